"""Who may do what: proxy headers only from trusted addresses, CSRF for cookie
sessions, the admin for staff only.

(Header, token and cookie sign-in one by one are in tests/test_auth.py, the
WebSocket handshake refusals in tests/test_consumers.py, the rate limit in
tests/test_throttle.py.) Here the same rules are checked end to end through a
real daphne process, where the peer address is the real one.
"""

import asyncio
import json
import urllib.error
import urllib.request

import pytest
from django.contrib.auth import get_user_model
from django.middleware.csrf import get_token
from rest_framework.test import APIClient

from scoring.models import SessionScore
from tests.support.api import session_document
from tests.support.factories import make_session
from tests.support.servers import handshake_status

SESSIONS_URL = "/api/v1/sessions/"


def score_url(session_id) -> str:
    return f"/api/v1/scoring/sessions/{session_id}/score"


# --- The admin --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_signed_in_user_who_is_not_staff_is_sent_to_the_admin_login(client):
    client.force_login(get_user_model().objects.create_user("viewer"))
    for page in ("/admin/", "/admin/scoring/sessionscore/", "/admin/scoring/alertsession/"):
        response = client.get(page)
        assert response.status_code == 302 and response.url.startswith("/admin/login/"), page


@pytest.mark.django_db
def test_proxy_headers_do_not_open_the_admin_even_for_a_staff_name(client):
    get_user_model().objects.create_superuser("admin", "admin@example.com", "a-long-password-1")
    response = client.get("/admin/", HTTP_X_FORWARDED_USER="admin")
    assert response.status_code == 302 and response.url.startswith("/admin/login/")


@pytest.mark.django_db
def test_a_user_created_by_the_proxy_is_not_staff():
    APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_USER="newcomer")
    user = get_user_model().objects.get(username="newcomer")
    assert (user.is_staff, user.is_superuser, user.has_usable_password()) == (False, False, False)


@pytest.mark.django_db
def test_staff_reach_the_admin(client):
    client.force_login(get_user_model().objects.create_user("operator", is_staff=True))
    assert client.get("/admin/").status_code == 200


# --- CSRF for cookie sessions, on every unsafe API method ------------------------------------------


def unsafe_requests():
    session = make_session()
    return [
        ("POST", SESSIONS_URL, session_document()),
        ("POST", score_url(session.session_id), {"force_rescore": False}),
    ]


@pytest.mark.django_db
def test_cookie_sessions_need_the_csrf_token_on_every_unsafe_api_method():
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(get_user_model().objects.create_user("dave"))
    for method, url, body in unsafe_requests():
        refused = client.generic(method, url, json.dumps(body), content_type="application/json")
        assert refused.status_code == 403 and "CSRF" in refused.json()["detail"], url
    assert not SessionScore.objects.exists()


@pytest.mark.django_db
def test_cookie_sessions_with_the_csrf_token_are_accepted(rf):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(get_user_model().objects.create_user("dave"))
    token = get_token(rf.get("/"))
    client.cookies["csrftoken"] = token
    for method, url, body in unsafe_requests():
        accepted = client.generic(
            method, url, json.dumps(body), content_type="application/json", HTTP_X_CSRFTOKEN=token
        )
        assert accepted.status_code in (201, 202), (url, accepted.content)


# --- End to end: a daphne process that does not trust loopback -------------------------------------


def http(method: str, url: str, headers: dict) -> int:
    request = urllib.request.Request(url, method=method, headers=headers, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


SPOOFED = [
    {"X-Forwarded-User": "mallory"},
    {"X-Forwarded-Email": "mallory@example.com"},
    # A forged forwarding chain does not change who the peer is.
    {"X-Forwarded-User": "mallory", "X-Forwarded-For": "10.0.0.1", "X-Real-IP": "10.0.0.1"},
]


@pytest.mark.processes
def test_proxy_headers_from_an_untrusted_peer_are_ignored_by_rest_and_websocket(start_daphne):
    server = start_daphne(TRUSTED_PROXY_IPS="10.0.0.0/8")  # loopback, where the test runs, is not trusted
    session = make_session()
    for headers in SPOOFED:
        assert http("GET", server.http_url + SESSIONS_URL, headers) == 401, headers
        assert http("POST", server.http_url + score_url(session.session_id), headers) == 401, headers
        assert asyncio.run(handshake_status(server.ws_url, headers)) == 403, headers
    assert not SessionScore.objects.exists()
    assert not get_user_model().objects.filter(username__startswith="mallory").exists()


@pytest.mark.processes
def test_unauthenticated_callers_get_401_and_a_refused_websocket_handshake(start_daphne):
    server = start_daphne()
    assert http("GET", server.http_url + SESSIONS_URL, {}) == 401
    assert asyncio.run(handshake_status(server.ws_url, {})) == 403
