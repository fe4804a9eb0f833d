"""Sessions pulled from a running TARSy (tarsy-bot's history API), for
``manage.py sync_sessions`` and the worker clusters' periodic sync (docs/sync.md).

A run pages through ``GET /api/v1/history/sessions`` (finished statuses, newest
first, 100 a page) and fetches ``GET /api/v1/history/sessions/{id}`` only for a
session that is new or whose list entry changed (status, completion time,
chat messages) since it was last fetched (``TarsySyncedSession``, the cursor).
Each document is stored through ``services.ingest_session`` on its own, so a
run that stops keeps what it stored.

One run per TARSy at a time, across processes and hosts: a run holds a lease on
the TARSy's ``TarsySync`` row, taken and renewed by conditional UPDATEs (atomic
on SQLite and PostgreSQL alike) and let go at the end; a run that dies leaves a
lease that expires. A second run meanwhile stops at once (``SyncAlreadyRunning``).
"""

from __future__ import annotations

import datetime
import http.client
import json
import logging
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Q

from scoring import batches, services
from scoring.models import SessionScore, SessionStatus, TarsySync, TarsySyncedSession
from scoring.tarsy.documents import InvalidSession

logger = logging.getLogger(__name__)

LIST_PATH = "/api/v1/history/sessions"
PAGE_SIZE = 100  # tarsy-bot's largest page_size
FINISHED_STATUSES = SessionStatus.terminal_values()
# score_triggered_by of the scorings a sync requests; the daily cap counts them.
SCORING_TRIGGER_PREFIX = "tarsy-sync"


class SyncError(Exception):
    """A sync that stopped before the end of the list; str() is for the operator.

    ``report`` holds what the run did before it stopped (set by ``sync_sessions``).
    """

    report: SyncReport | None = None


class TarsyAuthRejected(SyncError):
    """TARSy (or the proxy in front of it) answered 401 or 403: retrying cannot help."""


class TarsyUnreachable(SyncError):
    """Network errors or 5xx answers on every attempt."""


class SyncAlreadyRunning(SyncError):
    """Another process holds this TARSy's lease."""


class SyncStopped(SyncError):
    """The caller asked the run to stop (the worker is shutting down)."""


class _SessionGone(Exception):
    """404 for a session document: TARSy deleted it after listing it."""


@dataclass
class SyncReport:
    listed: int = 0
    unchanged: int = 0
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (session id, reason)
    # (session id, note): what ingest had to change to store a session (AlertSession.ingest_notes).
    noted: list[tuple[str, str]] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    scoring: dict[str, int] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {
            "listed": self.listed,
            "unchanged": self.unchanged,
            "created": len(self.created),
            "updated": len(self.updated),
            "rejected": len(self.rejected),
            "gone": len(self.gone),
        }

    def add_scoring(self, outcome: dict[str, int]) -> None:
        for key, count in outcome.items():
            self.scoring[key] = self.scoring.get(key, 0) + count


def source_of(url: str) -> str:
    """The key of a TARSy: its base URL without a trailing slash."""
    return url.strip().rstrip("/")


