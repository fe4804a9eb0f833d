"""Writes: every change to sessions and scores goes through a function here.

A score moves pending -> in_progress -> completed | failed, and only forward
(see ``_ALLOWED_TRANSITIONS``). Each state change is one conditional UPDATE,
so two processes can never both claim a score or move it twice, and the event
that reports it is stored in the same transaction (``events.record``), to be
sent after commit.
"""

import logging
import time
from decimal import Decimal

from django.conf import settings
from django.db import DatabaseError, IntegrityError, close_old_connections, connection, transaction

from scoring import conversation, events, ingest, injection, llm, selectors
from scoring.logs import log_context
from scoring.models import (
    AlertSession,
    ReviewVerdict,
    ScoreReview,
    ScoringCriteria,
    ScoringStatus,
    SessionScore,
    SessionStatus,
)
from scoring.prompts import JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS, JUDGE_PROMPT_SCORE, PROMPT_HASH

logger = logging.getLogger(__name__)

Status = ScoringStatus
_ALLOWED_TRANSITIONS = {
    Status.PENDING: {Status.IN_PROGRESS, Status.FAILED},
    Status.IN_PROGRESS: {Status.COMPLETED, Status.FAILED},
    Status.COMPLETED: set(),
    Status.FAILED: set(),
}
_EVENT_FOR_STATUS = {Status.IN_PROGRESS: events.STARTED, Status.COMPLETED: events.COMPLETED, Status.FAILED: events.FAILED}
DB_RETRY_DELAY_S = 1.0
CAPACITY_POLL_S = 1.0
# Any constant bigint; names the advisory lock that capacity-checked claims queue on.
CAPACITY_CLAIM_LOCK_KEY = 0x7A55C0
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


def ingest_session(document: dict) -> tuple[AlertSession, bool]:
    """Store one TARSy session document; return it and whether it was new.

    Idempotent: sending the same session again updates it in place. Raises
    ``ingest.InvalidSession`` (with field errors) for a document that is not a
    TARSy session.
    """
    fields = ingest.parse_session(document)
    session_id = fields.pop("session_id")
    return AlertSession.objects.update_or_create(session_id=session_id, defaults=fields)


# --- Requesting a score ------------------------------------------------------------------


def score_request(*, session_id, triggered_by: str, force_rescore: bool = False) -> tuple[SessionScore, bool]:
    """Start scoring a session, or return the scoring it already has.

    Returns ``(score, created)``. Follows spec 000's status table: an active
    (pending / in_progress) score is returned as it is, or refused with
    ``ScoringInProgress`` when a re-score is forced; a finished score is
    returned unless ``force_rescore``; otherwise a new pending score is created
    and its judge job queued after commit.
    """
    session = AlertSession.objects.only("session_id", "status").filter(pk=session_id).first()
    if session is None:
        raise SessionNotFound(f"session {session_id} not found")
    if not session.is_terminal:
        raise SessionNotScorable(
            f"session {session_id} is {session.status}; only finished sessions "
            f"({', '.join(SessionStatus.terminal_values())}) can be scored"
        )
    expire_stale_scorings(session_id=session_id)
    with transaction.atomic():
        latest = selectors.latest_score(session_id)
        if latest is not None and latest.status in Status.active_values():
            if force_rescore:
                raise ScoringInProgress(latest)
            return latest, False
        if latest is not None and not force_rescore:
            return latest, False
        try:
            # The partial unique index (one active score per session) settles
            # races between concurrent requests; the savepoint keeps the outer
            # transaction usable when this one loses.
            with transaction.atomic():
                score = _create_pending_score(session_id, triggered_by)
        except IntegrityError:
            winner = selectors.active_score(session_id)
            if winner is None:
                raise
            if force_rescore:
                raise ScoringInProgress(winner) from None
            return winner, False
        transaction.on_commit(lambda: _enqueue_or_fail(score))
    return score, True


def _create_pending_score(session_id, triggered_by: str) -> SessionScore:
    ScoringCriteria.objects.get_or_create(
        prompt_hash=PROMPT_HASH,
        defaults={"score_prompt": JUDGE_PROMPT_SCORE, "followup_prompt": JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS},
    )
    requested_at = now_us()
    return SessionScore.objects.create(
        session_id=session_id,
        prompt_hash=PROMPT_HASH,
        score_triggered_by=triggered_by[:255],
        scored_at_us=requested_at,
        started_at_us=requested_at,
        status=Status.PENDING,
    )


