"""GETting JSON from a running TARSy, either generation, for the sync (docs/sync.md).

A TARSy is another team's service, and what answers at its URL may be a proxy, a login page
or something broken: every answer is bounded in size and checked as JSON, error bodies are
shown with their control characters escaped, redirects are answers (never followed), and the
credentials never appear in a message, a log line or a traceback. A token may come from a
file (a projected ServiceAccount token), read again when the file changes; HTTPS may be
verified against a CA bundle of the cluster's own.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from django.conf import settings

from scoring.tarsy.url import canonical_url

logger = logging.getLogger(__name__)

# How much of an error answer's body a message quotes.
ERROR_EXCERPT_CHARS = 300


class SyncError(Exception):
    """A sync that stopped before the end of the list; str() is for the operator.

    ``report`` holds what the run did before it stopped (set by the runner).
    """

    report = None


class TarsyAuthRejected(SyncError):
    """TARSy (or the proxy in front of it) answered 401 or 403, or redirected: retrying cannot help."""


class TarsyUnreachable(SyncError):
    """Network errors or 5xx answers on every attempt."""


class TarsyNotFound(SyncError):
    """404: the path is not this TARSy's, or the session was deleted after it was listed."""


class BadAnswer(SyncError):
    """An answer that is not a JSON value this service reads (HTML, too large, too deeply
    nested, a number too long to read): a document's is reported and skipped; the list's
    stops the run."""


class DeadlineReached(SyncError):
    """The run (or the session being fetched) reached its deadline."""


class FetchFailed(SyncError):
    """A session that could not be fetched this time (it took longer than its deadline): reported,
    not remembered, so that the next run fetches it again."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are answers, not followed: a proxy redirects to its login page (often
    on another host), and following would send the credentials there."""

    def redirect_request(self, *args, **kwargs):
        return None


@dataclass
class TokenFile:
    """A bearer token kept in a file (a Kubernetes projected ServiceAccount token, which the
    kubelet rotates): read again whenever the file changes, surrounding white space removed."""

    path: str
    _seen: tuple | None = None
    _token: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def token(self) -> str:
        try:
            status = os.stat(self.path)
            version = (status.st_mtime_ns, status.st_size, status.st_ino)
            with self._lock:
                if version != self._seen:
                    with open(self.path, encoding="utf-8") as file:
                        self._token = file.read().strip()
                    self._seen = version
                return self._token
        except (OSError, UnicodeError) as exc:
            raise SyncError(f"cannot read the token file {self.path}: {type(exc).__name__}") from None


