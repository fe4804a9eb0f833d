import math

import pytest
from django.contrib.auth.models import User

from scoring import services
from scoring.insights.agreement import agreement, average_ranks, spearman_rho, weighted_kappa
from scoring.insights.filters import InsightFilters
from scoring.models import REVIEW_NOTE_MAX_CHARS, ScoreReview
from tests.support.factories import make_go_session, make_score, make_session

BANDS = ["poor", "weak", "good"]


# --- The formulas, on values computed by hand -------------------------------------------------


def test_tied_values_share_their_average_rank():
    assert average_ranks([30, 10, 20, 20]) == [4.0, 1.0, 2.5, 2.5]
    assert average_ranks([7, 7, 7]) == [2.0, 2.0, 2.0]


def test_spearman_with_ties_is_pearson_of_average_ranks():
    # Ranks of ys: [1, 2, 3.5, 5, 3.5]; deviations products sum to 8, squares to 10 and 9.5.
    assert spearman_rho([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))


def test_spearman_of_monotonic_pairs_is_one_or_minus_one():
    assert spearman_rho([10, 40, 90], [1, 2, 3]) == pytest.approx(1.0)
    assert spearman_rho([10, 40, 90], [3, 2, 1]) == pytest.approx(-1.0)


@pytest.mark.parametrize(
    ("xs", "ys"),
    [([], []), ([70], [20]), ([70, 70, 70], [10, 50, 90]), ([10, 50, 90], [60, 60, 60])],
)
def test_spearman_is_undefined_below_two_pairs_or_without_variance(xs, ys):
    assert spearman_rho(xs, ys) is None


def test_kappa_of_the_textbook_two_category_example_is_0_4():
    # Cohen's classic table: 20 both yes, 5 and 10 split, 15 both no (50 items): κ = 0.4.
    # Two bands at the ends of the scale weigh a disagreement 1, as unweighted κ does.
    first = ["good"] * 20 + ["good"] * 5 + ["poor"] * 10 + ["poor"] * 15
    second = ["good"] * 20 + ["poor"] * 5 + ["good"] * 10 + ["poor"] * 15
    assert weighted_kappa(first, second, BANDS) == pytest.approx(0.4)


def test_kappa_weighs_neighbouring_bands_linearly():
    # Observed disagreement 1/6 (two neighbours at 0.5), expected 4/9: κ = 1 − 9/24 = 0.625
    # (quadratic weights would give 0.75).
    judge = ["poor", "poor", "weak", "weak", "good", "good"]
    human = ["poor", "weak", "weak", "good", "good", "good"]
    assert weighted_kappa(judge, human, BANDS) == pytest.approx(0.625)


def test_kappa_of_full_agreement_is_one_and_of_opposite_ends_below_zero():
    assert weighted_kappa(["poor", "good", "weak"], ["poor", "good", "weak"], BANDS) == pytest.approx(1.0)
    assert weighted_kappa(["poor", "good"], ["good", "poor"], BANDS) == pytest.approx(-1.0)


@pytest.mark.parametrize(
    ("first", "second"),
    [([], []), (["poor"], ["good"]), (["weak", "weak"], ["weak", "weak"])],
)
def test_kappa_is_undefined_below_two_pairs_or_when_both_raters_use_one_band(first, second):
    assert weighted_kappa(first, second, BANDS) is None


# --- agreement(filters), on stored reviews ---------------------------------------------------


@pytest.fixture
def reviewers(db):
    return [User.objects.create_user(name) for name in ("rita", "ravi")]


def reviewed(total, *reviews, session=None, judge_model="gpt-4o", **score_fields):
    """A completed score with ``total`` and its reviews: (reviewer, verdict, reviewer_score)."""
    score = make_score(session or make_session(), total_score=total, judge_model=judge_model, **score_fields)
    for reviewer, verdict, reviewer_score in reviews:
        services.record_review(
            score_id=score.score_id, reviewer=reviewer, verdict=verdict, reviewer_score=reviewer_score
        )
    return score


def test_no_reviews_give_no_groups(db):
    make_score(make_session())
    assert agreement(InsightFilters()) == {"groups": [], "largest_differences": []}


def test_tarsys_reviewers_and_judge_are_not_our_reviewers(db):
    # Their verdict is compared with our judge apart (tarsy_agreement), never as a review here.
    make_score(make_go_session("inaccurate", tarsy_total=20, source_reviewer="rita"), total_score=90)
    assert agreement(InsightFilters()) == {"groups": [], "largest_differences": []}


def test_figures_per_criteria_hash_and_judge_model(reviewers):
    rita, _ = reviewers
    reviewed(80, (rita, "agree", 85))  # good, good
    reviewed(60, (rita, "agree", 55))  # weak, weak
    reviewed(30, (rita, "disagree", 70))  # poor, weak
    reviewed(90, (rita, "agree", 90), judge_model="claude")
    [gpt, claude] = agreement(InsightFilters())["groups"]
    assert gpt == {
        "prompt_hash": gpt["prompt_hash"],
        "judge_model": "gpt-4o",
        "judge_temperature": None,
        "judge_seed": None,
        "n": 3,
        "reviewed_scores": 3,
        "mean_abs_diff": round((5 + 5 + 40) / 3, 2),
        "spearman_rho": 0.5,  # ranks [3, 2, 1] against [3, 1, 2]
        # Bands good/weak/poor against good/weak/weak: observed 1/6, expected 7/18, κ = 4/7.
        "weighted_kappa": round(4 / 7, 3),
        "agree_share": round(2 / 3, 3),
    }
    assert (claude["judge_model"], claude["n"], claude["spearman_rho"], claude["weighted_kappa"]) == (
        "claude", 1, None, None,
    )  # fmt: skip
    assert (claude["mean_abs_diff"], claude["agree_share"]) == (0, 1.0)


