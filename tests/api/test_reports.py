"""POST /api/v1/scoring/reports/ and GET /api/v1/scoring/reports/{report_id}: MCP prioritization reports."""

import uuid

import pytest
from django.contrib.auth.models import User
from django_q.models import OrmQ
from rest_framework.test import APIClient

from scoring.insights import reports
from scoring.insights.filters import InsightFilters
from scoring.models import InsightReport
from tests.support.factories import make_score, make_session, proxy_client
from tests.support.fake_llm import Reply

pytestmark = pytest.mark.django_db
URL = "/api/v1/scoring/reports/"
SCHEMA_PATH = "/api/v1/scoring/reports/{report_id}"


def analysed(alert_type="kubernetes"):
    return make_score(make_session(alert_type=alert_type), missing_tools_analysis="1. kubectl-logs")


def test_a_request_queues_a_report_on_the_filters(operator_client, django_capture_on_commit_callbacks, settings):
    score = analysed()
    analysed(alert_type="database")
    with django_capture_on_commit_callbacks(execute=True):
        response = operator_client.post(URL, {"alert_type": "kubernetes", "since": "2025-01-01"}, format="json")

    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"report_id", "status"} and body["status"] == "pending"
    report = InsightReport.objects.get(pk=body["report_id"])
    assert report.filters == {"since": "2025-01-01T00:00:00Z", "alert_type": "kubernetes"}
    assert report.score_ids == [str(score.score_id)] and report.requested_by == "alice"
    assert report.status == "pending"  # until a worker's dispatcher claims it, as a scoring
    if "orm" in settings.Q_CLUSTER:  # the database broker (without REDIS_URL): the wake-up is there to see
        assert [task.task["func"] for task in OrmQ.objects.all()] == ["scoring.tasks.wake_judge_runtime"]


