import json
import random
import statistics
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Count

from scoring.insights.filters import InsightFilters, scored_sessions
from scoring.insights.stats import DIMENSIONS, GROUPINGS, InvalidGrouping, fleet_stats, percentile
from scoring.judge.prompts import PROMPT_HASH
from scoring.models import ScoringStatus
from tests.support.factories import T0_US, make_go_session, make_score, make_session

DAY_US = 86_400_000_000
HOUR_US = 3_600_000_000

pytestmark = pytest.mark.django_db


def rows_by_key(group_by: str, filters: InsightFilters = InsightFilters()) -> dict:
    return {row["key"]: row for row in fleet_stats(filters, group_by)}


def test_median_and_quartiles_interpolate_as_python_does():
    rng = random.Random(16)
    for size in (1, 2, 3, 4, 5, 10, 37, 200):
        totals = [rng.randint(0, 100) for _ in range(size)]
        counted = sorted((value, totals.count(value)) for value in set(totals))
        expected = statistics.quantiles(totals, n=4, method="inclusive") if size > 1 else [totals[0]] * 3
        assert percentile(counted, 0.25) == pytest.approx(expected[0])
        assert percentile(counted, 0.5) == pytest.approx(statistics.median(totals))
        assert percentile(counted, 0.75) == pytest.approx(expected[2])
    assert percentile([], 0.5) is None


def test_figures_of_a_group_match_python_statistics_on_this_database():
    rng = random.Random(7)
    totals = [rng.randint(0, 100) for _ in range(41)]
    for total in totals:
        make_score(make_session(), total_score=total)

    [row] = fleet_stats(InsightFilters(), "alert_type")

    quartiles = statistics.quantiles(totals, n=4, method="inclusive")
    assert row["key"] == "kubernetes" and row["sessions"] == 41
    assert row["mean_score"] == round(statistics.mean(totals), 2)
    assert row["median_score"] == statistics.median(totals)
    assert (row["q1_score"], row["q3_score"]) == (quartiles[0], quartiles[2])
    assert row["bands"] == {
        "poor": sum(total <= 49 for total in totals),
        "weak": sum(50 <= total <= 74 for total in totals),
        "good": sum(total >= 75 for total in totals),
    }


def test_a_session_counts_once_by_its_newest_completed_score():
    session = make_session()
    make_score(
        session,
        total_score=20,
        scored_at_us=T0_US,
        input_tokens=100,
        output_tokens=10,
        cost_usd=Decimal("0.01"),
    )
    make_score(
        session,
        total_score=90,
        scored_at_us=T0_US + 1,
        input_tokens=200,
        output_tokens=20,
        cost_usd=Decimal("0.02"),
        cached_input_tokens=128,
    )
    make_score(session, ScoringStatus.FAILED, scored_at_us=T0_US + 2, input_tokens=50, output_tokens=0)

    [row] = fleet_stats(InsightFilters(), "chain_id")

    assert row["sessions"] == 1
    assert row["mean_score"] == row["median_score"] == 90
    assert row["bands"] == {"poor": 0, "weak": 0, "good": 1}
    # Every attempt: the failed one and the replaced one cost too.
    assert row["failed_scorings"] == 1
    assert (row["input_tokens"], row["output_tokens"], row["cost_usd"]) == (350, 30, Decimal("0.03"))
    assert row["cached_input_tokens"] == 128  # a part of input_tokens, not more of them


def test_a_group_with_only_failed_scorings_has_a_row_without_score_figures():
    make_score(make_session(alert_type="db"), ScoringStatus.FAILED)
    make_score(make_session(alert_type="db"), ScoringStatus.FAILED)
    make_score(make_session(alert_type="k8s"), total_score=70)
    make_score(make_session(alert_type="k8s"), ScoringStatus.PENDING)

    rows = rows_by_key("alert_type")

    assert list(rows) == ["db", "k8s"]
    assert rows["db"]["sessions"] == 0 and rows["db"]["failed_scorings"] == 2
    assert rows["db"]["mean_score"] is rows["db"]["median_score"] is rows["db"]["q1_score"] is None
    assert rows["db"]["dimension_means"] == dict.fromkeys(DIMENSIONS)
    assert rows["k8s"]["sessions"] == 1 and rows["k8s"]["failed_scorings"] == 0
    assert rows["k8s"]["input_tokens"] is None  # no scoring of the group recorded tokens


def test_dimension_means_skip_scores_without_the_dimension():
    make_score(
        make_session(),
        dimensions={"logical_flow": 10, "consistency": 20, "tool_relevance": 5, "synthesis_quality": None},
    )
    make_score(
        make_session(),
        dimensions={"logical_flow": 15, "consistency": 25, "tool_relevance": 6, "synthesis_quality": None},
    )
    make_score(make_session(), dimensions=None)

    [row] = fleet_stats(InsightFilters(), "agent_type")

    assert row["sessions"] == 3
    assert row["dimension_means"] == {
        "logical_flow": 12.5,
        "consistency": 22.5,
        "tool_relevance": 5.5,
        "synthesis_quality": None,
    }


def test_groups_by_score_columns():
    make_score(make_session(), judge_model="gpt-5", prompt_hash="a" * 64, total_score=40)
    make_score(make_session(), judge_model="gemini", prompt_hash="b" * 64, total_score=80)

    assert {key: row["mean_score"] for key, row in rows_by_key("judge_model").items()} == {
        "gemini": 80,
        "gpt-5": 40,
    }
    assert {key: row["sessions"] for key, row in rows_by_key("prompt_hash").items()} == {
        "a" * 64: 1,
        "b" * 64: 1,
    }


