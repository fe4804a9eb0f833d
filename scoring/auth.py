"""Who is calling: oauth2-proxy headers from trusted addresses, else Django auth.

TARSy runs behind oauth2-proxy, which authenticates the user and forwards the
request with ``X-Forwarded-User`` (or ``X-Forwarded-Email``). Anyone can send
those headers, so they are believed only from an address in
``TRUSTED_PROXY_IPS``; from anywhere else they are ignored.
"""

import ipaddress
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS
from django.db.models.signals import post_delete, post_save
from django.middleware.csrf import CsrfViewMiddleware
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS

PROXY_USER_HEADERS = ("HTTP_X_FORWARDED_USER", "HTTP_X_FORWARDED_EMAIL")


def is_trusted_proxy(remote_addr: str | None) -> bool:
    if not remote_addr:
        return False
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return False
    return any(address in network for network in settings.TRUSTED_PROXY_IPS)


def proxy_username(meta: dict) -> str | None:
    """The user named by a trusted proxy in this request's headers, if any."""
    if not is_trusted_proxy(meta.get("REMOTE_ADDR")):
        return None
    for header in PROXY_USER_HEADERS:
        value = (meta.get(header) or "").strip()
        if value:
            return value[:150]
    return None


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
        username = proxy_username(request.META)
        if username is None:
            return None
        if request.method not in SAFE_METHODS and request.content_type.split(";")[0].strip() != "application/json":
            _enforce_csrf(request)
        return proxy_user(username), None

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
    A proxy header never carries staff rights: a name that matches a staff
    account is ignored here, so the admin always needs that account's own login
    (otherwise anyone the proxy knows as "admin" would be the admin).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.user.is_authenticated:
            username = proxy_username(request.META)
            if username is not None:
                user = proxy_user(username)
                if not (user.is_staff or user.is_superuser):
                    request.user = user
        return self.get_response(request)
