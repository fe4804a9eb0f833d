"""Sessions pulled from a running TARSy, either generation, for ``manage.py sync_sessions``
and the worker clusters' periodic sync (docs/sync.md).

A run finds which TARSy answers at the URL (tarsy-bot's history API, else Go TARSy's API:
``scoring.tarsy_bot.api``, ``scoring.tarsy_go.api``), pages through its list of finished
sessions and fetches a session only when it is new or its list entry changed since it was
last fetched (``TarsySyncedSession``, the cursor). Each document is stored through
``services.ingest_session`` on its own, so a run that stops keeps what it stored.

A TARSy is another team's service: one document it cannot give whole (not JSON, too large,
nested too deep, invalid) is reported and skipped, and the run goes on; a database that
fails for a moment (SQLite's lock, a PostgreSQL failover) is waited for, and never taken for
a bad document. A run stops at its deadline (``TARSY_SYNC_RUN_DEADLINE_S``) or after
``TARSY_SYNC_MAX_PAGES`` list pages, keeping what it stored: the next one goes on.

One run per TARSy at a time, across processes and hosts: a run holds a lease on
the TARSy's ``TarsySync`` row, taken and renewed by conditional UPDATEs (atomic
on SQLite and PostgreSQL alike) and let go at the end; a run that dies leaves a
lease that expires. A second run meanwhile stops at once (``SyncAlreadyRunning``).
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import Q

from scoring import batches, budget, identities, services
from scoring.models import AlertSession, SessionScore, SessionSource, TarsySync, TarsySyncedSession
from scoring.tarsy.client import (
    BadAnswer,
    FetchFailed,
    SyncError,
    TarsyClient,
    TarsyNotFound,
    printable,
)
from scoring.tarsy.documents import InvalidSession
from scoring.tarsy_bot.api import TarsyBotApi
from scoring.tarsy_go import events
from scoring.tarsy_go.api import TarsyGoApi

logger = logging.getLogger(__name__)

# score_triggered_by of the scorings a sync requests; the daily cap counts them. No user can be
# named so (scoring/identities.py).
SCORING_TRIGGER_PREFIX = identities.SYNC_SCORING
# A wake-up (Go TARSy's events) starts a run this long after it: wake-ups close together make one run.
WAKE_DEBOUNCE_S = 2.0
# Tries of a write the database refused for a moment (locked, failing over), and the first wait.
DATABASE_TRIES = 4
DATABASE_BACKOFF_S = 0.5


class SyncAlreadyRunning(SyncError):
    """Another process holds this TARSy's lease."""


class SyncStopped(SyncError):
    """The caller asked the run to stop (the worker is shutting down)."""


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
    # Which TARSy answered: a SessionSource value ("" until the run found out).
    source: str = ""

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


# --- Which TARSy ---------------------------------------------------------------------------------


def api_at(client: TarsyClient, since_us: int | None):
    """The API of the TARSy answering at ``client``'s URL, and its list's first page:
    tarsy-bot's history API if it answers, else Go TARSy's (which answers 404 to tarsy-bot's
    paths). Anything but a 404 from tarsy-bot's list (refused credentials, no answer) stops
    the run as it is."""
    try:
        bot = TarsyBotApi(client)
        return bot, bot.first_page(since_us)
    except TarsyNotFound as not_bot:
        go = TarsyGoApi(client)
        try:
            return go, go.first_page(since_us)
        except TarsyNotFound:
            raise SyncError(
                f"{not_bot}; Go TARSy's API does not answer there either: is the URL TARSy's base URL "
                "(the one its dashboard is served from)?"
            ) from None


# --- The lease ---------------------------------------------------------------------------------


