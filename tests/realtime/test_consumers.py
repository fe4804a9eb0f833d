"""The /api/v1/ws protocol, driven in-process with channels' WebsocketCommunicator.

Events are recorded in committed transactions and reach the consumer the way
they do in production: through the relay with the in-memory layer, or directly
when the tests run with a Redis layer.
"""

import asyncio
import time
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client

from scoring.models import ScoringEvent
from scoring.realtime import consumers, events
from scoring.realtime.consumers import CLOSE_TRY_AGAIN_LATER, MAX_SUBSCRIPTIONS
from scoring.realtime.extensions import ANSWER_AT_ONCE_EXTENSION, WRITE_TEXT_EXTENSION
from scoring.selectors import latest_event_id
from tarsy_scoring.asgi import application
from tests.support.factories import make_score, make_session
from tests.support.servers import WS_PATH, redis_channel_layer

PROXY_USER = [(b"x-forwarded-user", b"alice")]
# Generous, only so that a broken consumer fails instead of hanging.
TIMEOUT_S = 10

pytestmark = pytest.mark.django_db(transaction=True)


class LoopbackCommunicator(WebsocketCommunicator):
    """A handshake from ``client`` (the web server puts the peer address in the scope)."""

    def __init__(self, headers=(), client=("127.0.0.1", 50123)):
        super().__init__(application, WS_PATH, headers=list(headers))
        self.scope["client"] = list(client)

    async def open(self) -> dict:
        connected, _ = await self.connect(TIMEOUT_S)
        assert connected
        return await self.receive_json_from(TIMEOUT_S)

    async def request(self, message) -> dict:
        await self.send_json_to(message)
        return await self.receive_json_from(TIMEOUT_S)

    async def refused(self) -> bool:
        """Whether the server closed the handshake without accepting it (the web
        server answers such a handshake with HTTP 403; see test_realtime_processes)."""
        connected, _ = await self.connect(TIMEOUT_S)
        return not connected

    async def subscribe_with_replay(self, channel: str) -> list[dict]:
        """Subscribe; return what followed the confirmation (a ping marks the end)."""
        assert await self.request({"action": "subscribe", "channel": channel}) == {
            "type": "subscription.confirmed",
            "channel": channel,
        }
        return await self.answers()

    async def answers(self, *messages: dict) -> list[dict]:
        """Send ``messages`` at once, then a ping; return all that came before the pong
        (the server answers in order)."""
        for message in (*messages, {"action": "ping"}):
            await self.send_json_to(message)
        received = []
        while (message := await self.receive_json_from(TIMEOUT_S))["type"] != "pong":
            received.append(message)
        return received


def run(scenario):
    return async_to_sync(scenario)()


def record_committed(event_type, score, **fields) -> dict:
    with transaction.atomic():
        return events.payload(events.record(event_type, score, **fields))


record = database_sync_to_async(record_committed)


@pytest.fixture
def score():
    return make_score(make_session(), status="in_progress")


def session_channel(score) -> str:
    return f"session:{score.session_id}"


# --- connection and simple actions --------------------------------------------------------


def test_connection_is_established_with_an_id_and_answers_ping():
    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        greeting = await ws.open()
        pong = await ws.request({"action": "ping"})
        await ws.disconnect()
        return greeting, pong

    greeting, pong = run(scenario)
    assert greeting["type"] == "connection.established"
    assert uuid.UUID(greeting["connection_id"])
    assert pong == {"type": "pong"}


def test_a_ping_is_answered_as_the_web_server_reads_it_only_when_nothing_is_before_it():
    """With the web server's extensions (tarsy_scoring.server), the consumer gives it its answer
    to a ``ping``: the pong written at once, unless a message is being handled or a burst's
    replay waits (the answer goes after theirs, by the consumer's own dispatch)."""
    written, answers = [], []

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        ws.scope["extensions"] = {
            WRITE_TEXT_EXTENSION: {"write_text": lambda text: written.append(text) or True},
            ANSWER_AT_ONCE_EXTENSION: {"answer_with": answers.append},
        }
        await ws.open()
        [answer] = answers
        idle = [answer(text) for text in consumers.PING_TEXTS | {'{"action": "catchup"}'}]
        await ws.send_json_to({"action": "subscribe", "channel": "sessions"})
        await ws.receive_json_from(TIMEOUT_S)  # confirmed; its replay waits for the burst's end
        during_burst = answer('{"action":"ping"}')
        await ws.send_json_to({"action": "ping"})
        while consumers.PONG_TEXT not in written[2:]:
            await asyncio.sleep(0.01)
        after = answer('{"action":"ping"}')
        await ws.disconnect()
        return idle, during_burst, after

    idle, during_burst, after = run(scenario)
    assert sorted(idle) == [False, True, True]
    assert during_burst is False
    assert after is True
    assert written == [consumers.PONG_TEXT] * 4


