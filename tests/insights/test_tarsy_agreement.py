import math
import uuid

import pytest

from scoring import services
from scoring.insights.confidence import cached_intervals, minimum_sessions
from scoring.insights.filters import InsightFilters
from scoring.insights.tarsy_agreement import (
    _reviewers_group,
    auc,
    judge_agreement,
    reviewers_agreement,
    tarsy_agreement,
)
from tests.support.factories import make_go_session, make_score, make_session

pytestmark = pytest.mark.django_db
ACC, PART, INACC = "accurate", "partially_accurate", "inaccurate"
REVIEWER_FIGURES = ["spearman_rho", "auc", "mapping_agree_share"]
JUDGE_FIGURES = ["spearman_rho", "mean_abs_diff", "mean_difference"]


def go_session(total: int | None, rating: str = "", tarsy_total: int | None = None, **fields):
    """A Go TARSy session (``make_go_session``) and our completed score ``total`` by
    ``judge_model`` (None: we never completed one)."""
    judge_model = fields.pop("judge_model", "gpt-4o")
    session = make_go_session(rating, tarsy_total, **fields)
    if total is not None:
        make_score(session, total_score=total, judge_model=judge_model)
    return session


def only_group(result: dict) -> dict:
    [group] = result["groups"]
    return group


# --- AUC, on values computed by hand ------------------------------------------------------------


def test_auc_is_the_share_of_pairs_the_positive_wins_ties_counting_half():
    assert auc([90], [10]) == 1.0
    assert auc([10], [90]) == 0.0
    # (50, 50) half, (50, 30), (70, 50), (70, 30) won: 3.5 of 4 pairs.
    assert auc([50, 70], [50, 30]) == pytest.approx(0.875)
    assert auc([60, 60], [60, 60, 60]) == pytest.approx(0.5)


@pytest.mark.parametrize(("positives", "negatives"), [([], [40]), ([40], []), ([], [])])
def test_auc_is_undefined_without_both_classes(positives, negatives):
    assert auc(positives, negatives) is None


# --- Against TARSy's reviewers -------------------------------------------------------------------


def test_reviewer_figures_on_a_small_group_with_ties():
    ratings = [INACC, INACC, INACC, ACC, PART, ACC, PART]
    for total, rating in zip([20, 40, 55, 55, 60, 80, 80], ratings, strict=True):
        go_session(total, rating)
    result = reviewers_agreement(InsightFilters())
    group = only_group(result)
    # Ranks of our totals [1, 2, 3.5, 3.5, 5, 6.5, 6.5]; of the ratings (0 0 0 2 1 2 1)
    # [2, 2, 2, 6.5, 4.5, 6.5, 4.5]; both means 4: Σxy 17.75, Σx² 27, Σy² 25.
    assert group["spearman_rho"] == round(17.75 / math.sqrt(27 * 25), 3)
    # Accurate 55 and 80 against inaccurate 20, 40, 55: 55 wins two and ties one, 80 wins three.
    assert (group["auc_n"], group["auc"]) == (5, round(5.5 / 6, 3))
    assert group["confusion"] == [
        {"band": "poor", INACC: 2, PART: 0, ACC: 0},
        {"band": "weak", INACC: 1, PART: 1, ACC: 1},
        {"band": "good", INACC: 0, PART: 1, ACC: 1},
    ]
    # Under the mapping: poor-inaccurate 2, weak-partially accurate 1, good-accurate 1.
    assert group["mapping_agree_share"] == round(4 / 7, 3)
    for name in REVIEWER_FIGURES:  # each figure's interval holds it
        low, high = group[f"{name}_ci"]
        assert low <= group[name] <= high, name
    assert (group["n"], group["ratings"], group["too_few"]) == (7, {ACC: 2, PART: 2, INACC: 3}, [])
    assert (group["judge_model"], result["unknown_ratings"], result["minimum_n"]) == ("gpt-4o", {}, 5)
    assert result["mapping"] == [
        {"band": "poor", "rating": INACC}, {"band": "weak", "rating": PART}, {"band": "good", "rating": ACC},
    ]  # fmt: skip


def test_below_the_minimum_the_figures_are_withheld_and_named_the_counts_kept():
    for total, rating in [(20, INACC), (55, PART), (80, ACC), (90, ACC)][: minimum_sessions() - 1]:
        go_session(total, rating)
    group = only_group(reviewers_agreement(InsightFilters()))
    assert [group[name] for name in REVIEWER_FIGURES] == [None, None, None]
    assert group["too_few"] == REVIEWER_FIGURES
    assert [group[f"{name}_ci"] for name in REVIEWER_FIGURES] == [None, None, None]
    assert (group["too_few_reviews"], group["reason"]) == (
        True, f"too few reviews: 4 sessions, a figure needs at least {minimum_sessions()}",
    )  # fmt: skip
    assert (group["n"], group["ratings"]) == (4, {ACC: 2, PART: 1, INACC: 1})
    assert [row[ACC] for row in group["confusion"]] == [0, 0, 2]


