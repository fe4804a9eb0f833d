"""Writes: every change to sessions and scores goes through a function here.

A score moves pending -> in_progress -> completed | failed, and only forward
(see ``_ALLOWED_TRANSITIONS``), but for one step back: in_progress -> pending when
the provider's quota says wait (``_wait_for_quota``). Each state change is one conditional UPDATE,
so two processes can never both claim a score or move it twice, and the event
that reports it is stored in the same transaction (``events.record``), to be
sent after commit.
"""

import enum
import logging
import math
import time
import uuid
from dataclasses import dataclass
from functools import cache

from django.conf import settings
from django.db import DatabaseError, IntegrityError, close_old_connections, connection, transaction
from django.db.models import Subquery
from django.db.models.sql import UpdateQuery

from scoring import budget, failures, selectors
from scoring.criteria import selectors as criteria_selectors
from scoring.jobs import queue
from scoring.judge import circuit, conversation, errors, injection, llm, pacing, rendering, replies, sampling
from scoring.models import (
    COST_QUANTUM,
    REVIEW_NOTE_MAX_CHARS,
    AlertSession,
    MissingTool,
    ReviewVerdict,
    ScoreReview,
    ScoreTranscript,
    ScoringStatus,
    SessionScore,
    SessionStatus,
    SessionWrite,
)
from scoring.ops.logs import log_context
from scoring.precompiled import PrecompiledQuery, instance_from_row, precompile
from scoring.realtime import events
from scoring.tarsy import ingest

logger = logging.getLogger(__name__)

Status = ScoringStatus
_ALLOWED_TRANSITIONS = {
    Status.PENDING: {Status.IN_PROGRESS, Status.FAILED},
    Status.IN_PROGRESS: {Status.COMPLETED, Status.FAILED, Status.PENDING},
    Status.COMPLETED: set(),
    Status.FAILED: set(),
}
# Of each status, the statuses a score may move to it from (sorted: one statement text each).
_SOURCES = {
    status: tuple(sorted(str(source) for source, moves in _ALLOWED_TRANSITIONS.items() if status in moves))
    for status in Status
}
_EVENT_FOR_STATUS = {Status.PENDING: events.PROGRESS, Status.IN_PROGRESS: events.STARTED, Status.COMPLETED: events.COMPLETED, Status.FAILED: events.FAILED}
DB_RETRY_DELAY_S = 1.0
# Any constant bigints; each names the advisory lock that one kind of write queues on.
CAPACITY_CLAIM_LOCK_KEY = 0x7A55C0
SYNC_SCORING_LOCK_KEY = 0x7A55C1
REPORT_REQUEST_LOCK_KEY = 0x7A55C2
WORKER_SHUT_DOWN = "worker shut down"


class ScoringError(Exception):
    """A scoring request that cannot be carried out; str() is for the caller."""


class SessionNotFound(ScoringError):
    pass


class SessionNotScorable(ScoringError):
    pass


class ScoringInProgress(ScoringError):
    def __init__(self, score: SessionScore):
        super().__init__(
            f"session {score.session_id} is already being scored (score {score.score_id} is "
            f"{score.status}); wait for it to finish before forcing a re-score"
        )
        self.score = score


def now_us() -> int:
    return time.time_ns() // 1000


# --- Sessions ------------------------------------------------------------------------


SESSION_WRITE_PERMISSION = "scoring.change_alertsession"
# Who may store sessions, in words for refusals and the API docs.
SESSION_WRITERS_RULE = f"the {SESSION_WRITE_PERMISSION} permission, or a user name listed in SESSION_WRITERS"


def can_write_sessions(user) -> bool:
    """Whether ``user`` may store sessions: TARSy's service account (SESSION_WRITERS)
    or a user with the ``scoring.change_alertsession`` permission. Inactive users never."""
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    return user.get_username() in settings.SESSION_WRITERS or user.has_perm(SESSION_WRITE_PERMISSION)


class IngestOutcome(enum.Enum):
    """What storing a session document did (``ingest_session``)."""

    CREATED = "created"
    UPDATED = "updated"  # it was stored before, with other content: replaced
    UNCHANGED = "unchanged"  # it was stored before with this content: left as it was


