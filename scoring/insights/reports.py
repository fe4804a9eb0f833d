"""MCP prioritization reports (spec decision 5): the judge model reads the missing-tools
analyses of the selected scores and writes which tools or MCP servers to build first.

A report moves pending -> in_progress -> completed | failed, each move one conditional
UPDATE, like a scoring. It is a judge job as a scoring is: requesting one stores it
pending and, after commit, wakes the workers; a worker process's dispatcher claims it
for one of its slots (``claim_pending_reports``, scoring/jobs/runtime.py) and writes it
on that slot's thread, so that reports and scorings share SCORING_CONCURRENCY_PER_WORKER
and SCORING_MAX_IN_FLIGHT; reports hold at most SCORING_REPORT_SLOT_SHARE of either
(``report_slots``), so that scorings keep moving behind a queue of reports. A request that
an existing report answers gets it (``request_report``), and each user may queue at most
SCORING_REPORT_RATE. A worker told to stop fails the reports it is writing, as it
does its scorings; a report whose worker died, or that no worker took, is failed by the
minutely cleanup (``expire_stale_reports``).

When the analyses do not fit the judge model's context window, the report is written
in rounds: parts of them are summarised into notes first (again, if the notes do not
fit either), and the report is written from the notes.
"""

import hashlib
import logging
import math
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q

from scoring import selectors, services
from scoring.insights.filters import InsightFilters, latest_completed_scores
from scoring.judge import errors, fitting, llm, report_prompt, tokens
from scoring.judge.report_prompt import ReportInput
from scoring.models import InsightReport, ScoringStatus, SessionScore

logger = logging.getLogger(__name__)

Status = ScoringStatus
# The reply's share of the window: each call leaves this much of it unused by its prompt.
REPLY_SHARE = 4
# Summarising rounds before the last: more means the notes do not shrink.
MAX_ROUNDS = 4
# The least room a window must leave for each of two texts beside the prompt.
MIN_TEXT_TOKENS = 200
TRUNCATED = "\n\n[cut here: too long for one judge call]"


class NoReportInputs(Exception):
    """No selected score has a missing-tools analysis; str() says so, for the caller."""


