"""What a trial reads: the sessions people reviewed (its pool), the stratified sample it draws
from them, what scoring that sample would cost, and the figures of a trial's scorings against
the reviewers (docs/insights.md, "Trials").

A session's *reference* is what people said of it: the mean of our reviewers' scores (each
reviewer's newest review of any of its scores: a reviewer scores the investigation, which every
score of the session judged), or, with no review of ours, the band its Go TARSy reviewer's
``quality_rating`` stands for. A reference from a rating has a band and no score.
"""

import random
import statistics
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet

from scoring import selectors
from scoring.criteria import selectors as criteria_selectors
from scoring.insights.confidence import (
    BAND_KEYS,
    BAND_OF_TOTAL,
    bootstrap_intervals,
    confusion_table,
    mean_abs_diff,
    minimum_sessions,
    paired_difference,
    spearman_rho,
    too_few_reason,
    weighted_kappa,
)
from scoring.insights.tarsy_agreement import BAND_RATINGS
from scoring.judge import estimates, sampling
from scoring.models import (
    AlertSession,
    CriteriaScope,
    CriteriaVersion,
    ScoreReview,
    ScoringStatus,
    SessionStatus,
    Trial,
    TrialArm,
    TrialScoring,
)

# The band each Go TARSy rating stands for (our bands name the same three judgements).
RATING_BANDS = {rating.value: band for band, rating in BAND_RATINGS.items()}
# How many sessions ``results`` lists where the two arms differ most.
LARGEST_DIFFERENCES = 10


@dataclass(frozen=True)
class Reference:
    """What people said of a session: a score (0-100; None from a rating alone) and its band."""

    score: int | None
    band: str
    source: str  # "reviews" (ours) or "tarsy" (a Go TARSy reviewer's rating)


def pool(
    version: CriteriaVersion | None, *, alert_type: str = "", chain_id: str = ""
) -> QuerySet[AlertSession]:
    """The finished sessions a trial may draw: those with a review of ours or a Go TARSy
    reviewer's rating, that the candidate ``version`` would judge if promoted (of its scope, and
    not of a narrower scope with a current version of its own: an alert type's wins over a
    chain's, which wins over the global one; all sessions for a candidate model alone), and of
    ``alert_type`` and ``chain_id`` when given."""
    reviewed = ScoreReview.objects.filter(score__session=OuterRef("pk"))
    sessions = AlertSession.objects.filter(status__in=SessionStatus.terminal_values()).filter(
        Exists(reviewed) | ~Q(source_quality_rating="")
    )
    if version is not None:
        current = criteria_selectors.current_criteria()
        if version.scope == CriteriaScope.ALERT_TYPE:
            sessions = sessions.filter(alert_type=version.scope_value)
        elif version.scope == CriteriaScope.CHAIN:
            sessions = sessions.filter(chain_id=version.scope_value).exclude(
                alert_type__in=current.by_alert_type
            )
        else:
            sessions = sessions.exclude(alert_type__in=current.by_alert_type).exclude(
                chain_id__in=current.by_chain
            )
    if alert_type:
        sessions = sessions.filter(alert_type=alert_type)
    if chain_id:
        sessions = sessions.filter(chain_id=chain_id)
    return sessions


def references(session_ids) -> dict:
    """Each of these sessions' ``Reference``, by session id (str); a session nobody reviewed
    is missing."""
    newest = {}  # (session, reviewer) -> (review id, score): the reviewer's newest of the session
    rows = ScoreReview.objects.filter(score__session_id__in=session_ids).values_list(
        "id", "score__session_id", "reviewer_id", "reviewer_score"
    )
    for review_id, session_id, reviewer, score in rows:
        key = (str(session_id), reviewer)
        if key not in newest or newest[key][0] < review_id:
            newest[key] = (review_id, score)
    scores = defaultdict(list)
    for (session_id, _), (_, score) in newest.items():
        scores[session_id].append(score)
    found = {}
    for session_id, given in scores.items():
        score = round(statistics.fmean(given))
        found[session_id] = Reference(score, BAND_OF_TOTAL[score], "reviews")
    ratings = AlertSession.objects.filter(pk__in=session_ids).exclude(source_quality_rating="")
    for session_id, rating in ratings.values_list("session_id", "source_quality_rating"):
        if str(session_id) not in found and rating in RATING_BANDS:
            found[str(session_id)] = Reference(None, RATING_BANDS[rating], "tarsy")
    return found


