"""Trials (docs/insights.md, "Trials"): planning one (its sample drawn and what it would cost,
the dry run), starting it (its scorings queued), cancelling it, and running its scorings as judge
jobs. A trial scoring is claimed by a worker's dispatcher after the service's own scorings and
within the same limit of judge jobs in flight (``scoring.jobs.runtime``), so a trial never holds
back a scoring; it is judged as a scoring is (``conversation.run_judge``), under its arm's
criteria, and written to its own row: no score of the service changes."""

import logging
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Value, When

from scoring import selectors, services
from scoring.criteria import selectors as criteria_selectors
from scoring.judge import conversation, errors, llm, sampling
from scoring.models import (
    AlertSession,
    CriteriaState,
    CriteriaVersion,
    ScoringStatus,
    Trial,
    TrialArm,
    TrialScoring,
    TrialStatus,
)
from scoring.ops.logs import log_context
from scoring.trials import selectors as trial_selectors

logger = logging.getLogger(__name__)

# How many sessions a trial may draw: each is judged twice, and the figures' intervals narrow
# little past a few hundred.
MAX_TRIAL_SIZE = 500
DEFAULT_TRIAL_SIZE = 30


class TrialRejected(ValueError):
    """A trial that cannot be planned or changed; str() says why."""


@dataclass(frozen=True)
class TrialPlan:
    """A trial as it would run: the sessions drawn, each arm's criteria hash for each, each arm's
    judge model, and what judging them would send and cost (``trial_selectors.estimate``)."""

    candidate: CriteriaVersion | None
    candidate_model: str
    size: int
    alert_type: str
    chain_id: str
    seed: int
    hashes: dict  # session id (str) -> {arm: criteria hash}
    models: dict  # arm -> its judge model ("": the configured one)
    estimate: dict

    @property
    def session_ids(self) -> list[str]:
        return list(self.hashes)


def triable_candidate(candidate_id) -> CriteriaVersion:
    """The criteria version ``candidate_id`` if it may be tried; else ``TrialRejected`` says why
    (none such, or not a candidate)."""
    version = CriteriaVersion.objects.filter(pk=candidate_id).first()
    if version is None:
        raise TrialRejected(f"no criteria version {candidate_id}")
    if version.state != CriteriaState.CANDIDATE:
        raise TrialRejected(
            f"criteria version {version.pk} is {version.state}: only a candidate is tried (its texts are "
            "frozen, so every trial scoring carries its hash); make it a candidate first"
        )
    return version


def plan_trial(
    *,
    candidate_id=None,
    candidate_model: str = "",
    size: int = DEFAULT_TRIAL_SIZE,
    alert_type: str = "",
    chain_id: str = "",
    seed: int | None = None,
    session_ids: list | None = None,
) -> TrialPlan:
    """Draw a trial's sample and estimate its cost, writing nothing: the dry run, and the first
    step of ``start_trial``. The candidate is a criteria version (a candidate), a judge model
    (reached through the configured API base and key), or both. ``session_ids`` (a dry run's)
    are taken as the sample instead of drawing one. Raises ``TrialRejected`` for neither, a
    version that is not a candidate, a model litellm cannot place or of another provider, a
    size out of range, a session not in the pool, a pool with no reviewed session, or a
    candidate that is what judges now."""
    candidate_model = candidate_model.strip()
    if candidate_id is None and not candidate_model:
        raise TrialRejected("a trial needs a candidate: a criteria version, a judge model, or both")
    version = triable_candidate(candidate_id) if candidate_id is not None else None
    if candidate_model:
        _check_model(candidate_model)
    if not 1 <= size <= MAX_TRIAL_SIZE:
        raise TrialRejected(f"size must be from 1 to {MAX_TRIAL_SIZE} sessions, not {size}")
    seed = secrets.randbelow(2**31) if seed is None else seed
    pool = trial_selectors.pool(version, alert_type=alert_type, chain_id=chain_id)
    if session_ids is None:
        sample = trial_selectors.stratified_sample(pool, size, seed)
    else:  # the sample a dry run drew, as it was shown
        sample = _in_pool(pool, session_ids)
        size = len(sample)
    if not sample:
        scope = version.scope_label if version is not None else "any"
        raise TrialRejected(
            f"no finished session of {scope} criteria{_narrowed(alert_type, chain_id)} has a review of "
            "ours or a Go TARSy reviewer's rating: a trial measures agreement with reviewers"
        )
    sessions = list(AlertSession.objects.filter(pk__in=sample).order_by("pk"))
    current_hash = trial_selectors.current_hash_for()
    hashes = {
        str(session.session_id): {
            TrialArm.CANDIDATE: version.prompt_hash if version is not None else current_hash(session),
            TrialArm.CURRENT: current_hash(session),
        }
        for session in sessions
    }
    models = {TrialArm.CANDIDATE: candidate_model, TrialArm.CURRENT: ""}
    same_model = candidate_model in ("", settings.SCORING_LLM_MODEL)
    if same_model and all(
        by_arm[TrialArm.CANDIDATE] == by_arm[TrialArm.CURRENT] for by_arm in hashes.values()
    ):
        raise TrialRejected("the candidate is what judges every session drawn now: nothing to compare")
    estimate = trial_selectors.estimate(sessions, hashes, models)
    return TrialPlan(version, candidate_model, size, alert_type, chain_id, seed, hashes, models, estimate)


