"""How far our judge agrees with Go TARSy: with its reviewers' verdicts on sessions
(``quality_rating``) and with its own judge's scores. docs/insights.md, "Agreement with
Go TARSy", says what each figure means.

TARSy's judge is another judge: its scores are compared with ours here and nowhere
counted as ours. Each selected session counts once, by our newest completed score
(``scored_sessions``), against what TARSy says of it now (the session's copy, which a
sync rewrites when TARSy has a new review or score).

The database answers how many sessions have each (our total, their verdict or total)
in each group: at most a few thousand rows whatever the fleet's size; the figures are
computed from those counts here.
"""

import statistics
from collections import Counter, defaultdict

from django.db.models import Count, F

from scoring.insights.agreement import sortable
from scoring.insights.confidence import (
    BAND_KEYS,
    BAND_OF_TOTAL,
    average_ranks,
    cached_intervals,
    confusion_table,
    mean_abs_diff,
    minimum_sessions,
    spearman_rho,
    too_few_reason,
)
from scoring.insights.filters import InsightFilters, scored_sessions
from scoring.models import QualityRating

# TARSy's reviewers' ratings in order, for Spearman's ρ against our totals.
RATING_RANKS = {QualityRating.INACCURATE: 0, QualityRating.PARTIALLY_ACCURATE: 1, QualityRating.ACCURATE: 2}
RATINGS = [rating.value for rating in sorted(RATING_RANKS, key=RATING_RANKS.__getitem__)]
# Which rating each of our bands stands for, for the confusion table's agreeing cells.
BAND_RATINGS = {
    "poor": QualityRating.INACCURATE,
    "weak": QualityRating.PARTIALLY_ACCURATE,
    "good": QualityRating.ACCURATE,
}
# Our judge: the criteria hash, and the judge model with the sampling settings it was sent.
OUR_JUDGE_KEYS = ("prompt_hash", "judge_model", "judge_temperature", "judge_seed")
# A TARSy judge group: our criteria hash and judge, then TARSy's criteria hash and judge model.
JUDGE_GROUP_KEYS = (*OUR_JUDGE_KEYS, "tarsy_prompt_hash", "tarsy_judge_model")
_OURS = {
    "prompt_hash": F("latest_completed_prompt_hash"),
    "judge_model": F("latest_completed_judge_model"),
    "judge_temperature": F("latest_completed_judge_temperature"),
    "judge_seed": F("latest_completed_judge_seed"),
    "total": F("latest_completed_total_score"),
}
_TEXT_KEYS = {"prompt_hash", "judge_model", "tarsy_prompt_hash", "tarsy_judge_model"}


def _key_value(row: dict, name: str):
    """A group key's value in a row: "" for a text that is null, a number as it is (None: not sent)."""
    return (row[name] or "") if name in _TEXT_KEYS else row[name]


def tarsy_agreement(filters: InsightFilters) -> dict:
    """Our judge against TARSy's reviewers (``tarsy_reviewers``) and against TARSy's judge
    (``tarsy_judge``), over the selected sessions."""
    return {"tarsy_reviewers": reviewers_agreement(filters), "tarsy_judge": judge_agreement(filters)}


def reviewers_agreement(filters: InsightFilters) -> dict:
    """Our newest completed score against TARSy's reviewers' rating of the same session.

    ``groups``: one per our (``prompt_hash``, ``judge_model``, ``judge_temperature``,
    ``judge_seed``), most sessions first, with ``n``, ``ratings`` (sessions per rating), ``spearman_rho`` (our total against the rating
    as 0 < 1 < 2), ``auc`` (over ``auc_n`` accurate and inaccurate sessions), ``confusion``
    (our band × their rating), ``mapping_agree_share`` and ``too_few``.
    ``unknown_ratings``: sessions left out for a rating this service does not know, by value.
    """
    rows = (
        scored_sessions(filters)
        .exclude(source_quality_rating="")
        .values(**_OURS, rating=F("source_quality_rating"))
        .annotate(sessions=Count("pk"))
        .order_by()
    )
    by_group = defaultdict(list)
    unknown = Counter()
    for row in rows:
        if row["rating"] not in RATING_RANKS:
            unknown[row["rating"]] += row["sessions"]
            continue
        key = tuple(_key_value(row, name) for name in OUR_JUDGE_KEYS)
        by_group[key] += [(row["total"], row["rating"])] * row["sessions"]
    groups = [
        _reviewers_group(dict(zip(OUR_JUDGE_KEYS, key, strict=True)), pairs) for key, pairs in by_group.items()
    ]
    return {
        "minimum_n": minimum_sessions(),
        "mapping": [{"band": band, "rating": rating.value} for band, rating in BAND_RATINGS.items()],
        "unknown_ratings": dict(sorted(unknown.items())),
        "groups": _ordered(groups, OUR_JUDGE_KEYS),
    }


def judge_agreement(filters: InsightFilters) -> dict:
    """Our newest completed score against TARSy's judge's score of the same session.

    ``groups``: one per our (``prompt_hash``, ``judge_model``, ``judge_temperature``,
    ``judge_seed``) and TARSy's
    (``tarsy_prompt_hash``, ``tarsy_judge_model``), most sessions first, with ``n``,
    ``spearman_rho``, ``mean_abs_diff``, ``mean_difference`` (ours − TARSy's) and ``too_few``.
    """
    rows = (
        scored_sessions(filters)
        .filter(source_score_total__isnull=False)
        .values(
            **_OURS,
            tarsy_prompt_hash=F("source_score_prompt_hash"),
            tarsy_judge_model=F("source_score_model"),
            tarsy_total=F("source_score_total"),
        )
        .annotate(sessions=Count("pk"))
        .order_by()
    )
    by_group = defaultdict(list)
    for row in rows:
        key = tuple(_key_value(row, name) for name in JUDGE_GROUP_KEYS)
        by_group[key] += [(row["total"], row["tarsy_total"])] * row["sessions"]
    groups = [
        _judge_group(dict(zip(JUDGE_GROUP_KEYS, key, strict=True)), pairs) for key, pairs in by_group.items()
    ]
    return {"minimum_n": minimum_sessions(), "groups": _ordered(groups, JUDGE_GROUP_KEYS)}


