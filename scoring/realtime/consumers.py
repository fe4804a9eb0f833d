"""The dashboard WebSocket at ``/api/v1/ws``: TARSy's subscribe/catchup protocol.

Protocol, replay, close codes and authentication are described in docs/websocket.md.
"""

import asyncio
import itertools
import json
import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlsplit

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from scoring import selectors
from scoring.auth import ProxyIdentityRefused, may_sign_in_by_proxy, proxy_request_user
from scoring.realtime import access, events, fanout, relay, resync
from scoring.realtime.extensions import ANSWER_AT_ONCE_EXTENSION, WRITE_TEXT_EXTENSION

logger = logging.getLogger(__name__)

# RFC 6455's "Try Again Later": the channel layer (Redis) is unreachable.
CLOSE_TRY_AGAIN_LATER = 1013
# Bound on one channel-layer call (group_add, group_discard).
LAYER_TIMEOUT_S = 5.0
MAX_SUBSCRIPTIONS = 100
# How long the replays of a burst of subscribes wait for the burst's next message once
# none is waiting. Both dashboards send all their subscribes and catchups at once, so
# the rest of a burst is already there or a network hop behind.
BURST_GRACE_S = 0.05
# Client actions that may belong to a burst: their replies wait for its end.
BURST_ACTIONS = ("subscribe", "catchup")
# The ``ping`` action as the dashboards' JSON.stringify and Python's json.dumps write it, and
# its answer: answered as the web server reads it (``ScoringEventsConsumer.answered_at_once``).
PING_TEXTS = frozenset({'{"action":"ping"}', '{"action": "ping"}'})
PONG_TEXT = json.dumps({"type": "pong"})


def request_meta(scope: dict) -> dict:
    """The WSGI-style META of a WebSocket handshake, as ``scoring.auth`` reads it."""
    meta = {"REMOTE_ADDR": scope["client"][0] if scope.get("client") else None}
    for name, value in scope.get("headers", []):
        meta["HTTP_" + name.decode("latin-1").upper().replace("-", "_")] = value.decode("latin-1")
    return meta


def origin_allowed(origin: str, host: str | None) -> bool:
    """Whether a browser page from ``origin`` may open the socket, by the rules of
    Django's CSRF origin check: a page served by this host (the handshake's Host,
    port included, which must be an allowed host), or a CSRF_TRUSTED_ORIGINS entry."""
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc or host is None:
        return False
    if parts.netloc.lower() != host.lower():
        return False
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


@dataclass(frozen=True)
class Listener:
    """Who a connection listens as: a user, signed in by the proxy's headers or by a session."""

    user_id: int
    by_proxy: bool


def admitted(scope: dict) -> Listener | str:
    """Who may listen on this connection, or why it may not (a string).

    Listeners authenticate like the REST API: oauth2-proxy headers from a trusted
    address (a name of a staff account is ignored there too: that account signs in with
    its password), or a Django session cookie. A browser always sends Origin, and a
    foreign one is refused (cross-site WebSocket hijacking). A handshake without Origin
    comes from a non-browser client, accepted only when the proxy vouches for it: a bare
    session cookie is not enough.
    """
    meta = request_meta(scope)
    origin = meta.get("HTTP_ORIGIN")
    if origin is not None and not origin_allowed(origin, meta.get("HTTP_HOST")):
        return "foreign origin"
    try:
        proxy_user = proxy_request_user(meta, scope.get("headers", []))
    except ProxyIdentityRefused as exc:
        return str(exc)
    if proxy_user is not None and may_sign_in_by_proxy(proxy_user):
        return Listener(proxy_user.pk, by_proxy=True)
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        if proxy_user is not None:
            name = proxy_user.get_username()
            return f"the proxy names {name!r}, a staff account: it signs in with its password"
        return "not authenticated"
    if origin is None:
        return "session cookie without origin"
    return Listener(user.pk, by_proxy=False)


