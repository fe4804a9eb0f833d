"""Who may call the API: trusted-proxy headers, Django sessions and tokens."""

from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scoring import auth
from tests.support.api import session_document

SESSIONS_URL = "/api/v1/sessions/"


def usernames() -> set[str]:
    return set(get_user_model().objects.values_list("username", flat=True))


def test_anonymous_callers_get_401_with_a_challenge(db):
    response = APIClient().get(SESSIONS_URL)

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Token realm="api"'


def test_the_proxy_user_header_from_loopback_signs_the_user_in(db):
    response = APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_USER="alice")

    assert response.status_code == 200
    assert response.wsgi_request.user.username == "alice"
    assert usernames() == {"alice"}


def test_the_proxy_headers_from_an_untrusted_address_are_ignored(db):
    client = APIClient(REMOTE_ADDR="10.1.2.3")

    response = client.get(
        SESSIONS_URL, HTTP_X_FORWARDED_USER="mallory", HTTP_X_FORWARDED_EMAIL="m@example.com"
    )

    assert response.status_code == 401
    assert usernames() == set()


def test_the_proxy_email_header_is_used_when_there_is_no_user_header(db):
    response = APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_EMAIL="bob@example.com")

    assert response.status_code == 200
    assert response.wsgi_request.user.username == "bob@example.com"


def test_the_proxy_user_header_wins_over_the_email_header(db):
    response = APIClient().get(
        SESSIONS_URL, HTTP_X_FORWARDED_USER="carol", HTTP_X_FORWARDED_EMAIL="c@example.com"
    )

    assert response.wsgi_request.user.username == "carol"


def test_a_proxy_signed_in_caller_can_post_without_a_csrf_token(db):
    client = APIClient(enforce_csrf_checks=True)

    response = client.post(SESSIONS_URL, session_document(), format="json", HTTP_X_FORWARDED_USER="tarsy")

    assert response.status_code == 201


def test_a_browser_session_must_send_its_csrf_token_to_post(db):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(get_user_model().objects.create_user(username="dave"))

    response = client.post(SESSIONS_URL, session_document(), format="json")

    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_a_token_signs_its_user_in_and_a_wrong_token_does_not(db):
    token = Token.objects.create(user=get_user_model().objects.create_user(username="ci-bot"))

    accepted = APIClient().get(SESSIONS_URL, HTTP_AUTHORIZATION=f"Token {token.key}")
    refused = APIClient().get(SESSIONS_URL, HTTP_AUTHORIZATION="Token not-the-key")

    assert accepted.status_code == 200
    assert accepted.wsgi_request.user.username == "ci-bot"
    assert refused.status_code == 401


# --- Proxy users are remembered per process -------------------------------------------------


def user_queries(client, url: str, **headers) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url, **headers).status_code == 200
    return [query["sql"] for query in queries if "auth_user" in query["sql"]]


def test_a_proxy_user_is_looked_up_once_then_remembered(db):
    client = APIClient()

    first = user_queries(client, SESSIONS_URL, HTTP_X_FORWARDED_USER="alice")
    second = user_queries(client, SESSIONS_URL, HTTP_X_FORWARDED_USER="alice")

    assert first and second == []
    assert usernames() == {"alice"}


def test_a_deleted_proxy_user_is_created_again_on_their_next_request(db):
    client = APIClient()
    client.get(SESSIONS_URL, HTTP_X_FORWARDED_USER="alice")
    get_user_model().objects.get(username="alice").delete()

    response = client.get(SESSIONS_URL, HTTP_X_FORWARDED_USER="alice")

    assert response.status_code == 200
    assert response.wsgi_request.user.pk == get_user_model().objects.get(username="alice").pk


def test_a_remembered_proxy_user_made_staff_no_longer_signs_in_on_the_pages(client, db):
    assert client.get("/", HTTP_X_FORWARDED_USER="carol").status_code == 200
    carol = get_user_model().objects.get(username="carol")
    carol.is_staff = True
    carol.save()

    response = client.get("/", HTTP_X_FORWARDED_USER="carol")

    assert response.status_code == 302 and response.url.startswith("/admin/login/")


def test_a_user_changed_elsewhere_is_looked_up_again_after_the_memory_expires(db, monkeypatch):
    monkeypatch.setattr(auth, "PROXY_USER_MEMORY_S", 0.0)
    client = APIClient()
    client.get(SESSIONS_URL, HTTP_X_FORWARDED_USER="alice")
    # Another process's change: no signal reaches this one.
    get_user_model().objects.filter(username="alice").update(first_name="Alice")

    response = client.get(SESSIONS_URL, HTTP_X_FORWARDED_USER="alice")

    assert response.wsgi_request.user.first_name == "Alice"


def test_each_request_gets_its_own_user_instance(db):
    client = APIClient()

    first = client.get(SESSIONS_URL, HTTP_X_FORWARDED_USER="alice").wsgi_request.user
    second = client.get(SESSIONS_URL, HTTP_X_FORWARDED_USER="alice").wsgi_request.user

    assert first.pk == second.pk and first is not second
