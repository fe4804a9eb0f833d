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

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Q, QuerySet

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
from scoring.judge import estimates
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


def pool(version: CriteriaVersion, *, alert_type: str = "", chain_id: str = "") -> QuerySet[AlertSession]:
    """The finished sessions a trial of ``version`` may draw: those with a review of ours or a
    Go TARSy reviewer's rating, of the version's own scope (its alert type or chain), and of
    ``alert_type`` and ``chain_id`` when given."""
    reviewed = ScoreReview.objects.filter(score__session=OuterRef("pk"))
    sessions = AlertSession.objects.filter(status__in=SessionStatus.terminal_values()).filter(
        Exists(reviewed) | ~Q(source_quality_rating="")
    )
    if version.scope == CriteriaScope.ALERT_TYPE:
        sessions = sessions.filter(alert_type=version.scope_value)
    elif version.scope == CriteriaScope.CHAIN:
        sessions = sessions.filter(chain_id=version.scope_value)
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
    alert_types = {str(key): alert_type for key, alert_type in sessions.values_list("session_id", "alert_type")}
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


def estimate(sessions: list[AlertSession], arms: dict) -> dict:
    """What scoring each of ``sessions`` under each arm's criteria (``arms``: arm -> a function
    of a session giving its criteria hash, ``arm_hashes``) would send and cost, as
    ``score_sessions --dry-run`` counts it (``scoring.judge.estimates``), in all."""
    model = settings.SCORING_LLM_MODEL
    assumptions = estimates.Assumptions.now(*selectors.mean_output_tokens(model))
    criteria_by_hash = {}
    input_tokens = scorings = unpriced = 0
    cost_usd, would_fail = Decimal(0), []
    for session in sessions:
        for arm, hash_for in arms.items():
            prompt_hash = hash_for(session)
            if prompt_hash not in criteria_by_hash:
                criteria_by_hash[prompt_hash] = criteria_selectors.criteria_of_hash(prompt_hash)
            found = estimates.estimate(session, assumptions, criteria_by_hash[prompt_hash])
            if found.failure:
                would_fail.append({"session_id": str(session.session_id), "arm": arm, "reason": found.failure})
                continue
            scorings += 1
            input_tokens += found.input_tokens
            if found.cost_usd is None:
                unpriced += 1
            else:
                cost_usd += found.cost_usd
    return {
        "judge_model": model,
        "window_tokens": assumptions.window,
        "scorings": scorings,
        "input_tokens": input_tokens,
        "output_tokens": scorings * assumptions.output_tokens,
        # None: litellm has no price for the model; with some priced, the sum of those.
        "cost_usd": None if unpriced == scorings else f"{cost_usd:.4f}",
        "unpriced_scorings": unpriced,
        "would_fail": would_fail,
    }


def arm_hashes(candidate_hash: str) -> dict:
    """Each arm's criteria hash for a session: the candidate's, and the one current for it now."""
    current = criteria_selectors.current_criteria()
    return {
        TrialArm.CANDIDATE.value: lambda session: candidate_hash,
        TrialArm.CURRENT.value: lambda session: current.hash_for(session.alert_type, session.chain_id),
    }


def trials() -> QuerySet[Trial]:
    """Every trial, newest first, with its candidate and its progress (``with_progress``)."""
    return with_progress(Trial.objects.select_related("candidate")).order_by("-created_at_us")


def get_trial(trial_id) -> Trial | None:
    return trials().filter(pk=trial_id).first()


