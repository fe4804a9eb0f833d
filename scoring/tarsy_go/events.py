"""Go TARSy's session events, so that a finished session is pulled within seconds (docs/sync.md).

Go TARSy pushes events to its dashboard over a WebSocket (``GET /api/v1/ws``, beside its API).
A client subscribes to channels; the ``sessions`` channel carries a copy of each session's status
changes, review changes and scorings by TARSy's own judge. The listener here subscribes to it and
wakes the periodic sync (``scoring.tarsy.sync.run_periodically``) when a session finished or its
review or score changed. The sync then finds the session the way it always does (its lists and its
cursor): an event only says "look now", so one that is missed costs no more than the wait for the
next round. That is also why the ``sessions`` channel having no catch-up (its events are not stored)
does not matter: on each subscription the sync is woken once, for whatever happened before it.

It talks to Go as Go's dashboard does: one subscription, a ``ping`` action every 20 s whose ``pong``
must come within 10 s (else the connection counts as dead), reconnection after doubling waits,
capped. Where no WebSocket answers (a tarsy-bot, a proxy that does not pass upgrades, refused
credentials), it says so once and tries again every 10 minutes; polling goes on regardless.

The credentials and rules are the REST client's (``TarsyClient``): its bearer token (a token file
read again on each connection), its CA bundle, plain http only where TARSY_ALLOW_PLAIN_HTTP or
loopback allows it, and no credentials in a log line. The websockets client follows a redirect
only without the credentials when it leads to another host, and never from https to http.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, WebSocketException
from websockets.sync.client import connect

from scoring.models import SessionStatus
from scoring.tarsy.client import SyncError, TarsyClient, printable
from scoring.tarsy.url import plain_http_problem

logger = logging.getLogger(__name__)

WS_PATH = "/api/v1/ws"
SESSIONS_CHANNEL = "sessions"
FINISHED = frozenset(SessionStatus.terminal_values())
# Go's scoring statuses that end a scoring (in_progress and memorizing do not).
SCORING_ENDED = frozenset({"completed", "failed"})
# As Go TARSy's dashboard: a ping every 20 s, its pong within 10 s.
PING_INTERVAL_S = 20.0
PONG_TIMEOUT_S = 10.0
# The wait before reconnecting after a drop or a failed connection: doubling from the first, capped.
RECONNECT_FIRST_S = 0.5
RECONNECT_MAX_S = 60.0
# Where no WebSocket answers, the next try comes this much later.
ABSENT_RETRY_S = 600.0
# How long a wait for a message goes without looking at the stop event.
STOP_CHECK_S = 0.5
# The sessions channel's events are a few hundred bytes; a larger message ends the connection.
MAX_MESSAGE_BYTES = 1024 * 1024


class Absent(Exception):
    """No WebSocket answers there (or the credentials are refused): trying soon cannot help."""


class Dropped(Exception):
    """The connection failed, ended or went silent: reconnect soon."""


class _Redacting(logging.LoggerAdapter):
    """websockets' own logger without the credentials: at DEBUG it writes the request's headers."""

    def __init__(self, client: TarsyClient):
        super().__init__(logging.getLogger("websockets.client"), {})
        self.client = client

    def log(self, level, msg, *args, **kwargs):
        if self.isEnabledFor(level):
            text = self.client.redact(str(msg) % args if args else str(msg))
            self.logger.log(level, "%s", text, **kwargs)


def websocket_url(base_url: str) -> str:
    """The WebSocket of the Go TARSy at ``base_url``: ws:// for http, wss:// for https."""
    parts = urllib.parse.urlsplit(base_url)
    scheme = {"http": "ws", "https": "wss"}[parts.scheme.lower()]
    return urllib.parse.urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + WS_PATH, "", ""))


def wakes_sync(event) -> bool:
    """Whether an event of the ``sessions`` channel may change what the sync stores: a session that
    finished, a review that changed, a scoring by TARSy's own judge that ended."""
    if not isinstance(event, dict):
        return False
    kind = event.get("type")
    if kind == "session.status":
        return _text(event, "status") in FINISHED
    if kind == "review.status":
        return True
    if kind == "session.score_updated":
        return _text(event, "scoring_status") in SCORING_ENDED
    return False


def _text(event: dict, key: str) -> str:
    value = event.get(key)
    return value if isinstance(value, str) else ""


def start_listener(client: TarsyClient, wake: Callable[[], None], stop: threading.Event) -> threading.Thread:
    """``listen`` on a daemon thread."""
    thread = threading.Thread(target=listen, args=(client, wake, stop), name="tarsy-events", daemon=True)
    thread.start()
    return thread


def listen(client: TarsyClient, wake: Callable[[], None], stop: threading.Event) -> None:
    """Listen to the ``sessions`` channel of ``client``'s Go TARSy until ``stop`` is set, calling
    ``wake()`` for each event that ``wakes_sync`` and on each subscription. Never raises."""
    _Listener(client, wake, stop).run()