def ingest_session(document: dict, *, written_by: str) -> tuple[AlertSession, IngestOutcome]:
    """Store one TARSy session document; return it and what storing it did.

    Idempotent: sending the same session again replaces it in place, or leaves it
    alone (``updated_at`` too) when its content is unchanged; its scores stay
    (each records the digest of what it judged). Every write is recorded with
    ``written_by`` (``SessionWrite``); an unchanged document writes nothing.
    Raises ``scoring.tarsy.documents.InvalidSession`` (with field errors) for a document that is
    not a TARSy session.
    """
    fields = ingest.parse_document(document)
    session_id = fields.pop("session_id")
    unsaved = AlertSession(session_id=session_id, **fields)
    fields["investigation_digest"] = rendering.investigation_digest(unsaved)
    fields["judge_prompt_chars"] = _judge_prompt_chars(unsaved)
    with transaction.atomic():
        stored = (
            AlertSession.objects.select_for_update()
            .defer(*AlertSession.HEAVY_FIELDS)
            .filter(session_id=session_id)
            .first()
        )
        # The digest stands for the rendered fields, and the investigation's columns hold nothing
        # else that is not also in a column of its own; every other field is compared itself.
        skipped = {*rendering.rendered_fields(fields["source"]), *AlertSession.HEAVY_FIELDS}
        if (
            stored is not None
            and all(getattr(stored, name) == value for name, value in fields.items() if name not in skipped)
            and _same_source_document(stored, fields.get("source_document"))
        ):
            return stored, IngestOutcome.UNCHANGED
        session, created = AlertSession.objects.update_or_create(session_id=session_id, defaults=fields)
        if stored is not None and (stored.alert_type, stored.chain_id) != (session.alert_type, session.chain_id):
            # The session's missing tools keep a copy of both (missing_tool_rows).
            MissingTool.objects.filter(score__session=session).update(
                alert_type=session.alert_type, chain_id=session.chain_id
            )
        SessionWrite.objects.create(
            session_id=session.session_id,
            written_by=written_by[:255],
            written_at_us=now_us(),
            created=created,
            investigation_digest=fields["investigation_digest"],
        )
    return session, IngestOutcome.CREATED if created else IngestOutcome.UPDATED


def _same_source_document(stored: AlertSession, document: dict | None) -> bool:
    """Whether the stored session has this source document (Go TARSy's): the digest covers what
    the judge reads of it, not the rest (its chat count, its review activity), compared here."""
    if document is None:
        return True
    return AlertSession.objects.filter(pk=stored.pk).values_list("source_document", flat=True).get() == document


def _judge_prompt_chars(session: AlertSession) -> int | None:
    """The length of the session's turn-1 prompt, or None when the renderer cannot
    read a part that validation leaves open (say, a tool list that is not an
    object): such a session is stored all the same, and its scoring fails saying why."""
    try:
        return len(conversation.build_score_prompt(session))
    except (AttributeError, TypeError, KeyError, ValueError):
        logger.warning(
            "session %s stored; its judge prompt cannot be rendered", session.session_id, exc_info=True
        )
        return None


# --- Requesting a score ------------------------------------------------------------------


class ScoringDecision(enum.Enum):
    """What a scoring request does for one session (``scoring_decision``)."""

    NOT_SCORABLE = "not_scorable"  # the session is not finished
    IN_PROGRESS = "in_progress"  # its newest score is active: it stays, and is not replaced
    ALREADY_SCORED = "already_scored"  # its newest score is finished, and no re-score is forced
    NEW_SCORE = "new_score"  # a new pending score is created


def scoring_decision(*, session_status: str, latest_status: str | None, force_rescore: bool) -> ScoringDecision:
    """EP-0028's status table, for a session in ``session_status`` whose newest
    score is in ``latest_status`` (None: it was never scored). An orphaned newest
    score is decided on as failed (``decide_scorings``)."""
    if session_status not in SessionStatus.terminal_values():
        return ScoringDecision.NOT_SCORABLE
    if latest_status in Status.active_values():
        return ScoringDecision.IN_PROGRESS
    if latest_status is not None and not force_rescore:
        return ScoringDecision.ALREADY_SCORED
    return ScoringDecision.NEW_SCORE


def decide_scorings(session_ids, *, force_rescore: bool) -> list[tuple[selectors.ScoringState, ScoringDecision]]:
    """The decision of the status table for each of these sessions that exists
    (a session that does not is the caller's to report).

    Where the decision would be "in progress" but the active score is past its
    time limit (its worker died, or it was never picked up), that orphan is
    failed first and the decision made on ``failed``: an orphan never blocks a
    new scoring for longer than that limit. Other orphans are left to the cleanup.
    """
    decided = []
    orphaned_sessions = []
    for state in selectors.scoring_states(session_ids, now_us=now_us()):
        decision = scoring_decision(
            session_status=state.status, latest_status=state.latest_status, force_rescore=force_rescore
        )
        if decision is ScoringDecision.IN_PROGRESS and state.latest_orphaned:
            orphaned_sessions.append(state.session_id)
            decision = scoring_decision(
                session_status=state.status, latest_status=Status.FAILED, force_rescore=force_rescore
            )
        decided.append((state, decision))
    if orphaned_sessions:
        expire_stale_scorings(session_ids=orphaned_sessions)
    return decided