def auc(positives: list[float], negatives: list[float]) -> float | None:
    """The share of (positive, negative) pairs where the positive is higher, a tie counting
    half (Mann-Whitney's U over the number of pairs, from the rank sum); None without both."""
    if not positives or not negatives:
        return None
    ranks = average_ranks(positives + negatives)
    rank_sum = sum(ranks[: len(positives)])
    u = rank_sum - len(positives) * (len(positives) + 1) / 2
    return u / (len(positives) * len(negatives))


def _reviewers_group(key: dict, pairs: list[tuple[int, str]]) -> dict:
    ratings = [rating for _, rating in pairs]
    auc_n = sum(rating != QualityRating.PARTIALLY_ACCURATE for rating in ratings)
    figures = _Figures(pairs)
    figures.add("spearman_rho", _reviewers_rho)
    figures.add("auc", _auc_of_pairs, n=auc_n)
    figures.add("mapping_agree_share", _mapping_agree_share)
    table = confusion_table([BAND_OF_TOTAL[total] for total, _ in pairs], ratings, BAND_KEYS, RATINGS)
    return {
        **key,
        "n": len(pairs),
        "ratings": {rating: ratings.count(rating) for rating in RATINGS},
        "auc_n": auc_n,
        "confusion": [{"band": row["row"], **row["counts"]} for row in table],
        **figures.done(),
    }


def _reviewers_rho(pairs: list[tuple[int, str]]) -> float | None:
    return spearman_rho([total for total, _ in pairs], [RATING_RANKS[rating] for _, rating in pairs])


def _auc_of_pairs(pairs: list[tuple[int, str]]) -> float | None:
    return auc(
        [total for total, rating in pairs if rating == QualityRating.ACCURATE],
        [total for total, rating in pairs if rating == QualityRating.INACCURATE],
    )


def _mapping_agree_share(pairs: list[tuple[int, str]]) -> float:
    return sum(BAND_RATINGS[BAND_OF_TOTAL[total]] == rating for total, rating in pairs) / len(pairs)


def _judge_group(key: dict, pairs: list[tuple[int, int]]) -> dict:
    figures = _Figures(pairs, of="sessions")
    figures.add("spearman_rho", _judges_rho)
    figures.add("mean_abs_diff", _judges_mean_abs_diff, digits=2)
    figures.add("mean_difference", _judges_mean_difference, digits=2)
    return {**key, "n": len(pairs), **figures.done()}


def _judges_rho(pairs: list[tuple[int, int]]) -> float | None:
    return spearman_rho([ours for ours, _ in pairs], [theirs for _, theirs in pairs])


def _judges_mean_abs_diff(pairs: list[tuple[int, int]]) -> float | None:
    return mean_abs_diff([ours for ours, _ in pairs], [theirs for _, theirs in pairs])


def _judges_mean_difference(pairs: list[tuple[int, int]]) -> float:
    return statistics.fmean(ours - theirs for ours, theirs in pairs)


class _Figures:
    """A group's figures over its sessions' pairs, each with its 95 % bootstrap interval
    (``<name>_ci``, the sessions resampled) and each withheld (None, its name in
    ``too_few``) below ``minimum_sessions()`` sessions: the group's, or the figure's own when
    it reads fewer (the AUC)."""

    def __init__(self, pairs: list[tuple], of: str = "reviews"):
        # In one order whatever the database's, so that the same sessions give the same interval.
        self.pairs, self.of = tuple(sorted(pairs)), of
        self.values: dict = {}
        self.computed: dict = {}
        self.digits: dict = {}
        self.too_few: list[str] = []
        self.fewest = len(pairs)

    def add(self, name: str, compute, *, n: int | None = None, digits: int = 3) -> None:
        n = len(self.pairs) if n is None else n
        self.digits[name] = digits
        if n < minimum_sessions():
            self.too_few.append(name)
            self.fewest = min(self.fewest, n)
            self.values[name] = None
            return
        self.computed[name] = compute
        value = compute(list(self.pairs))
        self.values[name] = None if value is None else round(value, digits)

    def _short_of(self) -> int:
        """The sessions the reason names: the group's when it is below the minimum, else
        those of the figure that reads fewest (the AUC's)."""
        return len(self.pairs) if len(self.pairs) < minimum_sessions() else self.fewest

    def done(self) -> dict:
        intervals = cached_intervals(self.pairs, tuple(self.computed.items())) if self.computed else {}
        answer = {}
        for name, value in self.values.items():
            interval = intervals.get(name)
            answer[name] = value
            digits = self.digits[name]
            answer[f"{name}_ci"] = None if interval is None else [round(end, digits) for end in interval]
        return {
            **answer,
            "too_few": self.too_few,
            "too_few_reviews": bool(self.too_few),
            "reason": too_few_reason(self._short_of(), self.of) if self.too_few else None,
        }


def _ordered(groups: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """Most sessions first, then by the group's key."""
    return sorted(groups, key=lambda group: (-group["n"], *(sortable(group[key]) for key in keys)))
