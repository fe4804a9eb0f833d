import pytest
from django.db import IntegrityError, transaction

from scoring import services
from scoring.insights import backlog
from scoring.insights.backlog import EXAMPLES_PER_TOOL, missing_tools_backlog
from scoring.insights.filters import InsightFilters
from scoring.models import ScoringStatus
from tests.support.api import session_document
from tests.support.factories import T0_US, add_missing_tools, make_go_session, make_score, make_session

pytestmark = pytest.mark.django_db


def scored(total: int, *names: str, **session_fields):
    """A session with a completed score whose judge named these missing tools."""
    score = make_score(make_session(**session_fields), total_score=total)
    add_tools(score, *names)
    return score


def add_tools(score, *names: str) -> None:
    add_missing_tools(score, *names)


def test_ranked_by_sessions_with_share_and_mean_score():
    scored(40, "kubectl-logs", "Prometheus query", alert_type="k8s", chain_id="k8s-chain")
    scored(60, "kubectl logs", alert_type="k8s", chain_id="k8s-chain")
    scored(90, "Kubectl-Logs", alert_type="db", chain_id="")
    scored(80)  # lacked nothing

    rows = missing_tools_backlog(InsightFilters())

    assert [row["key"] for row in rows] == ["kubectl-logs", "prometheus-query"]
    logs = rows[0]
    assert logs["tool"] == "Kubectl-Logs"  # each spelling once: the first in sort order
    assert logs["sessions"] == 3
    assert logs["share"] == 0.75
    assert logs["mean_score"] == round((40 + 60 + 90) / 3, 2)
    assert logs["alert_types"] == ["k8s", "db"]
    assert logs["chains"] == ["k8s-chain"]  # a session without a chain is not a chain
    assert rows[1]["sessions"] == 1 and rows[1]["share"] == 0.25 and rows[1]["mean_score"] == 40


def test_the_tool_is_shown_as_the_judge_wrote_it_most_often():
    scored(50, "kubectl logs")
    scored(50, "Kubectl-Logs")
    scored(50, "Kubectl-Logs")

    [row] = missing_tools_backlog(InsightFilters())

    assert row["tool"] == "Kubectl-Logs"


def test_a_score_names_a_tool_once():
    score = scored(30, "kubectl-logs")
    with pytest.raises(IntegrityError), transaction.atomic():
        add_missing_tools(score, "kubectl logs", first_position=1)


def test_only_each_session_newest_completed_score_counts():
    session = make_session()
    add_tools(make_score(session, total_score=20, scored_at_us=T0_US), "old-tool")
    add_tools(make_score(session, total_score=70, scored_at_us=T0_US + 1), "new-tool")
    make_score(session, ScoringStatus.FAILED, scored_at_us=T0_US + 2)

    rows = missing_tools_backlog(InsightFilters())

    assert [(row["key"], row["sessions"], row["mean_score"], row["share"]) for row in rows] == [
        ("new-tool", 1, 70, 1.0)
    ]


def test_examples_are_the_newest_sessions_lacking_the_tool():
    scores = [scored(50, "grafana", started_at_us=T0_US + index) for index in range(EXAMPLES_PER_TOOL + 2)]

    [row] = missing_tools_backlog(InsightFilters())

    newest_first = [score.session_id for score in reversed(scores)]
    assert row["example_session_ids"] == newest_first[:EXAMPLES_PER_TOOL]


@pytest.mark.parametrize("newest_rows", [1, 5, 2000])
@pytest.mark.parametrize("limit", [None, 2])
def test_examples_of_rare_tools_are_their_own_newest(monkeypatch, newest_rows, limit):
    # Read in full (2000), or the common tool's from the newest rows (5) and the rare one's by
    # the window, or both by the window (1).
    monkeypatch.setattr(backlog, "NEWEST_ROWS", newest_rows)
    rare = [scored(50, "pagerduty", started_at_us=T0_US + index) for index in range(2)]
    common = [scored(50, "grafana", started_at_us=T0_US + 10 + index) for index in range(7)]

    rows = {row["key"]: row for row in missing_tools_backlog(InsightFilters(), limit=limit)}

    assert rows["grafana"]["example_session_ids"] == [score.session_id for score in reversed(common)][:5]
    assert rows["pagerduty"]["example_session_ids"] == [score.session_id for score in reversed(rare)]


def test_limit_and_ties_by_key():
    scored(50, "b-tool", "a-tool", "c-tool")
    scored(50, "c-tool")

    assert [row["key"] for row in missing_tools_backlog(InsightFilters(), limit=2)] == ["c-tool", "a-tool"]


def test_filters_select_the_sessions_and_the_share_base():
    scored(50, "grafana", alert_type="k8s")
    scored(50, alert_type="k8s")
    scored(50, "pagerduty", alert_type="db")

    [row] = missing_tools_backlog(InsightFilters(alert_type="k8s"))

    assert (row["key"], row["share"], row["alert_types"]) == ("grafana", 0.5, ["k8s"])


def test_tarsys_judge_is_never_counted_as_ours():
    """A session only Go TARSy's judge scored (with its failure tags) is no scored session here:
    neither a tool nor a share's base; a tool's mean score is our total, not TARSy's."""
    make_go_session(tarsy_total=10, source_score_failure_tags=["missed_pod_logs"])
    add_tools(make_score(make_go_session(tarsy_total=95), total_score=40), "kubectl-logs")

    [row] = missing_tools_backlog(InsightFilters())

    assert (row["key"], row["sessions"], row["share"], row["mean_score"]) == ("kubectl-logs", 1, 1.0, 40)


def test_nothing_missing_no_rows():
    scored(90)
    assert missing_tools_backlog(InsightFilters()) == []


def test_a_completion_stores_its_tools_with_what_the_backlog_counts_by():
    score = make_score(
        make_session(alert_type="db", chain_id="db-chain"), total_score=35, missing_tools_analysis="1. **pg_locks**"
    )
    services.store_reply_structure([score])

    [row] = missing_tools_backlog(InsightFilters())

    assert (row["key"], row["mean_score"], row["alert_types"], row["chains"]) == ("pg-locks", 35, ["db"], ["db-chain"])


def test_a_session_stored_again_with_another_alert_type_and_chain_moves_its_tools():
    document = session_document()
    session, _ = services.ingest_session(document, written_by="tarsy")
    scored_session = make_score(session, total_score=50)
    add_tools(scored_session, "pg_locks")

    services.ingest_session({**document, "alert_type": "db", "chain_id": "db-chain"}, written_by="tarsy")

    [row] = missing_tools_backlog(InsightFilters())
    assert (row["alert_types"], row["chains"]) == (["db"], ["db-chain"])
