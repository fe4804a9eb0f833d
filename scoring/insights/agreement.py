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

from collections import defaultdict

from django.db.models import Exists, F, OuterRef
from django.db.models.functions import Left

from scoring.insights.confidence import (
    BAND_KEYS,
    BAND_OF_TOTAL,
    cached_intervals,
    mean_abs_diff,
    minimum_sessions,
    spearman_rho,
    too_few_reason,
    weighted_kappa,
)
from scoring.insights.filters import InsightFilters, scorings, with_evaluation
from scoring.models import REVIEW_NOTE_MAX_CHARS, ReviewVerdict, ScoreReview, ScoringStatus

# How many pairs ``largest_differences`` lists.
LARGEST_DIFFERENCES = 10


def agreement(filters: InsightFilters, limit: int = LARGEST_DIFFERENCES) -> dict:
    """Judge-human agreement per criteria hash and judge, and the ``limit`` pairs
    where the judge and the reviewer differ most (for the next calibration).

    ``groups``: one dict per (``prompt_hash``, ``judge_model``, ``judge_temperature``,
    ``judge_seed``), most pairs first, with
    ``n`` (pairs), ``reviewed_scores``, ``reviewed_sessions``, ``mean_abs_diff``,
    ``spearman_rho``, ``weighted_kappa``, ``agree_share`` (None where a figure is undefined
    or withheld), each with ``<figure>_ci`` ([low, high] or None), and ``too_few_reviews``,
    ``reason`` and ``too_few`` (the withheld figures) below ``minimum_sessions()``.
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
    return {"minimum_n": minimum_sessions(), "groups": groups, "largest_differences": _with_notes(largest)}


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
    """The group's figures over its pairs, each with its 95 % bootstrap interval
    (``<figure>_ci``) over its reviewed sessions (a session's pairs resampled together);
    all withheld below ``minimum_sessions()`` reviewed sessions."""
    by_session = defaultdict(list)
    for pair in pairs:
        by_session[str(pair["session_id"])].append(
            (pair["total_score"], pair["reviewer_score"], pair["verdict"] == ReviewVerdict.AGREE)
        )
    # In one order whatever the database's, so that the same reviews give the same interval.
    sessions = tuple(tuple(sorted(by_session[session])) for session in sorted(by_session))
    too_few = len(sessions) < minimum_sessions()
    figures = {
        **group,
        "n": len(pairs),
        "reviewed_scores": len({pair["score_id"] for pair in pairs}),
        "reviewed_sessions": len(sessions),
        "too_few_reviews": too_few,
        "reason": too_few_reason(len(sessions)) if too_few else None,
        "too_few": list(FIGURES) if too_few else [],
    }
    intervals = {} if too_few else cached_intervals(sessions, OVER_SESSIONS)
    reviews = _reviews(sessions)
    for name, figure in FIGURES.items():
        digits = FIGURE_DIGITS.get(name, 3)
        figures[name] = None if too_few else _rounded(figure(reviews), digits)
        interval = intervals.get(name)
        figures[f"{name}_ci"] = None if interval is None else [round(end, digits) for end in interval]
    return figures


# A review here: (the judge's total, the reviewer's score, whether the verdict is agree).
def _reviews(sessions) -> list[tuple[int, int, bool]]:
    return [review for session in sessions for review in session]


def _judge_and_human(reviews: list[tuple]) -> tuple[list[int], list[int]]:
    return [review[0] for review in reviews], [review[1] for review in reviews]


def _mean_abs_diff(reviews: list[tuple]) -> float | None:
    return mean_abs_diff(*_judge_and_human(reviews))


def _rho(reviews: list[tuple]) -> float | None:
    return spearman_rho(*_judge_and_human(reviews))


def _kappa(reviews: list[tuple]) -> float | None:
    judge = [BAND_OF_TOTAL[review[0]] for review in reviews]
    return weighted_kappa(judge, [BAND_OF_TOTAL[review[1]] for review in reviews], BAND_KEYS)


def _agree_share(reviews: list[tuple]) -> float:
    return sum(review[2] for review in reviews) / len(reviews)


# Each figure of a group's reviews, in the order the API gives them; and the same of
# resampled sessions, for the intervals.
FIGURES = {
    "mean_abs_diff": _mean_abs_diff,
    "spearman_rho": _rho,
    "weighted_kappa": _kappa,
    "agree_share": _agree_share,
}
OVER_SESSIONS = tuple(
    (name, lambda sessions, figure=figure: figure(_reviews(sessions))) for name, figure in FIGURES.items()
)
FIGURE_DIGITS = {"mean_abs_diff": 2}


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