class TooManyReports(Exception):
    """The requester queued SCORING_REPORT_RATE reports within its period; str() says so,
    ``retry_after_s`` when the next one may be queued."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class UnusableInputs(Exception):
    """The report's inputs are gone, or cannot be brought within the window; str() is
    stored with the report."""


# --- Requesting -----------------------------------------------------------------------------


def report_inputs(filters: InsightFilters):
    """The scores a report on ``filters`` reads: each selected session's newest completed
    score with a missing-tools analysis, the newest SCORING_REPORT_MAX_SCORES of them."""
    scores = latest_completed_scores(filters).filter(missing_tools_analysis__regex=r"\S")
    return scores.order_by("-scored_at_us", "score_id")[: settings.SCORING_REPORT_MAX_SCORES]


def inputs_digest(score_ids: list[str]) -> str:
    """What a report's text depends on besides its filters: the scores it reads (in any order),
    the judge model that would write it and the report's prompts (a deploy that changes them
    makes new reports)."""
    text = "\n".join([report_prompt.REPORT_PROMPTS_HASH, settings.SCORING_LLM_MODEL, *sorted(score_ids)])
    return hashlib.sha256(text.encode()).hexdigest()


def request_report(filters: InsightFilters, requested_by: str) -> InsightReport:
    """Store a pending report on ``filters`` and wake the workers after commit; return it.

    A request that another report already answers gets that one (a second click, or
    filters that select the same scores, costs no second report): one on the same filters
    pending or in progress, or one that reads the same scores with the same judge model,
    pending, in progress or completed within SCORING_REPORT_REUSE_S. Raises
    ``NoReportInputs`` when no selected score has a missing-tools analysis (there would be
    nothing to report on), ``TooManyReports`` past the requester's SCORING_REPORT_RATE.
    """
    params = filters.as_params()
    score_ids = [str(score_id) for score_id in report_inputs(filters).values_list("score_id", flat=True)]
    if not score_ids:
        raise NoReportInputs(
            "no completed score with a missing-tools analysis matches these filters "
            f"({_describe(params)}): score some sessions first, or widen the filters"
        )
    digest = inputs_digest(score_ids)
    requested_by = requested_by[:255]
    with transaction.atomic():
        services.take_turn(services.REPORT_REQUEST_LOCK_KEY)  # two requests at once: one report
        now_us = services.now_us()
        same = _answering_report(params, digest, now_us)
        if same is not None:
            return same
        _check_rate(requested_by, now_us)
        report = InsightReport.objects.create(
            status=Status.PENDING,
            filters=params,
            score_ids=score_ids,
            inputs_digest=digest,
            requested_by=requested_by,
            requested_at_us=now_us,
        )
        # The pending row is the job, as a scoring's is: a lost wake-up only waits for the next poll.
        transaction.on_commit(lambda: services.wake_workers(1))
    return report


def _answering_report(params: dict, digest: str, now_us: int) -> InsightReport | None:
    """The report that answers a request already: on the same filters and active, else the
    newest reading the same scores that is active or completed recently enough."""
    active = InsightReport.objects.filter(status__in=Status.active_values())
    same_filters = next((report for report in active if report.filters == params), None)
    if same_filters is not None:
        return same_filters
    fresh_since_us = now_us - settings.SCORING_REPORT_REUSE_S * 1_000_000
    answering = Q(status__in=Status.active_values()) | Q(
        status=Status.COMPLETED, completed_at_us__gte=fresh_since_us
    )
    return InsightReport.objects.filter(answering, inputs_digest=digest).order_by("-requested_at_us").first()


_PERIOD_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PERIOD_WORDS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}


def _check_rate(requested_by: str, now_us: int) -> None:
    """Raise ``TooManyReports`` when ``requested_by`` has queued SCORING_REPORT_RATE reports
    within its period (counted in the database: the limit holds across web processes)."""
    if not settings.SCORING_REPORT_RATE:
        return
    count, period = settings.SCORING_REPORT_RATE.split("/")
    period_us = _PERIOD_S[period[0]] * 1_000_000
    recent = InsightReport.objects.filter(requested_by=requested_by, requested_at_us__gt=now_us - period_us)
    times = list(recent.order_by("-requested_at_us").values_list("requested_at_us", flat=True)[: int(count)])
    if len(times) < int(count):
        return
    retry_after_s = max(1, math.ceil((times[-1] + period_us - now_us) / 1_000_000))
    raise TooManyReports(
        f"{requested_by} has requested {count} reports within the last {_PERIOD_WORDS[period[0]]} "
        f"(SCORING_REPORT_RATE={settings.SCORING_REPORT_RATE}).",
        retry_after_s,
    )


def report_slots(slots: int) -> int:
    """How many of ``slots`` judge slots reports may hold at once (SCORING_REPORT_SLOT_SHARE)."""
    return services.share_of_slots(settings.SCORING_REPORT_SLOT_SHARE, slots)


def latest_report() -> InsightReport | None:
    """The newest report requested, whatever its status."""
    return InsightReport.objects.order_by("-requested_at_us").first()


def get_report(report_id) -> InsightReport | None:
    return InsightReport.objects.filter(pk=report_id).first()


# --- Running (in a worker process) ----------------------------------------------------------


def claim_pending_reports(limit: int) -> list[InsightReport]:
    """pending -> in_progress for up to ``limit`` of the oldest pending reports, as far as
    fewer than SCORING_MAX_IN_FLIGHT judge jobs (scorings and reports) stay in progress
    across all workers, and reports hold no more than their share of it
    (``report_slots``); returns those claimed. A worker's dispatcher claims them for its
    free slots, in the same turns as scorings (``services.claim_pending_scores``)."""
    if not selectors.any_pending_report():  # idle workers poll: a plain read first, with no write lock
        return []
    pending = InsightReport.objects.filter(status=Status.PENDING).order_by("requested_at_us", "report_id")
    with transaction.atomic():
        room = services.claim_room(limit)  # takes the claims' turn: the count below is exact
        room = min(room, report_slots(settings.SCORING_MAX_IN_FLIGHT) - selectors.reports_in_progress_count())
        if room <= 0:
            return []
        # The model is kept from the claim on: a report that fails says which model it was for.
        values = {"started_at_us": services.now_us(), "judge_model": settings.SCORING_LLM_MODEL}
        oldest = pending.values_list("pk", flat=True)[:room]
        claimed = (_move(report_id, Status.IN_PROGRESS, **values) for report_id in oldest)
        return [report for report in claimed if report is not None]


@dataclass
class _Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal | None = None
    model: str = ""
    calls: int = 0


def run_claimed_report(report: InsightReport) -> InsightReport | None:
    """Write an in-progress report to its end: completed or failed."""
    deadline = llm.Deadline.from_setting("SCORING_REPORT_TIMEOUT_S")
    usage = _Usage()
    try:
        inputs = _load_inputs(report.score_ids)
        llm.release_db_connection()
        window = settings.SCORING_REPORT_WINDOW_TOKENS or fitting.context_window()
        filters = report.filters
        try:
            text, rounds = _write(inputs, filters=filters, usage=usage, deadline=deadline, window=window)
        except errors.ContextWindowExceeded as exc:
            # As a scoring does: once more, within the window the provider's error taught.
            window = fitting.learn_window(str(exc), window)
            text, rounds = _write(inputs, filters=filters, usage=usage, deadline=deadline, window=window)
    except errors.ContextWindowExceeded as exc:
        # Its message speaks of a session: say what it means for a report.
        reason = (
            "a report call was over the judge model's context window; "
            f"set SCORING_REPORT_WINDOW_TOKENS below it ({exc})"
        )
        return fail_report(report.report_id, reason, usage)
    except (errors.JudgeLLMError, UnusableInputs) as exc:
        return fail_report(report.report_id, str(exc), usage)
    except DatabaseError as exc:
        logger.exception("report %s lost the database", report.report_id)
        return fail_report(report.report_id, f"database error: {type(exc).__name__}: {exc}", usage)
    except Exception as exc:
        logger.exception("report %s failed unexpectedly", report.report_id)
        return fail_report(report.report_id, f"unexpected error: {type(exc).__name__}: {exc}", usage)
    done = _move(report.report_id, Status.COMPLETED, report=text, rounds=rounds, **_usage_fields(usage))
    if done is None:
        logger.warning("report %s was no longer in progress when it was written; dropped", report.report_id)
    return done


def _load_inputs(score_ids: list[str]) -> list[ReportInput]:
    rows = (
        SessionScore.objects.filter(pk__in=score_ids)
        .order_by("-scored_at_us", "score_id")
        .values_list(
            "session_id", "session__alert_type", "session__chain_id", "total_score", "missing_tools_analysis"
        )
    )
    return [ReportInput(str(session_id), *rest) for session_id, *rest in rows if (rest[-1] or "").strip()]


@dataclass
class _Text:
    """A text to send (an analysis, or the notes of a part) and the sessions it covers."""

    text: str
    sessions: int
    tokens: int


def _write(
    inputs: list[ReportInput], *, filters: dict, usage: _Usage, deadline: llm.Deadline, window: int
) -> tuple[str, int]:
    """The report's text and the rounds it took: one call when everything fits the
    window, else parts summarised (as often as needed) and the report written from them."""
    if not inputs:
        raise UnusableInputs("none of the report's scores has a missing-tools analysis any more")
    sessions = len(inputs)
    room = window - window // REPLY_SHARE  # one call's prompt: the window less the reply's share
    # What the texts may take of a call: the room less the longest prompt around them.
    space = room - max(
        tokens.count(prompt)
        for prompt in (
            report_prompt.report_prompt([], sessions=sessions, filters=filters, parts=sessions),
            report_prompt.chunk_prompt([], sessions=sessions, notes=True),
        )
    )
    if space < 2 * MIN_TEXT_TOKENS:
        raise UnusableInputs(
            f"a window of {room:,} input tokens leaves too little room beside the report's prompt: "
            "raise SCORING_REPORT_WINDOW_TOKENS"
        )
    texts = [_sized(item.as_text(), space) for item in inputs]
    parts = None
    for rounds in range(1, MAX_ROUNDS + 2):
        if sum(t.tokens for t in texts) <= space:
            prompt = report_prompt.report_prompt(
                [t.text for t in texts], sessions=sessions, filters=filters, parts=parts
            )
            return _ask(prompt, usage, deadline), rounds
        if rounds > MAX_ROUNDS:
            break
        notes = parts is not None
        texts = [
            _sized(_ask(_chunk_prompt(chunk, notes), usage, deadline), space, sessions=sum(t.sessions for t in chunk))
            for chunk in _pack(texts, space)
        ]
        parts = len(texts)
    raise UnusableInputs(
        f"the missing-tools analyses of {sessions} sessions did not fit the judge model's window of {room:,} "
        f"input tokens even after {MAX_ROUNDS} rounds of summaries; narrow the filters"
    )


def _chunk_prompt(chunk: list[_Text], notes: bool) -> str:
    return report_prompt.chunk_prompt([t.text for t in chunk], sessions=sum(t.sessions for t in chunk), notes=notes)


def _ask(prompt: str, usage: _Usage, deadline: llm.Deadline) -> str:
    # Patient: a report cannot wait in the queue, so it waits out a quota in place, up to its deadline.
    reply = llm.complete([{"role": "user", "content": prompt}], deadline=deadline, patient=True)
    usage.input_tokens += reply.input_tokens or 0
    usage.output_tokens += reply.output_tokens or 0
    if reply.cost_usd is not None:
        usage.cost_usd = (usage.cost_usd or Decimal(0)) + reply.cost_usd
    usage.model = reply.model
    usage.calls += 1
    return reply.content


def _sized(text: str, space: int, sessions: int = 1) -> _Text:
    """``text`` with its tokens (its separator included), cut to half the space when
    longer: any two texts fit one call."""
    limit = space // 2
    counted = tokens.count(text + report_prompt.ENTRY_SEPARATOR)
    while counted > limit:
        text = text[: int(len(text) * limit / counted * 0.9)] + TRUNCATED
        counted = tokens.count(text + report_prompt.ENTRY_SEPARATOR)
    return _Text(text, sessions, counted)


def _pack(texts: list[_Text], space: int) -> list[list[_Text]]:
    """Consecutive texts in parts of at most ``space`` tokens. ``_sized`` keeps each
    within half of it, so every part holds two or more (but perhaps the last), and each
    round at least halves the count."""
    parts: list[list[_Text]] = []
    used = 0
    for text in texts:
        if not parts or used + text.tokens > space:
            parts.append([])
            used = 0
        parts[-1].append(text)
        used += text.tokens
    return parts


def _usage_fields(usage: _Usage) -> dict:
    if not usage.calls:
        return {}
    return {
        "judge_model": usage.model,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd.quantize(Decimal("1e-10")) if usage.cost_usd is not None else None,
    }


def fail_report(report_id, reason: str, usage: _Usage | None = None) -> InsightReport | None:
    """Mark an active report failed with ``reason`` (keeping what its calls cost); None if it was not active."""
    return _move(report_id, Status.FAILED, error_message=reason, **_usage_fields(usage or _Usage()))


_SOURCES = {
    Status.IN_PROGRESS: [Status.PENDING],
    Status.COMPLETED: [Status.IN_PROGRESS],
    Status.FAILED: Status.active_values(),
}


def _move(report_id, to_status: str, **values) -> InsightReport | None:
    """One conditional UPDATE: the move happens only from an allowed status."""
    if to_status in Status.terminal_values():
        values["completed_at_us"] = services.now_us()
    allowed = InsightReport.objects.filter(pk=report_id, status__in=_SOURCES[to_status])
    moved = allowed.update(status=to_status, **values)
    return InsightReport.objects.get(pk=report_id) if moved else None


# --- Orphans --------------------------------------------------------------------------------


def expire_stale_reports() -> int:
    """Fail the reports no job will finish; return how many: in progress for longer than
    SCORING_REPORT_TIMEOUT_S (their worker died) or pending for longer than
    SCORING_PENDING_TIMEOUT_S (their task was lost)."""
    stale = selectors.stale_jobs(
        InsightReport.objects.all(),
        pending_since="requested_at_us",
        job_limit_s=settings.SCORING_REPORT_TIMEOUT_S,
        queue_limit_s=settings.SCORING_PENDING_TIMEOUT_S,
        now_us=services.now_us(),
    )
    return sum(fail_report(report_id, reason) is not None for report_id, reason in stale)


def _describe(params: dict) -> str:
    return ", ".join(f"{name} {value}" for name, value in params.items()) or "no filters"