def test_subscribe_and_unsubscribe_confirm_the_canonical_channel():
    session_id = uuid.uuid4()

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        replies = [
            await ws.request({"action": "subscribe", "channel": "sessions"}),
            await ws.request({"action": "subscribe", "channel": f"session:{str(session_id).upper()}"}),
            await ws.request({"action": "unsubscribe", "channel": "sessions"}),
        ]
        await ws.disconnect()
        return replies

    assert run(scenario) == [
        {"type": "subscription.confirmed", "channel": "sessions"},
        {"type": "subscription.confirmed", "channel": f"session:{session_id}"},
        {"type": "subscription.cancelled", "channel": "sessions"},
    ]


@pytest.mark.parametrize(
    ("message", "error_says"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "unknown action"),
        ('{"channel": "sessions"}', "unknown action None"),
        ('{"action": "shout"}', "unknown action 'shout'"),
        ('{"action": ["subscribe"]}', "unknown action of type list"),
        ('{"action": {"subscribe": 1}}', "unknown action of type dict"),
        ('{"action": "subscribe", "channel": ["sessions"]}', "'channel' must be a string, not list"),
        ('{"action": "ping", "padding": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"action": ' + "[" * 900 + "]" * 900 + "}", "unknown action of type list"),
        ('{"action": "subscribe"}', "missing field 'channel'"),
        ('{"action": "subscribe", "channel": "session:42"}', "unknown channel 'session:42'"),
        ('{"action": "unsubscribe", "channel": "alerts"}', "unknown channel 'alerts'"),
        ('{"action": "catchup", "channel": "sessions"}', "'last_event_id' must be"),
        ('{"action": "catchup", "channel": "sessions", "last_event_id": -1}', "'last_event_id' must be"),
        ('{"action": "catchup", "channel": "sessions", "last_event_id": "5"}', "'last_event_id' must be"),
        ('{"action": "catchup", "channel": "sessions", "last_event_id": true}', "'last_event_id' must be"),
    ],
)
def test_bad_messages_get_an_error_and_the_connection_stays_open(message, error_says):
    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        await ws.send_to(text_data=message)
        error = await ws.receive_json_from(TIMEOUT_S)
        pong = await ws.request({"action": "ping"})
        await ws.disconnect()
        return error, pong

    error, pong = run(scenario)
    assert error["type"] == "error"
    assert error_says in error["message"]
    assert pong == {"type": "pong"}


def test_subscriptions_per_connection_are_limited():
    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        for _ in range(MAX_SUBSCRIPTIONS):
            await ws.request({"action": "subscribe", "channel": f"session:{uuid.uuid4()}"})
        over = await ws.request({"action": "subscribe", "channel": "sessions"})
        await ws.disconnect()
        return over

    assert run(scenario) == {
        "type": "error",
        "message": f"at most {MAX_SUBSCRIPTIONS} subscriptions per connection",
    }


# --- live events ----------------------------------------------------------------------------


def test_subscriber_receives_the_events_of_its_session_in_order(score):
    other = make_score(make_session(), status="in_progress")

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        await ws.request({"action": "subscribe", "channel": session_channel(score)})
        await record(events.STARTED, other)
        recorded = [
            await record(events.STARTED, score),
            await record(events.PROGRESS, score, phase=events.PHASE_ANALYZING),
            await record(events.PROGRESS, score, phase=events.PHASE_MISSING_TOOLS),
            await record(events.COMPLETED, score, total_score=64),
        ]
        received = [await ws.receive_json_from(TIMEOUT_S) for _ in recorded]
        await ws.disconnect()
        return recorded, received

    recorded, received = run(scenario)
    assert received == recorded
    assert [event["type"] for event in received] == [
        "scoring.started",
        "scoring.progress",
        "scoring.progress",
        "scoring.completed",
    ]