def score_request(
    *, session_id, triggered_by: str, force_rescore: bool = False, confirm_over_budget: bool = False
) -> tuple[SessionScore, bool]:
    """Start scoring a session, or return the scoring it already has.

    Returns ``(score, created)``, as ``decide_scorings`` decides: a session that
    does not exist or is not finished is refused (``SessionNotFound``,
    ``SessionNotScorable``); an active score is returned as it is, or refused
    with ``ScoringInProgress`` when a re-score is forced; a finished score is
    returned unless ``force_rescore``; otherwise a new pending score is created
    and a worker woken after commit, unless a spend budget is used up and the
    request does not ``confirm_over_budget`` (``budget.OverBudget``).
    """
    decided = decide_scorings([session_id], force_rescore=force_rescore)
    if not decided:
        raise SessionNotFound(selectors.no_such_session(session_id))
    ((state, decision),) = decided
    if decision is ScoringDecision.NOT_SCORABLE:
        raise SessionNotScorable(
            f"session {session_id} is {state.status}; only finished sessions "
            f"({', '.join(SessionStatus.terminal_values())}) can be scored"
        )
    if decision is ScoringDecision.IN_PROGRESS or decision is ScoringDecision.ALREADY_SCORED:
        latest = selectors.latest_score(session_id)
        if decision is ScoringDecision.IN_PROGRESS and force_rescore:
            raise ScoringInProgress(latest)
        return latest, False
    budget.confirm_manual_scoring(now_us(), confirmed=confirm_over_budget)
    prompt_hash = criteria_selectors.current_criteria().hash_for(state.alert_type, state.chain_id)
    try:
        # The partial unique index (one active score per session) settles races
        # between concurrent requests.
        with transaction.atomic():
            score = pending_score(session_id, prompt_hash, triggered_by, now_us())
            score.save(force_insert=True)
            copy_latest_scores([session_id])
            transaction.on_commit(lambda: wake_workers(1))
    except IntegrityError:
        winner = selectors.active_score(session_id)
        if winner is None:
            raise
        if force_rescore:
            raise ScoringInProgress(winner) from None
        return winner, False
    return score, True


def pending_score(session_id, prompt_hash: str, triggered_by: str, requested_at_us: int) -> SessionScore:
    """A new pending score of the session, not saved yet, to be judged by the criteria of
    ``prompt_hash`` (those current for the session's scope when it was requested)."""
    return SessionScore(
        session_id=session_id,
        prompt_hash=prompt_hash,
        score_triggered_by=triggered_by[:255],
        scored_at_us=requested_at_us,
        started_at_us=requested_at_us,
        status=Status.PENDING,
    )


def copy_latest_scores(session_ids) -> None:
    """Copy each session's newest score onto its row (``AlertSession.latest_*``).

    Called in the transaction of every change to a score, so the copy that the
    session lists filter and sort on is never stale.
    """
    session_ids = list(session_ids)
    if len(session_ids) != 1:
        AlertSession.objects.filter(pk__in=session_ids).update(**selectors.latest_score_columns())
        return
    # One session, as each score's move does twice per scoring: the same UPDATE, compiled
    # once per process, since compiling its five subqueries costs the worker about 2 ms of
    # CPU, several times what running it costs.
    _copy_latest_of_one().rows(session_id=AlertSession._meta.pk.get_db_prep_value(session_ids[0], connection))


@cache
def _copy_latest_of_one() -> PrecompiledQuery:
    """``copy_latest_scores``'s UPDATE for one session, its id marked."""
    marker = uuid.uuid4()
    update = AlertSession.objects.filter(pk=marker).query.chain(UpdateQuery)
    update.add_update_values(selectors.latest_score_columns())
    return precompile(update, session_id=AlertSession._meta.pk.get_db_prep_value(marker, connection))


def wake_workers(new_scores: int) -> None:
    """Queue wake-up tasks for ``new_scores`` new pending scores: one per worker
    process's worth of slots, since a woken process claims as many as it has free
    slots. In one transaction: with the database broker, one commit for all."""
    wake_ups = math.ceil(new_scores / settings.SCORING_CONCURRENCY_PER_WORKER)
    try:
        with transaction.atomic():
            for _ in range(wake_ups):
                queue.enqueue_wake_up()
    except Exception:
        # The pending row is the job, and workers also look for pending rows every
        # SCORING_WORKER_POLL_S: the scores still run, only that much later.
        logger.warning(
            "could not wake workers for %d new score(s); they will find them when they next poll",
            new_scores,
            exc_info=True,
        )


# --- Running a score (in a worker) ------------------------------------------------------


def share_of_slots(share: float, slots: int) -> int:
    """How many of ``slots`` judge slots a kind of job with this ``share`` may hold at once:
    rounded down, but one at least (else no such job would ever run)."""
    return max(1, math.floor(share * slots))


def claim_room(limit: int) -> int:
    """Inside the caller's transaction: take the claims' turn, and return how many judge
    jobs (scorings or reports) it may claim, at most ``limit``, so that no more than
    SCORING_MAX_IN_FLIGHT (fewer with SCORING_JUDGE_CONCURRENCY: ``pacing.jobs_in_flight_limit``)
    are in progress across all workers."""
    take_turn(CAPACITY_CLAIM_LOCK_KEY)
    return min(limit, pacing.jobs_in_flight_limit() - selectors.in_progress_count())