# --- HTTP --------------------------------------------------------------------------------


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are answers, not followed: a proxy redirects to its login page (often
    on another host), and following would send the credentials there."""

    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirects)


@dataclass
class TarsyClient:
    """GETs JSON from one TARSy, retrying network errors and 5xx with doubling waits."""

    base_url: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    max_retries: int = 3
    backoff_s: float = 1.0

    @classmethod
    def configured(
        cls, base_url: str, *, token: str = "", headers: dict[str, str] | None = None
    ) -> TarsyClient:
        all_headers = dict(headers or {})
        if token:
            all_headers["Authorization"] = f"Bearer {token}"
        return cls(
            source_of(base_url),
            all_headers,
            timeout_s=settings.TARSY_SYNC_TIMEOUT_S,
            max_retries=settings.TARSY_SYNC_MAX_RETRIES,
            backoff_s=settings.TARSY_SYNC_BACKOFF_S,
        )

    def get_json(self, path: str, params: dict | None = None):
        url = self.base_url + path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
        request = urllib.request.Request(url, headers={"Accept": "application/json", **self.headers})
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                with _opener.open(request, timeout=self.timeout_s) as response:
                    body = response.read()
                    content_type = response.headers.get("Content-Type", "")
            except urllib.error.HTTPError as exc:
                if exc.code in (401, 403):
                    raise TarsyAuthRejected(
                        f"TARSy answered {exc.code} {exc.reason} to GET {url}: the credentials "
                        "(--token / TARSY_TOKEN, or --header) are missing, wrong or not allowed"
                    ) from None
                if 300 <= exc.code < 400:
                    raise TarsyAuthRejected(
                        f"TARSy answered {exc.code} {exc.reason} to GET {url}, redirecting to "
                        f"{exc.headers.get('Location') or 'nowhere'}: most likely a proxy's login, so the "
                        "credentials (--token / TARSY_TOKEN, or --header) are missing or wrong; "
                        "or the URL is not TARSy's own"
                    ) from None
                if exc.code == 404 and path != LIST_PATH:
                    raise _SessionGone() from None
                if exc.code < 500:
                    raise SyncError(
                        f"TARSy answered {exc.code} {exc.reason} to GET {url}: {_excerpt(exc)}"
                    ) from None
                problem = f"{exc.code} {exc.reason}"
            except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, dropped connections
                problem = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            else:
                try:
                    return json.loads(body)
                except ValueError:
                    raise SyncError(
                        f"TARSy's answer to GET {url} is not JSON ({content_type or 'no content type'}); "
                        "is a login page of a proxy in front of it asking for credentials?"
                    ) from None
            if attempt + 1 < attempts:
                wait_s = self.backoff_s * 2**attempt
                logger.warning("GET %s failed (%s); retrying in %g s", url, problem, wait_s)
                time.sleep(wait_s)
        raise TarsyUnreachable(f"GET {url} failed {attempts} times; last: {problem}")


def _excerpt(error: urllib.error.HTTPError) -> str:
    try:
        return error.read(300).decode("utf-8", errors="replace")
    except OSError:
        return ""


def parse_header(text: str) -> tuple[str, str]:
    """``'Name: value'`` -> (name, value); ValueError when it is not of that form."""
    name, colon, value = text.partition(":")
    if not colon or not name.strip() or any(c.isspace() for c in name.strip()):
        raise ValueError(f"{text!r} is not a header: use 'Name: value'")
    return name.strip(), value.strip()


# --- Listing -------------------------------------------------------------------------------


def finished_session_pages(client: TarsyClient, since_us: int | None) -> Iterator[list[dict]]:
    """Pages of tarsy-bot's session list (its ``SessionOverview`` items), finished
    sessions only, newest first. Newest first, so that sessions added while paging
    push older ones to later pages (seen twice at worst, never skipped)."""
    page = 1
    while True:
        params = {
            "status": FINISHED_STATUSES,  # repeated: status=completed&status=failed&...
            "page": page,
            "page_size": PAGE_SIZE,
            "sort_by": "started_at_us",
            "sort_order": "desc",
        }
        if since_us is not None:
            params["start_date_us"] = since_us
        body = client.get_json(LIST_PATH, params)
        try:
            sessions, total_pages = body["sessions"], int(body["pagination"]["total_pages"])
        except (TypeError, KeyError, ValueError):
            raise SyncError(
                f"{client.base_url}{LIST_PATH} did not answer with tarsy-bot's session list "
                "({sessions, pagination: {total_pages, ...}}); is the URL TARSy's?"
            ) from None
        if not isinstance(sessions, list):
            raise SyncError(f"{client.base_url}{LIST_PATH}: 'sessions' is not a list")
        yield sessions
        if not sessions or page >= total_pages:
            return
        page += 1


def _fingerprint(entry: dict) -> tuple:
    return (entry.get("status"), entry.get("completed_at_us"), entry.get("chat_message_count"))


# --- The lease ---------------------------------------------------------------------------------


def _lease_s(client: TarsyClient) -> float:
    """Longer than one request may take with all its retries, twice over: the lease
    is renewed before every request."""
    attempts = client.max_retries + 1
    return 2 * attempts * (client.timeout_s + client.backoff_s * 2**client.max_retries)


def _take_lease(source: str, holder: str, lease_s: float) -> bool:
    TarsySync.objects.bulk_create([TarsySync(source=source)], ignore_conflicts=True)
    now = services.now_us()
    return bool(
        TarsySync.objects.filter(Q(lease_until_us__lt=now) | Q(lease_holder=holder), source=source).update(
            lease_holder=holder, lease_until_us=now + int(lease_s * 1e6), last_started_at_us=now
        )
    )


def _renew_lease(source: str, holder: str, lease_s: float) -> None:
    renewed = TarsySync.objects.filter(source=source, lease_holder=holder).update(
        lease_until_us=services.now_us() + int(lease_s * 1e6)
    )
    if not renewed:
        raise SyncError(f"the sync of {source} lost its lease (it stalled longer than {lease_s:g} s)")


def _release_lease(source: str, holder: str) -> None:
    try:
        TarsySync.objects.filter(source=source, lease_holder=holder).update(lease_holder="", lease_until_us=0)
    except Exception:  # the database is away: the lease expires by itself
        logger.warning("could not release the sync lease of %s", source, exc_info=True)


def _lease_holder_now(source: str) -> str:
    row = TarsySync.objects.filter(source=source).values("lease_holder", "lease_until_us").first()
    if row is None:
        return "unknown"
    left_s = max(0, (row["lease_until_us"] - services.now_us()) / 1e6)
    return f"{row['lease_holder']}, lease ends in {left_s:.0f} s unless renewed"


# --- A run -------------------------------------------------------------------------------------------


def sync_sessions(
    client: TarsyClient,
    *,
    since_us: int | None = None,
    score: bool = False,
    triggered_by: str = SCORING_TRIGGER_PREFIX,
    stop: threading.Event | None = None,
) -> SyncReport:
    """Import the finished sessions of ``client``'s TARSy that are new or changed.

    With ``score``, request a scoring of each session imported for the first time
    (``request_scorings``: at most SCORING_AUTO_SCORE_MAX_PER_DAY a day). Raises
    ``SyncError`` (with ``report``) when the run cannot go through the whole list;
    the sessions stored until then stay stored and are not fetched again.
    """
    source = client.base_url
    holder = f"{socket.gethostname()} pid {os.getpid()} {uuid.uuid4().hex[:8]}"
    lease_s = _lease_s(client)
    if not _take_lease(source, holder, lease_s):
        raise SyncAlreadyRunning(f"another sync of {source} is running ({_lease_holder_now(source)})")
    started_at_us = services.now_us()
    report = SyncReport()
    try:
        for entries in finished_session_pages(client, since_us):
            created_before = len(report.created)
            try:
                _sync_page(
                    client, entries, report, renew=lambda: _renew_lease(source, holder, lease_s), stop=stop
                )
            finally:
                # Also when the run stops mid-page: a stored session counts as unchanged
                # from then on, so a scoring not requested now never would be.
                if score and len(report.created) > created_before:
                    report.add_scoring(
                        request_scorings(report.created[created_before:], triggered_by=triggered_by)
                    )
            _renew_lease(source, holder, lease_s)
    except Exception as exc:
        if isinstance(exc, SyncError):
            exc.report = report
        if not isinstance(exc, SyncStopped):
            _record_failure(source, exc)
        raise
    finally:
        _release_lease(source, holder)
    # Only a run over the whole list says that everything finished before its start is here.
    done = (
        {"last_error": ""}
        if since_us is not None
        else {"last_error": "", "last_success_at_us": started_at_us}
    )
    TarsySync.objects.filter(source=source).update(**done)
    return report


def _record_failure(source: str, exc: Exception) -> None:
    reason = str(exc) if isinstance(exc, SyncError) else f"{type(exc).__name__}: {exc}"
    try:
        TarsySync.objects.filter(source=source).update(
            last_error=reason[:2000], last_error_at_us=services.now_us()
        )
    except Exception:  # the database is away: the caller reports the failure all the same
        logger.warning("could not record the failed sync of %s", source, exc_info=True)


def _sync_page(client: TarsyClient, entries: list, report: SyncReport, *, renew, stop) -> None:
    source = client.base_url
    ids = [_session_id(entry) for entry in entries]
    known = {
        str(row.session_id): (row.status, row.completed_at_us, row.chat_message_count)
        for row in TarsySyncedSession.objects.filter(source=source, session_id__in=[i for i in ids if i])
    }
    for entry, session_id in zip(entries, ids):
        report.listed += 1
        if session_id is None:
            report.rejected.append((repr(entry)[:100], "a list entry without a valid session_id"))
            continue
        if known.get(session_id) == _fingerprint(entry):
            report.unchanged += 1
            continue
        if stop is not None and stop.is_set():
            raise SyncStopped(f"the sync of {source} was stopped")
        renew()
        try:
            document = client.get_json(f"{LIST_PATH}/{session_id}")
        except _SessionGone:
            report.gone.append(session_id)
            continue
        _store(source, session_id, entry, document, report)


def _store(source: str, session_id: str, entry: dict, document, report: SyncReport) -> None:
    """Store one document and remember what was fetched (rejected ones too: a
    document that fails validation is not fetched again until it changes)."""
    reason = ""
    try:
        if not isinstance(document, dict) or _session_id(document) != session_id:
            raise InvalidSession({"session_id": [f"TARSy sent another document for session {session_id}."]})
        session, outcome = services.ingest_session(document, written_by=f"sync_sessions:{source}")
    except InvalidSession as exc:
        reason = str(exc)
        report.rejected.append((session_id, reason))
    except (DatabaseError, UnicodeError) as exc:
        # A value the database cannot store (a lone surrogate, say): reported and
        # remembered like an invalid document, so that it does not stop every run.
        logger.warning("session %s from %s could not be stored", session_id, source, exc_info=True)
        reason = f"could not be stored: {type(exc).__name__}: {str(exc)[:200]}"
        report.rejected.append((session_id, reason))
    else:
        if outcome is services.IngestOutcome.UNCHANGED:
            report.unchanged += 1
        elif outcome is services.IngestOutcome.CREATED:
            report.created.append(session_id)
        else:
            report.updated.append(session_id)
        report.noted.extend((session_id, note) for note in session.ingest_notes)
    # The document's status and completion time are at least as new as the list's.
    seen = document if not reason else entry
    TarsySyncedSession.objects.update_or_create(
        source=source,
        session_id=session_id,
        defaults={
            "status": str(seen.get("status"))[:32],
            "completed_at_us": _int_or_none(seen.get("completed_at_us")),
            "chat_message_count": _int_or_none(entry.get("chat_message_count")),
            "rejected_reason": reason,
            "synced_at_us": services.now_us(),
        },
    )


def _session_id(entry) -> str | None:
    """The entry's session_id in canonical form, or None."""
    try:
        return str(uuid.UUID(entry["session_id"]))
    except (TypeError, KeyError, ValueError, AttributeError):
        return None


