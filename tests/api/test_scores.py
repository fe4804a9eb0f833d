"""POST/GET /api/v1/scoring/sessions/{id}/score: EP-0028's status table and error codes."""

import uuid

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ
from rest_framework.test import APIClient

from scoring import failures, services
from scoring.judge.prompts import PROMPT_HASH
from scoring.models import MissingTool, ScoringStatus, SessionScore
from tests.support.factories import make_score, make_session, proxy_client

pytestmark = pytest.mark.django_db


def url(session_id) -> str:
    return f"/api/v1/scoring/sessions/{session_id}/score"


def queued_tasks() -> list[str]:
    return [task.task["func"] for task in OrmQ.objects.all()]


# --- Status table ---------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True])
def test_no_existing_score_starts_a_scoring_and_wakes_a_worker(
    operator_client, django_capture_on_commit_callbacks, force
):
    session = make_session()
    with django_capture_on_commit_callbacks(execute=True):
        response = operator_client.post(url(session.session_id), {"force_rescore": force}, format="json")
    assert response.status_code == 202
    assert set(response.json()) == {"score_id", "session_id", "status"}
    assert response.json()["status"] == "pending"
    assert response.json()["session_id"] == str(session.session_id)
    score = SessionScore.objects.get(pk=response.json()["score_id"])
    assert score.prompt_hash == PROMPT_HASH
    assert score.score_triggered_by == "alice"
    assert queued_tasks() == ["scoring.tasks.wake_judge_runtime"]


def test_a_failure_says_why_in_the_services_words_and_only_staff_read_the_providers(operator_client):
    session = make_session()
    recorded = "judge LLM provider error (401) after 1 attempt: Incorrect API key provided: sk-proj-abc***xyz"
    make_score(session, ScoringStatus.FAILED, error_message=recorded)
    staff = APIClient()
    staff.force_authenticate(User.objects.create_user("operator", is_staff=True))

    for path in (url(session.session_id), f"/api/v1/scoring/sessions/{session.session_id}/scores"):
        for_user, for_staff = (client.get(path).json() for client in (operator_client, staff))
        shown = [body.get("error_message") for body in (for_user, *for_user.get("results", []))]
        assert "the judge model's provider answered with an error" in shown and recorded not in str(for_user)
        assert recorded in str(for_staff)
    listed = operator_client.get("/api/v1/sessions/").json()["results"][0]["latest_score"]
    assert listed["error_message"] == "the judge model's provider answered with an error"


def test_the_body_is_optional(operator_client):
    session = make_session()
    response = operator_client.post(url(session.session_id))
    assert response.status_code == 202


@pytest.mark.parametrize("status", [ScoringStatus.COMPLETED, ScoringStatus.FAILED])
@pytest.mark.parametrize("body", [{}, {"force_rescore": False}])
def test_finished_score_is_returned_without_force(operator_client, status, body):
    session = make_session()
    existing = make_score(session, status)
    response = operator_client.post(url(session.session_id), body, format="json")
    assert response.status_code == 200
    data = response.json()
    assert data["score_id"] == str(existing.score_id)
    assert data["status"] == status
    assert data["current_prompt_used"] is True
    if status == ScoringStatus.COMPLETED:
        assert data["total_score"] == 61 and data["score_analysis"] and data["missing_tools_analysis"]
        assert data["error_message"] is None
    else:
        # A signed-in user who is not staff reads the reason, not the provider's text.
        reason = failures.shown_reason("judge LLM timed out")
        assert data["total_score"] is None and data["error_message"] == reason
    assert SessionScore.objects.count() == 1


@pytest.mark.parametrize("status", [ScoringStatus.PENDING, ScoringStatus.IN_PROGRESS])
def test_active_score_is_returned_as_it_is_without_force(operator_client, status):
    session = make_session()
    existing = make_score(session, status)
    response = operator_client.post(url(session.session_id), {"force_rescore": False}, format="json")
    assert response.status_code == 202
    assert response.json() == {
        "score_id": str(existing.score_id),
        "session_id": str(session.session_id),
        "status": status,
    }
    assert SessionScore.objects.count() == 1