def test_sessions_channel_gets_lifecycle_events_of_every_session_but_no_progress(score):
    other = make_score(make_session(), status="in_progress")

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        await ws.request({"action": "subscribe", "channel": "sessions"})
        await record(events.STARTED, score)
        await record(events.PROGRESS, score, phase=events.PHASE_ANALYZING)
        await record(events.FAILED, other, error_message="judge unavailable")
        received = [await ws.receive_json_from(TIMEOUT_S) for _ in range(2)]
        await ws.disconnect()
        return received

    started, failed = run(scenario)
    assert (started["type"], started["session_id"]) == ("scoring.started", str(score.session_id))
    assert (failed["type"], failed["error_message"]) == ("scoring.failed", "judge unavailable")


def test_event_on_two_subscribed_channels_is_sent_once(score):
    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        await ws.request({"action": "subscribe", "channel": "sessions"})
        await ws.request({"action": "subscribe", "channel": session_channel(score)})
        started = await record(events.STARTED, score)
        completed = await record(events.COMPLETED, score, total_score=70)
        received = [await ws.receive_json_from(TIMEOUT_S) for _ in range(2)]
        await ws.disconnect()
        return [started, completed], received

    recorded, received = run(scenario)
    assert received == recorded


def test_a_connection_remembers_what_its_subscriptions_can_bring_back_not_all_it_ever_sent():
    sent = consumers.SentEvents(per_channel=3)
    sent.fit(1)  # one channel's replay, and the live events beside it
    for event_id in range(1, 10_001):  # days of events on an open dashboard
        sent.add(event_id, 1)
    assert len(sent.under) == 6
    assert [sent.get(event_id) for event_id in (9_995, 9_994)] == [1, None]  # the newest kept
    sent.fit(3)  # two more channels subscribed: room for their replays
    for event_id in range(20_001, 20_011):
        sent.add(event_id, 2)
    assert len(sent.under) == 12 and sent.get(9_999) == 1
    sent.fit(0)  # every channel unsubscribed
    sent.add(30_000, 0)
    assert list(sent.under) == [20_009, 20_010, 30_000]


def test_unsubscribed_channel_no_longer_delivers(score):
    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        await ws.request({"action": "subscribe", "channel": "sessions"})
        await ws.request({"action": "subscribe", "channel": session_channel(score)})
        await ws.request({"action": "unsubscribe", "channel": session_channel(score)})
        # Progress goes only to the session channel, which is gone.
        await record(events.PROGRESS, score, phase=events.PHASE_ANALYZING)
        completed = await record(events.COMPLETED, score, total_score=70)
        received = await ws.receive_json_from(TIMEOUT_S)
        await ws.disconnect()
        return completed, received

    completed, received = run(scenario)
    assert received == completed


# --- catchup --------------------------------------------------------------------------------


def test_catchup_pages_by_100_with_has_more(score):
    recorded = [record_committed(events.PROGRESS, score, phase=events.PHASE_ANALYZING) for _ in range(150)]

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        pages = []
        last_event_id = 0
        for _ in range(2):
            await ws.send_json_to(
                {"action": "catchup", "channel": session_channel(score), "last_event_id": last_event_id}
            )
            replayed = [await ws.receive_json_from(TIMEOUT_S) for _ in range(100 if not pages else 50)]
            complete = await ws.receive_json_from(TIMEOUT_S)
            pages.append((replayed, complete))
            last_event_id = complete["last_event_id"]
        final = await ws.request(
            {"action": "catchup", "channel": session_channel(score), "last_event_id": last_event_id}
        )
        await ws.disconnect()
        return pages, final

    [(first, first_complete), (second, second_complete)], final = run(scenario)
    assert first == recorded[:100] and second == recorded[100:]
    assert first_complete == {
        "type": "catchup.complete",
        "channel": session_channel(score),
        "has_more": True,
        "last_event_id": recorded[99]["id"],
    }
    assert second_complete["has_more"] is False
    assert second_complete["last_event_id"] == recorded[-1]["id"]
    # Nothing newer: the reply keeps the id the client sent.
    assert final == {
        "type": "catchup.complete",
        "channel": session_channel(score),
        "has_more": False,
        "last_event_id": recorded[-1]["id"],
    }


