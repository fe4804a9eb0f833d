"""Go TARSy's API, as the sync reads it (``scoring.tarsy.sync``, docs/sync.md).

Go TARSy's session list (``GET /api/v1/sessions``, its dashboard's) has no "updated since", so
a run reads three lists, each newest first, 100 a page:

- the finished sessions created since the watermark: the creation time of the oldest session
  that was still running or queued when the last run started (``GET /api/v1/sessions/active``),
  else of the newest session the last run listed. A session that finishes later was created
  after it, so it is listed then;
- the finished sessions its reviewers took up or reviewed, and those its own judge scored,
  created within ``TARSY_SYNC_RECHECK_S``: a review or a score added to a session changes its
  list entry. Every ``TARSY_SYNC_FULL_PASS_S`` a run lists every finished session instead, which
  also brings what changed on older sessions.

A session is fetched only when its list entry changed since the last fetch (status, completion,
chat messages, review, TARSy's score: ``fingerprint``): its detail, timeline, trace, score and
review activity, then every interaction the trace lists, ``TARSY_SYNC_CONCURRENCY`` requests at
a time and within ``TARSY_SYNC_SESSION_DEADLINE_S``; they are assembled into the document
``scoring.tarsy_go.document`` reads.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from django.conf import settings

from scoring.models import SessionSource, SessionStatus, TarsySync, TarsySyncedSession
from scoring import services
from scoring.tarsy.client import BadAnswer, DeadlineReached, FetchFailed, TarsyClient, TarsyNotFound, printable
from scoring.tarsy.listing import list_pages
from scoring.tarsy_go.document import FORMAT, rfc3339_us

LIST_PATH = "/api/v1/sessions"
ACTIVE_PATH = "/api/v1/sessions/active"
PAGE_SIZE = 100  # Go TARSy's largest page_size
FINISHED = ",".join(SessionStatus.terminal_values())
# The re-check lists: sessions whose review or TARSy's own score may have changed.
RECHECK_FILTERS = ({"review_status": "in_progress,reviewed"}, {"scoring_status": "scored"})
# The watermark is moved back this much: sessions committed with a creation time a little
# before the newest one listed (concurrent inserts) are listed again rather than missed.
WATERMARK_MARGIN_S = 300
# List entry fields whose change means the session must be fetched again.
FINGERPRINT_FIELDS = (
    "status", "completed_at", "chat_message_count", "latest_score", "scoring_status", "review_status",
    "quality_rating", "action_taken", "investigation_feedback", "feedback_edited_at", "assignee",
)  # fmt: skip


@dataclass
class TarsyGoApi:
    client: TarsyClient
    source = SessionSource.TARSY_GO
    # Set by first_page for the run: where its list of finished sessions starts (None: all of
    # them), the creation time of the oldest session running or queued when it started, and of
    # the oldest session it could not fetch this time.
    _since_us: int | None = field(default=None, init=False)
    _full_pass: bool = field(default=False, init=False)
    _oldest_active_us: int | None = field(default=None, init=False)
    _retry_from_us: int | None = field(default=None, init=False)
    _started_at_us: int = field(default=0, init=False)

    def first_page(self, since_us: int | None):
        """The first page of the finished sessions since ``since_us`` or the watermark (all of
        them on a full pass); ``TarsyNotFound`` tells that Go TARSy does not answer at the
        client's URL."""
        state = TarsySync.objects.filter(source=self.client.base_url).values("watermark_us", "last_full_pass_at_us")
        state = state.first() or {"watermark_us": None, "last_full_pass_at_us": None}
        full_pass_due = state["last_full_pass_at_us"] is None or (
            services.now_us() - state["last_full_pass_at_us"] > settings.TARSY_SYNC_FULL_PASS_S * 1_000_000
        )
        self._full_pass = since_us is None and full_pass_due
        self._since_us = since_us if since_us is not None or self._full_pass else state["watermark_us"]
        self._started_at_us = services.now_us()
        # What runs now finishes later: the next run's watermark is at most its creation.
        self._oldest_active_us = self._oldest_active_us_now()
        return self._page(1, self._finished_filters())

    def finished_session_pages(self, since_us: int | None, max_pages: int, first_page) -> Iterator[list[dict]]:
        newest_us = None
        for entries in self._pages(self._finished_filters(), max_pages, first_page):
            newest_us = max([newest_us or 0, *(rfc3339_us(e.get("created_at")) or 0 for e in entries)])
            yield entries
        if not self._full_pass:  # a full pass has listed them all already
            # Reviews and scores of sessions created within TARSY_SYNC_RECHECK_S; older ones wait
            # for the next full pass, so that these lists stay short.
            recheck_from = since_us or self._started_at_us - int(settings.TARSY_SYNC_RECHECK_S * 1_000_000)
            for filters in RECHECK_FILTERS:
                recheck = {"status": FINISHED, **filters, "start_date": _rfc3339(recheck_from)}
                yield from self._pages(recheck, max_pages, None)
        if since_us is None:
            self._move_watermark(newest_us)

    def _finished_filters(self) -> dict:
        filters = {"status": FINISHED}
        if self._since_us is not None:
            filters["start_date"] = _rfc3339(self._since_us)
        return filters

    def _pages(self, filters: dict, max_pages: int, first_page) -> Iterator[list[dict]]:
        return list_pages(
            self.client,
            LIST_PATH,
            lambda page: self._params(page, filters),
            first_page=first_page,
            max_pages=max_pages,
            kind="Go TARSy's session list",
        )

    def _page(self, page: int, filters: dict):
        return self.client.get_json(LIST_PATH, self._params(page, filters))

    @staticmethod
    def _params(page: int, filters: dict) -> dict:
        return {**filters, "page": page, "page_size": PAGE_SIZE, "sort_by": "created_at", "sort_order": "desc"}

    # --- The watermark -------------------------------------------------------------------------

    def _oldest_active_us_now(self) -> int | None:
        try:
            body = self.client.get_json(ACTIVE_PATH)
        except TarsyNotFound:  # a Go TARSy without it: the watermark is the newest listed
            return None
        items = [*(body.get("active") or []), *(body.get("queued") or [])] if isinstance(body, dict) else []
        times = [rfc3339_us(item.get("created_at")) for item in items if isinstance(item, dict)]
        return min((t for t in times if t is not None), default=None)

    def _move_watermark(self, newest_listed_us: int | None) -> None:
        """After a run through every list: the next lists from the oldest of the newest session
        listed, the oldest running or queued at the start, and the oldest not fetched."""
        candidates = [t for t in (newest_listed_us, self._oldest_active_us, self._retry_from_us) if t]
        done = {"last_full_pass_at_us": self._started_at_us} if self._full_pass else {}
        if candidates:
            watermark = min(candidates) - WATERMARK_MARGIN_S * 1_000_000
            done["watermark_us"] = watermark if self._since_us is None else max(watermark, self._since_us)
        TarsySync.objects.filter(source=self.client.base_url).update(**done)

    # --- One session ------------------------------------------------------------------------------

    @staticmethod
    def entry_id(entry) -> str | None:
        try:
            return str(uuid.UUID(entry["id"]))
        except (TypeError, KeyError, ValueError, AttributeError):
            return None

    @staticmethod
    def fingerprint(entry: dict) -> str:
        values = [entry.get(name) for name in FINGERPRINT_FIELDS]
        return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()

    @staticmethod
    def synced_fingerprint(row: TarsySyncedSession) -> str:
        return row.fingerprint

    def cursor(self, entry: dict, document: dict | None) -> dict:
        return {
            "status": str(entry.get("status"))[:32],
            "completed_at_us": rfc3339_us(entry.get("completed_at")),
            "chat_message_count": None,
            "fingerprint": self.fingerprint(entry),
        }

    @staticmethod
    def document_id(document) -> str | None:
        session = document.get("session") if isinstance(document, dict) else None
        return TarsyGoApi.entry_id(session)

    def fetch(self, session_id: str, entry: dict) -> dict:
        """The session's document, assembled from its API's answers, within the session's
        deadline. ``TarsyNotFound`` when its detail answers 404 (deleted meanwhile); a 404 for
        another of its parts is a ``BadAnswer``, remembered like any bad document."""
        client = replace(self.client, deadline=self._session_deadline())
        base = f"{LIST_PATH}/{session_id}"
        pool = ThreadPoolExecutor(settings.TARSY_SYNC_CONCURRENCY, thread_name_prefix="tarsy-go-fetch")
        try:
            session = pool.submit(client.get_json, base)
            parts = {
                "timeline": pool.submit(_part, client, f"{base}/timeline"),
                "trace": pool.submit(_part, client, f"{base}/trace"),
                "score": pool.submit(_optional, client, f"{base}/score"),
                "review_activity": pool.submit(_optional, client, f"{base}/review-activity"),
            }
            parts = {"session": session.result(), **{name: part.result() for name, part in parts.items()}}
            llm_ids, mcp_ids = _interaction_ids(parts["trace"])
            llm = list(pool.map(lambda i: _part(client, f"{base}/trace/llm/{i}"), llm_ids))
            mcp = list(pool.map(lambda i: _part(client, f"{base}/trace/mcp/{i}"), mcp_ids))
        except DeadlineReached as exc:
            if self.client.seconds_left() is not None and self.client.seconds_left() <= 0:
                raise  # the run's own deadline: the run stops
            created_us = rfc3339_us(entry.get("created_at"))
            if created_us is not None:
                self._retry_from_us = min(created_us, self._retry_from_us or created_us)
            raise FetchFailed(
                f"session {session_id} was not fetched within TARSY_SYNC_SESSION_DEADLINE_S "
                f"({settings.TARSY_SYNC_SESSION_DEADLINE_S:g} s): {exc}"
            ) from None
        finally:
            pool.shutdown(cancel_futures=True)  # after a failure, what is still queued is not asked for
        return {
            "format": FORMAT,
            **parts,
            "llm_interactions": dict(zip(llm_ids, llm)),
            "mcp_interactions": dict(zip(mcp_ids, mcp)),
        }

    def _session_deadline(self) -> float:
        deadline = time.monotonic() + settings.TARSY_SYNC_SESSION_DEADLINE_S
        return deadline if self.client.deadline is None else min(deadline, self.client.deadline)