def test_the_auc_needs_the_minimum_of_accurate_and_inaccurate_sessions_itself():
    for total, rating in [(20, INACC), (50, PART), (55, PART), (60, PART), (65, PART), (90, ACC)]:
        go_session(total, rating)
    group = only_group(reviewers_agreement(InsightFilters()))
    assert (group["n"], group["auc_n"], group["auc"], group["too_few"]) == (6, 2, None, ["auc"])
    # The reason names the fewest sessions a withheld figure reads: the AUC's two.
    assert (group["too_few_reviews"], group["reason"], group["auc_ci"]) == (
        True, "too few reviews: 2 sessions, a figure needs at least 5", None,
    )  # fmt: skip
    # Ranks 1-6 against [1, 3.5, 3.5, 3.5, 3.5, 6]: Σxy 12.5, Σx² 17.5, Σy² 12.5.
    assert group["spearman_rho"] == round(12.5 / math.sqrt(17.5 * 12.5), 3)


def test_a_single_rating_leaves_rho_and_auc_undefined_not_too_few():
    for total in (30, 60, 70, 80, 95):
        go_session(total, ACC)
    group = only_group(reviewers_agreement(InsightFilters()))
    assert (group["spearman_rho"], group["auc_n"], group["auc"], group["too_few"]) == (None, 5, None, [])
    assert (group["spearman_rho_ci"], group["auc_ci"], group["too_few_reviews"]) == (None, None, False)
    assert group["mapping_agree_share"] == 0.4  # 80 and 95 are good


def test_an_unknown_rating_is_left_out_and_counted():
    for total, rating in [(20, INACC), (40, INACC), (45, INACC), (60, PART), (80, ACC), (90, ACC)]:
        go_session(total, rating)
    go_session(70, "excellent")
    go_session(75, "excellent")
    go_session(10, "wrong_alert")
    result = reviewers_agreement(InsightFilters())
    assert result["unknown_ratings"] == {"excellent": 2, "wrong_alert": 1}
    assert (only_group(result)["n"], only_group(result)["auc"]) == (6, 1.0)


def test_only_sessions_with_our_completed_score_and_a_rating_count_by_our_newest_score():
    replaced = go_session(10, ACC)
    make_score(replaced, total_score=85)  # the re-score counts, not the 10
    go_session(None, INACC)  # never scored by us
    make_score(go_session(None, INACC), status="failed")
    go_session(60)  # not rated
    make_session(alert_type="kubernetes")  # a tarsy-bot session
    group = only_group(reviewers_agreement(InsightFilters()))
    assert (group["n"], group["confusion"][2][ACC]) == (1, 1)


def test_groups_are_our_criteria_hash_and_judge_model_and_the_filters_apply():
    for total in (20, 40, 60, 80, 90):
        go_session(total, ACC, alert_type="disk")
    go_session(70, ACC, judge_model="claude", alert_type="disk")
    go_session(50, INACC, alert_type="database")
    groups = reviewers_agreement(InsightFilters(alert_type="disk"))["groups"]
    assert [(group["judge_model"], group["n"]) for group in groups] == [("gpt-4o", 5), ("claude", 1)]
    assert reviewers_agreement(InsightFilters(prompt_hash="f" * 64))["groups"] == []


# --- Against TARSy's judge -----------------------------------------------------------------------


def test_judge_figures_on_a_small_group_with_ties():
    for ours, theirs in [(60, 55), (70, 70), (80, 70), (90, 90), (50, 50)]:
        go_session(ours, tarsy_total=theirs)
    group = only_group(judge_agreement(InsightFilters()))
    # Ranks: ours [2, 3, 4, 5, 1], TARSy's [2, 3.5, 3.5, 5, 1]; Σxy 9.5, Σx² 10, Σy² 9.5.
    assert group["spearman_rho"] == round(9.5 / math.sqrt(95), 3)
    assert (group["mean_abs_diff"], group["mean_difference"]) == (3.0, 3.0)  # differences 5, 0, 10, 0, 0
    assert group == group | {
        "prompt_hash": group["prompt_hash"], "judge_model": "gpt-4o", "tarsy_prompt_hash": "c" * 64,
        "tarsy_judge_model": "gemini-2.5-flash", "n": 5, "too_few": [],
    }  # fmt: skip