def stratified_sample(sessions: QuerySet[AlertSession], size: int, seed: int) -> list[str]:
    """Up to ``size`` of ``sessions`` (ids, as str), drawn so that each stratum (the reference's
    band and the alert type) has its share of the pool, by largest remainders, and every stratum
    one at least while the size allows; the same pool and ``seed`` draw the same sessions."""
    alert_types = {
        str(key): alert_type for key, alert_type in sessions.values_list("session_id", "alert_type")
    }
    found = references(list(alert_types))
    strata = defaultdict(list)
    for session_id in sorted(alert_types):
        if session_id in found:
            strata[(found[session_id].band, alert_types[session_id])].append(session_id)
    total = sum(len(members) for members in strata.values())
    if size >= total:
        return sorted(session for members in strata.values() for session in members)
    keys = sorted(strata)
    shares = {key: size * len(strata[key]) / total for key in keys}
    counts = {key: int(shares[key]) for key in keys}
    if size >= len(keys):
        for key in keys:
            counts[key] = max(counts[key], 1)
    # The rest, one each, to the strata with the largest remainders (while they have members).
    by_remainder = sorted(keys, key=lambda key: (-(shares[key] - int(shares[key])), key))
    while sum(counts.values()) < size:
        for key in by_remainder:
            if sum(counts.values()) < size and counts[key] < len(strata[key]):
                counts[key] += 1
    while sum(counts.values()) > size:  # the minimum of one each took more than the size
        largest = max(keys, key=lambda key: (counts[key], key))
        counts[largest] -= 1
    generator = random.Random(seed)
    return sorted(session for key in keys for session in generator.sample(strata[key], counts[key]))


def estimate(sessions: list[AlertSession], hashes: dict, models: dict) -> dict:
    """What judging each of ``sessions`` in each arm (``hashes``: session id -> arm -> criteria
    hash; ``models``: arm -> its judge model, "" the configured one) would send and cost, as
    ``score_sessions --dry-run`` counts it (``scoring.judge.estimates``): in all, and by arm
    with the model, its window and its price."""
    criteria_by_hash = {}
    by_arm, would_fail = {}, []
    for arm, model in models.items():
        with sampling.judging_with(model):
            judge = sampling.judge_model()
            assumptions = estimates.Assumptions.now(*selectors.mean_output_tokens(judge))
            input_tokens = scorings = unpriced = 0
            cost_usd = Decimal(0)
            for session in sessions:
                prompt_hash = hashes[str(session.session_id)][arm]
                if prompt_hash not in criteria_by_hash:
                    criteria_by_hash[prompt_hash] = criteria_selectors.criteria_of_hash(prompt_hash)
                found = estimates.estimate(session, assumptions, criteria_by_hash[prompt_hash])
                if found.failure:
                    would_fail.append(
                        {"session_id": str(session.session_id), "arm": arm, "reason": found.failure}
                    )
                    continue
                scorings += 1
                input_tokens += found.input_tokens
                if found.cost_usd is None:
                    unpriced += 1
                else:
                    cost_usd += found.cost_usd
        by_arm[arm] = {
            "judge_model": judge,
            "window_tokens": assumptions.window,
            "scorings": scorings,
            "input_tokens": input_tokens,
            "output_tokens": scorings * assumptions.output_tokens,
            "cost_usd": _priced(cost_usd, unpriced, scorings),
            "unpriced_scorings": unpriced,
        }
    arms = by_arm.values()
    unpriced = sum(arm["unpriced_scorings"] for arm in arms)
    scorings = sum(arm["scorings"] for arm in arms)
    return {
        "scorings": scorings,
        "input_tokens": sum(arm["input_tokens"] for arm in arms),
        "output_tokens": sum(arm["output_tokens"] for arm in arms),
        "cost_usd": _priced(sum(Decimal(arm["cost_usd"] or 0) for arm in arms), unpriced, scorings),
        "unpriced_scorings": unpriced,
        "arms": by_arm,
        "would_fail": would_fail,
    }


def _priced(cost_usd: Decimal, unpriced: int, scorings: int) -> str | None:
    """A cost as the API gives it: None when litellm prices none of the scorings (with some
    priced, the sum of those, and ``unpriced_scorings`` says how many are not)."""
    return None if unpriced == scorings else f"{cost_usd:.4f}"