def _lease_s(client: TarsyClient) -> float:
    """Longer than the most a run goes between two renewals, with room to spare: the lease is
    renewed before each list page and each session, and after a session is fetched; between
    two renewals, one request with all its retries, twice over, or one Go TARSy session's fetch
    (``TARSY_SYNC_SESSION_DEADLINE_S``) and a request."""
    attempts = client.max_retries + 1
    request_s = attempts * (client.timeout_s + client.backoff_s * 2**client.max_retries)
    return request_s + max(request_s, settings.TARSY_SYNC_SESSION_DEADLINE_S)


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
    client.deadline = time.monotonic() + settings.TARSY_SYNC_RUN_DEADLINE_S
    report = SyncReport()
    try:
        api, first_page = api_at(client, since_us)
        report.source = api.source
        run = _Run(api, report, renew=lambda: _renew_lease(source, holder, lease_s), stop=stop)
        for entries in api.finished_session_pages(since_us, settings.TARSY_SYNC_MAX_PAGES, first_page):
            created_before = len(report.created)
            try:
                run.page(entries)
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
            _record_failure(source, client, exc)
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


def _record_failure(source: str, client: TarsyClient, exc: Exception) -> None:
    reason = str(exc) if isinstance(exc, SyncError) else f"{type(exc).__name__}: {exc}"
    try:
        TarsySync.objects.filter(source=source).update(
            last_error=client.redact(printable(reason))[:2000], last_error_at_us=services.now_us()
        )
    except Exception:  # the database is away: the caller reports the failure all the same
        logger.warning("could not record the failed sync of %s", source, exc_info=True)


@dataclass
class _Run:
    """One run's work on the pages of the list."""

    api: object  # TarsyBotApi or TarsyGoApi
    report: SyncReport
    renew: object
    stop: threading.Event | None

    @property
    def source(self) -> str:
        return self.api.client.base_url

    def page(self, entries: list) -> None:
        ids = [self.api.entry_id(entry) for entry in entries]
        known = {
            str(row.session_id): self.api.synced_fingerprint(row)
            for row in TarsySyncedSession.objects.filter(source=self.source, session_id__in=[i for i in ids if i])
        }
        for entry, session_id in zip(entries, ids):
            self.report.listed += 1
            if session_id is None:
                self.report.rejected.append(
                    (printable(repr(entry)[:100]), "a list entry without a valid session id")
                )
                continue
            if known.get(session_id) == self.api.fingerprint(entry):
                self.report.unchanged += 1
                continue
            if self.stop is not None and self.stop.is_set():
                raise SyncStopped(f"the sync of {self.source} was stopped")
            self.renew()
            try:
                document = self.api.fetch(session_id, entry)
            except TarsyNotFound:
                self.report.gone.append(session_id)
                continue
            except BadAnswer as exc:
                self._remember(session_id, entry, None, str(exc))
                continue
            except FetchFailed as exc:
                self.report.rejected.append((session_id, str(exc)))
                continue
            except SyncError:
                raise  # about the run (credentials, TARSy down, its deadline), not this session
            except Exception as exc:  # this session's answers are of a shape nothing here expects
                self._remember(session_id, entry, None, _unreadable(session_id, self.source, exc))
                continue
            self.renew()
            self._store(session_id, entry, document)

    def _store(self, session_id: str, entry: dict, document) -> None:
        """Store one document and remember what was fetched (rejected ones too: a
        document that fails validation is not fetched again until it changes)."""
        try:
            if self.api.document_id(document) != session_id:
                raise InvalidSession(
                    {"session_id": [f"TARSy sent another document for session {session_id}."]}
                )
            session, outcome = _ingest(document, written_by=f"{identities.SYNC_WRITE}{self.source}")
        except InvalidSession as exc:
            return self._remember(session_id, entry, None, str(exc))
        except (DatabaseError, UnicodeError) as exc:
            # A value the database cannot store (a lone surrogate, say): reported and
            # remembered like an invalid document, so that it does not stop every run.
            logger.warning("session %s from %s could not be stored", session_id, self.source, exc_info=True)
            return self._remember(
                session_id, entry, None, f"could not be stored: {type(exc).__name__}: {printable(str(exc)[:200])}"
            )
        except SyncError:
            raise
        except Exception as exc:  # a document of a shape nothing here expects: it must not stop every run
            return self._remember(session_id, entry, None, _unreadable(session_id, self.source, exc))
        if outcome is services.IngestOutcome.UNCHANGED:
            self.report.unchanged += 1
        elif outcome is services.IngestOutcome.CREATED:
            self.report.created.append(session_id)
        else:
            self.report.updated.append(session_id)
        self.report.noted.extend((session_id, note) for note in session.ingest_notes)
        self._remember(session_id, entry, document, "")

    def _remember(self, session_id: str, entry: dict, document, reason: str) -> None:
        if reason:
            self.report.rejected.append((session_id, reason))
        _with_database_retries(
            lambda: TarsySyncedSession.objects.update_or_create(
                source=self.source,
                session_id=session_id,
                defaults={
                    **self.api.cursor(entry, document),
                    "rejected_reason": reason,
                    "synced_at_us": services.now_us(),
                },
            )
        )


