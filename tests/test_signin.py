"""Password sign-in throttling (scoring/signin.py): django-axes's lock on a name from one
address, and the cap on a name's failures from every address, which a browser that signed
in to the account before passes.

Most cases use TARSy's own layout: an OpenShift router that appends the client's address to
``X-Forwarded-For``, then oauth2-proxy as a sidecar on loopback that appends the router's
(``TRUSTED_PROXY_HOPS=2``; the test client's peer is loopback, a trusted proxy).
"""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from scoring import signin

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-password-1"
ROUTER = "10.128.2.1"


def via_router(client_address: str) -> dict:
    return {"HTTP_X_FORWARDED_FOR": f"{client_address}, {ROUTER}"}


def sign_in(client: Client, password: str, **headers) -> int:
    return client.post("/login/", {"username": "operator", "password": password}, **headers).status_code


@pytest.fixture
def operator():
    return get_user_model().objects.create_user("operator", password=PASSWORD, is_staff=True)


@pytest.fixture
def two_hops(settings):
    settings.TRUSTED_PROXY_HOPS = 2


def test_wrong_passwords_from_one_client_do_not_lock_the_operator_out_from_another(
    operator, two_hops, settings
):
    guesser = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(guesser, "guess", **via_router("198.51.100.7"))
    assert sign_in(guesser, PASSWORD, **via_router("198.51.100.7")) == 429  # that client is locked out

    assert sign_in(Client(), PASSWORD, **via_router("203.0.113.20")) == 302


def rotating_guesses(count: int, first: int = 0) -> list[int]:
    """Wrong passwords through a trusted peer that passes on whatever X-Forwarded-For it is
    sent, a new one each time."""
    return [
        sign_in(Client(), "guess", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}, 10.0.{i}.1")
        for i in range(first, first + count)
    ]


def test_rotating_x_forwarded_for_from_a_trusted_peer_no_longer_gives_unlimited_guesses(
    operator, two_hops, settings
):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 20

    answers = rotating_guesses(30)

    assert answers == [200] * 20 + [429] * 10  # the form again (a wrong password), then refused
    assert AccessAttempt.objects.filter(username="operator").count() == 20  # refusals are not failures
    # Held for every client that never signed in to it, the right password included.
    assert sign_in(Client(), PASSWORD, **via_router("203.0.113.20")) == 429


def test_the_operators_own_browser_signs_in_while_strangers_hold_the_account_and_clears_it(
    operator, two_hops, settings
):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 5
    browser = Client()
    assert sign_in(browser, PASSWORD, **via_router("203.0.113.20")) == 302
    browser.post("/logout/")
    rotating_guesses(8)
    assert sign_in(Client(), PASSWORD, **via_router("203.0.113.30")) == 429

    # From another address (a laptop at home): the browser is what is known, not the address.
    assert sign_in(browser, PASSWORD, **via_router("198.51.100.99")) == 302

    assert signin.account_failures("operator") == 0
    assert sign_in(Client(), PASSWORD, **via_router("203.0.113.30")) == 302


def test_a_known_browser_still_gets_only_the_failures_of_one_address(operator, two_hops, settings):
    browser = Client()
    sign_in(browser, PASSWORD, **via_router("203.0.113.20"))
    browser.post("/logout/")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(browser, "guess", **via_router("203.0.113.20"))

    assert sign_in(browser, PASSWORD, **via_router("203.0.113.20")) == 429


def test_the_hold_ends_once_the_failures_are_older_than_the_lockout(operator, two_hops, settings):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 3
    rotating_guesses(3)
    assert sign_in(Client(), PASSWORD, **via_router("203.0.113.30")) == 429

    past = timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    AccessAttempt.objects.update(attempt_time=past)

    assert sign_in(Client(), PASSWORD, **via_router("203.0.113.30")) == 302


def test_axes_reset_username_lifts_the_hold(operator, two_hops, settings):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 3
    rotating_guesses(3)

    call_command("axes_reset_username", "operator")

    assert sign_in(Client(), PASSWORD, **via_router("203.0.113.30")) == 302


def test_only_a_cookie_this_service_signed_for_the_account_makes_a_browser_known(
    operator, two_hops, settings
):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 3
    rotating_guesses(3)
    forged = {
        "not signed": "operator",
        "another salt": signing.dumps(["operator"], salt="elsewhere"),
        "another account": signing.dumps(["colleague"], salt=signin.KNOWN_CLIENT_SALT),
    }
    for what, value in forged.items():
        browser = Client()
        browser.cookies[signin.KNOWN_CLIENT_COOKIE] = value
        assert sign_in(browser, PASSWORD, **via_router("203.0.113.30")) == 429, what


def test_a_password_sign_in_gives_the_browser_a_private_cookie_naming_the_account(operator, settings):
    get_user_model().objects.create_user("colleague", password=PASSWORD)
    browser = Client()
    browser.post("/login/", {"username": "colleague", "password": PASSWORD})
    browser.post("/logout/")

    response = browser.post("/login/", {"username": "operator", "password": PASSWORD})

    cookie = response.cookies[signin.KNOWN_CLIENT_COOKIE]
    assert cookie["httponly"] is True and cookie["samesite"] == "Lax"
    assert int(cookie["max-age"]) == signin.KNOWN_CLIENT_MAX_AGE_S
    assert signing.loads(cookie.value, salt=signin.KNOWN_CLIENT_SALT) == ["operator", "colleague"]


def test_a_proxy_sign_in_gives_no_cookie(operator):
    response = Client().get("/", HTTP_X_FORWARDED_USER="alice")

    assert response.status_code == 200
    assert signin.KNOWN_CLIENT_COOKIE not in response.cookies