def claim_pending_scores(limit: int) -> list[SessionScore]:
    """pending -> in_progress for up to ``limit`` of the oldest pending scores,
    as far as fewer than SCORING_MAX_IN_FLIGHT scorings stay in progress
    across all workers; returns those claimed (none when nothing is pending).

    Claims take turns (see ``take_turn``) and each counts the
    scorings in progress inside its turn, so the limit is exact and no score is
    claimed twice: a judge task delivered twice costs nothing. Claiming several
    at once costs one turn and one commit, which matters when a batch starts.
    """
    # Idle workers poll: a plain read first, so that polling takes no write lock.
    if selectors.oldest_pending_score_ids(1, now_us=now_us()) == []:
        return []

    def write() -> list[SessionScore]:
        with transaction.atomic():
            room = claim_room(limit)
            if room <= 0:
                return []
            started_at_us = now_us()
            if budget.budgets_set():
                spend = budget.current_spend(started_at_us)
                if spend.used_up:
                    hold_automatic_scorings(spend, now=started_at_us)
            # The model this worker judges with, kept from the claim on: a score that
            # fails says which model it was for (a completed one writes it again).
            model = settings.SCORING_LLM_MODEL
            claimed = (
                _move(score_id, Status.IN_PROGRESS, started_at_us=started_at_us, judge_model=model, waiting_reason="")
                for score_id in selectors.oldest_pending_score_ids(room, now_us=started_at_us)
            )
            return [score for score in claimed if score is not None]

    return retrying_once(write, "claiming pending scores")


def run_claimed_score(score: SessionScore) -> SessionScore | None:
    """Run the judge conversation of a claimed score to its end: completed or failed."""
    with log_context(score_id=str(score.score_id), session_id=str(score.session_id)):
        deadline = llm.Deadline.from_setting("SCORING_JOB_TIMEOUT_S")
        transcript = conversation.Transcript()
        warnings = []
        try:
            session = session_to_judge(score.session_id)
            # The criteria current now, not when the scoring was requested: it may have waited
            # for hours (a quota, the budget) while a version was promoted or rolled back.
            requested_hash = score.prompt_hash
            current = criteria_selectors.current_criteria()
            score.prompt_hash = current.hash_for(session.alert_type, session.chain_id)
            criteria = criteria_selectors.criteria_of_hash(score.prompt_hash)
            # The scan is CPU work: let the process's other jobs use the connection meanwhile.
            llm.release_db_connection()
            # Instruction-like text in the session is only flagged: the prompt fences
            # session data in (injection.py), and the score comes from the judge's own last line.
            warnings = injection.find_injection_attempts(session)
            digest = rendering.investigation_digest(session)
            judge = sampling.judge_sampling()
            _update_returning(
                score.score_id,
                (Status.IN_PROGRESS,),
                {
                    "prompt_hash": score.prompt_hash,
                    "warnings": warnings,
                    "investigation_digest": digest,
                    "judge_temperature": judge.temperature,
                    "judge_seed": judge.seed,
                },
            )
            if score.prompt_hash != requested_hash:
                copy_latest_scores([score.session_id])
            # A session stored before digests existed gets the one of the version scored.
            if session.investigation_digest is None:
                AlertSession.objects.filter(pk=session.pk, investigation_digest__isnull=True).update(
                    investigation_digest=digest
                )
            llm.release_db_connection()  # and while the prompt is rendered
            result = conversation.run_judge(
                session,
                criteria=criteria,
                on_phase=lambda phase: _record_progress(score, phase),
                deadline=deadline,
                transcript=transcript,
            )
        except errors.RateLimited as exc:
            return _wait_for_quota(score, exc)
        except errors.JudgeLLMError as exc:
            if exc.input_coverage is None:
                return _keep_transcript(fail_scoring(score.score_id, str(exc)), transcript)
            # What the judge was sent before it failed, as a completed score would keep it, and
            # what its answered calls cost (the spend budgets count it).
            sent = [*warnings, exc.input_warning] if exc.input_warning else warnings
            return _keep_transcript(
                fail_scoring(
                    score.score_id, str(exc), warnings=sent, input_coverage=exc.input_coverage, **exc.spent
                ),
                transcript,
            )
        except DatabaseError as exc:  # fail_scoring retries its write on a fresh connection
            logger.exception("judge job for score %s lost the database", score.score_id)
            return fail_scoring(score.score_id, f"database error: {type(exc).__name__}: {exc}")
        except Exception as exc:
            logger.exception("judge job for score %s failed unexpectedly", score.score_id)
            return _keep_transcript(
                fail_scoring(score.score_id, f"unexpected error: {type(exc).__name__}: {exc}"), transcript
            )
        try:
            return _complete(score.score_id, result, warnings, transcript)
        except Exception as exc:  # not left in progress until the orphan sweep blames a dead worker
            logger.exception("the judge's result for score %s could not be stored", score.score_id)
            return fail_scoring(score.score_id, f"could not store the judge's result: {type(exc).__name__}: {exc}")


def session_to_judge(session_id) -> AlertSession:
    """The session, loaded unless it is too large to send: that fails (``InputTooLarge``)
    before it is loaded, scanned and rendered, by the prompt length kept at ingest (the
    prompt itself is checked again). One query in the common case."""
    session = selectors.session_within_prompt_bound(session_id, llm.max_input_chars())
    if session is None:
        sessions = AlertSession.objects.filter(pk=session_id)
        llm.check_input_size(sessions.values_list("judge_prompt_chars", flat=True).get())
        session = sessions.get()  # it was stored again, smaller, meanwhile
    return session