def test_catchup_of_sessions_replays_lifecycle_events_after_the_given_id(score):
    started = record_committed(events.STARTED, score)
    record_committed(events.PROGRESS, score, phase=events.PHASE_ANALYZING)
    completed = record_committed(events.COMPLETED, score, total_score=88)

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        await ws.send_json_to({"action": "catchup", "channel": "sessions", "last_event_id": started["id"]})
        replayed = await ws.receive_json_from(TIMEOUT_S)
        complete = await ws.receive_json_from(TIMEOUT_S)
        await ws.disconnect()
        return replayed, complete

    replayed, complete = run(scenario)
    assert replayed == completed
    assert complete == {
        "type": "catchup.complete",
        "channel": "sessions",
        "has_more": False,
        "last_event_id": completed["id"],
    }


def test_catchup_skips_events_this_connection_already_received_live(score):
    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        await ws.request({"action": "subscribe", "channel": session_channel(score)})
        started = await record(events.STARTED, score)
        live = await ws.receive_json_from(TIMEOUT_S)
        await ws.request({"action": "unsubscribe", "channel": session_channel(score)})
        completed = await record(events.COMPLETED, score, total_score=90)
        await ws.send_json_to({"action": "catchup", "channel": session_channel(score), "last_event_id": 0})
        replayed = await ws.receive_json_from(TIMEOUT_S)
        complete = await ws.receive_json_from(TIMEOUT_S)
        await ws.disconnect()
        return started, live, completed, replayed, complete

    started, live, completed, replayed, complete = run(scenario)
    assert live == started
    assert replayed == completed
    assert complete["last_event_id"] == completed["id"]


# --- db_event_id and replay on subscribe (Go TARSy's dashboard) ---------------------------


def test_every_event_carries_db_event_id_equal_to_its_stored_id_live_replayed_and_caught_up(score):
    """Go TARSy's dashboard (web/dashboard/src/services/websocket.ts) takes its resume
    position from ``db_event_id``, not ``id``: without it, it never asks for a catchup."""
    replayed_one = record_committed(events.STARTED, score)

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        replayed = await ws.subscribe_with_replay(session_channel(score))
        await record(events.PROGRESS, score, phase=events.PHASE_ANALYZING)
        live = await ws.receive_json_from(TIMEOUT_S)
        await ws.request({"action": "unsubscribe", "channel": session_channel(score)})
        await record(events.COMPLETED, score, total_score=61)
        caught_up = await ws.request(
            {"action": "catchup", "channel": session_channel(score), "last_event_id": live["id"]}
        )
        assert (await ws.receive_json_from(TIMEOUT_S))["type"] == "catchup.complete"
        await ws.disconnect()
        return replayed, live, caught_up

    replayed, live, caught_up = run(scenario)
    assert replayed == [replayed_one]
    stored_ids = list(ScoringEvent.objects.order_by("id").values_list("id", flat=True))
    assert [event["db_event_id"] for event in (*replayed, live, caught_up)] == stored_ids
    assert all(event["db_event_id"] == event["id"] for event in (*replayed, live, caught_up))


def test_subscribe_replays_the_channels_newest_events_oldest_first(score):
    """Go TARSy's server sends a channel's stored events right after
    ``subscription.confirmed``; its dashboard relies on that to fill a page and to
    recover what it missed while disconnected."""
    other = make_score(make_session(), status="in_progress")
    started = record_committed(events.STARTED, score)
    progress = record_committed(events.PROGRESS, score, phase=events.PHASE_ANALYZING)
    other_started = record_committed(events.STARTED, other)
    completed = record_committed(events.COMPLETED, score, total_score=72)

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        on_session = await ws.subscribe_with_replay(session_channel(score))
        on_sessions = await ws.subscribe_with_replay("sessions")
        await ws.disconnect()
        return on_session, on_sessions

    on_session, on_sessions = run(scenario)
    assert on_session == [started, progress, completed]
    # Already sent for the session channel: only the other session's event is new.
    assert on_sessions == [other_started]


