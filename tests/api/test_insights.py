"""GET /api/v1/scoring/stats/ and /api/v1/scoring/missing-tools/: the insight endpoints."""

import csv
import io
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from scoring.insights.filters import InsightFilters
from scoring.insights.stats import fleet_stats
from scoring.models import MissingTool, ScoringStatus
from tests.support.factories import T0_US, add_missing_tools, make_score, make_session

pytestmark = pytest.mark.django_db

STATS = "/api/v1/scoring/stats/"
MISSING_TOOLS = "/api/v1/scoring/missing-tools/"


@pytest.fixture
def fleet():
    """Two alert types, one with a re-score and a failed attempt, dimensions and missing tools."""
    db_session = make_session(alert_type="db", chain_id="db-chain", started_at_us=T0_US)
    make_score(db_session, total_score=20, scored_at_us=T0_US, input_tokens=1000, cost_usd=Decimal("0.5"))
    db_score = make_score(
        db_session,
        total_score=45,
        scored_at_us=T0_US + 1,
        input_tokens=1200,
        output_tokens=300,
        cost_usd=Decimal("0.25"),
        cached_input_tokens=1000,
        dimensions={"logical_flow": 10, "consistency": 12, "tool_relevance": 8, "synthesis_quality": 15},
    )
    make_score(db_session, ScoringStatus.FAILED, scored_at_us=T0_US + 2)
    add_missing_tools(db_score, "=pg_stat_activity", keys=["pg-stat-activity"])
    k8s_score = make_score(
        make_session(alert_type="k8s", started_at_us=T0_US + 86_400_000_000), total_score=88
    )
    add_missing_tools(k8s_score, "PG stat activity")
    return db_session


def test_stats_answer_the_rows_of_fleet_stats_with_the_filters(operator_client, fleet):
    response = operator_client.get(STATS, {"group_by": "alert_type", "since": "2026-01-01"})

    assert response.status_code == 200
    data = response.json()
    assert data["group_by"] == "alert_type"
    assert data["filters"] == {"since": "2026-01-01T00:00:00Z"}
    assert [row["key"] for row in data["rows"]] == ["db", "k8s"]
    db = data["rows"][0]
    assert db == {
        "key": "db",
        "sessions": 1,
        "mean_score": 45.0,
        "median_score": 45.0,
        "q1_score": 45.0,
        "q3_score": 45.0,
        "bands": {"poor": 1, "weak": 0, "good": 0},
        "failed_scorings": 1,
        "dimension_means": {
            "logical_flow": 10.0,
            "consistency": 12.0,
            "tool_relevance": 8.0,
            "synthesis_quality": 15.0,
        },
        "input_tokens": 2200,
        "output_tokens": 300,
        "cost_usd": 0.75,
        "cached_input_tokens": 1000,
    }


def test_stats_filter_by_the_query(operator_client, fleet):
    data = operator_client.get(STATS, {"group_by": "week", "alert_type": "k8s"}).json()
    # The k8s session started on Friday 2026-01-02: the ISO week of Monday 2025-12-29.
    assert [(row["key"], row["sessions"]) for row in data["rows"]] == [("2025-12-29", 1)]


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"group_by": "month"}, "group_by: must be one of alert_type, chain_id, agent_type, judge_model"),
        ({}, "group_by: must be one of"),
        ({"group_by": "day", "since": "yesterday"}, "since: not an ISO 8601 date or date-time: 'yesterday'"),
        (
            {"group_by": "day", "since": "2026-02-01", "until": "2026-01-01"},
            "until: must be later than since",
        ),
    ],
)
@pytest.mark.parametrize("answer_format", ["json", "csv"])
def test_stats_refuse_a_bad_query_naming_it_in_json(operator_client, params, detail, answer_format):
    response = operator_client.get(STATS, {**params, "format": answer_format})

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert detail in response.json()["detail"]


def test_stats_refuse_an_unknown_format_naming_it(operator_client):
    response = operator_client.get(STATS, {"group_by": "day", "format": "xml"})

    assert response.status_code == 400
    assert response.json() == {"detail": "format: must be json or csv, not 'xml'"}