def _enqueue_or_fail(score: SessionScore) -> None:
    from scoring import tasks  # tasks imports this module

    try:
        tasks.enqueue_scoring(score.score_id)
    except Exception as exc:  # the broker is down: say so rather than leave it pending
        logger.exception("could not queue judge job for score %s", score.score_id)
        try:
            fail_scoring(score.score_id, f"could not queue the judge job: {exc}")
            score.refresh_from_db()
        except DatabaseError:  # the broker was the database, and it is down
            logger.exception(
                "could not record that score %s was not queued; the orphan cleanup fails it "
                "after SCORING_PENDING_TIMEOUT_S",
                score.score_id,
            )


# --- Running a score (in a worker) ------------------------------------------------------


def score_run(score_id) -> SessionScore | None:
    """Run the judge job of a pending score to its end: completed or failed.

    Returns None when the score was not pending (another run claimed it, or it
    was already failed); that run does nothing, so a job delivered twice costs
    no second judge conversation.
    """
    with log_context(score_id=str(score_id)):
        score = _claim(score_id)
        if score is None:
            logger.info("score %s is not pending; nothing to do", score_id)
            return None
        with log_context(session_id=str(score.session_id)):
            return _judge(score)


def _judge(score: SessionScore) -> SessionScore | None:
    deadline = time.monotonic() + settings.SCORING_JOB_TIMEOUT_S
    try:
        session = AlertSession.objects.get(pk=score.session_id)
        # Instruction-like text in the session is only flagged: the prompt fences
        # session data in (injection.py), and the score comes from the judge's own last line.
        SessionScore.objects.filter(pk=score.score_id, status=Status.IN_PROGRESS).update(
            warnings=injection.find_injection_attempts(session)
        )
        result = conversation.run_judge(
            session, on_phase=lambda phase: _record_progress(score, phase), deadline=deadline
        )
    except llm.JudgeLLMError as exc:
        return fail_scoring(score.score_id, str(exc))
    except Exception as exc:
        logger.exception("judge job for score %s failed unexpectedly", score.score_id)
        return fail_scoring(score.score_id, f"unexpected error: {type(exc).__name__}: {exc}")
    return _complete(score.score_id, result)


def _claim(score_id) -> SessionScore | None:
    """pending -> in_progress, once fewer than SCORING_MAX_IN_FLIGHT scorings are
    in progress across all workers; None if the score is no longer pending.

    The limit is checked inside the claiming UPDATE, and claims that check it
    run one at a time (see ``_serialize_capacity_claims``), so it is exact.
    """
    while True:
        score = _transition(score_id, Status.IN_PROGRESS, within_capacity=True, started_at_us=now_us())
        if score is not None or not SessionScore.objects.filter(pk=score_id, status=Status.PENDING).exists():
            return score
        llm.release_db_connection()  # a waiting job holds no connection either
        time.sleep(CAPACITY_POLL_S)