def _in_pool(pool, session_ids: list) -> list[str]:
    """``session_ids`` (as str), each checked to be in the trial's pool: a review deleted, a
    version promoted since the dry run drew them would change what they measure."""
    wanted = sorted({str(session_id) for session_id in session_ids})
    if not 1 <= len(wanted) <= MAX_TRIAL_SIZE:
        raise TrialRejected(f"session_ids must name from 1 to {MAX_TRIAL_SIZE} sessions, not {len(wanted)}")
    found = {str(session_id) for session_id in pool.filter(pk__in=wanted).values_list("pk", flat=True)}
    missing = [session_id for session_id in wanted if session_id not in found]
    if missing:
        raise TrialRejected(
            f"{len(missing)} of the session_ids are not in the trial's pool (finished, reviewed, of the "
            f"candidate's scope) now: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
        )
    return wanted


def _check_model(model: str) -> None:
    """A candidate model is reached through the configured API base and key, which are for the
    configured model's provider: a model of another provider would be sent that key."""
    provider = llm.provider_of(model)
    if provider is None:
        raise TrialRejected(f"litellm cannot place the judge model {model!r} (provider/model, say)")
    configured = llm.provider_of(settings.SCORING_LLM_MODEL) if settings.SCORING_LLM_MODEL else None
    if provider != configured:
        raise TrialRejected(
            f"the judge model {model!r} is {provider}'s, and a trial's model is reached through the "
            f"configured API base and key, which are for {configured or 'no'} provider: try a model of the "
            "same provider (through a gateway, any model it serves)"
        )


def _narrowed(alert_type: str, chain_id: str) -> str:
    named = [f"alert type {alert_type}" if alert_type else "", f"chain {chain_id}" if chain_id else ""]
    return "".join(f" and {name}" for name in named if name)


def start_trial(plan: TrialPlan, *, created_by: str, description: str = "") -> Trial:
    """Record the planned trial and queue its scorings (each session under each arm); the
    workers are woken once it is committed."""
    now = services.now_us()
    with transaction.atomic():
        trial = Trial.objects.create(
            candidate=plan.candidate,
            candidate_hash=plan.candidate.prompt_hash if plan.candidate is not None else "",
            candidate_model=plan.candidate_model,
            size=plan.size,
            alert_type=plan.alert_type,
            chain_id=plan.chain_id,
            seed=plan.seed,
            estimate=plan.estimate,
            judge_model=settings.SCORING_LLM_MODEL,
            description=description,
            created_by=created_by,
            created_at_us=now,
        )
        queued = TrialScoring.objects.bulk_create(
            TrialScoring(
                trial=trial,
                session_id=session_id,
                arm=arm,
                prompt_hash=prompt_hash,
                model=plan.models[arm],
                due_at_us=now,
            )
            for session_id, by_arm in plan.hashes.items()
            for arm, prompt_hash in by_arm.items()
        )
        transaction.on_commit(lambda: services.wake_workers(len(queued)))
    logger.info("trial %s of %s: %d scorings queued", trial.pk, trial.candidate_label, len(queued))
    return trial