@dataclass(frozen=True)
class QuotaWait:
    """When a judge job the provider's quota held back may try again (``due_us``), and why it
    waits; or, past SCORING_RATE_LIMIT_PATIENCE_S since its first 429, why it gives up (``gives_up``)."""

    due_us: int
    since_us: int
    reason: str
    gives_up: str | None = None


def quota_wait(rate_limited_since_us: int | None, limited: errors.RateLimited) -> QuotaWait:
    """How a job rate-limited since ``rate_limited_since_us`` (None: this is its first 429)
    waits for the quota: due when the provider said to come back."""
    now = now_us()
    since = rate_limited_since_us or now
    waited_s = (now - since) / 1_000_000
    patience_s = settings.SCORING_RATE_LIMIT_PATIENCE_S
    due_us = now + int(max(limited.retry_after_s, settings.SCORING_WORKER_POLL_S) * 1_000_000)
    reason = f"{limited}; next try at {circuit.iso_time(due_us)}, rate-limited since {circuit.iso_time(since)}"
    gives_up = None
    if waited_s + limited.retry_after_s > patience_s:
        gives_up = (
            f"{limited}; gave up after waiting {waited_s:,.0f} s for the quota "
            f"(SCORING_RATE_LIMIT_PATIENCE_S={patience_s:g})"
        )
    return QuotaWait(due_us, since, reason, gives_up)


def _wait_for_quota(score: SessionScore, limited: errors.RateLimited) -> SessionScore | None:
    """Send a score the provider's quota holds back to the queue (``quota_wait``), with its
    ``waiting_reason`` and a progress event: waiting, it holds no worker slot and is not
    orphaned (its due time is its age). Once it has waited too long, it fails saying the quota
    was the cause."""
    wait = quota_wait(score.rate_limited_since_us, limited)
    if wait.gives_up:
        return fail_scoring(score.score_id, wait.gives_up)
    waiting = _transition(
        score.score_id,
        Status.PENDING,
        event_fields={"phase": events.PHASE_WAITING, "waiting_reason": wait.reason},
        started_at_us=wait.due_us,
        waiting_reason=wait.reason,
        rate_limited_since_us=wait.since_us,
    )
    if waiting is not None:
        logger.info("score %s waits for the judge's quota until %s", score.score_id, circuit.iso_time(wait.due_us))
    return waiting


def hold_automatic_scorings(spend: budget.Spend, *, now: int, session_ids=None) -> int:
    """Inside the caller's transaction: send the automatic scorings that are due (of these
    sessions, if given) to wait until the used-up budget's period ends, with its reason and a
    progress event each; return how many. Pending all along, they are not lost: a worker
    takes them once they are due, or holds them again if a budget is still used up then.
    A wait for the budget is no wait for the quota: the quota's patience starts over."""
    due = SessionScore.objects.filter(
        status=Status.PENDING, started_at_us__lte=now, score_triggered_by__startswith=budget.AUTOMATIC
    )
    if session_ids is not None:
        due = due.filter(session_id__in=session_ids)
    held = list(due.only("score_id", "session_id"))
    if not held:
        return 0
    SessionScore.objects.filter(pk__in=[score.pk for score in held]).update(
        started_at_us=spend.frees_at_us, waiting_reason=spend.waiting_reason, rate_limited_since_us=None
    )
    for score in held:
        events.record(
            events.PROGRESS, score, phase=events.PHASE_WAITING_FOR_BUDGET, waiting_reason=spend.waiting_reason
        )
    logger.info("%d automatic scoring(s) wait: %s", len(held), spend.waiting_reason)
    return len(held)


def release_budget_waits() -> int:
    """Make the automatic scorings that wait for a spend budget due now, when no budget is used
    up any more (it was raised or removed); return how many. The minutely cleanup runs it: a
    budget freed by its period's end needs nothing, its scorings fall due then."""
    now = now_us()
    if budget.budgets_set() and budget.current_spend(now).used_up:
        return 0
    with transaction.atomic():
        released = SessionScore.objects.filter(selectors.waiting_for_budget_q(), started_at_us__gt=now).update(
            started_at_us=now, waiting_reason=""
        )
        if released:
            transaction.on_commit(lambda: wake_workers(released))
    return released