def test_replay_is_bounded_to_the_newest_200_and_says_when_older_were_left_out(score):
    """Go TARSy's server replays at most 200 events and then sends
    ``catchup.overflow`` (its dashboard reloads over REST on it)."""
    with transaction.atomic():
        stored = [events.record(events.PROGRESS, score, phase=events.PHASE_ANALYZING) for _ in range(205)]
    newest = [events.payload(event) for event in stored[-events.REPLAY_LIMIT :]]

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        replayed = await ws.subscribe_with_replay(session_channel(score))
        await ws.disconnect()
        return replayed

    *replayed, overflow = run(scenario)
    assert events.REPLAY_LIMIT == 200
    assert replayed == newest
    assert overflow == {"type": "catchup.overflow", "channel": session_channel(score), "has_more": True}


def test_a_catchup_sent_with_the_subscribe_starts_the_replay_after_its_position(score):
    """Both dashboards resubscribe after a reconnect and, once they have a position,
    send ``catchup`` from it right after the ``subscribe``: the replay starts after
    that position (the client has the events up to it), each event once."""
    recorded = [
        record_committed(events.STARTED, score),
        record_committed(events.PROGRESS, score, phase=events.PHASE_ANALYZING),
        record_committed(events.COMPLETED, score, total_score=58),
    ]

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        received = await ws.answers(
            {"action": "subscribe", "channel": session_channel(score)},
            {"action": "catchup", "channel": session_channel(score), "last_event_id": recorded[0]["id"]},
        )
        await ws.disconnect()
        return received

    confirmed, *replayed, complete = run(scenario)
    assert confirmed == {"type": "subscription.confirmed", "channel": session_channel(score)}
    assert replayed == recorded[1:]
    assert complete == {
        "type": "catchup.complete",
        "channel": session_channel(score),
        "has_more": False,
        "last_event_id": recorded[-1]["id"],
    }


def test_a_session_channel_subscribed_later_replays_its_events_sent_before_through_sessions(score):
    """The dashboards hand an event to the handlers of its session's channel: one that
    came through ``sessions`` before that channel was subscribed reached none of them,
    so the channel's replay sends it again, with the session's other events, in order."""

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        assert await ws.subscribe_with_replay("sessions") == []
        started = await record(events.STARTED, score)
        live = await ws.receive_json_from(TIMEOUT_S)
        progress = await record(events.PROGRESS, score, phase=events.PHASE_ANALYZING)
        replayed = await ws.subscribe_with_replay(session_channel(score))
        # Subscribed to both now: a live event comes once.
        completed = await record(events.COMPLETED, score, total_score=75)
        next_message = await ws.receive_json_from(TIMEOUT_S)
        assert await ws.subscribe_with_replay("sessions") == []
        await ws.disconnect()
        return started, live, progress, replayed, completed, next_message

    started, live, progress, replayed, completed, next_message = run(scenario)
    assert live == started
    assert replayed == [started, progress]
    assert next_message == completed


def test_subscribes_sent_together_are_replayed_as_one_stream_in_id_order(score):
    """``sessions`` and a session's channel subscribed at once (as the dashboards do after
    a reconnect): the session's lifecycle events do not come ahead of its progress."""
    other = make_score(make_session(), status="in_progress")
    recorded = [
        record_committed(events.STARTED, score),
        record_committed(events.STARTED, other),
        record_committed(events.PROGRESS, score, phase=events.PHASE_ANALYZING),
        record_committed(events.COMPLETED, score, total_score=66),
    ]

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        received = await ws.answers(
            {"action": "subscribe", "channel": "sessions"},
            {"action": "subscribe", "channel": session_channel(score)},
        )
        await ws.disconnect()
        return received

    received = run(scenario)
    assert [message["type"] for message in received[:2]] == ["subscription.confirmed"] * 2
    assert received[2:] == recorded


def test_an_event_committed_during_the_replay_is_sent_once(score, monkeypatch):
    """The channel's group is joined before the replay is read, so an event committed
    in between is both replayed and delivered live: the connection sends it once."""
    read_replay = events.recent_events
    committed_meanwhile = []

    def commit_then_read(channel, *args, **kwargs):
        committed_meanwhile.append(record_committed(events.STARTED, score))
        return read_replay(channel, *args, **kwargs)

    monkeypatch.setattr(events, "recent_events", commit_then_read)

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        replayed = await ws.subscribe_with_replay(session_channel(score))
        # Live delivery is in commit order: a second copy of the first event
        # would come before this one.
        later = await record(events.COMPLETED, score, total_score=80)
        next_message = await ws.receive_json_from(TIMEOUT_S)
        await ws.disconnect()
        return replayed, later, next_message

    replayed, later, next_message = run(scenario)
    assert replayed == committed_meanwhile
    assert next_message == later