def _unreadable(session_id: str, source: str, exc: Exception) -> str:
    """Why a session was skipped for an error nothing expected (logged whole, for a fix)."""
    logger.error("session %s from %s could not be read", session_id, source, exc_info=exc)
    return f"could not be read: {type(exc).__name__}: {printable(str(exc)[:200])}"


def _ingest(document, *, written_by: str):
    return _with_database_retries(lambda: services.ingest_session(document, written_by=written_by))


def _with_database_retries(write):
    """``write()``, tried again when the database refused it for a moment (SQLite's "database is
    locked", a PostgreSQL connection lost in a failover); SyncError when it still fails, so the
    run stops without taking the session for a bad one."""
    for attempt in range(DATABASE_TRIES):
        try:
            return write()
        except (OperationalError, InterfaceError) as exc:
            problem = exc
            logger.warning("the database refused a sync write (%s: %s); trying again", type(exc).__name__, exc)
            if not connection.in_atomic_block:
                connection.close()  # a broken connection is replaced by the next query
            time.sleep(DATABASE_BACKOFF_S * 2**attempt)
    raise SyncError(f"the database failed {DATABASE_TRIES} times: {type(problem).__name__}: {problem}")


# --- Scoring what a sync imports ----------------------------------------------------------


def request_scorings(session_ids: list[str], *, triggered_by: str) -> dict[str, int]:
    """Queue scorings of synced sessions: the share of them SCORING_AUTO_SCORE_SHARES samples,
    within SCORING_AUTO_SCORE_MAX_PER_DAY, held back while a spend budget is used up.

    A session outside its alert type's or chain's share is counted as ``not_sampled`` and left
    unscored (the same sessions at every run: ``budget.is_sampled``). The cap counts every
    scoring a sync requested since 00:00 UTC (by its ``score_triggered_by``), in every process:
    the count and the requests take turns (a PostgreSQL advisory lock; SQLite's write
    transactions already do), so concurrent syncs cannot pass the cap together. What is over
    the cap is counted as ``over_daily_cap`` and left unscored (``score_sessions --unscored``).
    While a budget is used up, the scorings queued are held until its period ends, counted as
    ``waiting_for_budget`` (``services.hold_automatic_scorings``).
    """
    cap = settings.SCORING_AUTO_SCORE_MAX_PER_DAY
    today = datetime.datetime.now(datetime.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    sampled = _sampled(session_ids)
    held = 0
    with transaction.atomic():
        services.take_turn(services.SYNC_SCORING_LOCK_KEY)
        used = SessionScore.objects.filter(
            score_triggered_by__startswith=SCORING_TRIGGER_PREFIX,
            scored_at_us__gte=int(today.timestamp() * 1e6),
        ).count()
        wanted = sampled[: max(0, cap - used)]
        outcome = (
            batches.score_sessions(wanted, triggered_by=triggered_by, force_rescore=False) if wanted else {}
        )
        if outcome.get("queued") and budget.budgets_set():
            now = services.now_us()
            spend = budget.current_spend(now)
            if spend.used_up:
                held = services.hold_automatic_scorings(spend, now=now, session_ids=wanted)
    if len(wanted) < len(sampled):
        logger.warning(
            "SCORING_AUTO_SCORE_MAX_PER_DAY=%d reached: %d synced sessions left unscored",
            cap,
            len(sampled) - len(wanted),
        )
    return {
        **outcome,
        "over_daily_cap": len(sampled) - len(wanted),
        "not_sampled": len(session_ids) - len(sampled),
        "waiting_for_budget": held,
    }


def _sampled(session_ids: list[str]) -> list[str]:
    """Those of ``session_ids`` in their alert type's or chain's share (a session not stored
    is kept, for the scoring request to report), in their order."""
    kinds = {
        str(session_id): (alert_type, chain_id)
        for session_id, alert_type, chain_id in AlertSession.objects.filter(session_id__in=session_ids).values_list(
            "session_id", "alert_type", "chain_id"
        )
    }
    return [
        session_id
        for session_id, kind in ((session_id, kinds.get(str(uuid.UUID(session_id)))) for session_id in session_ids)
        if kind is None or budget.is_sampled(session_id, budget.auto_score_share(*kind))
    ]


# --- The worker's periodic sync -------------------------------------------------------------------


def configured_client() -> TarsyClient:
    """A client of TARSY_URL with the worker's credentials (TARSY_TOKEN or TARSY_TOKEN_FILE)."""
    return TarsyClient.configured(
        settings.TARSY_URL,
        token=settings.TARSY_TOKEN,
        token_file=settings.TARSY_TOKEN_FILE,
        ca_bundle=settings.TARSY_CA_BUNDLE,
    )


def sync_configured_tarsy(stop: threading.Event | None = None) -> SyncReport:
    """One run against TARSY_URL with TARSY_TOKEN; scores new sessions when SCORING_AUTO_SCORE."""
    return sync_sessions(
        configured_client(),
        score=settings.SCORING_AUTO_SCORE,
        triggered_by=f"{SCORING_TRIGGER_PREFIX}worker",
        stop=stop,
    )


def run_periodically(stop: threading.Event) -> None:
    """Sync TARSY_URL now and every TARSY_SYNC_INTERVAL_S until ``stop`` is set; sooner when Go
    TARSy's events say a session finished or its review or score changed.

    Once a run found Go TARSy, a listener of its events (``scoring.tarsy_go.events``, unless
    TARSY_SYNC_EVENTS is off) runs beside this loop until ``stop``. Failures are logged and
    recorded on the TARSy's row (``/readyz``, ``/metrics``); nothing here may end the thread.
    """
    wake = threading.Event()
    listener = None
    while not stop.is_set():
        # Cleared before the run: a wake-up from now on may be about something this run misses.
        wake.clear()
        report = None
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
            report = exc.report  # which TARSy answered, when the run got that far
            logger.error("sync from %s failed: %s", settings.TARSY_URL, exc)
        except Exception:
            logger.exception("sync from %s failed unexpectedly", settings.TARSY_URL)
        finally:
            connection.close()
        if listener is None and wants_events(report):
            listener = events.start_listener(configured_client(), wake.set, stop)
        wait_for_next_round(stop, wake, settings.TARSY_SYNC_INTERVAL_S)


def wants_events(report: SyncReport | None) -> bool:
    """Whether to listen to the events of the TARSy a run found: only Go TARSy has them."""
    return settings.TARSY_SYNC_EVENTS and report is not None and report.source == SessionSource.TARSY_GO


def wait_for_next_round(
    stop: threading.Event, wake: threading.Event, interval_s: float, debounce_s: float = WAKE_DEBOUNCE_S
) -> None:
    """Return after ``interval_s``, or ``debounce_s`` after ``wake`` is set (so that wake-ups close
    together make one run), or as soon as ``stop`` is set."""
    deadline = time.monotonic() + interval_s
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        # In slices: ``stop`` is looked at as well.
        if wake.wait(min(left, events.STOP_CHECK_S)):
            stop.wait(debounce_s)
            return