def test_stats_as_csv_flatten_bands_and_criteria(operator_client, fleet):
    response = operator_client.get(STATS, {"group_by": "alert_type", "format": "csv"})

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="fleet-stats-by-alert_type.csv"'
    header, *rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert header == [
        "key", "sessions", "mean_score", "median_score", "q1_score", "q3_score",
        "band_poor", "band_weak", "band_good", "failed_scorings",
        "mean_logical_flow", "mean_consistency", "mean_tool_relevance", "mean_synthesis_quality",
        "input_tokens", "output_tokens", "cost_usd", "cached_input_tokens",
    ]  # fmt: skip
    assert rows[0] == [
        "db", "1", "45.0", "45.0", "45.0", "45.0", "1", "0", "0", "1",
        "10.0", "12.0", "8.0", "15.0", "2200", "300", "0.7500000000", "1000",
    ]  # fmt: skip
    # Unknown figures are empty cells.
    assert dict(zip(header, rows[1], strict=True))["mean_logical_flow"] == ""
    assert len(rows) == len(fleet_stats(InsightFilters(), "alert_type"))


def test_stats_as_csv_by_accept_header_and_with_no_rows_still_have_the_header(operator_client):
    response = operator_client.get(STATS, {"group_by": "day"}, HTTP_ACCEPT="text/csv")

    assert response.status_code == 200
    assert response.content.decode().splitlines()[0].startswith("key,sessions,mean_score,")
    assert len(response.content.decode().splitlines()) == 1


def test_csv_cells_a_spreadsheet_would_run_are_quoted(operator_client):
    make_score(make_session(alert_type='=HYPERLINK("http://evil")'), total_score=50)

    response = operator_client.get(STATS, {"group_by": "alert_type", "format": "csv"})

    [_, row] = list(csv.reader(io.StringIO(response.content.decode())))
    assert row[0] == '\'=HYPERLINK("http://evil")'


def test_missing_tools_answer_the_backlog(operator_client, fleet):
    response = operator_client.get(MISSING_TOOLS)

    assert response.status_code == 200
    data = response.json()
    assert data["filters"] == {}
    [row] = data["tools"]
    assert row["key"] == "pg-stat-activity" and row["sessions"] == 2 and row["share"] == 1.0
    assert row["mean_score"] == 66.5
    assert row["alert_types"] == ["db", "k8s"] and row["chains"] == ["db-chain", "kubernetes-agent-chain"]
    k8s_session_id = MissingTool.objects.get(score__session__alert_type="k8s").score.session_id
    assert row["example_session_ids"] == [str(k8s_session_id), str(fleet.session_id)]  # newest start first


def test_missing_tools_filters_and_limit(operator_client, fleet):
    only_db = operator_client.get(MISSING_TOOLS, {"alert_type": "db", "limit": "1"}).json()
    assert only_db["filters"] == {"alert_type": "db"}
    assert [(row["sessions"], row["share"]) for row in only_db["tools"]] == [(1, 1.0)]
    assert operator_client.get(MISSING_TOOLS, {"alert_type": "none"}).json()["tools"] == []


@pytest.mark.parametrize("limit", ["0", "-1", "ten", "1.5", "10001", "²"])
def test_missing_tools_refuse_a_bad_limit_naming_it(operator_client, limit):
    response = operator_client.get(MISSING_TOOLS, {"limit": limit})
    assert response.status_code == 400
    assert response.json()["detail"].startswith("limit: must be a whole number from 1 to 10000")


def test_missing_tools_refuse_a_bad_filter_naming_it(operator_client):
    response = operator_client.get(MISSING_TOOLS, {"until": "soon"})
    assert response.status_code == 400
    assert response.json() == {"detail": "until: not an ISO 8601 date or date-time: 'soon'"}


@pytest.mark.parametrize("path", [STATS + "?group_by=day", MISSING_TOOLS, STATS + "?group_by=day&format=csv"])
def test_anonymous_caller_is_401_in_json(path):
    response = APIClient().get(path)
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"


def test_both_are_in_the_schema_with_examples():
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    stats = schema["paths"][STATS]["get"]
    assert {parameter["name"] for parameter in stats["parameters"]} >= {
        "group_by", "since", "until", "alert_type", "chain_id", "prompt_hash", "format"
    }  # fmt: skip
    assert set(stats["responses"]["200"]["content"]) == {"application/json", "text/csv"}
    assert all(
        stats["responses"]["200"]["content"][kind]["examples"] for kind in ("application/json", "text/csv")
    )
    assert stats["responses"]["400"]["content"]["application/json"]["examples"]
    tools = schema["paths"][MISSING_TOOLS]["get"]
    assert "limit" in {parameter["name"] for parameter in tools["parameters"]}
    assert tools["responses"]["200"]["content"]["application/json"]["examples"]
