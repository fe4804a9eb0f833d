"""Every API error has one shape: a ``detail`` for people, and for a bad value its
messages by field beside it; a missing session is worded the same everywhere."""

import uuid

import pytest
from rest_framework.test import APIClient

from tests.support.factories import make_session

pytestmark = pytest.mark.django_db

SESSION_ENDPOINTS = [
    ("get", "/api/v1/sessions/{}/"),
    ("get", "/api/v1/scoring/sessions/{}/score"),
    ("post", "/api/v1/scoring/sessions/{}/score"),
]


def test_a_bad_field_is_kept_by_name_beside_a_detail_that_says_it(operator_client):
    session = make_session()

    response = operator_client.post(
        f"/api/v1/scoring/sessions/{session.session_id}/score", {"force_rescore": "maybe"}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "detail": "force_rescore: Must be a valid boolean.",
        "force_rescore": ["Must be a valid boolean."],
    }


def test_a_session_with_several_invalid_fields_reports_all_of_them(api_client):
    document = {"session_id": "x", "status": "running", "alert_type": "", "started_at_us": "today"}

    response = api_client.post("/api/v1/sessions/", document, format="json")

    body = response.json()
    assert response.status_code == 400
    invalid = {"session_id", "status", "alert_type", "started_at_us", "alert_data", "stages"}
    assert set(body) == {"detail", *invalid}
    for field in invalid:
        assert f"{field}: {body[field][0]}" in body["detail"]


@pytest.mark.parametrize(("method", "template"), SESSION_ENDPOINTS)
def test_a_missing_session_is_worded_the_same_on_every_endpoint(operator_client, method, template):
    missing = uuid.uuid4()

    unknown = getattr(operator_client, method)(template.format(missing), format="json")
    malformed = getattr(operator_client, method)(template.format("not-a-uuid"), format="json")

    assert (unknown.status_code, unknown.json()) == (404, {"detail": f"No session with id {missing}."})
    assert (malformed.status_code, malformed.json()) == (
        404,
        {
            "detail": "No session with id 'not-a-uuid': session ids are UUIDs "
            "(like 7c9e6679-7425-40de-944b-e07fc1f90ae7)."
        },
    )


def test_an_address_under_the_api_that_names_nothing_answers_json(operator_client):
    response = operator_client.get("/api/v1/no-such-endpoint/")

    assert response.status_code == 404
    assert response.json() == {"detail": "No API endpoint at /api/v1/no-such-endpoint/ (see /api/docs/)."}


def test_the_api_root_lists_the_scoring_endpoints_too(operator_client):
    response = operator_client.get("/api/v1/", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    assert response.json() == {
        "sessions": "http://testserver/api/v1/sessions/",
        "session": "http://testserver/api/v1/sessions/{session_id}/",
        "session-score": "http://testserver/api/v1/scoring/sessions/{session_id}/score",
        "session-scores": "http://testserver/api/v1/scoring/sessions/{session_id}/scores",
        "score-reviews": "http://testserver/api/v1/scoring/scores/{score_id}/reviews",
        "score-transcript": "http://testserver/api/v1/scoring/scores/{score_id}/transcript",
        "stats": "http://testserver/api/v1/scoring/stats/",
        "missing-tools": "http://testserver/api/v1/scoring/missing-tools/",
        "agreement": "http://testserver/api/v1/scoring/agreement/",
        "reports": "http://testserver/api/v1/scoring/reports/",
        "report": "http://testserver/api/v1/scoring/reports/{report_id}",
        "criteria": "http://testserver/api/v1/scoring/criteria/",
        "criteria-version": "http://testserver/api/v1/scoring/criteria/{version_id}",
        "criteria-rollback": "http://testserver/api/v1/scoring/criteria/rollback",
        "criteria-calibrate": "http://testserver/api/v1/scoring/criteria/calibrate",
        "trials": "http://testserver/api/v1/scoring/trials/",
        "trial": "http://testserver/api/v1/scoring/trials/{trial_id}",
        "schema": "http://testserver/api/schema/",
        "docs": "http://testserver/api/docs/",
    }


def test_the_browsable_api_is_branded_and_signs_in_on_the_dashboards_page():
    page = APIClient().get("/api/v1/", HTTP_ACCEPT="text/html").content.decode()

    assert "<title>API root · TARSy scoring API</title>" in page
    assert 'href="/login/?next=/api/v1/"' in page and "Django REST framework" not in page