def current_hash_for():
    """A function of a session giving the criteria hash current for it now."""
    current = criteria_selectors.current_criteria()
    return lambda session: current.hash_for(session.alert_type, session.chain_id)


def trials() -> QuerySet[Trial]:
    """Every trial, newest first, with its candidate and its progress (``with_progress``)."""
    return with_progress(Trial.objects.select_related("candidate")).order_by("-created_at_us")


def get_trial(trial_id) -> Trial | None:
    return trials().filter(pk=trial_id).first()


def with_progress(trials: QuerySet[Trial]) -> QuerySet[Trial]:
    """``trials``, each with how many of its scorings are in each status, counted in the same
    query (a list of trials shows each one's progress)."""
    counts = {
        f"progress_{status}": Count("scorings", filter=Q(scorings__status=status))
        for status in ScoringStatus.values
    }
    return trials.annotate(**counts, progress_total=Count("scorings"))


def progress(trial: Trial) -> dict:
    """How many of the trial's scorings are in each status, and in all: as counted when it was
    read ``with_progress``, else now."""
    if not hasattr(trial, "progress_total"):
        trial = with_progress(Trial.objects.filter(pk=trial.pk)).get()
    counts = {status: getattr(trial, f"progress_{status}") for status in ScoringStatus.values}
    return {**counts, "total": trial.progress_total}


def scorings(trial: Trial) -> QuerySet[TrialScoring]:
    return trial.scorings.defer("transcript").order_by("session_id", "arm")


def results(trial: Trial) -> dict:
    """The trial's figures (docs/insights.md, "Trials"), remembered per process while none of
    what they are computed from changes: its ended scorings, the reviews, its sessions (a sync
    rewrites a rating) and the minimum (the bootstrap costs seconds for hundreds of sessions)."""
    ended = trial.scorings.filter(status__in=ScoringStatus.terminal_values()).count()
    newest_review = ScoreReview.objects.aggregate(newest=Max("id"))["newest"]
    sessions_changed = AlertSession.objects.filter(pk__in=trial.scorings.values("session_id")).aggregate(
        changed=Max("updated_at")
    )["changed"]
    return _results(trial.pk, ended, newest_review, sessions_changed, minimum_sessions())


@lru_cache(maxsize=64)
def _results(trial_id, ended: int, newest_review, sessions_changed, minimum: int) -> dict:
    """For each arm, over the sessions both arms completed with an evaluation
    (``paired_sessions``), agreement with the reviewers with 95 % bootstrap intervals and the
    confusion table by band; how many of its scorings lacked the evaluation; the paired
    differences candidate − current and whether each is significant; the mean shift of the
    totals; the spread of k samples; the cost per scoring; and the sessions where the arms
    differ most. Each figure says the sessions it rests on (``n``: MAE and ρ those with a
    reference score, κ and the mean shift every paired one) and is withheld below
    ``minimum_sessions()`` of them."""
    rows = list(
        TrialScoring.objects.filter(
            trial_id=trial_id, status=ScoringStatus.COMPLETED, total_score__isnull=False
        ).values(
            "session_id", "arm", "judge_model", "total_score", "cost_usd", "score_spread", "input_tokens",
            "output_tokens", "analysis_missing",
        )
    )  # fmt: skip
    by_session = defaultdict(dict)
    for row in rows:
        # A score the judge gave without its evaluation is left out of the figures, as it is of
        # the service's statistics and agreement (insights.filters.with_evaluation); counted apart.
        if not row["analysis_missing"]:
            by_session[str(row["session_id"])][row["arm"]] = row
    found = references(list(by_session))
    # (candidate total, current total, reference score or None, reference band), by session id.
    paired = {
        session: (
            arms[TrialArm.CANDIDATE]["total_score"],
            arms[TrialArm.CURRENT]["total_score"],
            found[session].score,
            found[session].band,
        )
        for session, arms in sorted(by_session.items())
        if len(arms) == 2 and session in found
    }
    units = tuple(paired.values())
    n = {name: len(_over(name, units)) for name in FIGURES}
    too_few = [name for name in FIGURES if n[name] < minimum]
    return {
        "paired_sessions": len(units),
        "n": n,
        "minimum_n": minimum,
        "too_few": too_few,
        "too_few_reviews": bool(too_few),
        "reason": {name: too_few_reason(n[name]) for name in too_few},
        "arms": {arm: _arm_figures(arm, units, rows, too_few) for arm in ARM_COLUMN},
        "differences": _differences(units, too_few),
        "largest_differences": _largest_differences(paired),
    }