def test_a_judge_is_its_model_and_the_sampling_settings_it_was_sent():
    make_score(make_session(), judge_model="gpt-5", total_score=40)  # before settings were sent
    make_score(make_session(), judge_model="gpt-5", judge_temperature=0.0, judge_seed=0, total_score=60)
    make_score(make_session(), judge_model="gpt-5", judge_temperature=0.7, total_score=80)

    rows = rows_by_key("judge_model")
    assert {key: row["mean_score"] for key, row in rows.items()} == {
        "gpt-5": 40,
        "gpt-5 (temperature 0, seed 0)": 60,
        "gpt-5 (temperature 0.7)": 80,
    }
    assert list(rows) == ["gpt-5", "gpt-5 (temperature 0, seed 0)", "gpt-5 (temperature 0.7)"]
    # Under a criteria filter, each scoring's figures are read per scoring: the same groups.
    assert list(rows_by_key("judge_model", InsightFilters(prompt_hash=PROMPT_HASH))) == list(rows)


def test_sessions_whose_newest_score_has_no_evaluation_are_left_out_unless_included():
    make_score(make_session(), total_score=70)
    make_score(make_session(), total_score=20, analysis_missing=True)
    make_score(make_session(), ScoringStatus.FAILED)

    (row,) = fleet_stats(InsightFilters(), "alert_type")
    assert (row["sessions"], row["mean_score"], row["failed_scorings"]) == (1, 70, 1)
    (row,) = fleet_stats(InsightFilters(include_analysis_missing=True), "alert_type")
    assert (row["sessions"], row["mean_score"]) == (2, 45)
    (row,) = fleet_stats(InsightFilters(prompt_hash=PROMPT_HASH), "judge_model")
    assert (row["sessions"], row["failed_scorings"]) == (1, 1)  # what every scoring cost counts still


def test_days_and_iso_weeks_of_the_session_start_in_utc():
    # 2026-01-01 is a Thursday: its ISO week starts on Monday 2025-12-29.
    starts = {
        T0_US: 60,  # Thu 2026-01-01 00:00
        T0_US + 3 * DAY_US + 23 * HOUR_US: 70,  # Sun 2026-01-04 23:00, same week
        T0_US + 4 * DAY_US: 90,  # Mon 2026-01-05, next week
    }
    for started_at_us, total in starts.items():
        make_score(make_session(started_at_us=started_at_us), total_score=total)

    weeks = rows_by_key("week")
    days = rows_by_key("day")

    assert {key: row["sessions"] for key, row in weeks.items()} == {"2025-12-29": 2, "2026-01-05": 1}
    assert weeks["2025-12-29"]["median_score"] == 65
    assert list(days) == ["2026-01-01", "2026-01-04", "2026-01-05"]


def test_postgresql_estimates_the_days_and_weeks_a_grouping_has():
    """Migration 0023's statistics on the start's day and week: without them PostgreSQL
    estimates one group per distinct start time, and sorts where it could hash."""
    if connection.vendor != "postgresql":
        pytest.skip("statistics on expressions are PostgreSQL's")
    for hour in range(20):  # 20 start times over 2 days of one week
        make_score(make_session(started_at_us=T0_US + 5 * hour * HOUR_US // 2))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE alert_sessions")

    def estimated_groups(group_by: str) -> int:
        (start,) = GROUPINGS[group_by][0]
        grouped = scored_sessions(InsightFilters()).values(group=start)
        plan = grouped.annotate(n=Count("pk")).order_by().explain(format="json")
        return json.loads(plan)[0]["Plan"]["Plan Rows"]

    assert (estimated_groups("day"), estimated_groups("week")) == (2, 1)


def test_filters_apply():
    make_score(make_session(alert_type="db", started_at_us=T0_US), total_score=30)
    make_score(make_session(alert_type="k8s", started_at_us=T0_US + DAY_US), total_score=80)

    assert list(rows_by_key("alert_type", InsightFilters(since_us=T0_US + 1))) == ["k8s"]
    assert list(rows_by_key("week", InsightFilters(alert_type="db"))) == ["2025-12-29"]


def test_tarsys_judge_is_never_counted_as_ours():
    """Go TARSy's own judge scored both sessions (95, under its own model and prompt hash); only
    our score of one of them counts, in every grouping and under TARSy's prompt hash."""
    make_go_session("accurate", tarsy_total=95)
    make_score(make_go_session("accurate", tarsy_total=95), total_score=40, judge_model="gpt-4o")
    for group_by in GROUPINGS:
        rows = fleet_stats(InsightFilters(), group_by)
        figures = [(row["sessions"], row["mean_score"], row["bands"]["good"]) for row in rows]
        assert figures == [(1, 40, 0)], group_by
    assert list(rows_by_key("judge_model")) == ["gpt-4o"]
    assert fleet_stats(InsightFilters(prompt_hash="c" * 64), "alert_type") == []


def test_no_scores_no_rows():
    assert all(fleet_stats(InsightFilters(), group_by) == [] for group_by in GROUPINGS)


def test_an_unknown_grouping_is_refused_by_name():
    with pytest.raises(InvalidGrouping, match="group_by: must be one of alert_type, .* not 'month'"):
        fleet_stats(InsightFilters(), "month")
