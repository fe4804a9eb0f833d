"""GET /api/v1/scoring/scores/{score_id}/transcript: what the judge saw, for staff only."""

import uuid

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from scoring.models import ScoreTranscript, ScoringStatus
from tests.support.factories import make_score, make_session, run_next_scoring
from tests.support.fake_llm import Reply
from tests.support.judge_replies import SCORE_ALONE, evaluated

pytestmark = pytest.mark.django_db


def url(score_id) -> str:
    return f"/api/v1/scoring/scores/{score_id}/transcript"


@pytest.fixture
def staff_client() -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.create_user("operator", is_staff=True))
    return client


def test_staff_read_every_message_sent_and_every_reply_of_a_scoring(judge_llm, staff_client, settings):
    settings.SCORING_LLM_TEMPERATURE, settings.SCORING_LLM_SEED = 0.0, 3
    judge_llm.push(Reply(SCORE_ALONE), Reply(evaluated("Found gaps.\n\n50")), Reply("1. **kubectl-logs**"))
    score = make_score(make_session(), ScoringStatus.PENDING)
    run_next_scoring()

    body = staff_client.get(url(score.score_id)).json()

    assert (body["score_id"], body["model"], body["temperature"], body["seed"]) == (
        str(score.score_id), "openai/fake-judge", 0.0, 3,
    )  # fmt: skip
    (conversation,) = body["conversations"]
    assert conversation["error"] is None
    assert [message["role"] for message in conversation["messages"]] == ["user", "assistant"] * 3
    assert conversation["messages"][0] == judge_llm.requests[0].messages[0]  # the prompt as sent
    assert conversation["messages"][1]["content"] == SCORE_ALONE


def test_others_are_refused_and_a_score_without_one_is_not_found(operator_client, staff_client):
    score = make_score(make_session())
    ScoreTranscript.objects.create(score=score, recorded_at_us=1, transcript={"conversations": []})
    response = operator_client.get(url(score.score_id))
    assert response.status_code == 403
    assert "staff" in response.json()["detail"]
    assert APIClient().get(url(score.score_id)).status_code in (401, 403)

    unrecorded = make_score(make_session())
    assert staff_client.get(url(unrecorded.score_id)).status_code == 404
    assert "No transcript of score" in staff_client.get(url(unrecorded.score_id)).json()["detail"]
    missing = uuid.uuid4()
    assert staff_client.get(url(missing)).json() == {"detail": f"No score with id {missing}."}
    assert staff_client.get(url("not-a-uuid")).status_code == 404


def test_the_score_says_its_judges_sampling_and_whether_it_lacks_an_evaluation(operator_client):
    score = make_score(make_session(), judge_temperature=0.0, judge_seed=0, analysis_missing=True)
    body = operator_client.get(f"/api/v1/scoring/sessions/{score.session_id}/score").json()
    assert (body["judge_temperature"], body["judge_seed"], body["analysis_missing"]) == (0.0, 0, True)
    assert "transcript" not in body


def test_the_schema_describes_the_endpoint(staff_client):
    schema = staff_client.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/scoring/scores/{score_id}/transcript"]["get"]
    assert set(operation["responses"]) == {"200", "401", "403", "404"}
    assert "staff" in operation["summary"]