@pytest.mark.parametrize("status", [ScoringStatus.COMPLETED, ScoringStatus.FAILED])
def test_force_rescore_of_a_finished_score_adds_a_new_scoring(
    operator_client, django_capture_on_commit_callbacks, status
):
    session = make_session()
    old = make_score(session, status)
    with django_capture_on_commit_callbacks(execute=True):
        response = operator_client.post(url(session.session_id), {"force_rescore": True}, format="json")
    assert response.status_code == 202
    assert response.json()["status"] == "pending"
    assert response.json()["score_id"] != str(old.score_id)
    assert SessionScore.objects.filter(session=session).count() == 2  # the old score is kept
    latest = operator_client.get(url(session.session_id)).json()
    assert latest["score_id"] == response.json()["score_id"]


@pytest.mark.parametrize("status", [ScoringStatus.PENDING, ScoringStatus.IN_PROGRESS])
def test_force_rescore_while_active_is_a_conflict(operator_client, status):
    session = make_session()
    active = make_score(session, status)
    response = operator_client.post(url(session.session_id), {"force_rescore": True}, format="json")
    assert response.status_code == 409
    body = response.json()
    assert body["score_id"] == str(active.score_id) and body["status"] == status
    assert "already being scored" in body["detail"]
    assert SessionScore.objects.count() == 1


# --- Errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("session_status", ["pending", "in_progress", "paused", "canceling"])
def test_unfinished_session_is_refused_naming_its_status(operator_client, session_status):
    session = make_session(status=session_status)
    response = operator_client.post(url(session.session_id))
    assert response.status_code == 400
    assert f"is {session_status}" in response.json()["detail"]
    assert not SessionScore.objects.exists()


@pytest.mark.parametrize("session_status", ["completed", "failed", "cancelled", "timed_out"])
def test_every_finished_session_status_can_be_scored(operator_client, session_status):
    session = make_session(status=session_status)
    assert operator_client.post(url(session.session_id)).status_code == 202


def test_unknown_session_is_404(operator_client):
    missing = uuid.uuid4()
    for response in (operator_client.post(url(missing)), operator_client.get(url(missing))):
        assert response.status_code == 404
        assert str(missing) in response.json()["detail"]


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "123", "7c9e6679-7425-40de-944b"])
def test_malformed_session_id_is_404_with_a_clear_message(operator_client, bad_id):
    for response in (operator_client.post(url(bad_id)), operator_client.get(url(bad_id))):
        assert response.status_code == 404
        assert "session ids are UUIDs" in response.json()["detail"]


@pytest.mark.parametrize(
    "body", [{"force_rescore": "maybe"}, {"force_rescore": None}, ["force_rescore"], "true"]
)
def test_malformed_body_is_400(operator_client, body):
    session = make_session()
    response = operator_client.post(url(session.session_id), body, format="json")
    assert response.status_code == 400
    assert response.json()["detail"]
    assert not SessionScore.objects.exists()


def test_invalid_json_is_400(operator_client):
    session = make_session()
    response = operator_client.post(url(session.session_id), "{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_anonymous_caller_is_401_on_both_methods():
    session = make_session()
    for response in (APIClient().post(url(session.session_id)), APIClient().get(url(session.session_id))):
        assert response.status_code == 401
        assert response.has_header("WWW-Authenticate")


def test_proxy_header_from_an_untrusted_address_is_ignored():
    session = make_session()
    client = proxy_client("mallory")
    response = client.post(url(session.session_id), REMOTE_ADDR="10.20.30.40")
    assert response.status_code == 401
    assert not SessionScore.objects.exists()


@pytest.mark.parametrize("header", ["HTTP_X_FORWARDED_USER", "HTTP_X_FORWARDED_EMAIL"])
def test_score_triggered_by_is_the_user_named_by_the_proxy(header):
    session = make_session()
    client = APIClient()
    client.credentials(**{header: "carol@example.com"})
    response = client.post(url(session.session_id))
    assert SessionScore.objects.get(pk=response.json()["score_id"]).score_triggered_by == "carol@example.com"


def test_score_triggered_by_is_the_logged_in_user(django_user_model):
    session = make_session()
    client = APIClient()
    client.force_login(django_user_model.objects.create_user("dave", password="a-long-password-1"))
    response = client.post(url(session.session_id))
    assert response.status_code == 202
    assert SessionScore.objects.get(pk=response.json()["score_id"]).score_triggered_by == "dave"


def test_cookie_sessions_must_pass_csrf(django_user_model):
    session = make_session()
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_user("erin", password="a-long-password-1"))
    response = client.post(url(session.session_id))
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert not SessionScore.objects.exists()