def cancel_trial(trial_id, *, cancelled_by: str) -> Trial:
    """Stop a running trial: its pending scorings fail unasked (those in progress finish)."""
    with transaction.atomic():
        trial = Trial.objects.select_for_update().filter(pk=trial_id).first()
        if trial is None:
            raise TrialRejected(f"no trial {trial_id}")
        if trial.status != TrialStatus.RUNNING:
            raise TrialRejected(f"trial {trial_id} is {trial.status}: only a running trial is cancelled")
        now = services.now_us()
        trial.scorings.filter(status=ScoringStatus.PENDING).update(
            status=ScoringStatus.FAILED,
            completed_at_us=now,
            error_message=f"trial cancelled by {cancelled_by}",
        )
        trial.status, trial.ended_at_us = TrialStatus.CANCELLED, now
        trial.save(update_fields=["status", "ended_at_us"])
    return trial


# --- Running a trial scoring (in a worker) ----------------------------------------------------


def trial_slots(slots: int) -> int:
    """How many of ``slots`` judge slots trial scorings may hold at once (SCORING_TRIAL_SLOT_SHARE)."""
    return services.share_of_slots(settings.SCORING_TRIAL_SLOT_SHARE, slots)


def claim_pending_trial_scorings(limit: int) -> list[TrialScoring]:
    """pending -> in_progress for up to ``limit`` of the oldest due trial scorings, within the
    judge jobs' limit across all workers (``services.claim_room``), of which they hold their
    share at most (``trial_slots``); returns those claimed."""
    due = TrialScoring.objects.filter(status=ScoringStatus.PENDING, due_at_us__lte=services.now_us())
    if not due.exists():  # idle workers poll: a plain read first, with no write lock
        return []

    def write() -> list[TrialScoring]:
        with transaction.atomic():
            room = services.claim_room(limit)  # takes the claims' turn: the count below is exact
            in_progress = TrialScoring.objects.filter(status=ScoringStatus.IN_PROGRESS).count()
            room = min(room, trial_slots(settings.SCORING_MAX_IN_FLIGHT) - in_progress)
            if room <= 0:
                return []
            now = services.now_us()
            ids = list(
                due.filter(due_at_us__lte=now).order_by("due_at_us", "pk").values_list("pk", flat=True)[:room]
            )
            # The model kept from the claim on, as a scoring's: a failure says which it was for.
            TrialScoring.objects.filter(pk__in=ids, status=ScoringStatus.PENDING).update(
                status=ScoringStatus.IN_PROGRESS,
                started_at_us=now,
                judge_model=Case(When(model="", then=Value(settings.SCORING_LLM_MODEL)), default=F("model")),
                waiting_reason="",
            )
            return list(
                TrialScoring.objects.filter(
                    pk__in=ids, status=ScoringStatus.IN_PROGRESS, started_at_us=now
                ).defer("transcript")
            )

    return services.retrying_once(write, "claiming pending trial scorings")