def test_groups_are_split_by_criteria_hash(reviewers):
    rita, _ = reviewers
    reviewed(80, (rita, "agree", 80), prompt_hash="a" * 64)
    reviewed(80, (rita, "agree", 80), prompt_hash="b" * 64)
    assert [group["prompt_hash"] for group in agreement(InsightFilters())["groups"]] == ["a" * 64, "b" * 64]


def test_each_reviewers_newest_review_of_a_score_counts_once(reviewers):
    rita, ravi = reviewers
    reviewed(70, (rita, "disagree", 20), (rita, "agree", 72), (ravi, "disagree", 40))
    [group] = agreement(InsightFilters())["groups"]
    figures = (group["n"], group["reviewed_scores"], group["mean_abs_diff"], group["agree_share"])
    assert figures == (2, 1, 16, 0.5)


def test_reviews_of_a_replaced_score_still_count(reviewers):
    rita, _ = reviewers
    session = make_session()
    reviewed(40, (rita, "disagree", 70), session=session)
    reviewed(65, (rita, "agree", 70), session=session)
    [group] = agreement(InsightFilters())["groups"]
    assert (group["n"], group["mean_abs_diff"]) == (2, 17.5)


def test_the_filters_select_the_sessions_and_criteria(reviewers):
    rita, _ = reviewers
    reviewed(80, (rita, "agree", 80), session=make_session(alert_type="disk"))
    reviewed(20, (rita, "disagree", 90), session=make_session(alert_type="kubernetes"))
    result = agreement(InsightFilters(alert_type="disk"))
    assert [group["n"] for group in result["groups"]] == [1]
    assert [pair["total_score"] for pair in result["largest_differences"]] == [80]
    assert agreement(InsightFilters(prompt_hash="f" * 64)) == {"groups": [], "largest_differences": []}


def test_largest_differences_come_first_signed_reviewer_minus_judge(reviewers):
    rita, ravi = reviewers
    small = reviewed(50, (rita, "agree", 52))
    large = reviewed(90, (rita, "disagree", 30), (ravi, "agree", 85))
    middle = reviewed(20, (rita, "disagree", 45))
    differences = agreement(InsightFilters(), limit=3)["largest_differences"]
    assert [(pair["score_id"], pair["reviewer"], pair["difference"]) for pair in differences] == [
        (large.score_id, "rita", -60), (middle.score_id, "rita", 25), (large.score_id, "ravi", -5),
    ]  # fmt: skip
    assert small.score_id not in {pair["score_id"] for pair in differences}
    first = differences[0]
    assert (first["session_id"], first["total_score"], first["reviewer_score"], first["verdict"]) == (
        large.session_id, 90, 30, "disagree",
    )  # fmt: skip


def test_when_every_reviewer_agrees_exactly(reviewers):
    rita, _ = reviewers
    for total in (20, 60, 90):
        reviewed(total, (rita, "agree", total))
    [group] = agreement(InsightFilters())["groups"]
    assert (group["mean_abs_diff"], group["spearman_rho"], group["weighted_kappa"], group["agree_share"]) == (
        0, 1.0, 1.0, 1.0,
    )  # fmt: skip


def test_the_pairs_are_read_in_one_query_and_the_notes_of_those_shown_in_another(
    reviewers, django_assert_num_queries
):
    rita, ravi = reviewers
    for total in (20, 60, 90):
        reviewed(total, (rita, "agree", total), (ravi, "disagree", 50))
    with django_assert_num_queries(2) as queries:
        result = agreement(InsightFilters(alert_type="kubernetes"), limit=2)
    assert result["groups"][0]["n"] == 6
    assert "note" not in queries.captured_queries[0]["sql"]  # the figures need no note


def test_a_note_recorded_before_the_cap_is_cut_to_it_in_the_largest_differences(reviewers):
    rita, _ = reviewers
    score = reviewed(20, (rita, "disagree", 90))
    ScoreReview.objects.filter(score=score).update(note="x" * (REVIEW_NOTE_MAX_CHARS + 5000))

    (shown,) = agreement(InsightFilters())["largest_differences"]

    assert shown["note"] == "x" * REVIEW_NOTE_MAX_CHARS


def test_a_judge_is_its_model_and_sampling_settings(reviewers):
    rita, _ = reviewers
    reviewed(80, (rita, "agree", 85), judge_temperature=0.0, judge_seed=0)
    reviewed(60, (rita, "agree", 55), judge_temperature=0.0, judge_seed=0)
    reviewed(30, (rita, "disagree", 70))  # the provider's default sampling: another judge
    groups = agreement(InsightFilters())["groups"]
    assert [(group["judge_model"], group["judge_temperature"], group["judge_seed"], group["n"]) for group in groups] == [
        ("gpt-4o", 0.0, 0, 2),
        ("gpt-4o", None, None, 1),
    ]


def test_scores_without_an_evaluation_are_left_out_unless_included(reviewers):
    rita, _ = reviewers
    reviewed(80, (rita, "agree", 85))
    unreasoned = reviewed(30, (rita, "disagree", 90), analysis_missing=True)
    assert [group["n"] for group in agreement(InsightFilters())["groups"]] == [1]
    included = agreement(InsightFilters(include_analysis_missing=True))
    assert [group["n"] for group in included["groups"]] == [2]
    assert included["largest_differences"][0]["score_id"] == unreasoned.score_id
