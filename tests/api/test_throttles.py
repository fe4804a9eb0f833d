"""POST .../score is rate-limited per user (SCORING_POST_RATE); reading scores is not."""

import pytest
from rest_framework.test import APIClient

from scoring.models import SessionScore
from tests.support.factories import make_session, proxy_client
from tests.test_settings import load_settings, settings_values

pytestmark = pytest.mark.django_db


def url(session_id) -> str:
    return f"/api/v1/scoring/sessions/{session_id}/score"


@pytest.fixture
def rate_of_three(settings):
    settings.SCORING_POST_RATE = "3/min"


def post_for_new_sessions(client: APIClient, count: int) -> list:
    return [client.post(url(make_session().session_id)) for _ in range(count)]


def test_over_the_rate_a_user_gets_429_with_retry_after(rate_of_three):
    responses = post_for_new_sessions(proxy_client("alice"), 4)

    assert [r.status_code for r in responses] == [202, 202, 202, 429]
    refused = responses[-1]
    assert 0 < int(refused.headers["Retry-After"]) <= 60
    assert "throttled" in refused.json()["detail"]
    assert SessionScore.objects.count() == 3  # the refused request queued nothing


def test_the_limit_is_per_user(rate_of_three):
    post_for_new_sessions(proxy_client("alice"), 3)

    assert post_for_new_sessions(proxy_client("bob"), 1)[0].status_code == 202
    assert post_for_new_sessions(proxy_client("alice"), 1)[0].status_code == 429


def test_reading_scores_is_not_limited(rate_of_three):
    client = proxy_client("alice")
    session = make_session()
    post_for_new_sessions(client, 3)

    assert {client.get(url(session.session_id)).status_code for _ in range(5)} == {404}


def test_anonymous_callers_get_401_not_429(rate_of_three):
    responses = post_for_new_sessions(APIClient(), 5)
    assert {r.status_code for r in responses} == {401}


def test_an_empty_rate_means_no_limit(settings):
    settings.SCORING_POST_RATE = ""
    responses = post_for_new_sessions(proxy_client("alice"), 40)
    assert {r.status_code for r in responses} == {202}


def test_the_default_rate_is_30_a_minute():
    responses = post_for_new_sessions(proxy_client("alice"), 31)
    assert [r.status_code for r in responses].count(202) == 30
    assert responses[-1].status_code == 429


@pytest.mark.parametrize(("raw", "expected"), [("5/s", "5/s"), ("100/hour", "100/hour"), ("", "")])
def test_the_rate_is_read_from_the_environment(tmp_path, raw, expected):
    assert settings_values(tmp_path, "settings.SCORING_POST_RATE", SCORING_POST_RATE=raw) == expected


def test_a_malformed_rate_stops_the_process_naming_the_variable(tmp_path):
    process = load_settings(tmp_path, "settings.DEBUG", SCORING_POST_RATE="lots")
    assert process.returncode != 0
    assert "SCORING_POST_RATE='lots' is not a rate" in process.stderr