def test_the_mean_difference_is_ours_minus_tarsys():
    for ours in (40, 50, 60, 70, 80):
        go_session(ours, tarsy_total=ours + 12)
    group = only_group(judge_agreement(InsightFilters()))
    assert (group["mean_difference"], group["mean_abs_diff"], group["spearman_rho"]) == (-12.0, 12.0, 1.0)
    # The same on every session, so on every resample: intervals of no width.
    intervals = (group["mean_difference_ci"], group["mean_abs_diff_ci"], group["spearman_rho_ci"])
    assert intervals == ([-12.0, -12.0], [12.0, 12.0], [1.0, 1.0])


def test_the_intervals_do_not_depend_on_the_order_of_the_sessions():
    pairs = [(20, INACC), (40, PART), (45, INACC), (60, ACC), (80, ACC), (90, PART), (55, ACC)]
    forwards = _reviewers_group({}, pairs)
    cached_intervals.cache_clear()
    assert _reviewers_group({}, pairs[::-1]) == forwards


def test_judge_groups_are_split_by_tarsys_model_and_prompt_and_withheld_below_the_minimum():
    for ours in (40, 50, 60, 70, 80):
        go_session(ours, tarsy_total=ours)
    go_session(70, tarsy_total=20, source_score_model="claude-sonnet")
    go_session(70, tarsy_total=20, source_score_prompt_hash="d" * 64)
    go_session(None, tarsy_total=90)  # TARSy's judge only: nothing to compare
    groups = judge_agreement(InsightFilters())["groups"]
    assert [(group["tarsy_prompt_hash"][:1], group["tarsy_judge_model"], group["n"]) for group in groups] == [
        ("c", "gemini-2.5-flash", 5), ("c", "claude-sonnet", 1), ("d", "gemini-2.5-flash", 1),
    ]  # fmt: skip
    assert [group[name] for name in JUDGE_FIGURES for group in groups[1:]] == [None] * 6
    assert [group["too_few"] for group in groups] == [[], JUDGE_FIGURES, JUDGE_FIGURES]
    assert [group["reason"] for group in groups] == [
        None, *["too few sessions: 1 session, a figure needs at least 5"] * 2,
    ]  # fmt: skip


def test_each_part_is_one_query(django_assert_num_queries):
    for total, rating in [(20, INACC), (40, INACC), (60, PART), (80, ACC), (90, ACC)]:
        go_session(total, rating, tarsy_total=total)
    with django_assert_num_queries(2):
        result = tarsy_agreement(InsightFilters(alert_type="kubernetes"))
    assert (only_group(result["tarsy_reviewers"])["n"], only_group(result["tarsy_judge"])["n"]) == (5, 5)


# --- A sync that brings a review or a score ------------------------------------------------------


def go_document(session_id: uuid.UUID, *, rating: str | None = None, score: int | None = None) -> dict:
    """The smallest Go TARSy document this service stores, as a sync assembles it."""
    return {
        "format": "tarsy-go/1",
        "session": {
            "id": str(session_id), "alert_type": "kubernetes", "chain_id": "kubernetes-agent-chain",
            "status": "completed", "created_at": "2026-01-01T00:00:00Z",
            "started_at": "2026-01-01T00:00:01Z", "completed_at": "2026-01-01T00:05:00Z",
            "alert_data": "Pod crash-looping", "final_analysis": "OOM.",
            "stages": [], "review_status": "reviewed" if rating else None, "quality_rating": rating,
        },
        "timeline": [], "trace": {"stages": []}, "llm_interactions": {}, "mcp_interactions": {},
        "score": None if score is None else {
            "status": "completed", "total_score": score, "prompt_hash": "c" * 64,
        },
    }  # fmt: skip


def test_the_figures_follow_a_new_review_or_score_stored_by_a_sync():
    ids = [uuid.uuid4() for _ in range(minimum_sessions())]
    for index, session_id in enumerate(ids):
        session, _ = services.ingest_session(go_document(session_id), written_by="tarsy-sync")
        make_score(session, total_score=30 + 15 * index)
    assert tarsy_agreement(InsightFilters())["tarsy_reviewers"]["groups"] == []

    for index, session_id in enumerate(ids):
        rating = INACC if index < 2 else ACC
        _, outcome = services.ingest_session(
            go_document(session_id, rating=rating, score=25 + 15 * index), written_by="tarsy-sync"
        )
        assert outcome is services.IngestOutcome.UPDATED
    result = tarsy_agreement(InsightFilters())
    assert only_group(result["tarsy_reviewers"])["auc"] == 1.0
    assert only_group(result["tarsy_judge"])["mean_difference"] == 5.0
