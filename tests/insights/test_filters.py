import pytest

from scoring.insights.filters import (
    InsightFilters,
    InvalidFilter,
    latest_completed_scores,
    parse_filters,
    scorings,
)
from scoring.models import ScoringStatus
from tests.support.factories import T0_US, make_score, make_session

DAY_US = 86_400_000_000


def test_parse_reads_dates_and_datetimes_as_utc():
    filters = parse_filters({"since": "2026-01-01", "until": "2026-01-02T12:00:00+02:00", "alert_type": "k8s"})
    assert filters.since_us == T0_US
    assert filters.until_us == T0_US + DAY_US + 10 * 3_600_000_000
    assert filters.alert_type == "k8s" and filters.chain_id is None


def test_parse_treats_empty_values_as_no_filter():
    assert parse_filters({"since": "", "alert_type": "  "}) == InsightFilters()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "yesterday"}, "since: not an ISO 8601"),
        ({"until": "2026-13-01"}, "until: not an ISO 8601"),
        ({"since": "2026-01-02", "until": "2026-01-01"}, "until: must be later than since"),
        ({"since": "9999-12-31T23:59:59-01:00"}, "since: out of range"),
        ({"until": "0001-01-01T00:00:00+01:00"}, "until: out of range"),
    ],
)
def test_parse_names_the_bad_parameter(params, message):
    with pytest.raises(InvalidFilter, match=message):
        parse_filters(params)


def test_as_params_round_trips():
    filters = parse_filters({"since": "2026-01-01T00:00:00Z", "chain_id": "c"})
    assert filters.as_params() == {"since": "2026-01-01T00:00:00Z", "chain_id": "c"}
    assert parse_filters(filters.as_params()) == filters
    included = parse_filters({"include_analysis_missing": "true"})
    assert included.as_params() == {"include_analysis_missing": "true"}
    assert parse_filters(included.as_params()) == included


@pytest.mark.parametrize(("value", "included"), [("true", True), ("1", True), ("false", False), ("", False)])
def test_include_analysis_missing_reads_a_boolean(value, included):
    assert parse_filters({"include_analysis_missing": value}).include_analysis_missing is included


def test_include_analysis_missing_refuses_other_values():
    with pytest.raises(InvalidFilter, match="include_analysis_missing: not true or false: 'maybe'"):
        parse_filters({"include_analysis_missing": "maybe"})


@pytest.mark.django_db
def test_a_newest_score_without_an_evaluation_is_left_out_unless_included():
    reasoned = make_score(make_session())
    unreasoned = make_score(make_session(), analysis_missing=True)
    assert list(latest_completed_scores(InsightFilters())) == [reasoned]
    assert set(latest_completed_scores(InsightFilters(include_analysis_missing=True))) == {reasoned, unreasoned}


@pytest.mark.django_db
def test_each_session_counts_by_its_newest_completed_score():
    session = make_session()
    older = make_score(session, total_score=40, scored_at_us=T0_US)
    newer = make_score(session, total_score=80, scored_at_us=T0_US + 1)
    make_score(session, ScoringStatus.FAILED, scored_at_us=T0_US + 2)
    never_completed = make_session()
    make_score(never_completed, ScoringStatus.FAILED)

    assert list(latest_completed_scores(InsightFilters())) == [newer]
    assert older in scorings(InsightFilters()) and scorings(InsightFilters()).count() == 4


@pytest.mark.django_db
def test_filters_select_by_session_start_type_chain_and_criteria():
    early = make_score(make_session(started_at_us=T0_US - 1))
    inside = make_score(make_session(started_at_us=T0_US, alert_type="db", chain_id="db-chain"))
    make_score(make_session(started_at_us=T0_US + DAY_US))
    window = parse_filters({"since": "2026-01-01", "until": "2026-01-02"})

    assert list(latest_completed_scores(window)) == [inside]
    assert list(latest_completed_scores(InsightFilters(alert_type="db"))) == [inside]
    assert list(latest_completed_scores(InsightFilters(chain_id="db-chain"))) == [inside]
    assert list(latest_completed_scores(InsightFilters(prompt_hash="other"))) == []
    assert early in latest_completed_scores(InsightFilters(until_us=T0_US))
