
import pytest
from django.contrib.auth.models import User

from scoring import services
from scoring.insights import agreement as agreement_module
from scoring.insights.agreement import FIGURES, agreement
from scoring.insights.filters import InsightFilters
from scoring.models import REVIEW_NOTE_MAX_CHARS, ScoreReview
from tests.support.factories import make_go_session, make_score, make_session

BANDS = ["poor", "weak", "good"]


# --- agreement(filters), on stored reviews ---------------------------------------------------


@pytest.fixture(autouse=True)
def any_number_of_reviews(settings):
    """The figures of a few reviews, on values computed by hand; the tests of the minimum set it."""
    settings.SCORING_AGREEMENT_MINIMUM_SESSIONS = 1


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
    assert agreement(InsightFilters()) == {"minimum_n": 1, "groups": [], "largest_differences": []}


def test_tarsys_reviewers_and_judge_are_not_our_reviewers(db):
    # Their verdict is compared with our judge apart (tarsy_agreement), never as a review here.
    make_score(make_go_session("inaccurate", tarsy_total=20, source_reviewer="rita"), total_score=90)
    assert agreement(InsightFilters()) == {"minimum_n": 1, "groups": [], "largest_differences": []}


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
        "reviewed_sessions": 3,
        "mean_abs_diff": round((5 + 5 + 40) / 3, 2),
        "spearman_rho": 0.5,  # ranks [3, 2, 1] against [3, 1, 2]
        # Bands good/weak/poor against good/weak/weak: observed 1/6, expected 7/18, κ = 4/7.
        "weighted_kappa": round(4 / 7, 3),
        "agree_share": round(2 / 3, 3),
        **{f"{name}_ci": gpt[f"{name}_ci"] for name in FIGURES},
        "too_few": [],
        "too_few_reviews": False,
        "reason": None,
    }
    # Resampling three sessions: the mean difference runs from 5 (never the 40) to 40 (only it).
    low, high = gpt["mean_abs_diff_ci"]
    assert 5 <= low < gpt["mean_abs_diff"] < high <= 40
    assert gpt["agree_share_ci"] == [0.0, 1.0]
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
    nothing = {"minimum_n": 1, "groups": [], "largest_differences": []}
    assert agreement(InsightFilters(prompt_hash="f" * 64)) == nothing


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


# --- How sure the figures are ------------------------------------------------------------------


def test_below_the_minimum_of_reviewed_sessions_the_figures_are_withheld_with_the_reason(reviewers, settings):
    settings.SCORING_AGREEMENT_MINIMUM_SESSIONS = 5
    rita, ravi = reviewers
    for total in (20, 40, 60, 90):  # four sessions, eight pairs: sessions count, not pairs
        reviewed(total, (rita, "agree", total), (ravi, "disagree", 50))
    result = agreement(InsightFilters())
    [group] = result["groups"]
    assert (result["minimum_n"], group["n"], group["reviewed_sessions"]) == (5, 8, 4)
    assert group["too_few_reviews"] is True
    assert group["reason"] == "too few reviews: 4 sessions, a figure needs at least 5"
    assert group["too_few"] == list(FIGURES)
    assert all(group[name] is None and group[f"{name}_ci"] is None for name in FIGURES)
    assert len(result["largest_differences"]) == 8  # the reviews themselves are still shown


def test_at_the_minimum_every_figure_has_its_interval_around_it(reviewers, settings):
    settings.SCORING_AGREEMENT_MINIMUM_SESSIONS = 5
    rita, ravi = reviewers
    scores = [(15, 20, 10), (35, 50, 30), (55, 60, 40), (72, 70, 75), (90, 95, 80)]
    for total, rita_score, ravi_score in scores:
        reviewed(total, (rita, "agree", rita_score), (ravi, "disagree", ravi_score))
    [group] = agreement(InsightFilters())["groups"]
    assert (group["too_few_reviews"], group["reason"], group["too_few"]) == (False, None, [])
    for name in FIGURES:
        low, high = group[f"{name}_ci"]
        assert low <= group[name] <= high, name
    assert group["agree_share_ci"] == [0.5, 0.5]  # every session has one agree and one disagree
    assert agreement(InsightFilters())["groups"] == [group]  # a fixed seed: the same every time


def test_the_intervals_do_not_depend_on_the_order_the_database_answers_in(reviewers, settings):
    rita, ravi = reviewers
    for total, score in [(15, 20), (35, 50), (55, 60), (72, 70), (90, 95), (40, 80)]:
        reviewed(total, (rita, "agree", score), (ravi, "disagree", 100 - score))
    pairs = agreement_module._pairs(InsightFilters())
    forwards = agreement_module._group_figures({}, pairs)
    agreement_module.cached_intervals.cache_clear()
    assert agreement_module._group_figures({}, pairs[::-1]) == forwards
