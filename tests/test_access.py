"""Who may do what: proxy headers only from trusted addresses, CSRF for cookie
sessions, the admin for staff only.

(Header, token and cookie sign-in one by one are in tests/test_auth.py, the
WebSocket handshake refusals in tests/realtime/test_consumers.py, the rate limit in
tests/api/test_throttles.py.) Here the same rules are checked end to end through a
real web server process, where the peer address is the real one.
"""

import asyncio
import json
import urllib.error
import urllib.request
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
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
def test_proxy_user_can_open_the_dashboard_but_not_the_admin(client):
    page = client.get("/", HTTP_X_FORWARDED_USER="alice")
    assert page.status_code == 200
    admin = client.get("/admin/", HTTP_X_FORWARDED_USER="alice")
    assert admin.status_code == 302 and "/admin/login/" in admin["Location"]
    from_elsewhere = client.get("/", HTTP_X_FORWARDED_USER="alice", REMOTE_ADDR="10.9.8.7")
    assert from_elsewhere.status_code == 302


@pytest.mark.django_db
def test_a_user_created_by_the_proxy_is_not_staff():
    APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_USER="newcomer")
    user = get_user_model().objects.get(username="newcomer")
    assert (user.is_staff, user.is_superuser, user.has_usable_password()) == (False, False, False)


@pytest.mark.django_db
def test_staff_reach_the_admin(client):
    client.force_login(get_user_model().objects.create_user("operator", is_staff=True))
    assert client.get("/admin/").status_code == 200


# --- The dashboard's own sign-in and sign-out ----------------------------------------------------

PASSWORD = "a-long-password-1"


def sign_in(client, username: str, password: str = PASSWORD):
    return client.post("/login/", {"username": username, "password": password, "next": "/"})


@pytest.mark.django_db
@pytest.mark.parametrize("is_staff", [False, True], ids=["viewer", "staff"])
def test_log_out_ends_the_session_of_staff_and_non_staff_users(client, is_staff):
    get_user_model().objects.create_user("someone", password=PASSWORD, is_staff=is_staff)
    signed_in = sign_in(client, "someone")
    assert signed_in.status_code == 302 and signed_in.url == "/"
    assert client.get("/").status_code == 200 and client.get(SESSIONS_URL).status_code == 200

    signed_out = client.post("/logout/")

    assert signed_out.status_code == 302 and signed_out.url == "/login/"
    assert client.get("/").url == "/login/?next=/"
    assert client.get(SESSIONS_URL).status_code == 401


@pytest.mark.django_db
def test_the_dashboard_logs_out_on_its_own_page_not_the_admins(client):
    client.force_login(get_user_model().objects.create_user("viewer"))

    page = client.get("/").content.decode()

    assert '<form method="post" action="/logout/"' in page and "/admin/logout/" not in page


@pytest.mark.django_db
def test_a_user_who_is_not_staff_is_never_sent_to_the_admin_from_the_dashboard(client):
    client.force_login(get_user_model().objects.create_user("viewer"))
    session = make_session()
    pages = ("/", f"/sessions/{session.session_id}/", f"/sessions/{uuid.uuid4()}/", "/insights/", "/api/v1/")
    for page in pages:
        response = client.get(page, HTTP_ACCEPT="text/html")
        assert response.status_code in (200, 404), page
        assert "/admin/" not in response.content.decode(), page


@pytest.mark.django_db
@pytest.mark.parametrize("login_url", ["/login/", "/api-auth/login/"])
def test_signing_in_is_the_dashboards_own_branded_page(client, login_url):
    get_user_model().objects.create_user("viewer", password=PASSWORD)

    page = client.get(login_url).content.decode()
    signed_in = client.post(login_url, {"username": "viewer", "password": PASSWORD, "next": "/api/v1/"})

    assert "<title>Sign in · TARSy scoring</title>" in page
    assert '<a class="brand" href="/">TARSy scoring</a>' in page
    assert signed_in.status_code == 302 and signed_in.url == "/api/v1/"


@pytest.mark.django_db
def test_the_admins_sign_in_page_is_titled_for_this_service(client):
    page = client.get("/admin/login/").content.decode()

    assert "<title>Log in | TARSy scoring</title>" in page and "Django" not in page