def take_turn(lock_key: int) -> None:
    """Make the writes of the current transaction that read-then-write under ``lock_key``
    take turns, across every process and host.

    Under PostgreSQL's READ COMMITTED, transactions running at the same instant would
    each read the state before any of them commits, and all act on it. A
    transaction-scoped advisory lock queues them; it is released at commit. SQLite
    needs nothing: IMMEDIATE transactions already take turns.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key])


def _record_progress(score: SessionScore, phase: str) -> None:
    try:
        # Not after the score was failed meanwhile (worker shutdown, orphan cleanup): one
        # statement checks that and stores the event.
        events.record_if(_in_progress_guard(score.score_id), events.PROGRESS, score, phase=phase)
    except DatabaseError:
        # Progress is informative; a database restart must not cost the judge's work.
        logger.warning("could not record progress %r of score %s; going on", phase, score.score_id, exc_info=True)
        connection.close()


def _in_progress_guard(score_id) -> tuple[str, list]:
    """A SELECT that finds a row while the score is in progress, for ``events.record_if``."""
    table, pk, status = (
        connection.ops.quote_name(name)
        for name in (SessionScore._meta.db_table, SessionScore._meta.pk.column, "status")
    )
    score_id = SessionScore._meta.pk.get_db_prep_value(score_id, connection)
    return f"SELECT 1 FROM {table} WHERE {pk} = %s AND {status} = %s", [score_id, Status.IN_PROGRESS.value]


def _complete(
    score_id, result: conversation.JudgeResult, warnings: list[str], transcript: conversation.Transcript
) -> SessionScore | None:
    """Store the judge's result; ``warnings`` are the injection findings, kept with what
    fitting the window cut and whether the judge gave no evaluation (the breakdown's warning
    is added from the reply).

    What ``judge.replies`` reads from the replies is read first, so that the move's UPDATE
    stores the criteria with the result (and the session's copy holds them); the missing
    tools and the transcript are stored in the move's transaction (a new completion has no
    tools to replace)."""
    warnings = [*warnings, result.input_warning] if result.input_warning else list(warnings)
    if result.analysis_missing:
        warnings.append(replies.ANALYSIS_MISSING_WARNING)
    completed = SessionScore(
        score_id=score_id,
        total_score=result.total_score,
        score_analysis=result.score_analysis,
        missing_tools_analysis=result.missing_tools_analysis,
        warnings=warnings,
    )
    tools = _read_replies(completed, MissingTool)

    def store_with_move(score: SessionScore) -> None:
        _store_missing_tools(tools)
        _store_transcript(score.score_id, transcript)

    score = _transition(
        score_id,
        Status.COMPLETED,
        event_fields={"total_score": result.total_score},
        in_transaction=store_with_move,
        total_score=result.total_score,
        score_analysis=result.score_analysis,
        missing_tools_analysis=result.missing_tools_analysis,
        dimensions=completed.dimensions,
        warnings=completed.warnings,
        judge_model=result.judge_model,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        cached_input_tokens=result.cached_input_tokens,
        cost_usd=result.cost_usd.quantize(COST_QUANTUM) if result.cost_usd is not None else None,
        score_samples=result.score_samples,
        score_spread=result.score_spread,
        unstable=result.unstable,
        input_coverage=result.input_coverage,
        analysis_missing=result.analysis_missing,
        judge_temperature=result.judge_sampling.temperature,
        judge_seed=result.judge_sampling.seed,
        completed_at_us=now_us(),
    )
    if score is None:
        logger.warning("score %s was no longer in progress when its judge finished; result dropped", score_id)
    return score


def _store_missing_tools(tools: list) -> None:
    if tools:
        MissingTool.objects.bulk_create(tools)


def _store_transcript(score_id, transcript: conversation.Transcript) -> None:
    """Keep the score's transcript, unless transcripts are not kept
    (SCORING_TRANSCRIPT_RETENTION_DAYS=0) or no call was made. One INSERT: a score is
    judged to its end once (its moves are conditional), so it has no transcript yet."""
    if settings.SCORING_TRANSCRIPT_RETENTION_DAYS <= 0 or not transcript.conversations:
        return
    ScoreTranscript.objects.create(score_id=score_id, recorded_at_us=now_us(), transcript=transcript.as_json())


def _keep_transcript(failed: SessionScore | None, transcript: conversation.Transcript) -> SessionScore | None:
    """Keep the transcript of a scoring that failed (``failed``; None: it was no longer active)."""
    if failed is not None:
        try:
            _store_transcript(failed.score_id, transcript)
        except DatabaseError:
            logger.warning("could not keep the transcript of failed score %s", failed.score_id, exc_info=True)
    return failed


def prune_transcripts(now=None) -> int:
    """Delete the transcripts recorded over SCORING_TRANSCRIPT_RETENTION_DAYS ago (all of them
    at 0); return how many. ``now``: microseconds since the epoch (default: the current time)."""
    now = now_us() if now is None else now
    cutoff = now - int(settings.SCORING_TRANSCRIPT_RETENTION_DAYS * 86_400 * 1_000_000)
    deleted, _ = ScoreTranscript.objects.filter(recorded_at_us__lt=cutoff).delete()
    return deleted


def _read_replies(score, tool_model) -> list:
    """Read what ``judge.replies`` finds in a completed score's text: sets its ``dimensions``
    and its breakdown's warning (in ``warnings``, replacing an earlier one, after the injection
    findings), and returns its ``missing_tools`` rows, unsaved."""
    score.dimensions = replies.parse_dimensions(score.score_analysis)
    warning = replies.breakdown_warning(score.dimensions, score.total_score)
    score.warnings = [text for text in score.warnings or [] if not replies.is_breakdown_warning(text)]
    score.warnings += [warning] if warning else []
    return missing_tool_rows(score, replies.parse_missing_tools(score.missing_tools_analysis), tool_model)


def store_reply_structure(scores) -> list:
    """Store what ``judge.replies`` reads from these completed scores' text (``_read_replies``),
    inside the caller's transaction, replacing what an earlier reading stored: ``dimensions``,
    the breakdown's warning and the ``missing_tools`` rows, which are returned. The score
    objects are updated too, and so is their sessions' copy of their newest completed score.
    (A completion reads its replies itself, before its move: ``_complete``.)

    The scores may be of a migration's historical model: the tools' model is the one
    their ``missing_tools`` relation points to, so ``0016_parse_backfill`` runs this too.
    """
    if not scores:
        return []
    score_model = type(scores[0])
    tool_model = score_model._meta.get_field("missing_tools").related_model
    tools = [tool for score in scores for tool in _read_replies(score, tool_model)]
    score_model.objects.bulk_update(scores, ["dimensions", "warnings"])
    if score_model is SessionScore:
        # The sessions' copy of their newest completed score holds its dimensions. (A
        # historical model is 0016's, older than the copy, which 0021 back-fills.)
        copy_latest_scores({score.session_id for score in scores})
    tool_model.objects.filter(score__in=scores).delete()
    return tool_model.objects.bulk_create(tools)


def missing_tool_rows(score, tools: list[replies.ToolName], tool_model=MissingTool) -> list:
    """Unsaved ``MissingTool`` rows of ``score`` for these tools, in their order, with the
    copies the backlog counts by: the score's total, and its session's alert type and
    chain, read by the INSERT itself (no query of their own)."""
    if not tools:
        return []  # and no copies to build: their subqueries cost a completion about 0.3 ms
    copies = {}
    if tool_model is MissingTool:  # a historical model (0016's) is older than the copies
        # Through the score's own row: a completion's score object carries only its id.
        stored = SessionScore.objects.filter(pk=score.pk)
        copies = {
            "total_score": score.total_score,
            "alert_type": Subquery(stored.values("session__alert_type")[:1]),
            "chain_id": Subquery(stored.values("session__chain_id")[:1]),
        }
    return [
        tool_model(score=score, name=tool.name, key=tool.key, position=position, **copies)
        for position, tool in enumerate(tools)
    ]


# Scores read per transaction by ``read_stored_replies``.
READ_REPLIES_BATCH = 500


@dataclass
class RepliesRead:
    """What ``read_stored_replies`` did."""

    scores: int = 0  # completed scores read
    with_dimensions: int = 0  # of them, those with a criteria breakdown
    with_warning: int = 0  # those whose breakdown does not back the total
    with_missing_tools: int = 0  # those naming at least one missing tool
    missing_tools: int = 0  # the tools named, in all


def read_stored_replies(score_model=SessionScore, *, every_score: bool = False) -> RepliesRead:
    """Read the dimensions and missing tools of completed scores stored before they were
    read at completion (``store_reply_structure``): those with neither, or with
    ``every_score`` all of them (after the parsers changed). Idempotent: reading a score
    again replaces what the last reading stored. ``score_model`` is a migration's
    historical ``SessionScore``, or the current one. A transaction per batch of scores.
    """
    scores = score_model.objects.filter(status=Status.COMPLETED).order_by("pk")
    if not every_score:
        scores = scores.filter(dimensions__isnull=True, missing_tools__isnull=True)
    scores = scores.only("pk", "session_id", "score_analysis", "missing_tools_analysis", "total_score", "warnings")
    read = RepliesRead()
    last_pk = None
    while True:
        with transaction.atomic():
            page = scores if last_pk is None else scores.filter(pk__gt=last_pk)
            batch = list(page[:READ_REPLIES_BATCH])
            tools = store_reply_structure(batch)
        if not batch:
            return read
        last_pk = batch[-1].pk
        read.scores += len(batch)
        read.with_dimensions += sum(score.dimensions is not None for score in batch)
        read.with_warning += sum(any(map(replies.is_breakdown_warning, score.warnings)) for score in batch)
        read.with_missing_tools += len({tool.score_id for tool in tools})
        read.missing_tools += len(tools)


def fail_scoring(score_id, reason: str, **kept) -> SessionScore | None:
    """Mark an active score failed with ``reason``, and the fields ``kept`` (what the judge
    was sent: ``warnings``, ``input_coverage``); None if it was not active."""
    return _transition(
        score_id,
        Status.FAILED,
        # The event goes to every dashboard: it says why in the service's words (scoring/failures.py).
        event_fields={"error_message": failures.shown_reason(reason)},
        error_message=reason,
        completed_at_us=now_us(),
        **kept,
    )


def _transition(
    score_id, to_status: str, *, event_fields: dict | None = None, in_transaction=None, **values
) -> SessionScore | None:
    """Move a score to ``to_status`` if the move is allowed from its current
    status, and store the event that reports it; return the updated score, or
    None (changing nothing) if the move is not allowed. ``in_transaction(score)``
    writes what goes with the move, in its transaction.

    A failed database write is retried once on a fresh connection, so a
    database restart mid-job does not strand the score.
    """

    def write() -> SessionScore | None:
        with transaction.atomic():
            return _move(score_id, to_status, event_fields=event_fields, in_transaction=in_transaction, **values)

    return retrying_once(write, f"writing score {score_id} as {to_status}")


def _move(
    score_id, to_status: str, *, event_fields: dict | None = None, in_transaction=None, **values
) -> SessionScore | None:
    """``_transition``'s write, inside the caller's transaction. ``in_transaction`` runs
    before the session's copy of its scores is written, so that the copy holds what it wrote."""
    score = _update_returning(score_id, _SOURCES[to_status], {"status": to_status, **values})
    if score is None:
        return None
    if in_transaction is not None:
        in_transaction(score)
    copy_latest_scores([score.session_id])
    events.record(_EVENT_FOR_STATUS[to_status], score, **(event_fields or {}))
    return score