class ProtocolError(Exception):
    """A client message the protocol cannot act on; reported, connection kept."""


class LayerUnavailable(Exception):
    """The channel layer failed or did not answer within LAYER_TIMEOUT_S."""


async def within_layer_timeout(call):
    """Await a channel-layer call; raise ``LayerUnavailable`` if it fails or hangs."""
    try:
        return await asyncio.wait_for(call, LAYER_TIMEOUT_S)
    except Exception as exc:
        raise LayerUnavailable(str(exc) or type(exc).__name__) from exc


class SentEvents:
    """The events last sent on a connection, each with the number of the subscription to its
    session's channel it was sent under (0: none), to send each event once (it can arrive
    through two subscribed channels, or live, replayed and in a catchup).

    What can arrive again is one replay or catchup page per subscribed channel
    (``events.REPLAY_LIMIT`` events each) and the live events beside them: that many are kept
    (``fit``), the newest sent, so what a connection keeps follows what it subscribes to, not
    how long it has been open (a dashboard open for days receives tens of thousands)."""

    def __init__(self, per_channel: int):
        self.per_channel = per_channel
        self.size = per_channel
        self.under: OrderedDict[int, int] = OrderedDict()

    def fit(self, channels: int) -> None:
        """Keep room for the replays of ``channels`` subscribed channels and the live events."""
        self.size = (channels + 1) * self.per_channel

    def add(self, event_id: int, subscription: int) -> None:
        self.under[event_id] = subscription
        self.under.move_to_end(event_id)
        while len(self.under) > self.size:
            self.under.popitem(last=False)

    def get(self, event_id: int) -> int | None:
        return self.under.get(event_id)


class ClientInbox:
    """The client's messages, read as they arrive, so that a handler can tell whether
    more are waiting: the rest of a burst of subscribes and catchups.

    ``unanswered`` counts those read and not yet handled to the end."""

    def __init__(self, receive):
        self.messages: asyncio.Queue = asyncio.Queue()
        self.arrived = asyncio.Event()
        self.unanswered = 0
        self.reader = asyncio.create_task(self._read(receive), name="websocket-inbox")

    async def _read(self, receive) -> None:
        while True:
            try:
                message = await receive()
            except Exception as exc:  # the consumer raises it where it reads the message
                self.messages.put_nowait(exc)
                return
            self.unanswered += 1
            self.messages.put_nowait(message)
            self.arrived.set()
            if message["type"] == "websocket.disconnect":
                return

    async def receive(self) -> dict:
        message = await self.messages.get()
        if isinstance(message, Exception):
            raise message
        return message

    async def more_within(self, timeout_s: float) -> bool:
        """Whether a message is waiting, or arrives within ``timeout_s``."""
        if not self.messages.empty():
            return True
        self.arrived.clear()
        try:
            await asyncio.wait_for(self.arrived.wait(), timeout_s)
        except TimeoutError:
            return False
        return True


@dataclass(frozen=True)
class PendingReplay:
    """A subscribed channel's replay, sent when its burst ends: the newest events
    (``after_id`` None), or, when a catchup came with the subscribe, those after it
    (then answered with ``catchup.complete``)."""

    after_id: int | None = None
    answers_catchup: bool = False


def shown(value) -> str:
    """A client's value in an error message: a string (cut short) or None as such, else its type
    (a list would not hash as a handler key, a deeply nested one would not even print)."""
    if value is None or isinstance(value, str):
        return repr(value)[:100]
    return f"of type {type(value).__name__}"


def channel_of(content: dict) -> str:
    if "channel" not in content:
        raise ProtocolError("missing field 'channel'")
    if not isinstance(content["channel"], str):
        raise ProtocolError(f"'channel' must be a string, not {type(content['channel']).__name__}")
    try:
        return events.parse_channel(content["channel"])
    except events.InvalidChannel as exc:
        raise ProtocolError(str(exc)) from exc


