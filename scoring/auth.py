"""Who is calling: oauth2-proxy headers from trusted addresses, else Django auth.

TARSy runs behind oauth2-proxy, which authenticates the user and forwards the
request with ``X-Forwarded-User`` (or ``X-Forwarded-Email``). Anyone can send
those headers, so they are believed only from an address in
``TRUSTED_PROXY_IPS``; from anywhere else they are ignored.

From a trusted address, a named user is refused (``ProxyIdentityRefused``)
when the account is deactivated, when the name does not fit a user name (it is
never cut, which could merge two identities), when it is one the service's own
processes record (``scoring.identities``: the sync's), or when the request also carries
an identity header spelled with underscores (``X_Forwarded_User``): WSGI and
Django's ASGI handler turn ``_`` and ``-`` into the same ``HTTP_X_FORWARDED_USER``,
so a client could add its own header beside the one the proxy sets (the
oauth2-proxy header smuggling of CVE-2025-64484). The web server (uvicorn)
passes such headers on; this check refuses them under any ASGI server.
"""

import ipaddress
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS
from django.db.models.signals import post_delete, post_save
from django.http import JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied
from rest_framework.permissions import SAFE_METHODS

from scoring import identities

PROXY_USER_HEADERS = ("HTTP_X_FORWARDED_USER", "HTTP_X_FORWARDED_EMAIL")
# The same headers as sent, lower-cased (ASGI scopes keep a header's own spelling).
PROXY_USER_HEADER_NAMES = ("x-forwarded-user", "x-forwarded-email")


class ProxyIdentityRefused(Exception):
    """A trusted proxy named a user who may not sign in; the message says why."""


def address_in(remote_addr: str | None, networks, *, loopback: bool = False) -> bool:
    """Whether ``remote_addr`` is in one of ``networks`` (or, with ``loopback``, is a
    loopback address); False for a missing or malformed address."""
    try:
        address = ipaddress.ip_address(remote_addr or "")
    except ValueError:
        return False
    return (loopback and address.is_loopback) or any(address in network for network in networks)


def is_trusted_proxy(remote_addr: str | None) -> bool:
    return address_in(remote_addr, settings.TRUSTED_PROXY_IPS)


def client_address(request) -> str | None:
    """The address a request came from, by which sign-in failures are counted.

    From a trusted proxy, the address that the first of ``TRUSTED_PROXY_HOPS`` proxies
    added to ``X-Forwarded-For``: each proxy appends the address it was reached from, so
    that entry is the ``TRUSTED_PROXY_HOPS``-th from the right (entries to its left are the
    client's own writing). With fewer entries, the leftmost (a request that came through
    fewer proxies). Otherwise, or when that entry is not an address, the peer's.
    """
    peer = request.META.get("REMOTE_ADDR")
    if not is_trusted_proxy(peer):
        return peer
    entries = [entry.strip() for entry in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    entries = [entry for entry in entries if entry]
    if not entries:
        return peer
    forwarded = entries[max(0, len(entries) - settings.TRUSTED_PROXY_HOPS)]
    try:
        return str(ipaddress.ip_address(forwarded))
    except ValueError:
        return peer


def smuggled_header(raw_headers) -> str | None:
    """The first identity header in ``raw_headers`` (ASGI ``(name, value)`` byte
    pairs) spelled with an underscore, if any."""
    for name, _value in raw_headers:
        spelled = name.decode("latin-1").lower()
        if "_" in spelled and spelled.replace("_", "-") in PROXY_USER_HEADER_NAMES:
            return name.decode("latin-1")
    return None


def proxy_username(meta: dict, raw_headers=()) -> str | None:
    """The user named by a trusted proxy in this request's headers, if any.

    ``raw_headers`` are the request's headers as sent, when the server passes
    them on (ASGI); under WSGI the server must drop underscore headers itself.
    """
    if not is_trusted_proxy(meta.get("REMOTE_ADDR")):
        return None
    smuggled = smuggled_header(raw_headers)
    if smuggled is not None:
        raise ProxyIdentityRefused(
            f"header {smuggled!r} refused: identity headers spelled with underscores could "
            "impersonate the one the proxy sets"
        )
    longest = get_user_model()._meta.get_field(get_user_model().USERNAME_FIELD).max_length
    for header in PROXY_USER_HEADERS:
        value = (meta.get(header) or "").strip()
        if len(value) > longest:
            raise ProxyIdentityRefused(
                f"{header[5:].replace('_', '-').title()} is {len(value)} characters long; "
                f"user names have at most {longest}"
            )
        if value and identities.reserved_prefix(value):
            raise ProxyIdentityRefused(
                f"names starting with {identities.reserved_prefix(value)!r} are the service's own "
                "(its sync, imports and commands)"
            )
        if value:
            return value
    return None


def asgi_headers(request) -> list:
    """The request's headers as sent, under ASGI; none under WSGI."""
    return getattr(request, "scope", {}).get("headers", [])


def proxy_request_user(meta: dict, raw_headers=()):
    """The active user a trusted proxy names, or None when it names nobody.

    Raises ``ProxyIdentityRefused`` for a deactivated account (as Django's
    RemoteUserBackend refuses one), a name too long, or a smuggled header.
    """
    username = proxy_username(meta, raw_headers)
    if username is None:
        return None
    user = proxy_user(username)
    if not user.is_active:
        raise ProxyIdentityRefused(f"user {username!r} is deactivated")
    return user


def may_sign_in_by_proxy(user) -> bool:
    """A proxy header never carries staff rights: a name that matches a staff
    account is ignored, so the admin and everything a superuser may do (storing
    sessions, say) need that account's own login; otherwise anyone the proxy
    knows as "admin" would be the admin."""
    return not (user.is_staff or user.is_superuser)


def revoked_listeners(listeners: set[tuple[int, bool]]) -> dict[tuple[int, bool], str]:
    """Of ``listeners`` ((user id, signed in by proxy) of open WebSocket connections), those
    who may no longer listen, with why: the account was deleted or deactivated, or, for a
    proxy sign-in, it is staff now (its proxy name no longer signs in, as on REST)."""
    users = get_user_model().objects.filter(pk__in={user_id for user_id, _ in listeners})
    known = {user.pk: user for user in users.only("pk", "is_active", "is_staff", "is_superuser")}
    revoked = {}
    for user_id, by_proxy in listeners:
        user = known.get(user_id)
        if user is None:
            revoked[user_id, by_proxy] = "the account was deleted"
        elif not user.is_active:
            revoked[user_id, by_proxy] = "the account is deactivated"
        elif by_proxy and not may_sign_in_by_proxy(user):
            revoked[user_id, by_proxy] = "the account is staff: its proxy name no longer signs in"
    return revoked


def _enforce_csrf(request) -> None:
    # Like DRF's SessionAuthentication: the middleware's verdict, without its HTML page.
    check = _CsrfCheck(lambda _: None)
    check.process_request(request._request)
    reason = check.process_view(request._request, None, (), {})
    if reason:
        raise PermissionDenied(f"CSRF failed: {reason}. Send the body as application/json, or the CSRF token.")


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request, reason):
        return reason