def _serialize_capacity_claims() -> None:
    """Make capacity-checked claims take turns, across every process and host.

    Under PostgreSQL's READ COMMITTED, claims running at the same instant would
    each count the scorings in progress before any of them commits, and all
    pass. A transaction-scoped advisory lock queues them; it is released at
    commit. SQLite needs nothing: IMMEDIATE transactions already take turns.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CAPACITY_CLAIM_LOCK_KEY])


def _record_progress(score: SessionScore, phase: str) -> None:
    with transaction.atomic():
        # Not after the score was failed meanwhile (worker shutdown, orphan cleanup).
        if SessionScore.objects.filter(pk=score.score_id, status=Status.IN_PROGRESS).exists():
            events.record(events.PROGRESS, score, phase=phase)


def _complete(score_id, result: conversation.JudgeResult) -> SessionScore | None:
    score = _transition(
        score_id,
        Status.COMPLETED,
        event_fields={"total_score": result.total_score},
        total_score=result.total_score,
        score_analysis=result.score_analysis,
        missing_tools_analysis=result.missing_tools_analysis,
        judge_model=result.judge_model,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        cost_usd=result.cost_usd.quantize(Decimal("1e-10")) if result.cost_usd is not None else None,
        completed_at_us=now_us(),
    )
    if score is None:
        logger.warning("score %s was no longer in progress when its judge finished; result dropped", score_id)
    return score


def fail_scoring(score_id, reason: str) -> SessionScore | None:
    """Mark an active score failed with ``reason``; None if it was not active."""
    return _transition(
        score_id,
        Status.FAILED,
        event_fields={"error_message": reason},
        error_message=reason,
        completed_at_us=now_us(),
    )


def _transition(
    score_id, to_status: str, *, event_fields: dict | None = None, within_capacity: bool = False, **values
) -> SessionScore | None:
    """Move a score to ``to_status`` if the move is allowed from its current
    status (and, with ``within_capacity``, if fewer than SCORING_MAX_IN_FLIGHT
    scorings are in progress), store the event that reports it, and return the
    updated score. Returns None (and changes nothing) otherwise.

    A failed database write is retried once on a fresh connection, so a
    database restart mid-job does not strand the score.
    """
    sources = [source for source, targets in _ALLOWED_TRANSITIONS.items() if to_status in targets]

    def write() -> SessionScore | None:
        with transaction.atomic():
            movable = SessionScore.objects.filter(pk=score_id, status__in=sources)
            if within_capacity:
                _serialize_capacity_claims()
                movable = movable.annotate(in_progress=selectors.in_progress_count_subquery()).filter(
                    in_progress__lt=settings.SCORING_MAX_IN_FLIGHT
                )
            if not movable.update(status=to_status, **values):
                return None
            score = SessionScore.objects.get(pk=score_id)
            events.record(_EVENT_FOR_STATUS[to_status], score, **(event_fields or {}))
            return score

    try:
        return write()
    except DatabaseError as exc:
        logger.warning("writing score %s as %s failed (%s); retrying once", score_id, to_status, exc)
        time.sleep(DB_RETRY_DELAY_S)
        close_old_connections()
        return write()


# --- Orphans -----------------------------------------------------------------------------


def expire_stale_scorings(*, session_id=None, include_all: bool = False, older_than_s: float | None = None) -> int:
    """Fail active scores that no job will finish; return how many.

    By default: in_progress scores older than the job time limit (their worker
    died) and pending scores older than SCORING_PENDING_TIMEOUT_S (their job was
    lost). ``older_than_s`` sets one threshold for both; ``include_all`` fails
    every active score (for a stopped service).
    """
    stale = selectors.stale_scorings(
        session_id=session_id, include_all=include_all, older_than_s=older_than_s, now_us=now_us()
    )
    return sum(fail_scoring(score_id, reason) is not None for score_id, reason in stale)


# --- Batches -------------------------------------------------------------------------------


def score_sessions(session_ids, *, triggered_by: str, force_rescore: bool) -> dict[str, int]:
    """Request scoring for many sessions through ``score_request``; count the outcomes."""
    outcome = {"queued": 0, "already_scored": 0, "in_progress": 0, "not_scorable": 0}
    for session_id in session_ids:
        try:
            score, created = score_request(
                session_id=session_id, triggered_by=triggered_by, force_rescore=force_rescore
            )
        except ScoringInProgress:
            outcome["in_progress"] += 1
            continue
        except (SessionNotFound, SessionNotScorable):
            outcome["not_scorable"] += 1
            continue
        if created:
            outcome["queued"] += 1
        elif score.status in Status.active_values():
            outcome["in_progress"] += 1
        else:
            outcome["already_scored"] += 1
    return outcome


# --- Human review ----------------------------------------------------------------------------


class ReviewRejected(ScoringError):
    """A review that cannot be recorded; str() says why."""


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
    score = SessionScore.objects.only("score_id", "status").filter(pk=score_id).first()
    if score is None:
        raise ReviewRejected(f"score {score_id} not found")
    if score.status != Status.COMPLETED:
        raise ReviewRejected(f"score {score_id} is {score.status}; only completed scores can be reviewed")
    return ScoreReview.objects.create(
        score=score, reviewer=reviewer, verdict=verdict, reviewer_score=reviewer_score, note=note.strip()
    )
