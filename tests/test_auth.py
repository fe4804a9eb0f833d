"""Who may call the API: trusted-proxy headers, Django sessions and tokens."""

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator, WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.core.asgi import get_asgi_application
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scoring import auth
from tarsy_scoring.asgi import application
from tests.support.api import session_document
from tests.support.servers import WS_PATH

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

    assert response.status_code == 302 and response.url.startswith("/login/")


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


# --- Refused proxy identities: deactivated, too long, smuggled -----------------------------------


def deactivate(username: str) -> None:
    user = get_user_model().objects.get(username=username)
    user.is_active = False
    user.save()


def test_a_deactivated_proxy_user_is_refused_on_the_api_and_the_pages(client, db):
    assert APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_USER="alice").status_code == 200
    deactivate("alice")  # remembered until now: a save in this process forgets it

    api = APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_USER="alice")
    page = client.get("/", HTTP_X_FORWARDED_USER="alice")

    assert api.status_code == 403 and api.json() == {"detail": "sign-in refused: user 'alice' is deactivated"}
    assert page.status_code == 403 and "deactivated" in page.json()["detail"]


def test_a_deactivated_proxy_user_is_refused_even_beside_another_users_session(db):
    # A Django session skips the page middleware's check; the API's own one still refuses.
    get_user_model().objects.create_user(username="alice", is_active=False)
    client = APIClient()
    client.force_login(get_user_model().objects.create_user(username="dave"))

    response = client.get(SESSIONS_URL, HTTP_X_FORWARDED_USER="alice")

    assert response.status_code == 401 and "deactivated" in response.json()["detail"]


def test_a_proxy_name_longer_than_a_user_name_is_refused_not_cut(db):
    longest = get_user_model()._meta.get_field("username").max_length
    fits, too_long = "a" * longest, "a" * longest + "-second-identity"

    accepted = APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_USER=fits)
    refused = APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_EMAIL=too_long)

    assert accepted.status_code == 200
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        f"sign-in refused: X-Forwarded-Email is {len(too_long)} characters long; user names have at most {longest}"
    )
    assert usernames() == {fits}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "name", ["tarsy-sync:worker", "TARSY-SYNC:cli:root", "sync_sessions:https://tarsy", "cli:root"]
)
def test_a_proxy_name_of_the_services_own_processes_is_refused(name):
    """The sync's identity (its scorings, and their daily cap) is no one's to take."""
    refused = APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_USER=name)
    by_email = APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_EMAIL=name)

    assert refused.status_code == by_email.status_code == 403
    prefix = name.split(":")[0].lower()
    assert refused.json()["detail"].startswith(f"sign-in refused: names starting with '{prefix}:'")
    assert websocket_refused([(b"x-forwarded-user", name.encode())])
    assert usernames() == set()
    # A name that only looks like one is an ordinary user.
    assert APIClient().get(SESSIONS_URL, HTTP_X_FORWARDED_USER="tarsy-sync-bot").status_code == 200


def asgi_get(path: str, headers: list[tuple[bytes, bytes]]):
    """GET ``path`` through Django's ASGI handler from loopback, headers exactly as sent."""
    communicator = HttpCommunicator(get_asgi_application(), "GET", path, headers=headers)
    communicator.scope["client"] = ("127.0.0.1", 50123)
    return async_to_sync(communicator.get_response)()


SMUGGLED = [
    [(b"x_forwarded_user", b"admin")],
    [(b"X_Forwarded_Email", b"admin@example.com")],
    # Beside the proxy's own header (Django would join both into "alice,admin").
    [(b"x-forwarded-user", b"alice"), (b"x_forwarded_user", b"admin")],
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("headers", SMUGGLED)
def test_identity_headers_spelled_with_underscores_are_refused_at_the_asgi_handler(headers):
    for path in (SESSIONS_URL, "/"):
        response = asgi_get(path, [(b"host", b"localhost"), *headers])
        assert response["status"] == 403, (path, response)
        assert b"underscores" in response["body"]
    assert usernames() == set()


@pytest.mark.django_db(transaction=True)
def test_the_proxy_header_as_oauth2_proxy_sends_it_still_signs_in_at_the_asgi_handler():
    response = asgi_get(SESSIONS_URL, [(b"host", b"localhost"), (b"x-forwarded-user", b"alice")])

    assert response["status"] == 200
    assert usernames() == {"alice"}


def websocket_refused(headers) -> bool:
    async def handshake():
        communicator = WebsocketCommunicator(application, WS_PATH, headers=headers)
        communicator.scope["client"] = ["127.0.0.1", 50123]
        connected, _ = await communicator.connect(10)
        await communicator.disconnect()
        return not connected

    return async_to_sync(handshake)()


@pytest.mark.django_db(transaction=True)
def test_the_websocket_refuses_deactivated_long_and_smuggled_proxy_identities():
    get_user_model().objects.create_user(username="mallory", is_active=False)

    assert not websocket_refused([(b"x-forwarded-user", b"alice")])
    assert websocket_refused([(b"x-forwarded-user", b"mallory")])
    assert websocket_refused([(b"x-forwarded-user", b"a" * 151)])
    for headers in SMUGGLED:
        assert websocket_refused(headers), headers
    assert usernames() == {"alice", "mallory"}


# --- The client's address, for sign-in throttling ----------------------------------------------------


def address_of(peer: str, forwarded: str | None = None) -> str | None:
    headers = {} if forwarded is None else {"HTTP_X_FORWARDED_FOR": forwarded}
    return auth.client_address(RequestFactory().get("/", REMOTE_ADDR=peer, **headers))


def test_from_a_trusted_proxy_the_client_is_the_entry_the_first_of_its_hops_appended(settings):
    written_by_the_client = "6.6.6.6"
    settings.TRUSTED_PROXY_HOPS = 1
    assert address_of("127.0.0.1", f"{written_by_the_client}, 203.0.113.9") == "203.0.113.9"
    # TARSy's layout: the router appends the client, oauth2-proxy (the peer, on loopback) the router.
    settings.TRUSTED_PROXY_HOPS = 2
    assert address_of("127.0.0.1", f"{written_by_the_client}, 203.0.113.9, 10.128.2.1") == "203.0.113.9"
    assert address_of("127.0.0.1", "203.0.113.9") == "203.0.113.9"  # through fewer proxies: the leftmost


def test_the_peer_is_the_client_when_it_is_no_trusted_proxy_or_names_no_address(settings):
    settings.TRUSTED_PROXY_HOPS = 2
    assert address_of("198.51.100.4", "203.0.113.9, 10.128.2.1") == "198.51.100.4"
    assert address_of("127.0.0.1") == "127.0.0.1"
    assert address_of("127.0.0.1", " , ") == "127.0.0.1"
    assert address_of("127.0.0.1", "not-an-address, 10.128.2.1") == "127.0.0.1"