def _update_returning(score_id, sources: tuple[str, ...], values: dict) -> SessionScore | None:
    """Set ``values`` (plain values, not expressions) on the score if its status is one of
    ``sources``, and return the score as updated (None when it is not): one statement (UPDATE
    ... RETURNING) where the ORM takes an UPDATE and a SELECT. Its SQL is written once per set
    of columns, since compiling it cost the worker more than running it costs the database; the
    values are prepared as the ORM prepares them (some, such as JSON, into objects that
    ``scoring.precompiled``'s markers cannot find)."""
    meta = SessionScore._meta
    params = [meta.get_field(name).get_db_prep_save(value, connection) for name, value in values.items()]
    params += [meta.pk.get_db_prep_value(score_id, connection), *sources]
    with connection.cursor() as cursor:
        cursor.execute(_update_returning_sql(tuple(values), len(sources)), params)
        row = cursor.fetchone()
    return None if row is None else instance_from_row(SessionScore, row)


@cache
def _update_returning_sql(names: tuple[str, ...], sources: int) -> str:
    quote = connection.ops.quote_name
    meta = SessionScore._meta
    assignments = ", ".join(f"{quote(meta.get_field(name).column)} = %s" for name in names)
    columns = ", ".join(quote(field.column) for field in meta.concrete_fields)
    return (
        f"UPDATE {quote(meta.db_table)} SET {assignments} "
        f"WHERE {quote(meta.pk.column)} = %s AND {quote(meta.get_field('status').column)} IN "
        f"({', '.join(['%s'] * sources)}) RETURNING {columns}"
    )