@dataclass
class _Listener:
    client: TarsyClient
    wake: Callable[[], None]
    stop: threading.Event
    subscribed_before: bool = False
    failures: int = 0  # connections failed or dropped in a row
    absent_said: bool = False

    @property
    def url(self) -> str:
        return websocket_url(self.client.base_url)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._connection()
            except Absent as exc:
                self.failures = 0
                level = logging.DEBUG if self.absent_said else logging.INFO
                logger.log(
                    level,
                    "no session events from %s (%s): sessions are pulled every TARSY_SYNC_INTERVAL_S; "
                    "trying again in %g s",
                    self.url, self._safe(exc), ABSENT_RETRY_S,
                )
                self.absent_said = True
                self.stop.wait(ABSENT_RETRY_S)
                continue
            except Dropped as exc:
                # The first failure in a row at INFO, the next ones quietly until it works again.
                level, problem = logging.INFO if self.failures == 0 else logging.DEBUG, self._safe(exc)
            except Exception as exc:  # a bug: said, and nothing may end the thread
                level, problem = logging.WARNING, self._safe(f"unexpected {type(exc).__name__}: {exc}")
            else:
                continue  # stopped
            self.failures += 1
            wait_s = min(RECONNECT_FIRST_S * 2 ** (self.failures - 1), RECONNECT_MAX_S)
            logger.log(level, "session events from %s: %s; reconnecting in %g s", self.url, problem, wait_s)
            self.stop.wait(wait_s)

    def _safe(self, problem) -> str:
        return self.client.redact(printable(str(problem)))

    def _connection(self) -> None:
        """One connection, until it drops (Dropped) or ``stop`` is set (returns)."""
        try:
            token = self.client.current_token()
        except SyncError as exc:
            raise Dropped(str(exc)) from None
        problem = plain_http_problem(
            self.client.base_url, has_credentials=bool(token), allowed=settings.TARSY_ALLOW_PLAIN_HTTP
        )
        if problem:
            raise Absent(problem)
        options = {}
        if self.url.startswith("wss:"):
            options["ssl"] = self.client.ssl_context()
        try:
            websocket = connect(
                self.url,
                additional_headers={"Authorization": f"Bearer {token}"} if token else None,
                open_timeout=self.client.timeout_s,
                ping_interval=None,  # Go's own ping action instead, as its dashboard
                close_timeout=2,
                max_size=MAX_MESSAGE_BYTES,
                logger=_Redacting(self.client),
                **options,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status >= 500 or status == 429:  # Go restarting, a proxy whose upstream is away
                raise Dropped(f"answered {status} {exc.response.reason_phrase}") from None
            raise Absent(f"answered {status} {exc.response.reason_phrase}") from None
        except InvalidHandshake as exc:
            raise Absent(f"not a WebSocket: {exc}") from None
        except (OSError, WebSocketException) as exc:  # refused, reset, timed out, TLS refused
            raise Dropped(f"{type(exc).__name__}: {exc}") from None
        with websocket:
            try:
                self._read(websocket)
            except ConnectionClosed as exc:
                raise Dropped(f"the connection ended ({exc})") from None
            except (OSError, WebSocketException) as exc:
                raise Dropped(f"{type(exc).__name__}: {exc}") from None

    def _read(self, websocket) -> None:
        websocket.send(json.dumps({"action": "subscribe", "channel": SESSIONS_CHANNEL}))
        confirm_by = time.monotonic() + self.client.timeout_s
        next_ping, pong_by = time.monotonic(), None
        while not self.stop.is_set():
            now = time.monotonic()
            if confirm_by is not None and now >= confirm_by:
                raise Dropped(f"no subscription.confirmed within {self.client.timeout_s:g} s")
            if pong_by is not None and now >= pong_by:
                raise Dropped(f"no pong within {PONG_TIMEOUT_S:g} s")
            if now >= next_ping:
                websocket.send(json.dumps({"action": "ping"}))
                next_ping, pong_by = now + PING_INTERVAL_S, pong_by or now + PONG_TIMEOUT_S
            try:
                message = websocket.recv(timeout=STOP_CHECK_S)
            except TimeoutError:
                continue
            try:
                event = json.loads(message)
            except (ValueError, RecursionError):
                continue  # as Go's dashboard, a message that does not decode is left alone
            kind = event.get("type") if isinstance(event, dict) else None
            if kind == "pong":
                pong_by = None
            elif kind == "subscription.confirmed" and event.get("channel") == SESSIONS_CHANNEL:
                confirm_by = None
                self._subscribed()
            elif kind == "subscription.error":
                raise Dropped(f"the subscription failed: {printable(_text(event, 'message'))[:200]}")
            elif wakes_sync(event):
                self.wake()

    def _subscribed(self) -> None:
        if self.failures or not self.subscribed_before:
            logger.info("listening to the session events of %s", self.url)
        # This channel replays nothing: look for what came before (during the run that found Go
        # TARSy, which may be long, or while the connection was down).
        self.wake()
        self.subscribed_before, self.failures, self.absent_said = True, 0, False