def run_claimed_trial_scoring(scoring: TrialScoring) -> TrialScoring | None:
    """Judge a claimed trial scoring's session under its arm's criteria, to its end."""
    with log_context(trial_id=str(scoring.trial_id), session_id=str(scoring.session_id)):
        transcript = conversation.Transcript()
        try:
            session = services.session_to_judge(scoring.session_id)
            criteria = criteria_selectors.criteria_of_hash(scoring.prompt_hash)
            llm.release_db_connection()  # rendering and the judge's calls need no connection
            with sampling.judging_with(scoring.model):
                result = conversation.run_judge(
                    session,
                    criteria=criteria,
                    on_phase=lambda phase: None,
                    deadline=llm.Deadline.from_setting("SCORING_JOB_TIMEOUT_S"),
                    transcript=transcript,
                )
        except errors.RateLimited as exc:
            wait = services.quota_wait(scoring.rate_limited_since_us, exc)
            if wait.gives_up:
                return fail_trial_scoring(scoring.pk, wait.gives_up, transcript=transcript.as_json())
            return _wait_for_quota(scoring, wait, transcript)
        except errors.JudgeLLMError as exc:
            return fail_trial_scoring(
                scoring.pk,
                str(exc),
                transcript=transcript.as_json(),
                input_coverage=exc.input_coverage,
                **getattr(exc, "spent", {}),
            )
        except Exception as exc:
            logger.exception("trial scoring %s failed unexpectedly", scoring.pk)
            return fail_trial_scoring(
                scoring.pk, f"unexpected error: {type(exc).__name__}: {exc}", transcript=transcript.as_json()
            )
        return _write(
            scoring.pk,
            ScoringStatus.COMPLETED,
            total_score=result.total_score,
            score_analysis=result.score_analysis,
            missing_tools_analysis=result.missing_tools_analysis,
            analysis_missing=result.analysis_missing,
            judge_model=result.judge_model,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            cached_input_tokens=result.cached_input_tokens,
            cost_usd=result.cost_usd,
            score_spread=result.score_spread,
            input_coverage=result.input_coverage,
            transcript=transcript.as_json(),
            completed_at_us=services.now_us(),
        )


def _wait_for_quota(scoring: TrialScoring, wait: services.QuotaWait, transcript) -> TrialScoring | None:
    """Back to pending until the quota's due time; failed instead if its trial was cancelled
    meanwhile (the trial's row held, so that a cancel cannot pass between)."""
    with transaction.atomic():
        running = Trial.objects.select_for_update().filter(pk=scoring.trial_id, status=TrialStatus.RUNNING)
        if not running.exists():
            return fail_trial_scoring(scoring.pk, "trial cancelled", transcript=transcript.as_json())
        return _write(
            scoring.pk,
            ScoringStatus.PENDING,
            due_at_us=wait.due_us,
            rate_limited_since_us=wait.since_us,
            waiting_reason=wait.reason,
        )


def fail_trial_scoring(scoring_id, reason: str, **kept) -> TrialScoring | None:
    """A pending or in-progress trial scoring -> failed, with ``reason``; None if it had ended."""
    return _write(
        scoring_id, ScoringStatus.FAILED, error_message=reason, completed_at_us=services.now_us(), **kept
    )


def _write(scoring_id, status: str, **values) -> TrialScoring | None:
    """Move an active trial scoring to ``status``; then, if none of its trial's is active, the
    running trial has ended."""
    with transaction.atomic():
        moved = TrialScoring.objects.filter(pk=scoring_id, status__in=ScoringStatus.active_values()).update(
            status=status, **values
        )
        if not moved:
            return None
        scoring = TrialScoring.objects.defer("transcript").get(pk=scoring_id)
        end_if_done(scoring.trial_id)
    return scoring


def end_if_done(trial_id) -> bool:
    """Inside the caller's transaction: a running trial none of whose scorings is active ends
    (completed). The trial's row is held first, so that two workers ending its last two scorings
    at once do not each see the other's still active."""
    running = Trial.objects.select_for_update().filter(pk=trial_id, status=TrialStatus.RUNNING)
    if not running.exists():
        return False
    if TrialScoring.objects.filter(trial_id=trial_id, status__in=ScoringStatus.active_values()).exists():
        return False
    return bool(running.update(status=TrialStatus.COMPLETED, ended_at_us=services.now_us()))


def expire_stale_trial_scorings() -> int:
    """Fail the trial scorings in progress for longer than SCORING_JOB_TIMEOUT_S (their worker
    stopped), and end the running trials with none active; return how many scorings failed. A
    pending one is never lost: the row is the job."""
    stale = selectors.stale_jobs(
        TrialScoring.objects.all(),
        pending_since="due_at_us",
        job_limit_s=settings.SCORING_JOB_TIMEOUT_S,
        queue_limit_s=None,
        now_us=services.now_us(),
    )
    failed = sum(fail_trial_scoring(scoring_id, reason) is not None for scoring_id, reason in stale)
    # And a trial whose last scoring ended without ending it (a write lost with its worker).
    for trial_id in Trial.objects.filter(status=TrialStatus.RUNNING).values_list("pk", flat=True):
        with transaction.atomic():
            end_if_done(trial_id)
    return failed