# Which position of a paired unit holds each arm's total.
ARM_COLUMN = {TrialArm.CANDIDATE.value: 0, TrialArm.CURRENT.value: 1}
# The figures, each with whether it needs the reference's score (else its band will do).
FIGURES = {"mean_abs_diff": True, "spearman_rho": True, "weighted_kappa": False, "mean_shift": False}


def _over(name: str, units) -> list:
    """The units a figure is computed over: those with a reference score where it needs one."""
    return [unit for unit in units if unit[2] is not None] if FIGURES[name] else list(units)


def _figures_of(column: int) -> dict:
    """Each agreement figure of an arm, as a function of the units it is computed over (for the
    whole and the bootstrap)."""

    def scored(units):
        return [unit[column] for unit in units], [unit[2] for unit in units]

    return {
        "mean_abs_diff": lambda units: mean_abs_diff(*scored(units)),
        "spearman_rho": lambda units: spearman_rho(*scored(units)),
        "weighted_kappa": lambda units: weighted_kappa(
            [BAND_OF_TOTAL[unit[column]] for unit in units], [unit[3] for unit in units], BAND_KEYS
        ),
    }


def _arm_figures(arm: str, units: tuple, rows: list[dict], too_few: list[str]) -> dict:
    column = ARM_COLUMN[arm]
    mine = [row for row in rows if row["arm"] == arm]
    costs = [row["cost_usd"] for row in mine if row["cost_usd"] is not None]
    spreads = [row["score_spread"] for row in mine if row["score_spread"] is not None]
    figures = {
        "judge_models": sorted({row["judge_model"] for row in mine}),
        "completed": len(mine),
        "analysis_missing": sum(row["analysis_missing"] for row in mine),
        "cost_per_scoring_usd": None if not costs else f"{sum(costs) / len(costs):.6f}",
        "mean_input_tokens": _mean([row["input_tokens"] for row in mine]),
        "mean_output_tokens": _mean([row["output_tokens"] for row in mine]),
        "mean_spread": _mean(spreads),
        "confusion": confusion_table(
            [BAND_OF_TOTAL[unit[column]] for unit in units], [unit[3] for unit in units], BAND_KEYS, BAND_KEYS
        ),
    }
    for name, figure in _figures_of(column).items():
        over = _over(name, units)
        given = name not in too_few
        interval = bootstrap_intervals(over, {name: figure})[name] if given else None
        figures[name] = _rounded(figure(over)) if given else None
        figures[f"{name}_ci"] = None if interval is None else [round(end, 3) for end in interval]
    return figures


def _differences(units: tuple, too_few: list[str]) -> dict:
    """candidate − current of each figure given, over the same sessions, with its paired 95 %
    interval and whether it leaves out 0; and the mean shift of the totals."""
    candidate, current = _figures_of(0), _figures_of(1)
    paired = {name: (candidate[name], current[name]) for name in candidate}
    paired["mean_shift"] = (_mean_total(0), _mean_total(1))
    found = {}
    for name, (first, second) in paired.items():
        if name in too_few:
            continue
        difference = paired_difference(_over(name, units), first, second)
        found[name] = {
            "difference": _rounded(difference["difference"]),
            "ci": None if difference["ci"] is None else [round(end, 3) for end in difference["ci"]],
            "significant": difference["significant"],
        }
    return found


def _mean_total(column: int):
    """An arm's mean total over units: the mean shift is the paired difference of two of these."""
    return lambda units: statistics.fmean(unit[column] for unit in units) if units else None


def _largest_differences(paired: dict) -> list[dict]:
    ordered = sorted(paired.items(), key=lambda item: (-abs(item[1][0] - item[1][1]), item[0]))
    return [
        {
            "session_id": session,
            "candidate_score": candidate,
            "current_score": current,
            "difference": candidate - current,
            "reviewer_score": reviewer,
            "reviewer_band": band,
        }
        for session, (candidate, current, reviewer, band) in ordered[:LARGEST_DIFFERENCES]
    ]


def _mean(values: list) -> float | None:
    values = [value for value in values if value is not None]
    return round(statistics.fmean(values), 1) if values else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
