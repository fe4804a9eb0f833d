"""GET /api/v1/scoring/sessions/{id}/scores: every scoring of a session, newest first."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from scoring import selectors
from scoring.models import ScoringStatus
from tests.support.factories import make_score, make_session

pytestmark = pytest.mark.django_db


def url(session_id) -> str:
    return f"/api/v1/scoring/sessions/{session_id}/scores"


def test_every_scoring_newest_first_as_the_score_endpoint_shows_each(operator_client):
    session = make_session()
    first = make_score(session, total_score=40, scored_at_us=1)
    failed = make_score(session, ScoringStatus.FAILED, scored_at_us=2)
    newest = make_score(session, ScoringStatus.PENDING, scored_at_us=3)
    make_score(make_session())  # another session's

    response = operator_client.get(url(session.session_id))

    assert response.status_code == 200
    data = response.json()
    assert data["count"] == 3 and data["next"] is None
    assert [score["score_id"] for score in data["results"]] == [
        str(newest.score_id), str(failed.score_id), str(first.score_id)
    ]  # fmt: skip
    assert (
        data["results"][0]
        == operator_client.get(f"/api/v1/scoring/sessions/{session.session_id}/score").json()
    )
    assert data["results"][1]["error_message"] == "the judge model's provider answered with an error"
    assert data["results"][2]["total_score"] == 40


def test_the_queries_do_not_grow_with_the_scorings(operator_client):
    def queries_for(scorings: int) -> int:
        session = make_session()
        for at in range(scorings):
            make_score(session, scored_at_us=at)
        operator_client.get(url(session.session_id))  # the proxy user, once
        with CaptureQueriesContext(connection) as queries:
            assert operator_client.get(url(session.session_id)).status_code == 200
        return len(queries)

    assert queries_for(1) == queries_for(5)


def test_pages_of_fifty(operator_client):
    session = make_session()
    for at in range(51):
        make_score(session, scored_at_us=at)

    first = operator_client.get(url(session.session_id)).json()
    second = operator_client.get(url(session.session_id), {"page": 2}).json()

    assert first["count"] == 51 and len(first["results"]) == 50 and first["next"].endswith("?page=2")
    assert [score["scored_at_us"] for score in second["results"]] == [0]


def test_a_session_never_scored_has_an_empty_history(operator_client):
    response = operator_client.get(url(make_session().session_id))
    assert response.status_code == 200 and response.json()["results"] == []


def test_an_unknown_session_is_the_one_404(operator_client):
    missing = uuid.uuid4()
    response = operator_client.get(url(missing))
    assert response.status_code == 404
    assert response.json() == {"detail": selectors.no_such_session(missing)}


def test_an_id_that_is_not_a_uuid_is_404_saying_so(operator_client):
    response = operator_client.get(url("not-a-uuid"))
    assert response.status_code == 404
    assert "session ids are UUIDs" in response.json()["detail"]


def test_anonymous_caller_is_401():
    assert APIClient().get(url(make_session().session_id)).status_code == 401


def test_it_is_in_the_schema_as_a_page_of_scores():
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    history = schema["paths"]["/api/v1/scoring/sessions/{session_id}/scores"]["get"]
    assert set(history["responses"]) == {"200", "401", "404", "500"}
    page = history["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    results = schema["components"]["schemas"][page]["properties"]["results"]
    assert results["items"]["$ref"].endswith("/Score")