def test_database_error_is_a_json_500(operator_client):
    session = make_session()
    make_score(session)
    with connection.cursor() as cursor:  # the test's transaction rolls this back
        cursor.execute("ALTER TABLE session_scores RENAME TO session_scores_gone")
    response = operator_client.get(url(session.session_id))
    assert response.status_code == 500
    assert response.json() == {"detail": "database error; the request was not completed, try again"}


# --- GET -----------------------------------------------------------------------------------


def test_get_returns_the_newest_scoring_in_any_status(operator_client):
    session = make_session()
    make_score(session, ScoringStatus.COMPLETED, scored_at_us=1)
    newest = make_score(session, ScoringStatus.IN_PROGRESS, scored_at_us=2)
    data = operator_client.get(url(session.session_id)).json()
    assert data["score_id"] == str(newest.score_id) and data["status"] == "in_progress"
    assert data["total_score"] is None and data["completed_at_us"] is None


def test_get_of_a_session_never_scored_is_404(operator_client):
    session = make_session()
    response = operator_client.get(url(session.session_id))
    assert response.status_code == 404
    assert "has not been scored" in response.json()["detail"]


def test_get_reports_every_spec_field_and_whether_the_criteria_are_current(operator_client):
    session = make_session()
    make_score(
        session,
        prompt_hash="0" * 64,
        judge_model="openai/gpt-4o",
        input_tokens=9000,
        output_tokens=700,
        cached_input_tokens=4000,
    )
    data = operator_client.get(url(session.session_id)).json()
    spec_fields = {
        "score_id", "session_id", "status", "prompt_hash", "total_score", "score_analysis",
        "missing_tools_analysis", "error_message", "score_triggered_by", "started_at_us",
        "completed_at_us", "current_prompt_used",
    }
    assert spec_fields <= set(data)
    assert data["current_prompt_used"] is False
    assert data["judge_model"] == "openai/gpt-4o" and data["input_tokens"] == 9000
    assert data["cached_input_tokens"] == 4000


def test_get_reports_the_samples_their_spread_and_whether_the_score_is_unstable(operator_client):
    sampled = make_session()
    make_score(sampled, total_score=70, score_samples=[85, 62, 70], score_spread=23, unstable=True)
    single = make_session()
    make_score(single)

    data = operator_client.get(url(sampled.session_id)).json()
    assert (data["score_samples"], data["score_spread"], data["unstable"]) == ([85, 62, 70], 23, True)
    data = operator_client.get(url(single.session_id)).json()
    assert (data["score_samples"], data["score_spread"], data["unstable"]) == (None, None, False)


def test_get_reports_how_much_of_the_investigation_the_judge_saw(operator_client):
    shortened = make_session()
    warning = "input shortened: the judge saw 31% of the investigation: the middle of 1 tool result was left out to fit the judge model's context window of 128,000 tokens: kubernetes-server.pods_log (2.1 MB of 3.0 MB)"
    make_score(shortened, input_coverage=0.31, warnings=[warning])

    data = operator_client.get(url(shortened.session_id)).json()

    assert (data["input_coverage"], data["warnings"]) == (0.31, [warning])