def _int_or_none(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63 else None


# --- Scoring what a sync imports ----------------------------------------------------------


def request_scorings(session_ids: list[str], *, triggered_by: str) -> dict[str, int]:
    """Queue scorings of synced sessions, within SCORING_AUTO_SCORE_MAX_PER_DAY.

    The cap counts every scoring a sync requested since 00:00 UTC (by its
    ``score_triggered_by``), in every process: the count and the requests take
    turns (a PostgreSQL advisory lock; SQLite's write transactions already do),
    so concurrent syncs cannot pass the cap together. What is over the cap is
    counted as ``over_daily_cap`` and left unscored (``score_sessions --unscored``).
    """
    cap = settings.SCORING_AUTO_SCORE_MAX_PER_DAY
    today = datetime.datetime.now(datetime.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with transaction.atomic():
        services.take_turn(services.SYNC_SCORING_LOCK_KEY)
        used = SessionScore.objects.filter(
            score_triggered_by__startswith=SCORING_TRIGGER_PREFIX,
            scored_at_us__gte=int(today.timestamp() * 1e6),
        ).count()
        wanted = session_ids[: max(0, cap - used)]
        outcome = (
            batches.score_sessions(wanted, triggered_by=triggered_by, force_rescore=False) if wanted else {}
        )
    if len(wanted) < len(session_ids):
        logger.warning(
            "SCORING_AUTO_SCORE_MAX_PER_DAY=%d reached: %d synced sessions left unscored",
            cap,
            len(session_ids) - len(wanted),
        )
    return {**outcome, "over_daily_cap": len(session_ids) - len(wanted)}


# --- The worker's periodic sync -------------------------------------------------------------------


def sync_configured_tarsy(stop: threading.Event | None = None) -> SyncReport:
    """One run against TARSY_URL with TARSY_TOKEN; scores new sessions when SCORING_AUTO_SCORE."""
    client = TarsyClient.configured(settings.TARSY_URL, token=settings.TARSY_TOKEN)
    return sync_sessions(
        client,
        score=settings.SCORING_AUTO_SCORE,
        triggered_by=f"{SCORING_TRIGGER_PREFIX}:worker",
        stop=stop,
    )


def run_periodically(stop: threading.Event) -> None:
    """Sync TARSY_URL now and every TARSY_SYNC_INTERVAL_S until ``stop`` is set.

    Failures are logged and recorded on the TARSy's row (``/readyz``, ``/metrics``);
    nothing here may end the thread.
    """
    while not stop.is_set():
        try:
            report = sync_configured_tarsy(stop)
            counts = report.counts()
            logger.info(
                "synced sessions from %s: %s%s",
                settings.TARSY_URL,
                ", ".join(f"{key} {count}" for key, count in counts.items()),
                f"; scorings: {report.scoring}" if report.scoring else "",
            )
            for session_id, reason in report.rejected:
                logger.warning("sync from %s rejected session %s: %s", settings.TARSY_URL, session_id, reason)
            for session_id, note in report.noted:
                logger.info(
                    "sync from %s stored session %s changed: %s", settings.TARSY_URL, session_id, note
                )
        except SyncAlreadyRunning as exc:
            logger.info("%s; skipping this round", exc)
        except SyncStopped:
            break
        except SyncError as exc:
            logger.error("sync from %s failed: %s", settings.TARSY_URL, exc)
        except Exception:
            logger.exception("sync from %s failed unexpectedly", settings.TARSY_URL)
        finally:
            connection.close()
        stop.wait(settings.TARSY_SYNC_INTERVAL_S)