# --- Sign-in throttling (django-axes) --------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("login_url", ["/login/", "/admin/login/"])
def test_repeated_failed_sign_ins_lock_that_name_out_until_reset(client, settings, login_url):
    get_user_model().objects.create_user("operator", password=PASSWORD, is_staff=True)
    get_user_model().objects.create_user("colleague", password=PASSWORD, is_staff=True)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        wrong = client.post(login_url, {"username": "operator", "password": "guess"})
        assert wrong.status_code == 200  # the form again, with its error
    assert client.post(login_url, {"username": "operator", "password": "guess"}).status_code == 429

    locked = client.post(login_url, {"username": "operator", "password": PASSWORD})

    assert locked.status_code == 429
    assert "_auth_user_id" not in client.session
    # Only that name is locked out: the address is usually the proxy's, shared by everyone.
    assert client.post(login_url, {"username": "colleague", "password": PASSWORD}).status_code == 302
    client.logout()
    call_command("axes_reset")
    assert client.post(login_url, {"username": "operator", "password": PASSWORD}).status_code == 302


@pytest.mark.django_db
def test_behind_the_proxy_failed_sign_ins_are_counted_by_the_address_it_forwards(client, settings):
    """The proxy is every request's peer: counting by it would let anyone behind
    it lock an operator out."""
    get_user_model().objects.create_user("operator", password=PASSWORD)
    attacker = {"HTTP_X_FORWARDED_FOR": "203.0.113.7"}
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post("/login/", {"username": "operator", "password": "guess"}, **attacker)
    assert client.post("/login/", {"username": "operator", "password": PASSWORD}, **attacker).status_code == 429

    operator = client.post(
        "/login/", {"username": "operator", "password": PASSWORD}, HTTP_X_FORWARDED_FOR="198.51.100.2"
    )

    assert operator.status_code == 302


# --- Browser-facing headers: the CSRF cookie, the Content-Security-Policy ---------------------------


@pytest.mark.django_db
def test_the_csrf_cookie_is_out_of_reach_of_scripts(client):
    response = client.get("/login/")

    assert response.cookies["csrftoken"]["httponly"] is True
    # The pages' scripts read the token here instead (static/scoring/dashboard.js).
    assert '<meta name="csrf-token" content="' in response.content.decode()


def csp_directives(response) -> dict[str, list[str]]:
    policy = response.headers["Content-Security-Policy"]
    return {name: sources for name, *sources in (part.split() for part in policy.split(";"))}


@pytest.mark.django_db
def test_every_page_forbids_inline_and_foreign_scripts(client):
    client.force_login(get_user_model().objects.create_superuser("operator", "o@example.com", PASSWORD))
    session = make_session()
    pages = ["/", f"/sessions/{session.session_id}/", "/insights/", "/login/", "/admin/"]
    for page in [*pages, "/api/docs/", "/api/redoc/", "/api-auth/login/"]:
        directives = csp_directives(client.get(page))
        assert directives["script-src"] == ["'self'"], page
        assert directives["object-src"] == ["'none'"] and directives["frame-ancestors"] == ["'none'"], page


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


# --- End to end: a web server process that does not trust loopback ---------------------------------


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
def test_proxy_headers_from_an_untrusted_peer_are_ignored_by_rest_and_websocket(start_web):
    server = start_web(TRUSTED_PROXY_IPS="10.0.0.0/8")  # loopback, where the test runs, is not trusted
    session = make_session()
    for headers in SPOOFED:
        assert http("GET", server.http_url + SESSIONS_URL, headers) == 401, headers
        assert http("POST", server.http_url + score_url(session.session_id), headers) == 401, headers
        assert asyncio.run(handshake_status(server.ws_url, headers)) == 403, headers
    assert not SessionScore.objects.exists()
    assert not get_user_model().objects.filter(username__startswith="mallory").exists()


@pytest.mark.processes
def test_unauthenticated_callers_get_401_and_a_refused_websocket_handshake(start_web):
    server = start_web()
    assert http("GET", server.http_url + SESSIONS_URL, {}) == 401
    assert asyncio.run(handshake_status(server.ws_url, {})) == 403


@pytest.mark.processes
def test_a_deactivated_proxy_user_is_refused_by_rest_and_websocket(start_web):
    server = start_web()
    get_user_model().objects.create_user("leaver", is_active=False)
    headers = {"X-Forwarded-User": "leaver"}

    assert http("GET", server.http_url + SESSIONS_URL, headers) == 403
    assert http("GET", server.http_url + "/", headers) == 403
    assert asyncio.run(handshake_status(server.ws_url, headers)) == 403
    assert asyncio.run(handshake_status(server.ws_url, {"X-Forwarded-User": "stayer"})) == 101


@pytest.mark.processes
def test_underscore_identity_headers_sign_no_one_in_through_the_server(start_web):
    # uvicorn passes them on (daphne dropped them): the app refuses them itself.
    server = start_web()
    for headers in ({"X_Forwarded_User": "admin"}, {"X_Forwarded_Email": "admin@example.com"}):
        assert http("GET", server.http_url + SESSIONS_URL, headers) == 403, headers
        assert asyncio.run(handshake_status(server.ws_url, headers)) == 403, headers
    assert not get_user_model().objects.filter(username__startswith="admin").exists()
