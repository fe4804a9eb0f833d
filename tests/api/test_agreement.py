"""GET /api/v1/scoring/agreement/: judge-human agreement over the insight filters."""

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from scoring import services
from tests.support.factories import make_score, make_session, proxy_client

pytestmark = pytest.mark.django_db
AGREEMENT_PATH = "/api/v1/scoring/agreement/"


def reviewed(total: int, reviewer_score: int, verdict: str, **session_fields):
    score = make_score(make_session(**session_fields), total_score=total, judge_model="gpt-4o")
    services.record_review(
        score_id=score.score_id,
        reviewer=User.objects.get_or_create(username="rita")[0],
        verdict=verdict,
        reviewer_score=reviewer_score,
    )
    return score


def test_agreement_per_judge_model_and_the_largest_differences():
    near = reviewed(80, 78, "agree")
    far = reviewed(30, 75, "disagree")
    response = proxy_client("alice").get(AGREEMENT_PATH)
    assert response.status_code == 200
    [group] = response.json()["groups"]
    figures = (group["judge_model"], group["n"], group["mean_abs_diff"], group["agree_share"])
    assert figures == ("gpt-4o", 2, 23.5, 0.5)
    assert group["spearman_rho"] == 1.0
    differences = response.json()["largest_differences"]
    assert [(pair["score_id"], pair["session_id"], pair["difference"]) for pair in differences] == [
        (str(far.score_id), str(far.session_id), 45), (str(near.score_id), str(near.session_id), -2),
    ]  # fmt: skip


def test_the_filters_select_the_sessions():
    reviewed(80, 78, "agree", alert_type="disk")
    reviewed(30, 75, "disagree", alert_type="kubernetes")
    response = proxy_client("alice").get(AGREEMENT_PATH, {"alert_type": "disk", "since": "2025-12-01"})
    assert [pair["difference"] for pair in response.json()["largest_differences"]] == [-2]
    assert proxy_client("alice").get(AGREEMENT_PATH, {"since": "2027-01-01"}).json() == {
        "groups": [], "largest_differences": [],
    }  # fmt: skip


def test_a_bad_filter_is_400_naming_it():
    response = proxy_client("alice").get(AGREEMENT_PATH, {"until": "tomorrow"})
    assert response.status_code == 400
    assert response.json()["detail"].startswith("until: ")


def test_anonymous_callers_are_401():
    assert APIClient().get(AGREEMENT_PATH).status_code == 401


def test_the_schema_documents_the_answer_filters_and_errors_with_examples():
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    get = schema["paths"][AGREEMENT_PATH]["get"]
    assert set(get["responses"]) == {"200", "400", "401"}
    assert {parameter["name"] for parameter in get["parameters"]} >= {
        "since", "until", "alert_type", "chain_id", "prompt_hash",
    }  # fmt: skip
    for code in ("200", "400"):
        assert get["responses"][code]["content"]["application/json"]["examples"], code
