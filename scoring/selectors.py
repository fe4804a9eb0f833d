"""Reads: the queries behind the API and the pages. Nothing here writes."""

import uuid
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from functools import cache

from django.conf import settings
from django.db import connection
from django.db.models import (
    Avg,
    Count,
    Exists,
    F,
    IntegerField,
    Max,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
    TextField,
    Value,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, NullIf

from scoring import identities
from scoring.criteria.selectors import criteria_q, current_criteria, with_criteria_current
from scoring.judge.prompts import (
    JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS,
    JUDGE_PROMPT_SCORE,
    estimated_tokens,
)
from scoring.judge.replies import DIMENSIONS
from scoring.models import (
    COST_QUANTUM,
    AlertSession,
    InsightReport,
    MissingTool,
    ReviewVerdict,
    ScoreReview,
    ScoreTranscript,
    ScoringEvent,
    ScoringStatus,
    SessionScore,
    SessionStatus,
    SessionWrite,
    TrialScoring,
)
from scoring.precompiled import PrecompiledQuery, instance_from_row, precompile


def session_list(*, status: str | None = None, alert_type: str | None = None) -> QuerySet[AlertSession]:
    """Sessions newest first, without their investigation, with their newest score's
    error (``with_latest_error``), dimensions (``latest_dimensions``) and whether its criteria
    are current (``criteria_current``).

    The investigation columns can hold megabytes per session, and a list never
    shows them, so they are deferred.
    """
    sessions = with_latest_error(AlertSession.objects.defer(*AlertSession.HEAVY_FIELDS))
    newest = SessionScore.objects.filter(pk=OuterRef("latest_score_id"))
    sessions = sessions.annotate(latest_dimensions=Subquery(newest.values("dimensions")[:1]))
    sessions = with_criteria_current(sessions, field="latest_prompt_hash", session="")
    sessions = sessions.order_by("-started_at_us", "-session_id")
    if status is not None:
        sessions = sessions.filter(status=status)
    if alert_type is not None:
        sessions = sessions.filter(alert_type=alert_type)
    return sessions


def with_latest_missing_tools(sessions: list[AlertSession]) -> list[AlertSession]:
    """Give each session of a page its newest score's missing tools (``latest_missing_tools``,
    their names in the judge's order), in one query."""
    names = defaultdict(list)
    score_ids = [session.latest_score_id for session in sessions if session.latest_score_id is not None]
    tools = MissingTool.objects.filter(score_id__in=score_ids).order_by("score_id", "position")
    for score_id, name in tools.values_list("score_id", "name"):
        names[score_id].append(name)
    for session in sessions:
        session.latest_missing_tools = names.get(session.latest_score_id, [])
    return sessions


def session_key(session_id: str | uuid.UUID) -> uuid.UUID:
    """A session id as a UUID. Raises AlertSession.DoesNotExist, saying ids are UUIDs, if it is not one."""
    return _uuid_key(session_id, AlertSession, "session")


def _uuid_key(raw: str | uuid.UUID, model, noun: str) -> uuid.UUID:
    try:
        return raw if isinstance(raw, uuid.UUID) else uuid.UUID(str(raw))
    except ValueError:
        raise model.DoesNotExist(
            f"No {noun} with id '{str(raw)[:100]}': {noun} ids are UUIDs "
            "(like 7c9e6679-7425-40de-944b-e07fc1f90ae7)."
        ) from None


def no_such_session(key: uuid.UUID) -> str:
    """What every endpoint says of a session id that names no session."""
    return f"No session with id {key}."


def get_session(session_id: str | uuid.UUID) -> AlertSession:
    """One whole session. Raises AlertSession.DoesNotExist, saying why, if there is none."""
    key = session_key(session_id)
    try:
        return AlertSession.objects.get(session_id=key)
    except AlertSession.DoesNotExist:
        raise AlertSession.DoesNotExist(no_such_session(key)) from None


# --- Scores ---------------------------------------------------------------------------


def with_session_digest(scores: QuerySet[SessionScore]) -> QuerySet[SessionScore]:
    """Annotate each score with its session's current ``investigation_digest`` (``session_digest``),
    for ``SessionScore.session_changed``."""
    return scores.annotate(session_digest=F("session__investigation_digest"))


def latest_score(session_id) -> SessionScore | None:
    """The score of a session: its newest scoring, whatever its status, with its missing tools."""
    scores = with_criteria_current(with_session_digest(SessionScore.objects.filter(session_id=session_id)))
    return scores.order_by("-scored_at_us").prefetch_related("missing_tools").first()


def latest_score_columns() -> dict:
    """AlertSession's copy of its newest score (``latest_*`` columns), as expressions that
    read it from the scores table, for an UPDATE of the sessions."""
    newest = SessionScore.objects.filter(session=OuterRef("pk")).order_by("-scored_at_us")
    return {
        "latest_score_id": Subquery(newest.values("score_id")[:1]),
        "latest_status": Subquery(newest.values("status")[:1]),
        "latest_total_score": Subquery(newest.values("total_score")[:1]),
        "latest_prompt_hash": Subquery(newest.values("prompt_hash")[:1]),
        **latest_completed_columns(),
        **latest_completed_judge_columns(),
        **scorings_columns(),
    }


def latest_completed_columns() -> dict:
    """The part of that copy read from the newest *completed* score: its id and the
    figures the fleet statistics count (``AlertSession.latest_completed_*``)."""
    newest = SessionScore.objects.filter(session=OuterRef("pk"), status=ScoringStatus.COMPLETED).order_by(
        "-scored_at_us"
    )
    columns = {
        f"latest_completed_{field}": Subquery(newest.values(field)[:1])
        for field in ("score_id", "total_score", "prompt_hash", "judge_model")
    }
    for name in DIMENSIONS:
        # A criterion without points is absent or JSON null (SQLite reads JSON null as
        # the text 'null'): SQL NULL here.
        points = Cast(NullIf(KT(f"dimensions__{name}"), Value("null")), IntegerField())
        columns[f"latest_completed_{name}"] = Subquery(newest.annotate(points=points).values("points")[:1])
    return columns


def latest_completed_judge_columns() -> dict:
    """The part of that copy that says how the newest completed score was made: its judge's
    sampling settings (with its model, the judge's identity) and whether it lacks an evaluation."""
    newest = SessionScore.objects.filter(session=OuterRef("pk"), status=ScoringStatus.COMPLETED).order_by(
        "-scored_at_us"
    )
    return {
        f"latest_completed_{field}": Subquery(newest.values(field)[:1])
        for field in ("judge_temperature", "judge_seed", "analysis_missing")
    }


def scorings_columns() -> dict:
    """The part of that copy summed over every scoring of the session
    (``AlertSession.scorings_*``); null for a session never scored."""
    per_session = SessionScore.objects.filter(session=OuterRef("pk")).order_by().values("session")
    sums = {
        "scorings_failed": Count("pk", filter=Q(status=ScoringStatus.FAILED)),
        "scorings_input_tokens": Sum("input_tokens"),
        "scorings_output_tokens": Sum("output_tokens"),
        "scorings_cost_usd": Sum("cost_usd"),
        "scorings_cached_input_tokens": Sum("cached_input_tokens"),
    }
    return {column: Subquery(per_session.annotate(total=total).values("total")) for column, total in sums.items()}


def is_orphaned(status: str, *, started_at_us: int, now_us: int) -> bool:
    """Whether a score in ``status`` is an active one past the limit after which
    ``stale_scorings`` lists it (a pending score's ``started_at_us`` is when it is due:
    its request, or the end of its wait for the provider's quota)."""
    if status == ScoringStatus.IN_PROGRESS:
        return started_at_us < _limit_us(settings.SCORING_JOB_TIMEOUT_S, now_us)
    if status == ScoringStatus.PENDING:
        return started_at_us < _limit_us(settings.SCORING_PENDING_TIMEOUT_S, now_us)
    return False


def _limit_us(limit_s: float, now_us: int) -> int:
    """The time ``limit_s`` seconds before ``now_us``: a job active since before it is orphaned."""
    return now_us - int(limit_s * 1_000_000)


@dataclass(frozen=True)
class ScoringState:
    """What the status table decides on for one session (``services.scoring_decision``)."""

    session_id: uuid.UUID
    status: str
    latest_status: str | None
    latest_orphaned: bool
    alert_type: str  # with chain_id, what picks the criteria that judge it
    chain_id: str


def scoring_states(session_ids, *, now_us: int) -> list[ScoringState]:
    """The state of each of these sessions that exists, in one query: the session
    row and its copy of its newest score, whose times are read by primary key."""
    newest = SessionScore.objects.filter(pk=OuterRef("latest_score_id"))
    rows = (
        AlertSession.objects.filter(pk__in=session_ids)
        .annotate(
            latest_started_at_us=Subquery(newest.values("started_at_us")[:1]),
        )
        .values_list(
            "session_id", "status", "latest_status", "latest_started_at_us", "alert_type", "chain_id"
        )
    )
    return [
        ScoringState(
            session_id,
            status,
            latest_status,
            latest_orphaned=is_orphaned(latest_status, started_at_us=started_at_us, now_us=now_us),
            alert_type=alert_type,
            chain_id=chain_id,
        )
        for session_id, status, latest_status, started_at_us, alert_type, chain_id in rows
    ]


def oldest_pending_score_ids(limit: int, *, now_us: int) -> list:
    """The ``limit`` pending scores due first: a pending row's started_at_us is when it is
    due (its request, or the end of its wait for the provider's quota), so the
    (status, started_at_us) index serves this; one still waiting is left out."""
    score_id = SessionScore._meta.pk
    return [score_id.to_python(row[0]) for row in _oldest_pending(limit).rows(now_us=now_us)]


# The claim path's reads, compiled once per process (scoring.precompiled): every claim runs them.
@cache
def _oldest_pending(limit: int) -> PrecompiledQuery:
    marker = -1  # unique among the parameters: the other one is a status
    pending = SessionScore.objects.filter(status=ScoringStatus.PENDING, started_at_us__lte=marker)
    ids = pending.order_by("started_at_us", "score_id").values_list("score_id", flat=True)[:limit]
    return precompile(ids.query, now_us=marker)


def in_progress_count() -> int:
    """Judge jobs in progress across all workers, which SCORING_MAX_IN_FLIGHT bounds: scorings, MCP
    reports and trial scorings."""
    return _in_progress_count().rows()[0][0]


@cache
def _in_progress_count() -> PrecompiledQuery:
    # One statement, not a count per table: it is on every claim's path.
    # Their status, a column of one type in the three tables (the primary keys are not).
    scorings, reports, trial_scorings = (
        model.objects.filter(status=ScoringStatus.IN_PROGRESS).order_by().values("status")
        for model in (SessionScore, InsightReport, TrialScoring)
    )
    return precompile(
        scorings.union(reports, trial_scorings, all=True).query, wrap="SELECT COUNT(*) FROM ({}) AS jobs"
    )


def spend_since_usd(since_us: int) -> Decimal:
    """What the scorings completed since ``since_us`` cost (their stored ``cost_usd``; an
    unpriced one costs nothing): every claim asks while a budget is set, so its statement is
    compiled once, and the (completed_at_us, cost_usd) index alone serves it."""
    ((total,),) = _spend_since().rows(since_us=since_us)
    # SQLite sums the column as floating point: back to the column's ten decimal places.
    return Decimal(0) if total is None else Decimal(str(total)).quantize(COST_QUANTUM)


@cache
def _spend_since() -> PrecompiledQuery:
    marker = -1
    costs = SessionScore.objects.filter(completed_at_us__gte=marker, cost_usd__isnull=False).order_by()
    return precompile(costs.values("cost_usd").query, wrap="SELECT SUM(spent.cost_usd) FROM ({}) AS spent", since_us=marker)


def waiting_for_budget_q() -> Q:
    """The automatic scorings that wait for a spend budget (``services.hold_automatic_scorings``):
    pending with a waiting reason that is not the provider's quota's."""
    return Q(
        status=ScoringStatus.PENDING,
        score_triggered_by__startswith=identities.SYNC_SCORING,
        rate_limited_since_us__isnull=True,
    ) & ~Q(waiting_reason="")


def spend_between_usd(since_us: int, until_us: int) -> Decimal:
    """What the scorings completed from ``since_us`` until before ``until_us`` cost."""
    return SessionScore.objects.filter(completed_at_us__gte=since_us, completed_at_us__lt=until_us).aggregate(
        spent=Sum("cost_usd", default=Decimal(0))
    )["spent"].quantize(COST_QUANTUM)


def reports_in_progress_count() -> int:
    """MCP reports in progress across all workers, which SCORING_REPORT_SLOT_SHARE bounds."""
    return InsightReport.objects.filter(status=ScoringStatus.IN_PROGRESS).count()


def any_pending_report() -> bool:
    """Whether an MCP report waits for a worker: every claim asks first."""
    return bool(_any_pending_report().rows())


@cache
def _any_pending_report() -> PrecompiledQuery:
    return precompile(InsightReport.objects.filter(status=ScoringStatus.PENDING).values("pk")[:1].query)


def session_within_prompt_bound(session_id, max_prompt_chars: int) -> AlertSession | None:
    """The session, unless the judge prompt length kept at ingest is over ``max_prompt_chars``
    (None then, or if there is no such session): each judge job loads its session so."""
    session_pk = AlertSession._meta.pk.get_db_prep_value(session_id, connection)
    rows = _session_within_prompt_bound().rows(session_id=session_pk, bound=max_prompt_chars)
    return instance_from_row(AlertSession, rows[0]) if rows else None


@cache
def _session_within_prompt_bound() -> PrecompiledQuery:
    session_marker, bound_marker = uuid.uuid4(), -1
    sessions = AlertSession.objects.filter(pk=session_marker).exclude(judge_prompt_chars__gt=bound_marker)
    return precompile(
        sessions[:1].query,
        session_id=AlertSession._meta.pk.get_db_prep_value(session_marker, connection),
        bound=bound_marker,
    )


def active_score(session_id) -> SessionScore | None:
    return SessionScore.objects.filter(session_id=session_id, status__in=ScoringStatus.active_values()).first()


def stale_scorings(*, session_ids=None, include_all=False, older_than_s=None, now_us: int) -> list[tuple]:
    """(score_id, reason) of the active scores that no job will finish (of these sessions, if given)."""
    active = SessionScore.objects.filter(status__in=ScoringStatus.active_values())
    if session_ids is not None:
        active = active.filter(session_id__in=session_ids)
    if include_all:
        reason = "orphaned: marked failed by cleanup_orphaned_scorings --all"
        return [(score_id, reason) for score_id in active.values_list("score_id", flat=True)]
    job_limit_s = settings.SCORING_JOB_TIMEOUT_S if older_than_s is None else older_than_s
    queue_limit_s = settings.SCORING_PENDING_TIMEOUT_S if older_than_s is None else older_than_s
    # A pending score's started_at_us is when it is due (see ``is_orphaned``).
    return stale_jobs(
        active, pending_since="started_at_us", job_limit_s=job_limit_s, queue_limit_s=queue_limit_s, now_us=now_us
    )


def stale_jobs(
    jobs: QuerySet, *, pending_since: str, job_limit_s: float, queue_limit_s: float | None, now_us: int
) -> list:
    """(primary key, reason) of those of ``jobs`` (scorings, MCP reports or trial scorings) that
    no worker will finish: in progress since (``started_at_us``) over ``job_limit_s`` ago, their
    worker stopped; pending since (the ``pending_since`` column) over ``queue_limit_s`` ago,
    their job lost (None: a pending one is never lost, as a trial scoring, which no task carries)."""
    in_progress = jobs.filter(status=ScoringStatus.IN_PROGRESS, started_at_us__lt=_limit_us(job_limit_s, now_us))
    stale = [
        (pk, f"orphaned: in progress for over {job_limit_s:g} s without finishing (its worker stopped)")
        for pk in in_progress.values_list("pk", flat=True)
    ]
    if queue_limit_s is None:
        return stale
    pending = jobs.filter(status=ScoringStatus.PENDING, **{f"{pending_since}__lt": _limit_us(queue_limit_s, now_us)})
    return stale + [
        (pk, f"orphaned: queued for over {queue_limit_s:g} s without a worker taking it (the job was lost)")
        for pk in pending.values_list("pk", flat=True)
    ]


def session_writes(session_id, limit: int = 20) -> list[SessionWrite]:
    """The newest ``limit`` writes of a session (who stored it, when)."""
    return list(SessionWrite.objects.filter(session_id=session_id).order_by("-written_at_us", "-id")[:limit])


def session_exists(session_id) -> bool:
    return AlertSession.objects.filter(pk=session_id).exists()


def sessions_to_score(
    *, unscored=False, obsolete=False, failed=False, since_us: int | None = None, alert_type: str | None = None
):
    """Finished sessions for a batch scoring, newest first.

    With none of ``unscored`` / ``obsolete`` / ``failed`` every finished
    session matches; with some, a session matches if any of them holds for it:
    it has no score, its score was made under other criteria, or it failed.
    """
    sessions = AlertSession.objects.filter(status__in=SessionStatus.terminal_values()).defer(
        *AlertSession.HEAVY_FIELDS
    )
    if since_us is not None:
        sessions = sessions.filter(started_at_us__gte=since_us)
    if alert_type:
        sessions = sessions.filter(alert_type=alert_type)
    wanted = Q()
    if unscored:
        wanted |= Q(latest_status__isnull=True)
    if obsolete:
        wanted |= Q(latest_status=ScoringStatus.COMPLETED) & criteria_q(
            obsolete=True, field="latest_prompt_hash", session=""
        )
    if failed:
        wanted |= Q(latest_status=ScoringStatus.FAILED)
    return sessions.filter(wanted).order_by("-started_at_us")


# A session's score prompt length, kept at ingest; a session stored before that counts
# its stored size instead (several times its prompt, usually).
PROMPT_CHARS = Coalesce("judge_prompt_chars", F("investigation_bytes") + len(JUDGE_PROMPT_SCORE))


def scoring_input_tokens(prompt_chars: int, scorings: int = 1) -> int:
    """Rough judge input tokens of ``scorings`` scorings whose score prompts have
    ``prompt_chars`` characters in all: each sends its score prompt twice (turn 2
    resends turn 1) and the follow-up."""
    return estimated_tokens(2 * prompt_chars + scorings * len(JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS))


def mean_output_tokens(judge_model: str) -> tuple[int | None, int]:
    """The mean output tokens of a scoring by ``judge_model`` (its completed scores'), and of
    how many scores; None when it has none."""
    done = SessionScore.objects.filter(
        judge_model=judge_model, status=ScoringStatus.COMPLETED, output_tokens__isnull=False
    ).aggregate(mean=Avg("output_tokens"), count=Count("pk"))
    return (round(done["mean"]) if done["mean"] is not None else None), done["count"]


def with_scoring_estimate(sessions: QuerySet[AlertSession]) -> QuerySet[AlertSession]:
    """Annotate each session with its score prompt's length (``prompt_chars``), for
    the estimate of what scoring it costs (``scoring_input_tokens``)."""
    return sessions.annotate(prompt_chars=PROMPT_CHARS)


def with_latest_error(sessions: QuerySet[AlertSession]) -> QuerySet[AlertSession]:
    """Annotate each session with its newest score's error message (``latest_error_message``;
    null unless that score failed), read by the copy's primary key (``latest_score_id``)."""
    newest = SessionScore.objects.filter(pk=OuterRef("latest_score_id"))
    return sessions.annotate(latest_error_message=Subquery(newest.values("error_message")[:1]))


# --- Dashboard and admin: sessions with their score, bands, reviews -------------------------
# EP-0028, Phase 6: 0-49 red (failed investigation), 50-74 yellow (weak), 75-100 green (good).


@dataclass(frozen=True)
class ScoreBand:
    key: str
    label: str
    low: int
    high: int
    meaning: str


SCORE_BANDS = (
    ScoreBand("poor", "Poor", 0, 49, "failed investigation"),
    ScoreBand("weak", "Weak", 50, 74, "weak investigation"),
    ScoreBand("good", "Good", 75, 100, "good investigation"),
)
_BANDS_BY_KEY = {band.key: band for band in SCORE_BANDS}


def band_of(total_score: int | None) -> ScoreBand | None:
    if total_score is None:
        return None
    return next((band for band in SCORE_BANDS if band.low <= total_score <= band.high), None)


def band_q(band_key: str, field: str = "total_score") -> Q:
    band = _BANDS_BY_KEY[band_key]
    return Q(**{f"{field}__gte": band.low, f"{field}__lte": band.high})


# What the newest score of a session says, for the list filters.
SCORE_STATES = {
    "not_scored": "Not scored",
    "scoring": "Scoring in progress",
    "failed": "Scoring failed",
    "scored": "Scored",
    "unstable": "Scored, unstable",
}


def score_state_q(state: str) -> Q:
    """Sessions whose newest score is in ``state`` ("unstable": completed, its samples far apart)."""
    if state == "unstable":
        unstable = SessionScore.objects.filter(unstable=True).values("score_id")
        return Q(latest_status=ScoringStatus.COMPLETED, latest_score_id__in=unstable)
    return {
        "not_scored": Q(latest_status__isnull=True),
        "scoring": Q(latest_status__in=ScoringStatus.active_values()),
        "failed": Q(latest_status=ScoringStatus.FAILED),
        "scored": Q(latest_status=ScoringStatus.COMPLETED),
    }[state]


def search_sessions(sessions: QuerySet[AlertSession], term: str) -> QuerySet[AlertSession]:
    """A whole session id finds that session; other text is looked for in the
    alert type, the alert data and the final analysis summary (what the lists show)."""
    term = term.strip()
    if not term:
        return sessions
    try:
        return sessions.filter(session_id=uuid.UUID(term))
    except ValueError:
        pass
    return sessions.annotate(alert_text=Cast("alert_data", TextField())).filter(
        Q(alert_type__icontains=term)
        | Q(alert_text__icontains=term)
        | Q(final_analysis_summary__icontains=term)
    )


SESSION_SORTS = {
    "-started": (F("started_at_us").desc(),),
    "started": (F("started_at_us").asc(),),
    "-score": (F("latest_total_score").desc(nulls_last=True), F("started_at_us").desc()),
    "score": (F("latest_total_score").asc(nulls_last=True), F("started_at_us").desc()),
}


def dashboard_sessions(
    *,
    state: str | None = None,
    band: str | None = None,
    obsolete: bool | None = None,
    alert_type: str | None = None,
    source: str | None = None,
    search: str = "",
    sort: str = "-started",
) -> QuerySet[AlertSession]:
    """The dashboard's session list: light columns, with the copy of each one's newest score.

    ``band`` selects sessions whose total (only completed scores have one) is in
    that band; ``obsolete`` True/False selects
    sessions whose newest score used other / the current criteria.
    """
    sessions = AlertSession.objects.defer(*AlertSession.HEAVY_FIELDS)
    current = current_criteria()  # one read for the filter and the column
    if state:
        sessions = sessions.filter(score_state_q(state))
    if band:
        sessions = sessions.filter(band_q(band, "latest_total_score"))
    if obsolete is not None:
        sessions = sessions.filter(
            criteria_q(obsolete=obsolete, field="latest_prompt_hash", session="", current=current)
        )
    if alert_type:
        sessions = sessions.filter(alert_type=alert_type)
    if source:
        sessions = sessions.filter(source=source)
    sessions = with_criteria_current(sessions, field="latest_prompt_hash", session="", current=current)
    sessions = search_sessions(with_latest_error(with_scoring_estimate(sessions)), search)
    return sessions.order_by(*SESSION_SORTS[sort], "-session_id")


def alert_types() -> list[str]:
    return list(AlertSession.objects.order_by("alert_type").values_list("alert_type", flat=True).distinct())


def score_history(session_id) -> QuerySet[SessionScore]:
    """Every scoring of a session, newest first, with its reviews and reviewers, its missing tools
    and whether its criteria are current (``criteria_current``)."""
    return (
        with_criteria_current(with_session_digest(SessionScore.objects.filter(session_id=session_id)))
        .order_by("-scored_at_us", "-score_id")  # a stable order, for the API's pages
        .prefetch_related(Prefetch("reviews", queryset=ScoreReview.objects.select_related("reviewer")), "missing_tools")
    )


# Review states of a score, for filters.
REVIEW_STATES = {
    "unreviewed": "Not reviewed",
    "agreed": "A reviewer agreed",
    "disagreed": "A reviewer disagreed",
}


def review_state_q(state: str) -> Q:
    reviews = ScoreReview.objects.filter(score=OuterRef("pk"))
    return {
        "unreviewed": ~Exists(reviews),
        "agreed": Exists(reviews.filter(verdict=ReviewVerdict.AGREE)),
        "disagreed": Exists(reviews.filter(verdict=ReviewVerdict.DISAGREE)),
    }[state]


def latest_event_id() -> int:
    """The newest stored scoring event: a page rendered now catches up from here."""
    return ScoringEvent.objects.aggregate(newest=Max("id"))["newest"] or 0


def with_review_counts(scores: QuerySet[SessionScore]) -> QuerySet[SessionScore]:
    """Annotate each score with its numbers of agreeing and disagreeing reviews.

    Subqueries, not a join with GROUP BY: grouping would drag every column
    (analyses included) through the aggregation.
    """

    def count(verdict: str):
        reviews = ScoreReview.objects.filter(score=OuterRef("pk"), verdict=verdict).order_by()
        return Coalesce(Subquery(reviews.values("score").annotate(n=Count("pk")).values("n")[:1]), 0)

    return scores.annotate(
        agree_count=count(ReviewVerdict.AGREE), disagree_count=count(ReviewVerdict.DISAGREE)
    )


def score_key(score_id: str | uuid.UUID) -> uuid.UUID:
    """A score id as a UUID. Raises SessionScore.DoesNotExist, saying ids are UUIDs, if it is not one."""
    return _uuid_key(score_id, SessionScore, "score")


def no_such_score(key: uuid.UUID) -> str:
    """What every endpoint says of a score id that names no score."""
    return f"No score with id {key}."


def score_transcript(score_id: uuid.UUID) -> ScoreTranscript | None:
    """A score's transcript; None when it has none (not kept, or past its retention). Raises
    SessionScore.DoesNotExist, saying why, when there is no such score."""
    transcript = ScoreTranscript.objects.filter(score_id=score_id).first()
    if transcript is None and not SessionScore.objects.filter(pk=score_id).exists():
        raise SessionScore.DoesNotExist(no_such_score(score_id))
    return transcript


def with_transcript_flag(scores: QuerySet[SessionScore]) -> QuerySet[SessionScore]:
    """Annotate each score with whether a transcript of it is kept (``has_transcript``), without reading it."""
    return scores.annotate(has_transcript=Exists(ScoreTranscript.objects.filter(score_id=OuterRef("pk"))))


def score_reviews(score_id: uuid.UUID) -> QuerySet[ScoreReview] | None:
    """A score's reviews, newest first, with their reviewers; None if there is no such score."""
    if not SessionScore.objects.filter(pk=score_id).exists():
        return None
    reviews = ScoreReview.objects.filter(score_id=score_id).select_related("reviewer")
    return reviews.order_by("-created_at", "-id")