# Proxy users are looked up once per process, then remembered this long, so that a
# request costs no user query. A change made through the ORM in this process (a user
# deleted, made staff, renamed) forgets them all at once; one made elsewhere is seen
# within this time.
PROXY_USER_MEMORY_S = 30.0
_remembered_users: dict[str, tuple[float, list]] = {}  # username -> (until, row values)


def proxy_user(username: str):
    """The Django user for a proxy-authenticated name, created on first sight.

    Each call returns a new instance (Django caches permissions on the instance),
    built from the remembered row when there is one.
    """
    user_model = get_user_model()
    fields = [field.attname for field in user_model._meta.concrete_fields]
    remembered = _remembered_users.get(username)
    if remembered is not None and remembered[0] > time.monotonic():
        return user_model.from_db(DEFAULT_DB_ALIAS, fields, remembered[1])
    user, created = user_model.objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    row = [getattr(user, name) for name in fields]
    _remembered_users[username] = (time.monotonic() + PROXY_USER_MEMORY_S, row)
    return user


def forget_proxy_users(**_) -> None:
    """Drop every remembered proxy user (connected to the user model's saves and deletes)."""
    _remembered_users.clear()


post_save.connect(forget_proxy_users, sender=settings.AUTH_USER_MODEL, dispatch_uid="forget_on_save")
post_delete.connect(forget_proxy_users, sender=settings.AUTH_USER_MODEL, dispatch_uid="forget_on_delete")


class TrustedProxyAuthentication(BaseAuthentication):
    """DRF authentication from oauth2-proxy headers sent by a trusted address.

    oauth2-proxy authenticates browsers by cookie, so a page on another site
    could make a browser send a form POST through the proxy. Such cross-site
    "simple" requests cannot carry a JSON body type without a CORS preflight
    (which this service never grants), so an unsafe request must either send
    ``Content-Type: application/json`` or pass Django's CSRF check.
    """

    def authenticate(self, request):
        try:
            user = proxy_request_user(request.META, asgi_headers(request._request))
        except ProxyIdentityRefused as exc:
            raise AuthenticationFailed(str(exc)) from exc
        if user is None or not may_sign_in_by_proxy(user):
            return None
        if request.method not in SAFE_METHODS and request.content_type.split(";")[0].strip() != "application/json":
            _enforce_csrf(request)
        return user, None

    def authenticate_header(self, request):
        # Answering 401 (not 403) to anonymous callers needs a challenge.
        return 'Token realm="api"'


class TrustedProxyAuthenticationScheme(OpenApiAuthenticationExtension):
    """Describes the oauth2-proxy header in the OpenAPI schema."""

    target_class = TrustedProxyAuthentication
    name = "trustedProxy"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "X-Forwarded-User",
            "description": "Set by oauth2-proxy; honoured only from TRUSTED_PROXY_IPS (X-Forwarded-Email also works).",
        }


class TrustedProxyUserMiddleware:
    """Make the oauth2-proxy user the request's user on the pages and the admin.

    Goes after AuthenticationMiddleware; a logged-in Django session wins.
    A proxy header never carries staff rights (``may_sign_in_by_proxy``). A refused
    proxy identity gets 403 with the reason, as JSON like every API error (the
    API's own check answers 401 when a Django session skipped this one).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.user.is_authenticated:
            try:
                user = proxy_request_user(request.META, asgi_headers(request))
            except ProxyIdentityRefused as exc:
                return JsonResponse({"detail": f"sign-in refused: {exc}"}, status=403)
            if user is not None and may_sign_in_by_proxy(user):
                request.user = user
        return self.get_response(request)
