"""Password sign-in throttling: django-axes's lock on a name and an address, and a cap on
the name's failures from every address, which the clients the account knows pass.

django-axes locks a user name out from one address after LOGIN_FAILURE_LIMIT failures
(``AXES_LOCKOUT_PARAMETERS``; the address is ``scoring.auth.client_address``). A guesser
who can change addresses (several machines, or a proxy that passes on whatever
``X-Forwarded-For`` it is sent) would have a fresh count at each, so the failures of a name
from all addresses are added up too: past LOGIN_ACCOUNT_FAILURE_LIMIT within LOGIN_LOCKOUT_S,
the name is held, refused without its password being checked, for every client it does not
know. A client it knows is a browser that signed in to it with its password before: it
carries a signed cookie naming the account (``KNOWN_CLIENT_COOKIE``), the device cookie of
OWASP's advice. So a stranger can hold the account only for browsers it has never signed in
from, and only while the failures are recent; a sign-in from a known client clears them.

The failures are django-axes's own rows (``AccessAttempt``), so ``manage.py axes_reset`` and
``axes_reset_username`` lift the hold as they lift the lock (docs/deploy.md).
"""

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.core import signing
from django.db.models import Sum
from django.utils import timezone

KNOWN_CLIENT_COOKIE = "tarsy_scoring_known"
KNOWN_CLIENT_SALT = "scoring.signin.known-client"
# A browser stays known this long after its last password sign-in.
KNOWN_CLIENT_MAX_AGE_S = 180 * 24 * 3600
# The accounts one browser is remembered for (people with a staff and a personal account).
KNOWN_CLIENT_NAMES = 5
# Set on a request that signed in by password: the names its answer's cookie is to carry.
_NAMES_TO_REMEMBER = "_scoring_known_client_names"


def known_names(request) -> list[str]:
    """The accounts this browser signed in to by password (from its signed cookie)."""
    value = request.COOKIES.get(KNOWN_CLIENT_COOKIE)
    if not value:
        return []
    try:
        names = signing.loads(value, salt=KNOWN_CLIENT_SALT, max_age=KNOWN_CLIENT_MAX_AGE_S)
    except signing.BadSignature:  # forged, expired, or signed with another SECRET_KEY
        return []
    return [name for name in names if isinstance(name, str)] if isinstance(names, list) else []


def is_known_client(request, username: str | None) -> bool:
    return username is not None and username in known_names(request)


def account_failures(username: str | None) -> int:
    """Failed password sign-ins of ``username`` from every address, over the last LOGIN_LOCKOUT_S."""
    if username is None:
        return 0
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    recent = AccessAttempt.objects.filter(username=username, attempt_time__gte=since)
    return recent.aggregate(failures=Sum("failures_since_start"))["failures"] or 0


def account_held(request, username: str | None) -> bool:
    """Whether sign-ins to ``username`` from this client are refused for the name's
    failures from every address (a client the account knows never is)."""
    if is_known_client(request, username):
        return False
    return account_failures(username) >= settings.LOGIN_ACCOUNT_FAILURE_LIMIT


def clear_account_failures(username: str) -> int:
    """Forget the failures of ``username`` from every address; return how many rows went."""
    deleted, _ = AccessAttempt.objects.filter(username=username).delete()
    return deleted


def signed_in(request, username: str) -> None:
    """After a password sign-in: a known client's clears the account's failures; either
    way the browser is (again) known to the account from now on."""
    names = known_names(request)
    if username in names:
        clear_account_failures(username)
    remembered = [username] + [name for name in names if name != username]
    setattr(request, _NAMES_TO_REMEMBER, remembered[:KNOWN_CLIENT_NAMES])


class SignInHandler(AxesDatabaseHandler):
    """django-axes's database handler, with the account's cap across addresses
    (``AXES_HANDLER``)."""

    def is_locked(self, request, credentials=None) -> bool:
        if super().is_locked(request, credentials):
            return True
        return account_held(request, get_client_username(request, credentials))

    def user_logged_in(self, sender, request, user, **kwargs):
        super().user_logged_in(sender, request, user, **kwargs)
        signed_in(request, user.get_username())


class KnownClientMiddleware:
    """Gives a browser that signed in by password its cookie (``signed_in`` says which names)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        names = getattr(request, _NAMES_TO_REMEMBER, None)
        if names:
            response.set_cookie(
                KNOWN_CLIENT_COOKIE,
                signing.dumps(names, salt=KNOWN_CLIENT_SALT),
                max_age=KNOWN_CLIENT_MAX_AGE_S,
                secure=settings.SESSION_COOKIE_SECURE,
                httponly=True,
                samesite="Lax",
            )
        return response