# --- who may connect ------------------------------------------------------------------------


def session_cookie(username="carol") -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(get_user_model().objects.create_user(username))
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


@pytest.mark.parametrize(
    ("headers", "client"),
    [
        ([], ("127.0.0.1", 5000)),
        (PROXY_USER, ("10.1.2.3", 5000)),
        ([(b"x-forwarded-user", b"  ")], ("127.0.0.1", 5000)),
        ([(b"host", b"localhost"), (b"origin", b"http://localhost")], ("127.0.0.1", 5000)),
        (PROXY_USER + [(b"origin", b"https://evil.example")], ("127.0.0.1", 5000)),
        (PROXY_USER + [(b"origin", b"null")], ("127.0.0.1", 5000)),
        # Another port of an allowed host is another site (another app on the machine).
        (
            PROXY_USER + [(b"host", b"localhost:8000"), (b"origin", b"http://localhost:9999")],
            ("127.0.0.1", 5000),
        ),
        (PROXY_USER + [(b"origin", b"http://localhost:8000")], ("127.0.0.1", 5000)),
    ],
)
def test_unauthenticated_and_foreign_origin_handshakes_are_refused_before_accept(headers, client):
    """Both dashboards reconnect after any close and reset their back-off when a
    socket opens: a refusal must never open the socket, or they retry ~5 times a second."""

    async def scenario():
        return await LoopbackCommunicator(headers, client).refused()

    assert run(scenario)


def test_session_cookie_needs_an_allowed_origin():
    cookie = session_cookie()

    async def scenario():
        with_origin = LoopbackCommunicator(
            [cookie, (b"host", b"localhost:8000"), (b"origin", b"http://localhost:8000")], ("10.9.9.9", 1)
        )
        greeting = await with_origin.open()
        await with_origin.disconnect()
        without_origin = await LoopbackCommunicator([cookie], ("10.9.9.9", 1)).refused()
        foreign_origin = await LoopbackCommunicator(
            [cookie, (b"origin", b"http://attacker.example")], ("10.9.9.9", 1)
        ).refused()
        return greeting, without_origin, foreign_origin

    greeting, without_origin, foreign_origin = run(scenario)
    assert greeting["type"] == "connection.established"
    assert without_origin and foreign_origin


def test_a_proxy_name_of_a_staff_account_is_refused_as_on_rest_but_its_session_is_not():
    """As on REST (scoring.auth.may_sign_in_by_proxy): the proxy's header never signs a staff
    account in; that account's own session (its password) does."""
    get_user_model().objects.create_user("admin", is_staff=True)
    get_user_model().objects.create_user("root", is_superuser=True)
    cookie = session_cookie("staff-operator")
    get_user_model().objects.filter(username="staff-operator").update(is_staff=True)

    async def scenario():
        refused = [
            await LoopbackCommunicator([(b"x-forwarded-user", name)]).refused()
            for name in (b"admin", b"root")
        ]
        browser = [cookie, (b"host", b"localhost"), (b"origin", b"http://localhost")]
        own_session = LoopbackCommunicator([(b"x-forwarded-user", b"admin"), *browser])
        greeting = await own_session.open()
        await own_session.disconnect()
        return refused, greeting

    refused, greeting = run(scenario)
    assert refused == [True, True]
    assert greeting["type"] == "connection.established"


def test_csrf_trusted_origin_is_allowed(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://tarsy.example.com"]

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER + [(b"origin", b"https://tarsy.example.com")])
        greeting = await ws.open()
        await ws.disconnect()
        return greeting

    assert run(scenario)["type"] == "connection.established"


def test_with_redis_an_event_never_published_still_reaches_a_connected_client(
    settings, redis_server_url, score
):
    """Redis was down when the event committed: the connection's resync sends it from the table."""
    settings.CHANNEL_LAYERS = redis_channel_layer(redis_server_url)
    settings.SCORING_EVENT_RESYNC_S = 0.2

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        await ws.request({"action": "subscribe", "channel": session_channel(score)})
        stored = await database_sync_to_async(store_unpublished)(score)
        received = await ws.receive_json_from(TIMEOUT_S)
        await ws.disconnect()
        return stored, received

    stored, received = run(scenario)
    assert received == stored