def test_with_no_body_the_report_covers_every_session(operator_client):
    analysed()
    response = operator_client.post(URL)
    assert response.status_code == 202
    assert InsightReport.objects.get().filters == {}


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({}, "no completed score with a missing-tools analysis matches these filters (no filters)"),
        ({"since": "last week"}, "since: not an ISO 8601 date or date-time: 'last week'"),
        ({"alert-type": "x"}, "unknown filter alert-type: the filters are since, until, alert_type, chain_id,"),
        (["kubernetes"], "the body must be a JSON object of filters"),
    ],
)
def test_a_request_that_cannot_be_reported_on_is_a_400_saying_why(operator_client, body, detail):
    make_score(make_session(), status="failed")
    response = operator_client.post(URL, body, format="json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith(detail)
    assert not InsightReport.objects.exists()


def test_requesting_and_reading_need_a_signed_in_user():
    analysed()
    assert APIClient().post(URL).status_code in (401, 403)
    report = reports.request_report(InsightFilters(), "alice")
    assert APIClient().get(f"{URL}{report.report_id}").status_code in (401, 403)


def test_requests_are_throttled_with_scorings(operator_client, settings):
    settings.SCORING_POST_RATE = "1/min"
    analysed()
    session = make_session()
    assert operator_client.post(f"/api/v1/scoring/sessions/{session.session_id}/score").status_code == 202
    response = operator_client.post(URL)
    assert response.status_code == 429 and "Retry-After" in response


@pytest.mark.django_db(transaction=True)
def test_a_report_reads_back_with_its_inputs_usage_and_text(operator_client, judge_llm):
    score = analysed()
    judge_llm.push(Reply("## Build first\n1. kubectl-logs", prompt_tokens=900, completion_tokens=120))
    report_id = operator_client.post(URL, {"alert_type": "kubernetes"}, format="json").json()["report_id"]

    pending = operator_client.get(f"{URL}{report_id}").json()
    assert pending["status"] == "pending" and pending["report"] is None
    (claimed,) = reports.claim_pending_reports(1)
    reports.run_claimed_report(claimed)

    response = operator_client.get(f"{URL}{report_id}")
    assert response.status_code == 200
    assert response.json() == {
        "report_id": report_id,
        "status": "completed",
        "report": "## Build first\n1. kubectl-logs",
        "filters": {"alert_type": "kubernetes"},
        "score_ids": [str(score.score_id)],
        "requested_by": "alice",
        "requested_at_us": response.json()["requested_at_us"],
        "started_at_us": response.json()["started_at_us"],
        "completed_at_us": response.json()["completed_at_us"],
        "judge_model": "openai/fake-judge",
        "input_tokens": 900,
        "output_tokens": 120,
        "cost_usd": None,
        "rounds": 1,
        "error_message": None,
    }


@pytest.mark.django_db(transaction=True)
def test_twelve_near_identical_report_requests_cost_one_report(judge_llm):
    """The same ten scores, with ``since`` moved by a second each time, by several users."""
    for _ in range(10):
        analysed()
    judge_llm.set_default(Reply("## Build first\n1. kubectl-logs", prompt_tokens=900, completion_tokens=120))

    def ask(second: int) -> dict:
        body = {"since": f"2025-12-31T23:59:{second:02d}Z"}
        response = proxy_client(f"user-{second % 3}").post(URL, body, format="json")
        assert response.status_code == 202
        return response.json()

    asked = [ask(second) for second in range(6)]
    while claimed := reports.claim_pending_reports(5):  # as the workers would
        for report in claimed:
            reports.run_claimed_report(report)
    asked += [ask(second) for second in range(6, 12)]  # once it is written: the fresh report

    assert len({answer["report_id"] for answer in asked}) == 1
    assert {answer["status"] for answer in asked[6:]} == {"completed"}
    assert len(judge_llm.requests) == 1 and InsightReport.objects.get().input_tokens == 900


def test_past_the_report_rate_a_user_gets_429_with_retry_after(operator_client, settings):
    settings.SCORING_REPORT_RATE = "2/h"
    for alert_type in ("a", "b", "c"):
        analysed(alert_type)
    answers = [operator_client.post(URL, {"alert_type": alert_type}, format="json") for alert_type in "abc"]

    assert [answer.status_code for answer in answers] == [202, 202, 429]
    assert 3590 <= int(answers[-1].headers["Retry-After"]) <= 3600
    assert answers[-1].json()["detail"].startswith("alice has requested 2 reports within the last hour")
    assert InsightReport.objects.count() == 2


def test_a_failed_report_says_why_in_the_services_words_to_users_and_as_recorded_to_staff(operator_client):
    recorded = "judge LLM provider error (500): upstream https://llm-gateway.internal:8443 said no"
    report = InsightReport.objects.create(
        status="failed", requested_by="alice", requested_at_us=1, error_message=recorded
    )
    staff = APIClient()
    staff.force_authenticate(User.objects.create_user("operator", is_staff=True))

    for_user, for_staff = (
        client.get(f"{URL}{report.report_id}").json() for client in (operator_client, staff)
    )

    assert for_user["error_message"] == "the judge model's provider answered with an error"
    assert for_staff["error_message"] == recorded


@pytest.mark.parametrize("report_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_an_unknown_report_is_a_404_with_detail(operator_client, report_id):
    response = operator_client.get(f"{URL}{report_id}")
    assert response.status_code == 404
    assert response.json() == {"detail": f"report {report_id} not found"}


# --- Schema ---------------------------------------------------------------------------------


@pytest.fixture
def schema() -> dict:
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


def test_both_operations_are_in_the_schema_with_examples(schema):
    post = schema["paths"]["/api/v1/scoring/reports/"]["post"]
    assert set(post["responses"]) == {"202", "400", "401", "429", "500"}
    assert post["requestBody"]["content"]["application/json"]["examples"]
    assert post["responses"]["202"]["content"]["application/json"]["examples"]
    get = schema["paths"][SCHEMA_PATH]["get"]
    assert set(get["responses"]) == {"200", "401", "404", "500"}
    example = get["responses"]["200"]["content"]["application/json"]["examples"]["Completed"]["value"]
    ref = get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(example) == set(schema["components"]["schemas"][ref]["properties"])


def test_the_request_body_describes_the_filters_as_the_query_parameters_do(schema):
    """One description of the filters: the report's body and the insights' query parameters."""
    body = schema["paths"][URL]["post"]["requestBody"]["content"]["application/json"]["schema"]
    fields = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]["properties"]
    parameters = schema["paths"]["/api/v1/scoring/stats/"]["get"]["parameters"]
    described = {p["name"]: p["description"] for p in parameters if p["name"] in fields}
    assert list(fields) == ["since", "until", "alert_type", "chain_id", "prompt_hash", "include_analysis_missing"]
    assert {name: field["description"] for name, field in fields.items()} == described
    assert all(field["type"] == "string" for field in fields.values())
