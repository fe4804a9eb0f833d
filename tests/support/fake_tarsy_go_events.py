"""A stand-in for Go TARSy's WebSocket (GET /api/v1/ws, pkg/events) on loopback.

What Go's ConnectionManager does (pkg/events/manager.go), on its own port (``url``):

- on connect it sends ``{"connection_id": ..., "type": "connection.established"}``;
- client messages are ``{"action": "subscribe" | "unsubscribe" | "catchup" | "ping",
  "channel": ..., "last_event_id": n}``; a subscribe is confirmed
  (``subscription.confirmed``) and followed by every event stored for the channel, a catchup
  replays those after ``last_event_id`` (at most 200, then ``catchup.overflow``), a ping gets
  ``pong``, a missing channel an ``error``; anything that does not decode is ignored;
- events reach the subscribers of their channel: ``session:<id>`` for one session's, and
  ``sessions`` for the session list (pkg/events/publisher.go). An event stored for catch-up
  (session.status and review.status on ``session:<id>``) is sent with ``db_event_id`` added
  (a decoded map, so its keys sorted); the copy to ``sessions`` is not stored and keeps the
  payload struct's field order (payloads.go).

It can drop every connection at once (as a Go restart or a proxy's idle timeout does), leave pings
unanswered (``answer_pings``: a connection a proxy left hanging), counts the pings, and tells how
many connections subscribe to a channel (Go's subscriberCount, for tests to wait on).
Attached to the stand-in Go API (``StandInGoTarsy.events``), it is reached at that API's own
``/api/v1/ws``, as Go serves it.

    events = StandInGoTarsyEvents()
    events.session_status(session_id, "completed")
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import pytest
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Response
from websockets.sync.server import serve

from tests.support.tarsy_go import go_json

WS_PATH = "/api/v1/ws"
SESSIONS_CHANNEL = "sessions"
CATCHUP_LIMIT = 200
REVIEW_FIELDS = ("review_status", "assignee", "quality_rating", "action_taken", "investigation_feedback")


def now_rfc3339nano() -> str:
    """time.Now().Format(time.RFC3339Nano), in UTC."""
    nanos = time.time_ns()
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(nanos // 1_000_000_000))
    fraction = f"{nanos % 1_000_000_000:09d}".rstrip("0")
    return text + (f".{fraction}" if fraction else "") + "Z"


def session_channel(session_id: str) -> str:
    return "session:" + session_id


class StandInGoTarsyEvents:
    def __init__(self, token: str | None = None):
        self.token = token
        self._lock = threading.Lock()
        self._stored: list[tuple[int, str, dict]] = []  # the events table: id, channel, payload
        self._channels: dict[str, set] = {}
        self._live: set = set()
        self.answer_pings = True
        self.pings = 0
        self._server = serve(
            self._handle, "127.0.0.1", 0, process_request=self._check, compression=None
        )
        self.address = self._server.socket.getsockname()[:2]
        self.url = f"ws://127.0.0.1:{self.address[1]}{WS_PATH}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()

    def drop_connections(self) -> None:
        """End every connection at once, without a closing handshake."""
        with self._lock:
            live = list(self._live)
        for connection in live:
            try:
                connection.socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def subscriber_count(self, channel: str) -> int:
        with self._lock:
            return len(self._channels.get(channel, ()))

    # --- What Go publishes ---------------------------------------------------------------

    def session_status(self, session_id: str, status: str) -> None:
        """PublishSessionStatus: stored on the session's channel, a copy to ``sessions``."""
        payload = {"type": "session.status", "session_id": session_id, "timestamp": now_rfc3339nano()}
        payload["status"] = status
        self.publish(session_channel(session_id), payload, stored=True)
        self.publish(SESSIONS_CHANNEL, payload)

    def review_status(self, session_id: str, actor: str, **fields) -> None:
        """PublishReviewStatus (``fields``: review_status, assignee, quality_rating, action_taken,
        investigation_feedback; left out when None, as their omitempty pointers)."""
        payload = {"type": "review.status", "session_id": session_id, "timestamp": now_rfc3339nano()}
        for name in REVIEW_FIELDS:
            if fields.get(name) is not None:
                payload[name] = fields[name]
        payload["actor"] = actor
        self.publish(session_channel(session_id), payload, stored=True)
        self.publish(SESSIONS_CHANNEL, payload)

    def score_updated(self, session_id: str, scoring_status: str) -> None:
        """PublishSessionScoreUpdated: not stored, to the session's channel and ``sessions``."""
        payload = {"type": "session.score_updated", "session_id": session_id}
        payload.update(timestamp=now_rfc3339nano(), scoring_status=scoring_status)
        self.publish(session_channel(session_id), payload)
        self.publish(SESSIONS_CHANNEL, payload)

    def publish(self, channel: str, payload: dict, stored: bool = False) -> None:
        """Send ``payload`` to the channel's subscribers (persistAndNotify when ``stored``,
        notifyOnly otherwise)."""
        with self._lock:
            if stored:
                event_id = len(self._stored) + 1
                self._stored.append((event_id, channel, dict(payload)))
                data = go_json(dict(sorted({**payload, "db_event_id": event_id}.items())))
            else:
                data = go_json(payload)
            subscribers = list(self._channels.get(channel, ()))
        for connection in subscribers:
            try:
                connection.send(data)
            except Exception:  # a client gone meanwhile, as Go logs and goes on
                pass

    # --- The protocol --------------------------------------------------------------------------

    def _check(self, connection, request):
        if request.path.split("?")[0] != WS_PATH:
            return self._refuse(404, {"message": "Not Found"})
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return self._refuse(401, {"message": "Unauthorized"})
        return None

    @staticmethod
    def _refuse(status: int, body: dict) -> Response:
        data = (go_json(body) + "\n").encode()
        headers = Headers([("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return Response(status, "Unauthorized" if status == 401 else "Not Found", headers, data)

    def _handle(self, connection) -> None:
        subscriptions: set[str] = set()
        with self._lock:
            self._live.add(connection)
        connection.send(go_json({"connection_id": str(uuid.uuid4()), "type": "connection.established"}))
        try:
            for message in connection:
                try:
                    decoded = json.loads(message)
                except ValueError:
                    continue
                if not isinstance(decoded, dict):
                    continue
                # json.Unmarshal into ClientMessage: null leaves a field empty, a wrong type fails.
                action, channel = decoded.get("action") or "", decoded.get("channel") or ""
                last_event_id = decoded.get("last_event_id")
                if not isinstance(action, str) or not isinstance(channel, str):
                    continue
                if last_event_id is not None and type(last_event_id) is not int:
                    continue
                self._act(connection, subscriptions, action, channel, last_event_id)
        except ConnectionClosed:  # as Go's read loop, which returns on any read error
            pass
        finally:
            with self._lock:
                self._live.discard(connection)
                for channel in subscriptions:
                    self._channels.get(channel, set()).discard(connection)

    def _act(self, connection, subscriptions: set, action: str, channel: str, last_event_id) -> None:
        if action in ("subscribe", "unsubscribe", "catchup") and not channel:
            connection.send(go_json({"message": f"channel is required for {action}", "type": "error"}))
            return
        if action == "subscribe":
            with self._lock:
                self._channels.setdefault(channel, set()).add(connection)
            subscriptions.add(channel)
            connection.send(go_json({"channel": channel, "type": "subscription.confirmed"}))
            self._catch_up(connection, channel, 0)
        elif action == "unsubscribe":
            with self._lock:
                self._channels.get(channel, set()).discard(connection)
            subscriptions.discard(channel)
        elif action == "catchup" and last_event_id is not None:
            self._catch_up(connection, channel, last_event_id)
        elif action == "ping":
            with self._lock:
                self.pings += 1
            if self.answer_pings:
                connection.send(go_json({"type": "pong"}))

    def _catch_up(self, connection, channel: str, after: int) -> None:
        with self._lock:
            missed = [(i, p) for i, c, p in self._stored if c == channel and i > after][: CATCHUP_LIMIT + 1]
        for event_id, payload in missed[:CATCHUP_LIMIT]:
            connection.send(go_json(dict(sorted({**payload, "db_event_id": event_id}.items()))))
        if len(missed) > CATCHUP_LIMIT:
            connection.send(go_json({"channel": channel, "has_more": True, "type": "catchup.overflow"}))


@pytest.fixture
def tarsy_go_events():
    """A stand-in for Go TARSy's WebSocket."""
    server = StandInGoTarsyEvents()
    yield server
    server.stop()