def last_event_id_of(content: dict) -> int:
    value = content.get("last_event_id")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError("'last_event_id' must be a non-negative integer (0 for everything stored)")
    return value


class ScoringEventsConsumer(AsyncJsonWebsocketConsumer):
    """One dashboard connection: channel subscriptions, catchup, keepalive."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.connection_id = str(uuid.uuid4())
        # channel -> the number of its subscription (a channel subscribed again after an
        # unsubscribe has new handlers in the dashboards: it gets a new number).
        self.subscriptions: dict[str, int] = {}
        self.subscription_numbers = itertools.count(1)
        self.sent = SentEvents(events.REPLAY_LIMIT)
        # Replays waiting for the end of their burst, and the live events held meanwhile.
        self.pending: dict[str, PendingReplay] = {}
        self.held: list[dict] = []
        # channel -> the newest stored event id when it was subscribed (see resync.Listener).
        self.checked_up_to: dict[str, int] = {}
        # While a message is handled, live events wait in ``held`` (as they waited in the
        # connection's layer channel when each connection had one): they go out after it.
        self.busy = False
        # The web server's WRITE_TEXT_EXTENSION, when it offers it.
        self.write_text = None

    async def __call__(self, scope, receive, send):
        extensions = scope.get("extensions") or {}
        self.write_text = extensions.get(WRITE_TEXT_EXTENSION, {}).get("write_text")
        self.inbox = ClientInbox(receive)
        if self.write_text is not None and ANSWER_AT_ONCE_EXTENSION in extensions:
            extensions[ANSWER_AT_ONCE_EXTENSION]["answer_with"](self.answered_at_once)
        # The fan-out and the resync must forget the connection when it ends, also by an
        # exception (then ``disconnect`` is not called).
        try:
            await super().__call__(scope, self.inbox.receive, send)
        finally:
            self.inbox.reader.cancel()
            fanout.of_this_loop().forget(self)
            resync.forget(self)

    async def connect(self):
        listener = await database_sync_to_async(admitted)(self.scope)
        if isinstance(listener, str):
            reason = listener
            # Closing before accepting refuses the handshake (the web server answers
            # HTTP 403). The dashboards reset their reconnect back-off whenever
            # a socket opens, so accepting and then closing would make them
            # reconnect several times a second, forever.
            logger.info("websocket %s refused: %s", self.connection_id, reason)
            await self.close()
            return
        await self.accept()
        access.watch(self.channel_name, listener.user_id, listener.by_proxy)
        await relay.ensure_running()
        if events.publishes_directly():
            resync.watch(self)
        await self.send_json({"type": "connection.established", "connection_id": self.connection_id})

    async def disconnect(self, code):
        access.forget(self.channel_name)
        resync.forget(self)
        try:
            for channel in self.subscriptions:
                await self.leave(channel)
        except LayerUnavailable as exc:
            # Harmless: the layer forgets a group member after its group expiry.
            logger.warning("websocket %s: could not leave its groups: %s", self.connection_id, exc)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        try:
            content = json.loads(text_data if text_data is not None else bytes_data)
        except (TypeError, ValueError):
            error = "message is not valid JSON"
        except RecursionError:
            error = "message is nested too deeply"
        else:
            await self.receive_json(content)
            return
        await self.send_pending_replays()
        await self.send_error(error)

    async def receive_json(self, content, **kwargs):
        handlers = {
            "subscribe": self.subscribe,
            "unsubscribe": self.unsubscribe,
            "catchup": self.catchup,
            "ping": self.ping,
        }
        action = content.get("action") if isinstance(content, dict) else None
        if action not in BURST_ACTIONS:
            # Answered after what the messages before it asked for.
            await self.send_pending_replays()
        if not isinstance(action, str) or action not in handlers:
            await self.send_error(f"unknown action {shown(action)}: use one of {sorted(handlers)}")
            return
        try:
            await handlers[action](content)
            if self.pending and not await self.inbox.more_within(BURST_GRACE_S):
                await self.send_pending_replays()
        except ProtocolError as exc:
            await self.send_pending_replays()
            await self.send_error(str(exc))
        except LayerUnavailable as exc:
            # Without the layer no live event can reach this connection: close it,
            # so that the client reconnects and catches up once the layer is back.
            logger.warning("websocket %s: channel layer unavailable (%s); closing", self.connection_id, exc)
            await self.send_error("live events unavailable (channel layer down): reconnect and catch up")
            await self.close(code=CLOSE_TRY_AGAIN_LATER)

    async def send_error(self, message: str) -> None:
        await self.send_json({"type": "error", "message": message})

    async def subscribe(self, content: dict) -> None:
        """Confirm at once; the channel's replay waits for the end of the burst
        (``send_pending_replays``)."""
        channel = channel_of(content)
        if channel not in self.subscriptions:
            if len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
                raise ProtocolError(f"at most {MAX_SUBSCRIPTIONS} subscriptions per connection")
            await self.join(channel)
            self.subscriptions[channel] = next(self.subscription_numbers)
            self.sent.fit(len(self.subscriptions))
            self.checked_up_to[channel] = await database_sync_to_async(selectors.latest_event_id)()
        await self.send_json({"type": "subscription.confirmed", "channel": channel})
        self.pending.setdefault(channel, PendingReplay())

    async def send_pending_replays(self) -> None:
        """Send the replays of the channels subscribed in the burst that ended, with
        the live events held meanwhile, as one stream in id order; then a
        ``catchup.overflow`` for each replay that left older events out, and the
        ``catchup.complete`` of each catchup that came with its subscribe.

        Both dashboards hand an event to the handlers of its session's channel,
        whichever subscription brought it: so an event of a session whose channel
        is subscribed comes only from that channel's replay (not before its older
        events from the ``sessions`` replay, nor when at or below the catchup's
        position), and it is sent again if it was sent before that channel was
        subscribed (its handlers did not get it then).

        The groups were joined before the replays are read, so an event committed
        in between is both replayed and held; it is sent once.
        """
        if not self.pending:
            return
        try:
            await self.send_replays(self.pending)
        finally:
            self.pending = {}

    async def send_replays(self, pending: dict[str, PendingReplay]) -> None:
        pages = await database_sync_to_async(events.replay_pages)(
            {channel: replay.after_id for channel, replay in pending.items()}
        )
        held, self.held = self.held, []
        stream = {}
        for channel, (page, _) in pages.items():
            for event in page:
                its_own_channel = events.session_channel(event)
                if channel == its_own_channel or its_own_channel not in self.subscriptions:
                    stream[event["id"]] = event
        for event in held:
            followed_by = events.session_channel(event)
            if followed_by not in self.subscriptions:
                followed_by = events.SESSIONS_CHANNEL
            position = pending.get(followed_by, PendingReplay()).after_id
            if position is None or event["id"] > position:
                stream.setdefault(event["id"], event)
        for event_id in sorted(stream):
            await self.send_event(stream[event_id])
        for channel, (page, has_more) in pages.items():
            if has_more:
                await self.send_json({"type": "catchup.overflow", "channel": channel, "has_more": True})
            if pending[channel].answers_catchup:
                last_event_id = page[-1]["id"] if page else pending[channel].after_id
                await self.send_catchup_complete(channel, has_more, last_event_id)

    async def unsubscribe(self, content: dict) -> None:
        channel = channel_of(content)
        if channel in self.subscriptions:
            await self.leave(channel)
            del self.subscriptions[channel]
            self.sent.fit(len(self.subscriptions))
        await self.send_json({"type": "subscription.cancelled", "channel": channel})

    async def catchup(self, content: dict) -> None:
        """Replay one page of stored events after ``last_event_id``; the client
        asks again from the returned ``last_event_id`` while ``has_more``.

        A catchup that comes with its channel's subscribe, in the same burst,
        says where that channel's replay starts."""
        channel = channel_of(content)
        last_event_id = last_event_id_of(content)
        replay = self.pending.get(channel)
        if replay is not None and not replay.answers_catchup:
            self.pending[channel] = PendingReplay(after_id=last_event_id, answers_catchup=True)
            return
        await self.send_pending_replays()
        page, has_more = await database_sync_to_async(events.events_after)(channel, last_event_id)
        for event in page:
            await self.send_event(event)
        await self.send_catchup_complete(channel, has_more, page[-1]["id"] if page else last_event_id)

    async def send_catchup_complete(self, channel: str, has_more: bool, last_event_id: int) -> None:
        complete = {"type": "catchup.complete", "channel": channel, "has_more": has_more}
        await self.send_json({**complete, "last_event_id": last_event_id})

    async def join(self, channel: str) -> None:
        await within_layer_timeout(fanout.of_this_loop().add(channel, self))

    async def leave(self, channel: str) -> None:
        await within_layer_timeout(fanout.of_this_loop().remove(channel, self))

    async def ping(self, content: dict) -> None:
        await self.send_text(PONG_TEXT)

    def answered_at_once(self, text: str) -> bool:
        """Answer a dashboard's ``ping`` as the web server reads it (ANSWER_AT_ONCE_EXTENSION),
        when nothing is before it (no message being handled or waiting, no replay pending):
        its pong written at once, without decoding and encoding JSON, the ASGI receive or the
        consumer's dispatch. Go TARSy's dashboard pings every 20 s: 250 pings a second at
        5,000 dashboards."""
        if (
            text not in PING_TEXTS
            or self.busy
            or self.pending
            or self.inbox.unanswered
        ):
            return False
        return self.write_text(PONG_TEXT)

    async def access_revoked(self, message: dict) -> None:
        """Its user may no longer listen (``access.REVOKED_MESSAGE_TYPE``): close."""
        logger.info("websocket %s closed: %s", self.connection_id, message["reason"])
        await self.close(code=access.CLOSE_POLICY_VIOLATION)

    async def dispatch(self, message):
        # channels' own dispatch first closes its sync thread's stale database connections,
        # by a hop to that one thread, for every message: a dashboard's ping every 20 s and
        # every live event, 5,000 hops an event at 5,000 dashboards (seconds before the last
        # got it). Every query here goes through database_sync_to_async, which closes them
        # itself.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        self.busy = True
        try:
            await handler(message)
            while self.held and not self.pending:
                held, self.held = self.held, []
                for event in held:
                    await self.send_event(event)
        finally:
            self.busy = False
            if message["type"].startswith("websocket."):  # the client's (``ClientInbox``)
                self.inbox.unanswered -= 1

    async def deliver(self, event: dict, text: str | None = None) -> None:
        """Send an event that came live (``fanout``; ``text``: its JSON) or from the resync;
        held while a message is handled or replays wait for the end of their burst, to go
        out in order with them."""
        if self.busy or self.pending:
            self.held.append(event)
        else:
            await self.send_event(event, text)

    async def send_event(self, event: dict, text: str | None = None) -> None:
        """Send ``event`` unless this connection sent it already: under the current
        subscription to its session's channel, when that channel is subscribed (the
        dashboards hand it to that channel's handlers), else at all."""
        subscription = self.subscriptions.get(events.session_channel(event), 0)
        sent_under = self.sent.get(event["id"])
        if sent_under is not None and (subscription == 0 or sent_under == subscription):
            return
        self.sent.add(event["id"], subscription)
        await self.send_text(json.dumps(event) if text is None else text)

    async def send_text(self, text: str) -> None:
        """Send a text message: at once through the web server's WRITE_TEXT_EXTENSION when
        it offers it (nothing is sent on a connection that is closing), else by ASGI."""
        if self.write_text is not None:
            self.write_text(text)
        else:
            await self.send(text_data=text)