def with_progress(trials: QuerySet[Trial]) -> QuerySet[Trial]:
    """``trials``, each with how many of its scorings are in each status, counted in the same
    query (a list of trials shows each one's progress)."""
    counts = {
        f"progress_{status}": Count("scorings", filter=Q(scorings__status=status)) for status in ScoringStatus.values
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
    """The trial's figures (docs/insights.md, "Trials"): for each arm, over the sessions both
    arms completed (``paired_sessions``), agreement with the reviewers with 95 % bootstrap
    intervals and the confusion table by band; the paired differences candidate − current and
    whether each is significant; the mean shift of the totals; the spread of k samples; the cost
    per scoring; and the sessions where the arms differ most. Below ``minimum_sessions()`` paired
    sessions the figures are withheld with a reason."""
    rows = list(
        trial.scorings.filter(status=ScoringStatus.COMPLETED, total_score__isnull=False).values(
            "session_id", "arm", "total_score", "cost_usd", "score_spread", "input_tokens", "output_tokens"
        )
    )
    by_session = defaultdict(dict)
    for row in rows:
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
    too_few = len(units) < minimum_sessions()
    figures = {
        "paired_sessions": len(units),
        # Of those, the sessions with a reviewer's score: the mean difference and ρ are over these
        # (a Go TARSy rating alone gives a band, which κ and the confusion tables count).
        "scored_sessions": sum(unit[2] is not None for unit in units),
        "minimum_n": minimum_sessions(),
        "too_few_reviews": too_few,
        "reason": too_few_reason(len(units)) if too_few else None,
        "arms": {arm: _arm_figures(arm, units, rows, too_few) for arm in ARM_COLUMN},
        "differences": {} if too_few else _differences(units),
        "largest_differences": _largest_differences(paired),
    }
    return figures


# Which position of a paired unit holds each arm's total.
ARM_COLUMN = {TrialArm.CANDIDATE.value: 0, TrialArm.CURRENT.value: 1}


def _scored(units, column: int) -> tuple[list[int], list[int]]:
    """The arm's totals and the reviewers' scores, over the units with a reference score."""
    with_score = [unit for unit in units if unit[2] is not None]
    return [unit[column] for unit in with_score], [unit[2] for unit in with_score]


def _figures_of(column: int) -> dict:
    """Each agreement figure of an arm, as a function of units (for the whole and the bootstrap)."""
    return {
        "mean_abs_diff": lambda units: mean_abs_diff(*_scored(units, column)),
        "spearman_rho": lambda units: spearman_rho(*_scored(units, column)),
        "weighted_kappa": lambda units: weighted_kappa(
            [BAND_OF_TOTAL[unit[column]] for unit in units], [unit[3] for unit in units], BAND_KEYS
        ),
    }


def _arm_figures(arm: str, units: tuple, rows: list[dict], too_few: bool) -> dict:
    column = ARM_COLUMN[arm]
    mine = [row for row in rows if row["arm"] == arm]
    costs = [row["cost_usd"] for row in mine if row["cost_usd"] is not None]
    spreads = [row["score_spread"] for row in mine if row["score_spread"] is not None]
    figures = {
        "completed": len(mine),
        "cost_per_scoring_usd": None if not costs else f"{sum(costs) / len(costs):.6f}",
        "mean_input_tokens": _mean([row["input_tokens"] for row in mine]),
        "mean_output_tokens": _mean([row["output_tokens"] for row in mine]),
        "mean_spread": _mean(spreads),
        "confusion": confusion_table(
            [BAND_OF_TOTAL[unit[column]] for unit in units], [unit[3] for unit in units], BAND_KEYS, BAND_KEYS
        ),
    }
    of = _figures_of(column)
    intervals = {} if too_few else bootstrap_intervals(units, of)
    for name, figure in of.items():
        value = None if too_few else figure(list(units))
        figures[name] = None if value is None else round(value, 3)
        interval = intervals.get(name)
        figures[f"{name}_ci"] = None if interval is None else [round(end, 3) for end in interval]
    return figures


def _differences(units: tuple) -> dict:
    """candidate − current of each figure over the same sessions, with its paired 95 % interval
    and whether it leaves out 0; and the mean shift of the totals."""
    candidate, current = _figures_of(0), _figures_of(1)
    found = {}
    for name in candidate:
        difference = paired_difference(units, candidate[name], current[name])
        found[name] = {
            "difference": _rounded(difference["difference"]),
            "ci": None if difference["ci"] is None else [round(end, 3) for end in difference["ci"]],
            "significant": difference["significant"],
        }
    shift = bootstrap_intervals(units, {"shift": _mean_shift})["shift"]
    found["mean_shift"] = {
        "difference": _rounded(_mean_shift(list(units))),
        "ci": None if shift is None else [round(end, 3) for end in shift],
        "significant": shift is not None and (shift[0] > 0 or shift[1] < 0),
    }
    return found


def _mean_shift(units: list) -> float | None:
    return statistics.fmean(unit[0] - unit[1] for unit in units) if units else None


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
