"""How far the judge agrees with the people who review its scores.

A *pair* is one reviewer's newest review of one completed score: the judge's total
beside the reviewer's score and verdict. Several reviewers of a score give several
pairs; a reviewer who reviewed a score again counts by their last review only (a
revision replaces their earlier opinion, it does not outvote others). Every reviewed
completed score under the filters counts, not only each session's newest: agreement is
about the judge, and a review of a score the session has since replaced still says how
that judge scored. The filters mean what they mean everywhere (``filters.py``): a score
whose judge gave no evaluation is left out unless they include it. A judge is its model
and the sampling settings it was sent (``scoring.judge.sampling``): scores made at another
temperature or seed are another judge's.

Reviews are written by people, so there are few: the pairs are read once and the
figures computed here in plain Python.
"""

import statistics
from collections import defaultdict

from django.db.models import Exists, F, OuterRef
from django.db.models.functions import Left

from scoring import selectors
from scoring.insights.filters import InsightFilters, scorings, with_evaluation
from scoring.models import REVIEW_NOTE_MAX_CHARS, ScoreReview, ScoringStatus

# How many pairs ``largest_differences`` lists.
LARGEST_DIFFERENCES = 10
_BAND_KEYS = [band.key for band in selectors.SCORE_BANDS]


def agreement(filters: InsightFilters, limit: int = LARGEST_DIFFERENCES) -> dict:
    """Judge-human agreement per criteria hash and judge, and the ``limit`` pairs
    where the judge and the reviewer differ most (for the next calibration).

    ``groups``: one dict per (``prompt_hash``, ``judge_model``, ``judge_temperature``,
    ``judge_seed``), most pairs first, with
    ``n`` (pairs), ``reviewed_scores``, ``mean_abs_diff``, ``spearman_rho``,
    ``weighted_kappa``, ``agree_share`` (None where a figure is undefined).
    ``largest_differences``: ``score_id``, ``session_id``, ``prompt_hash``, ``judge_model``,
    ``judge_temperature``, ``judge_seed``, ``total_score``, ``reviewer_score``, ``difference`` (reviewer − judge), ``verdict``,
    ``reviewer``, ``note``.
    """
    pairs = _pairs(filters)
    by_group = defaultdict(list)
    for pair in pairs:
        by_group[tuple(pair[name] for name in JUDGE_KEYS)].append(pair)
    groups = [_group_figures(dict(zip(JUDGE_KEYS, key, strict=True)), members) for key, members in by_group.items()]
    groups.sort(key=lambda group: (-group["n"], *(sortable(group[name]) for name in JUDGE_KEYS)))
    largest = sorted(
        pairs, key=lambda pair: (-abs(pair["difference"]), str(pair["score_id"]), pair["reviewer"])
    )[:limit]
    return {"groups": groups, "largest_differences": _with_notes(largest)}


def _with_notes(pairs: list[dict]) -> list[dict]:
    """``pairs`` with their reviews' notes, read for these alone (the figures need none). A
    note is capped when recorded; one recorded before the cap is cut to it here."""
    notes = dict(
        ScoreReview.objects.filter(id__in=[pair["id"] for pair in pairs]).values_list(
            "id", Left("note", REVIEW_NOTE_MAX_CHARS)
        )
    )
    shown = []
    for pair in pairs:
        review_id = pair.pop("id")
        shown.append({**pair, "note": notes.get(review_id, "")})  # deleted since it was counted: no note
    return shown


# What a group of pairs is one of: a criteria hash and a judge (its model and sampling settings).
JUDGE_KEYS = ("prompt_hash", "judge_model", "judge_temperature", "judge_seed")


def sortable(value) -> tuple:
    """A group key's value, ordered with None (no setting sent) first."""
    return (value is not None, value if value is not None else 0)


def _pairs(filters: InsightFilters) -> list[dict]:
    completed = with_evaluation(
        scorings(filters).filter(status=ScoringStatus.COMPLETED, total_score__isnull=False), filters
    )
    # The reviewer's last review of the score: none of theirs on it was recorded after it.
    later = ScoreReview.objects.filter(
        score=OuterRef("score"), reviewer=OuterRef("reviewer"), id__gt=OuterRef("id")
    )
    rows = (
        ScoreReview.objects.filter(score__in=completed.values("score_id"))
        .exclude(Exists(later))
        .order_by()
        .values(
            "id", "score_id", "reviewer_score", "verdict",
            session_id=F("score__session_id"), prompt_hash=F("score__prompt_hash"),
            judge_model=F("score__judge_model"), judge_temperature=F("score__judge_temperature"),
            judge_seed=F("score__judge_seed"), total_score=F("score__total_score"),
            reviewer_name=F("reviewer__username"),
        )
    )  # fmt: skip
    pairs = []
    for row in rows:
        row["reviewer"] = row.pop("reviewer_name")
        row["difference"] = row["reviewer_score"] - row["total_score"]
        pairs.append(row)
    return pairs


def _group_figures(group: dict, pairs: list[dict]) -> dict:
    judge = [pair["total_score"] for pair in pairs]
    human = [pair["reviewer_score"] for pair in pairs]
    return {
        **group,
        "n": len(pairs),
        "reviewed_scores": len({pair["score_id"] for pair in pairs}),
        "mean_abs_diff": round(statistics.fmean(abs(pair["difference"]) for pair in pairs), 2),
        "spearman_rho": _rounded(spearman_rho(judge, human)),
        "weighted_kappa": _rounded(
            weighted_kappa([_band(score) for score in judge], [_band(score) for score in human], _BAND_KEYS)
        ),
        "agree_share": round(sum(pair["verdict"] == "agree" for pair in pairs) / len(pairs), 3),
    }


def spearman_rho(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation: Pearson's correlation of the ranks, tied values
    sharing their average rank. None with fewer than two pairs or when either side
    does not vary (every value the same), where it is undefined."""
    if len(xs) < 2:
        return None
    try:
        return statistics.correlation(average_ranks(xs), average_ranks(ys))
    except statistics.StatisticsError:  # a side that does not vary
        return None


def average_ranks(values: list[float]) -> list[float]:
    """Each value's rank (1 for the smallest); tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def weighted_kappa(first: list[str], second: list[str], categories: list[str]) -> float | None:
    """Cohen's κ with linear weights between two raters' ordered categories.

    A disagreement weighs the number of categories between the two, over the most there
    can be (``|i − j| / (k − 1)``: with three bands, a neighbour 0.5, opposite ends 1).
    κ = 1 − observed / expected weighted disagreement, the expected one from each rater's
    own shares. None with fewer than two pairs, or when the expected disagreement is 0
    (both raters put everything in the same one category), where κ is undefined.
    """
    if len(first) < 2:
        return None
    position = {category: index for index, category in enumerate(categories)}
    span = len(categories) - 1

    def weight(a: str, b: str) -> float:
        return abs(position[a] - position[b]) / span

    count = len(first)
    observed = sum(weight(a, b) for a, b in zip(first, second, strict=True)) / count
    first_shares = {category: first.count(category) / count for category in categories}
    second_shares = {category: second.count(category) / count for category in categories}
    expected = sum(
        weight(a, b) * first_shares[a] * second_shares[b] for a in categories for b in categories
    )
    if expected == 0:
        return None
    return 1 - observed / expected


def _band(total_score: int) -> str:
    return selectors.band_of(total_score).key


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