def retrying_once(write, what: str):
    try:
        return write()
    except DatabaseError as exc:
        logger.warning("%s failed (%s); retrying once", what, exc)
        time.sleep(DB_RETRY_DELAY_S)
        close_old_connections()
        return write()


# --- Orphans -----------------------------------------------------------------------------


def expire_stale_scorings(*, session_ids=None, include_all: bool = False, older_than_s: float | None = None) -> int:
    """Fail active scores that no job will finish (of these sessions, if given); return how many.

    By default: in_progress scores older than the job time limit (their worker
    died) and pending scores older than SCORING_PENDING_TIMEOUT_S (their job was
    lost). ``older_than_s`` sets one threshold for both; ``include_all`` fails
    every active score (for a stopped service).
    """
    stale = selectors.stale_scorings(
        session_ids=session_ids, include_all=include_all, older_than_s=older_than_s, now_us=now_us()
    )
    return sum(fail_scoring(score_id, reason) is not None for score_id, reason in stale)


# --- Human review ----------------------------------------------------------------------------


class ReviewRejected(ScoringError):
    """A review that cannot be recorded; str() says why."""


class ScoreNotFound(ReviewRejected):
    pass


# Who may review scores, in the admin and through the API.
REVIEW_PERMISSION = "scoring.add_scorereview"


def can_review(user) -> bool:
    """Whether ``user`` may record reviews: an active user with the ``add score review``
    permission (directly or through a group)."""
    return user is not None and user.is_authenticated and user.is_active and user.has_perm(REVIEW_PERMISSION)


def record_review(*, score_id, reviewer, verdict: str, reviewer_score, note: str = ""):
    """Record ``reviewer``'s verdict on a completed score and return the review.

    The judge's output is left as it is: a review is a separate row. Only a
    completed score (one with a judge's total) can be reviewed.
    """
    if verdict not in ReviewVerdict.values:
        raise ReviewRejected(f"verdict must be one of {', '.join(ReviewVerdict.values)}, not {verdict!r}")
    is_whole_number = isinstance(reviewer_score, int) and not isinstance(reviewer_score, bool)
    if not is_whole_number or not 0 <= reviewer_score <= 100:
        raise ReviewRejected(
            f"the reviewer's score must be a whole number from 0 to 100, not {reviewer_score!r}"
        )
    if reviewer is None or not reviewer.is_authenticated:
        raise ReviewRejected("a review needs a signed-in reviewer")
    note = note.strip()
    if len(note) > REVIEW_NOTE_MAX_CHARS:
        raise ReviewRejected(f"the note is {len(note):,} characters long; at most {REVIEW_NOTE_MAX_CHARS:,}")
    score = SessionScore.objects.only("score_id", "status").filter(pk=score_id).first()
    if score is None:
        raise ScoreNotFound(selectors.no_such_score(score_id))
    if score.status != Status.COMPLETED:
        raise ReviewRejected(f"score {score_id} is {score.status}; only completed scores can be reviewed")
    return ScoreReview.objects.create(
        score=score, reviewer=reviewer, verdict=verdict, reviewer_score=reviewer_score, note=note
    )