@dataclass
class TarsyClient:
    """GETs JSON from one TARSy, retrying network errors and 5xx with doubling waits.

    Safe to share between threads (the Go TARSy sync fetches a session's parts at once).
    """

    base_url: str
    headers: dict[str, str] = field(default_factory=dict)
    token: str = ""
    token_file: TokenFile | None = None
    timeout_s: float = 30.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_answer_bytes: int = 64 * 1024 * 1024
    ca_bundle: str = ""
    # time.monotonic() after which no request starts, and none waits past it; None: no deadline.
    deadline: float | None = None
    _opener: urllib.request.OpenerDirector | None = None

    @classmethod
    def configured(
        cls,
        base_url: str,
        *,
        token: str = "",
        token_file: str = "",
        headers: dict[str, str] | None = None,
        ca_bundle: str = "",
    ) -> TarsyClient:
        return cls(
            canonical_url(base_url),
            dict(headers or {}),
            token=token.strip(),
            token_file=TokenFile(token_file) if token_file else None,
            timeout_s=settings.TARSY_SYNC_TIMEOUT_S,
            max_retries=settings.TARSY_SYNC_MAX_RETRIES,
            backoff_s=settings.TARSY_SYNC_BACKOFF_S,
            max_answer_bytes=settings.TARSY_SYNC_MAX_ANSWER_BYTES,
            ca_bundle=ca_bundle,
        )

    @property
    def opener(self) -> urllib.request.OpenerDirector:
        if self._opener is None:
            handlers = [_NoRedirects]
            context = self.ssl_context()
            if context is not None:
                handlers.append(urllib.request.HTTPSHandler(context=context))
            self._opener = urllib.request.build_opener(*handlers)
        return self._opener

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context verifying TARSy against ``ca_bundle``; None: the system's CAs."""
        if not self.ca_bundle:
            return None
        try:
            return ssl.create_default_context(cafile=self.ca_bundle)
        except (OSError, ssl.SSLError) as exc:
            raise SyncError(f"cannot read the CA bundle {self.ca_bundle}: {exc}") from None

    def current_token(self) -> str:
        return self.token_file.token() if self.token_file else self.token

    def redact(self, text: str) -> str:
        """``text`` without the credentials in it (a TARSy or a proxy may echo them back)."""
        secrets = [self.token, self.token_file._token if self.token_file else ""]
        secrets += [value for value in self.headers.values()]
        for secret in secrets:
            if len(secret) >= 4:
                text = text.replace(secret, "<credentials>")
        return text

    def seconds_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def get_json(self, path: str, params: dict | None = None):
        """The JSON value TARSy answers to ``GET path?params``."""
        url = self.base_url + path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
        try:
            return self._get_json(url)
        except SyncError as exc:
            # A message may quote what TARSy sent back: never the credentials.
            raise type(exc)(self.redact(str(exc))) from None

    def _get_json(self, url: str):
        headers = {"Accept": "application/json", **self.headers}
        token = self.current_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            left = self.seconds_left()
            if left is not None and left <= 0:
                raise DeadlineReached(f"the deadline was reached before GET {url}")
            timeout = self.timeout_s if left is None else min(self.timeout_s, left)
            try:
                request = urllib.request.Request(url, headers=headers)
                with self.opener.open(request, timeout=timeout) as response:
                    body = self._read(response, url)
                    content_type = response.headers.get("Content-Type", "")
            except urllib.error.HTTPError as exc:
                problem = self._refused(exc, url)
            except UnicodeError:
                raise BadAnswer(
                    f"GET {printable(url)} cannot be sent: it holds characters a URL cannot carry"
                ) from None
            except ValueError:
                # http.client refuses a header value with a line break: say which, never its value.
                raise SyncError(
                    "a request header (the token, or a --header value) holds a line break or another "
                    "character HTTP does not allow"
                ) from None
            except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, dropped connections
                problem = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            else:
                return parse_json(body, f"TARSy's answer to GET {url}", content_type)
            left = self.seconds_left()
            if left is not None and left <= 0:
                raise DeadlineReached(f"the deadline was reached during GET {url} ({problem})")
            if attempt + 1 < attempts:
                wait_s = self.backoff_s * 2**attempt
                if left is not None and wait_s >= left:
                    raise DeadlineReached(f"the deadline comes before GET {url} could be tried again ({problem})")
                logger.warning("GET %s failed (%s); retrying in %g s", url, self.redact(problem), wait_s)
                time.sleep(wait_s)
        raise TarsyUnreachable(f"GET {url} failed {attempt + 1} times; last: {problem}")

    def _read(self, response, url: str) -> bytes:
        length = response.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > self.max_answer_bytes:
            raise BadAnswer(self._too_large(url, int(length)))
        body = response.read(self.max_answer_bytes + 1)
        if len(body) > self.max_answer_bytes:
            raise BadAnswer(self._too_large(url, None))
        return body

    def _too_large(self, url: str, length: int | None) -> str:
        size = f"{length} bytes" if length is not None else "more"
        return (
            f"TARSy's answer to GET {url} is {size}, over TARSY_SYNC_MAX_ANSWER_BYTES "
            f"({self.max_answer_bytes} bytes)"
        )

    def _refused(self, exc: urllib.error.HTTPError, url: str) -> str:
        """The problem of a 5xx answer, to retry; raises for any other status."""
        if exc.code in (401, 403):
            raise TarsyAuthRejected(
                f"TARSy answered {exc.code} {exc.reason} to GET {url}: the credentials "
                "(--token / TARSY_TOKEN / TARSY_TOKEN_FILE, or --header) are missing, wrong or not allowed"
            )
        if 300 <= exc.code < 400:
            raise TarsyAuthRejected(
                f"TARSy answered {exc.code} {exc.reason} to GET {url}, redirecting to "
                f"{printable(exc.headers.get('Location') or 'nowhere')}: most likely a proxy's login, so the "
                "credentials (--token / TARSY_TOKEN, or --header) are missing or wrong; "
                "or the URL is not TARSy's own"
            )
        if exc.code == 404:
            raise TarsyNotFound(f"TARSy answered 404 {exc.reason} to GET {url}: {_excerpt(exc)}")
        if exc.code < 500:
            raise SyncError(f"TARSy answered {exc.code} {exc.reason} to GET {url}: {_excerpt(exc)}")
        return f"{exc.code} {exc.reason}"


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constants(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse_json(body: bytes, what: str, content_type: str = ""):
    """The JSON value of ``body``; BadAnswer (saying why, for the operator) when it is not
    one this service can store: not JSON, nested too deep, or holding a number too long
    to read or out of range."""
    try:
        return json.loads(body, parse_float=_finite, parse_constant=_no_constants)
    except RecursionError:
        raise BadAnswer(f"{what} is JSON nested too deeply to read") from None
    except ValueError as exc:
        if body.lstrip()[:1] in (b"{", b"["):
            raise BadAnswer(f"{what} is not JSON this service can read: {printable(str(exc)[:200])}") from None
        raise BadAnswer(
            f"{what} is not JSON ({printable(content_type) or 'no content type'}); "
            "is a login page of a proxy in front of it asking for credentials?"
        ) from None


def _excerpt(error: urllib.error.HTTPError) -> str:
    try:
        return printable(error.read(ERROR_EXCERPT_CHARS).decode("utf-8", errors="replace"))
    except OSError:
        return ""


def printable(text: str) -> str:
    """``text`` with control characters (terminal escapes, line breaks) written as escapes:
    it is shown in a terminal, a log line and a page."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def parse_header(text: str) -> tuple[str, str]:
    """``'Name: value'`` -> (name, value); ValueError when it is not of that form."""
    name, colon, value = text.partition(":")
    if not colon or not name.strip() or any(c.isspace() for c in name.strip()):
        raise ValueError(f"{printable(text)!r} is not a header: use 'Name: value'")
    return name.strip(), value.strip()