def _part(client: TarsyClient, path: str):
    """A part every session has: a 404 for it says the answer is broken, not that the session is gone."""
    try:
        return client.get_json(path)
    except TarsyNotFound as exc:
        raise BadAnswer(str(exc)) from None


def _optional(client: TarsyClient, path: str):
    """An answer a session may lack (no score, no review activity): None for a 404."""
    try:
        return client.get_json(path)
    except TarsyNotFound:
        return None


def _interaction_ids(trace) -> tuple[list[str], list[str]]:
    """The ids of every LLM and MCP interaction the trace list names, in its order: each
    stage's executions and their sub-agents, then the session-level interactions."""
    if not isinstance(trace, dict) or not isinstance(trace.get("stages"), list):
        raise BadAnswer("Go TARSy's trace list is not an object with a list of stages")
    llm, mcp = [], []
    # Depth first, without recursion: sub-agents may nest as deep as the answer does.
    groups = [
        group
        for stage in reversed(_list(trace.get("stages")))
        if isinstance(stage, dict)
        for group in reversed(_list(stage.get("executions")))
    ]
    while groups:
        group = groups.pop()
        if not isinstance(group, dict):
            continue
        llm.extend(_ids(group.get("llm_interactions")))
        mcp.extend(_ids(group.get("mcp_interactions")))
        groups.extend(reversed(_list(group.get("sub_agents"))))
    llm.extend(_ids(trace.get("session_interactions")))
    return list(dict.fromkeys(llm)), list(dict.fromkeys(mcp))


# An interaction id as Go TARSy makes them (UUIDs): anything else could name another path.
_INTERACTION_ID = re.compile(r"[0-9A-Za-z-]{1,100}")


def _ids(items) -> list[str]:
    """The interactions' ids; BadAnswer for one that is not a plain id (it could name another path)."""
    ids = []
    for item in _list(items):
        value = item.get("id") if isinstance(item, dict) else None
        if not isinstance(value, str) or not _INTERACTION_ID.fullmatch(value):
            raise BadAnswer(
                f"Go TARSy's trace list names an interaction without a valid id: {printable(repr(item)[:100])}"
            )
        ids.append(value)
    return ids


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _rfc3339(time_us: int) -> str:
    moment = datetime.datetime.fromtimestamp(time_us // 1_000_000, tz=datetime.UTC)
    return moment.isoformat().replace("+00:00", "Z")