def store_unpublished(score, event_id: int | None = None) -> dict:
    """An event row written without publishing it (as when Redis was down)."""
    return events.payload(
        ScoringEvent.objects.create(
            id=event_id,
            event_type=events.COMPLETED,
            score_id=score.score_id,
            session_id=score.session_id,
            on_sessions_channel=True,
            timestamp_us=time.time_ns() // 1000,
            fields={"total_score": 77},
        )
    )


def test_with_redis_a_lower_id_committed_after_a_resync_still_reaches_the_client(
    settings, redis_server_url, score
):
    """Ids are handed out before commit: the resync must not move its mark past an id
    that may still be committing, or an unpublished event committed late is lost."""
    settings.CHANNEL_LAYERS = redis_channel_layer(redis_server_url)
    settings.SCORING_EVENT_RESYNC_S = 0.2

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        await ws.request({"action": "subscribe", "channel": "sessions"})
        base = await database_sync_to_async(latest_event_id)()
        higher = await database_sync_to_async(store_unpublished)(score, base + 10)
        first = await ws.receive_json_from(TIMEOUT_S)  # sent by a resync
        lower = await database_sync_to_async(store_unpublished)(score, base + 5)  # committed late
        second = await ws.receive_json_from(TIMEOUT_S)
        await ws.disconnect()
        return (higher, lower), (first, second)

    stored, received = run(scenario)
    assert received == stored



def test_a_subscribe_the_channel_layer_cannot_serve_closes_the_socket_to_retry(
    settings, monkeypatch, silent_redis_url
):
    """Redis hangs: the client is told and the socket closed with 1013, so it reconnects
    and catches up later, instead of waiting forever for its subscription."""
    settings.CHANNEL_LAYERS = redis_channel_layer(silent_redis_url)
    monkeypatch.setattr(consumers, "LAYER_TIMEOUT_S", 0.3)

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        error = await ws.request({"action": "subscribe", "channel": "sessions"})
        closing = await ws.receive_output(TIMEOUT_S)
        return error, closing

    error, closing = run(scenario)
    assert error["type"] == "error"
    assert "reconnect and catch up" in error["message"]
    assert closing == {"type": "websocket.close", "code": CLOSE_TRY_AGAIN_LATER}


def test_a_connection_open_past_the_layers_group_expiry_still_gets_events(settings, score):
    """Single machine: the in-memory layer forgets a group member after its group expiry (a
    day); a dashboard left open longer must still get events (here the expiry is 1 s)."""
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "scoring.realtime.layers.InMemoryChannelLayer", "CONFIG": {"group_expiry": 1}}
    }

    async def scenario():
        ws = LoopbackCommunicator(PROXY_USER)
        await ws.open()
        await ws.request({"action": "subscribe", "channel": "sessions"})
        assert await ws.receive_nothing(2.5)  # past the expiry, and a sweep
        stored = await record(events.COMPLETED, score, total_score=70)
        received = await ws.receive_json_from(TIMEOUT_S)
        await ws.disconnect()
        return stored, received

    stored, received = run(scenario)
    assert received == stored


def test_with_redis_a_burst_of_subscribes_beyond_the_redis_pool_is_served(settings, redis_server_url, score):
    """150 dashboards subscribing at once (a web process restarted under them): more than
    redis-py's pool of 100 connections. Each is confirmed and gets the next event."""
    settings.CHANNEL_LAYERS = redis_channel_layer(redis_server_url, prefix=f"burst-{uuid.uuid4().hex}")
    count = 150

    async def scenario():
        sockets = [LoopbackCommunicator(PROXY_USER) for _ in range(count)]
        for ws in sockets:
            await ws.open()
        for ws in sockets:
            await ws.send_json_to({"action": "subscribe", "channel": "sessions"})
        confirmations = [await ws.receive_json_from(TIMEOUT_S) for ws in sockets]
        stored = await record(events.COMPLETED, score, total_score=70)
        received = [await ws.receive_json_from(TIMEOUT_S) for ws in sockets]
        for ws in sockets:
            await ws.disconnect()
        return confirmations, stored, received

    confirmations, stored, received = run(scenario)
    assert confirmations == [{"type": "subscription.confirmed", "channel": "sessions"}] * count
    assert received == [stored] * count