def test_reading_a_score_takes_three_queries_once_the_caller_is_known():
    session = make_session()
    make_score(session)
    client = proxy_client()
    client.get(f"/api/v1/scoring/sessions/{session.session_id}/score")

    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/api/v1/scoring/sessions/{session.session_id}/score")

    assert response.status_code == 200
    # The current criteria of every scope (for current_prompt_used), the score, and its missing tools.
    assert len(queries) == 3, [query["sql"] for query in queries]


def test_a_completed_score_has_its_dimensions_and_missing_tools(operator_client):
    session = make_session()
    dimensions = {"logical_flow": 15, "consistency": 18, "tool_relevance": None, "synthesis_quality": 13}
    score = make_score(session, dimensions=dimensions)
    MissingTool.objects.create(score=score, name="events_list", key="events-list", position=1)
    MissingTool.objects.create(score=score, name="`kubectl logs`", key="kubectl-logs", position=0)
    make_score(make_session(), dimensions=None)  # another session's score

    data = operator_client.get(url(session.session_id)).json()

    assert data["dimensions"] == dimensions
    assert data["missing_tools"] == ["`kubectl logs`", "events_list"]


def test_a_score_with_no_breakdown_and_no_tools_says_so(operator_client):
    session = make_session()
    make_score(session, "failed")

    data = operator_client.get(url(session.session_id)).json()

    assert (data["dimensions"], data["missing_tools"]) == (None, [])


def test_a_scoring_whose_wake_up_cannot_be_queued_stays_pending_for_polling_workers(transactional_db):
    session = make_session()
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE django_q_ormq RENAME TO django_q_ormq_away")
    try:
        response = proxy_client().post(url(session.session_id))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE django_q_ormq_away RENAME TO django_q_ormq")
    assert response.status_code == 202 and response.json()["status"] == "pending"
    # The pending row is the job: a worker looking for work claims it.
    assert services.claim_pending_scores(5) == [SessionScore.objects.get(session=session)]


def test_proxy_authenticated_post_must_be_json_or_pass_csrf():
    """A cross-site form can send the proxy's cookie, but not a JSON body type."""
    session = make_session()
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_X_FORWARDED_USER="alice")
    form_post = client.post(url(session.session_id), {"force_rescore": "false"})  # multipart, like a form
    assert form_post.status_code == 403
    assert "CSRF failed" in form_post.json()["detail"]
    empty_post = client.post(url(session.session_id), content_type="text/plain")
    assert empty_post.status_code == 403
    assert not SessionScore.objects.exists()

    json_post = client.post(url(session.session_id), {}, format="json")
    assert json_post.status_code == 202


def test_a_score_waiting_for_the_judges_quota_says_why_and_since_when(operator_client):
    session = make_session()
    reason = "judge LLM rate-limited (429): the provider's quota is used up for now: slow down; next try at ..."
    make_score(session, ScoringStatus.PENDING, waiting_reason=reason, rate_limited_since_us=1_763_900_000_000_000)

    body = operator_client.get(url(session.session_id)).json()

    assert (body["status"], body["waiting_reason"], body["rate_limited_since_us"]) == (
        "pending",
        reason,
        1_763_900_000_000_000,
    )



def test_a_scoring_past_a_used_up_budget_is_a_conflict_until_confirmed(settings):
    settings.SCORING_BUDGET_USD_PER_DAY = 2
    make_score(make_session(), cost_usd="2.5", completed_at_us=services.now_us())
    session, scored = make_session(), make_score(make_session())
    client = proxy_client("alice")
    url = f"/api/v1/scoring/sessions/{session.session_id}/score"

    refused = client.post(url, {}, format="json")

    assert refused.status_code == 409
    assert refused.json() == {
        "detail": "the daily scoring budget is used up ($2.50 spent of SCORING_BUDGET_USD_PER_DAY=$2.00); "
        "send confirm_over_budget=true to score anyway",
        "over_budget": True,
    }
    assert not session.scores.exists()
    # A score already there is returned as ever: it costs nothing.
    assert client.post(f"/api/v1/scoring/sessions/{scored.session_id}/score").status_code == 200
    accepted = client.post(url, {"confirm_over_budget": True}, format="json")
    assert accepted.status_code == 202 and accepted.json()["status"] == "pending"
