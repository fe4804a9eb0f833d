"""/api/v1/scoring/trials/: a candidate tried on 30 reviewed sessions from the API (a dry run with
its estimate first, then the trial, its scorings run as workers run them, its figures with their
intervals); who may start, cancel and read what; the schema."""

import uuid

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from scoring.models import SessionScore, Trial
from tests.support.factories import proxy_client
from tests.support.fake_llm import Error
from tests.support.trials import candidate, marked, reference_in, reviewed, run_all, scripted_judge

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_criteria")]
LIST = "/api/v1/scoring/trials/"


@pytest.fixture
def writer() -> APIClient:
    """A user who is not staff, with the change_criteria permission."""
    User.objects.create_user("carol").user_permissions.add(Permission.objects.get(codename="change_criteria"))
    return proxy_client("carol")


@pytest.fixture
def staff_client() -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.create_user("operator", is_staff=True))
    return client


def test_a_candidate_tried_on_30_reviewed_sessions_from_the_api(writer, staff_client, judge_llm):
    references = [95, 90, 85, 80, 75, 70, 65, 60, 55, 50, 45, 40, 35, 30, 25, 20, 15, 10, 5, 0] * 2
    for score in references[:34]:
        marked(score)
    version = candidate()
    scores_before = SessionScore.objects.count()

    dry = writer.post(LIST, {"candidate_version_id": version.pk, "size": 30, "dry_run": True}, format="json")

    assert dry.status_code == 200, dry.json()
    body = dry.json()
    assert body["dry_run"] is True and len(body["session_ids"]) == 30
    assert body["estimate"]["scorings"] == 60 and body["estimate"]["input_tokens"] > 0
    assert body["estimate"]["cost_usd"] is None  # no price for the fake judge's model: said, not guessed
    assert not Trial.objects.exists()

    started = writer.post(
        LIST,
        {"candidate_version_id": version.pk, "session_ids": body["session_ids"], "description": "logs first"},
        format="json",
    )

    assert started.status_code == 201, started.json()
    trial = started.json()
    assert trial["status"] == "running" and trial["created_by"] == "carol"
    assert trial["progress"] == {"pending": 60, "in_progress": 0, "completed": 0, "failed": 0, "total": 60}
    detail_url = f"{LIST}{trial['trial_id']}"
    first_page = writer.get(f"{detail_url}/scorings").json()
    assert first_page["count"] == 60 and len(first_page["results"]) == 50

    scripted_judge(judge_llm, lambda prompt: min(100, reference_in(prompt) + 3), lambda prompt: 50)
    run_all()
    detail = proxy_client("dave").get(detail_url).json()  # anyone signed in reads it

    assert detail["status"] == "completed" and detail["progress"]["completed"] == 60
    results = detail["results"]
    assert results["paired_sessions"] == 30 and results["too_few_reviews"] is False
    candidate_arm, current_arm = results["arms"]["candidate"], results["arms"]["current"]
    assert candidate_arm["mean_abs_diff"] <= 3 and candidate_arm["spearman_rho"] > 0.99
    low, high = current_arm["mean_abs_diff_ci"]
    assert low < current_arm["mean_abs_diff"] < high
    assert results["differences"]["mean_abs_diff"]["significant"] is True
    assert results["differences"]["weighted_kappa"]["difference"] > 0
    assert len(results["largest_differences"]) == 10
    assert SessionScore.objects.count() == scores_before

    one = writer.get(f"{detail_url}/scorings").json()["results"][0]
    transcript = staff_client.get(f"{detail_url}/scorings/{one['scoring_id']}").json()
    assert transcript["transcript"]["conversations"][0]["messages"][0]["role"] == "user"
    assert transcript["score_analysis"]
    assert writer.get(f"{detail_url}/scorings/{one['scoring_id']}").status_code == 403  # staff only

    listed = writer.get(LIST).json()["results"]
    assert [t["trial_id"] for t in listed] == [trial["trial_id"]]


def test_writing_needs_staff_or_change_criteria_and_refusals_say_why(writer, operator_client):
    reviewed(70)
    version = candidate()
    response = operator_client.post(LIST, {"candidate_version_id": version.pk}, format="json")
    assert response.status_code == 403 and "change_criteria" in response.json()["detail"]

    response = writer.post(LIST, {"candidate_version_id": version.pk, "size": 501}, format="json")
    assert response.status_code == 400 and "size" in response.json()

    another = candidate("Other")
    response = writer.post(LIST, {"candidate_version_id": 999999}, format="json")
    assert response.status_code == 409 and response.json() == {"detail": "no criteria version 999999"}

    started = writer.post(LIST, {"candidate_version_id": another.pk}, format="json").json()
    cancel = f"{LIST}{started['trial_id']}/cancel"
    assert operator_client.post(cancel).status_code == 403
    cancelled = writer.post(cancel)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    again = writer.post(cancel)
    assert again.status_code == 409 and "only a running trial is cancelled" in again.json()["detail"]


def test_a_judge_model_is_tried_from_the_api_and_a_request_with_no_candidate_is_refused(writer, judge_llm):
    reviewed(70)
    refused = writer.post(LIST, {}, format="json")
    assert refused.status_code == 409 and "a trial needs a candidate" in refused.json()["detail"]

    started = writer.post(LIST, {"candidate_model": "openai/fake-judge-large"}, format="json")

    assert started.status_code == 201, started.json()
    trial = started.json()
    assert trial["candidate_version_id"] is None and trial["candidate_model"] == "openai/fake-judge-large"
    assert trial["estimate"]["arms"]["candidate"]["judge_model"] == "openai/fake-judge-large"
    assert trial["estimate"]["arms"]["current"]["judge_model"] == "openai/fake-judge"
    scorings = writer.get(f"{LIST}{trial['trial_id']}/scorings").json()["results"]
    assert {(s["arm"], s["model"]) for s in scorings} == {
        ("candidate", "openai/fake-judge-large"), ("current", "")
    }  # fmt: skip


def test_a_failed_trial_scoring_says_a_reason_to_users_and_the_recorded_error_to_staff(
    writer, staff_client, judge_llm
):
    reviewed(70)
    trial = writer.post(LIST, {"candidate_version_id": candidate().pk}, format="json").json()
    judge_llm.set_default(Error(401, "Incorrect API key provided: sk-abc***"))
    run_all()
    url = f"{LIST}{trial['trial_id']}/scorings"
    shown = writer.get(url).json()["results"][0]["error_message"]
    recorded = staff_client.get(url).json()["results"][0]["error_message"]
    assert "sk-abc" in recorded and "sk-abc" not in shown and shown


def test_an_unknown_trial_is_not_found(operator_client):
    assert operator_client.get(f"{LIST}{uuid.uuid4()}").status_code == 404
    assert operator_client.get(f"{LIST}not-a-uuid").json() == {"detail": "trial not-a-uuid not found"}


def test_the_schema_describes_the_trials(operator_client):
    schema = operator_client.get("/api/schema/?format=json").json()
    post = schema["paths"]["/api/v1/scoring/trials/"]["post"]
    assert set(post["responses"]) >= {"200", "201", "400", "403", "409"}
    assert "dry_run" in schema["components"]["schemas"]["TrialCreateRequest"]["properties"]
    assert "results" in schema["components"]["schemas"]["TrialDetail"]["properties"]
    assert "/api/v1/scoring/trials/{trial_id}/cancel" in schema["paths"]
    assert "/api/v1/scoring/trials/{trial_id}/scorings/{scoring_id}" in schema["paths"]
