"""Events from a separate (worker-like) process reach WebSocket clients of real web server processes.

Single-machine mode: in-memory channel layer, the web process relays stored
events. Redis mode: the recording process publishes through Redis to every web
process.
"""

import asyncio

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client

from scoring.realtime import events
from tests.support.dashboard_clients import SERVICES, DashboardClient
from tests.support.factories import make_score, make_session
from tests.support.servers import EventClient, handshake_status, record_in_process, redis_channel_layer

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

SCORING_RUN = [
    (events.STARTED, {}),
    (events.PROGRESS, {"phase": events.PHASE_ANALYZING}),
    (events.PROGRESS, {"phase": events.PHASE_MISSING_TOOLS}),
    (events.COMPLETED, {"total_score": 77}),
]


@pytest.fixture
def score():
    return make_score(make_session(), status="in_progress")


async def record_elsewhere(env, score, run):
    return await asyncio.to_thread(record_in_process, env, score.score_id, run)


def test_worker_events_reach_a_subscriber_through_the_relay(start_web, score):
    server = start_web()

    async def scenario():
        async with EventClient.connect(server.ws_url) as client:
            await client.subscribe(f"session:{score.session_id}")
            recorded_ids = await record_elsewhere(server.env, score, SCORING_RUN)
            return recorded_ids, await client.wait_for_events(len(SCORING_RUN))

    recorded_ids, received = asyncio.run(scenario())
    assert [event["id"] for event in received] == recorded_ids
    assert [event["type"] for event in received] == [event_type for event_type, _ in SCORING_RUN]
    assert [event.get("phase") for event in received[1:3]] == list(events.PHASES)
    assert received[-1]["total_score"] == 77
    assert {event["score_id"] for event in received} == {str(score.score_id)}


def test_client_that_disconnects_mid_run_resumes_by_subscribe_and_catchup_without_duplicates(
    start_web, score
):
    """tarsy-bot's dashboard (dashboard/src/services/websocketService.ts) after a
    reconnect: ``subscribe``, then ``catchup`` from the last ``id`` it saw. Go TARSy's
    dashboard does the same from ``db_event_id``. The replay that follows the
    subscribe starts after the catchup's position: every missed event, each once,
    and none the client had."""
    server = start_web()
    channel = f"session:{score.session_id}"

    async def scenario():
        async with EventClient.connect(server.ws_url) as client:
            await client.subscribe(channel)
            [started_id] = await record_elsewhere(server.env, score, SCORING_RUN[:1])
            [started] = await client.wait_for_events(1)
        # Offline while the rest of the run happens.
        rest_ids = await record_elsewhere(server.env, score, SCORING_RUN[1:])
        async with EventClient.connect(server.ws_url) as client:
            await client.send({"action": "subscribe", "channel": channel})
            await client.send(
                {"action": "catchup", "channel": channel, "last_event_id": started["db_event_id"]}
            )
            await client.send({"action": "ping"})
            received = []
            while (message := await client.receive())["type"] != "pong":
                received.append(message)
            # Live delivery resumes after the catchup.
            [failed_id] = await record_elsewhere(
                server.env, score, [(events.FAILED, {"error_message": "late"})]
            )
            [live] = await client.wait_for_events(1)
        return started_id, rest_ids, received, failed_id, live

    started_id, rest_ids, received, failed_id, live = asyncio.run(scenario())
    confirmed, *replayed, complete = received
    assert confirmed == {"type": "subscription.confirmed", "channel": channel}
    assert [event["db_event_id"] for event in replayed] == rest_ids
    assert complete == {
        "type": "catchup.complete",
        "channel": channel,
        "has_more": False,
        "last_event_id": rest_ids[-1],
    }
    assert (live["id"], live["type"]) == (failed_id, "scoring.failed")


def test_client_that_saw_nothing_before_the_drop_gets_the_whole_run_replayed_on_subscribe(
    start_web, score
):
    """Go TARSy's dashboard asks for a catchup only once it has a ``db_event_id``
    (tarsy-bot's, once it has an ``id``): a client that subscribed, dropped, and
    missed a whole scoring relies on the replay after its next ``subscribe``."""
    server = start_web()
    channel = f"session:{score.session_id}"

    async def scenario():
        async with EventClient.connect(server.ws_url) as client:
            assert await client.subscribe_with_replay(channel) == []
        recorded_ids = await record_elsewhere(server.env, score, SCORING_RUN)
        async with EventClient.connect(server.ws_url) as client:
            return recorded_ids, await client.subscribe_with_replay(channel)

    recorded_ids, replayed = asyncio.run(scenario())
    assert [event["db_event_id"] for event in replayed] == recorded_ids
    assert [event["type"] for event in replayed] == [event_type for event_type, _ in SCORING_RUN]


def logged_in_cookie() -> dict:
    client = Client()
    client.force_login(get_user_model().objects.create_user("carol"))
    return {"Cookie": f"sessionid={client.cookies['sessionid'].value}"}


def test_unauthenticated_and_foreign_origin_handshakes_get_http_403(start_web):
    """Both dashboards reset their back-off when a socket opens and reconnect after
    any close: refused in the handshake (never opened), they back off to 3 s."""
    server = start_web()
    host = server.http_url.removeprefix("http://")
    proxy_user = {"X-Forwarded-User": "alice"}
    cookie = logged_in_cookie()

    def status(headers: dict, origin: str | None = None) -> int:
        return asyncio.run(handshake_status(server.ws_url, headers, origin))

    assert status({}) == 403
    assert status({}, origin=server.http_url) == 403
    # Through oauth2-proxy (trusted headers), and with a Django session cookie.
    assert status(proxy_user, origin="https://evil.example") == 403
    assert status(cookie, origin="https://evil.example") == 403
    assert status(cookie) == 403  # a cookie needs an Origin
    # The same credentials from this site's own pages are accepted.
    assert status(proxy_user, origin=f"http://{host}") == 101
    assert status(cookie, origin=f"http://{host}") == 101


def test_redis_mode_delivers_to_clients_of_two_web_processes(start_web, redis_server_url, score):
    first_web, second_web = start_web(redis_url=redis_server_url), start_web(redis_url=redis_server_url)

    async def scenario():
        async with (
            EventClient.connect(first_web.ws_url) as session_view,
            EventClient.connect(second_web.ws_url) as dashboard,
        ):
            await session_view.subscribe(f"session:{score.session_id}")
            await dashboard.subscribe("sessions")
            recorded_ids = await record_elsewhere(first_web.env, score, SCORING_RUN)
            return recorded_ids, await session_view.wait_for_events(4), await dashboard.wait_for_events(2)

    recorded_ids, on_session_view, on_dashboard = asyncio.run(scenario())
    assert [event["id"] for event in on_session_view] == recorded_ids
    assert [event["type"] for event in on_dashboard] == ["scoring.started", "scoring.completed"]
    assert [event["id"] for event in on_dashboard] == [recorded_ids[0], recorded_ids[-1]]


# --- The TARSy dashboards' own WebSocket services ---------------------------------------------
# Both route an event by its session_id to the handlers of ``session:<id>`` (whichever
# subscription brought it), to the ``sessions`` handlers only the ``session.*`` types (no
# scoring event), and to their global handlers by type. After a reconnect they subscribe
# to each channel again, in the order the pages subscribed, each followed by a ``catchup``
# from the last id its session's handler got (none for ``sessions``: its position moves
# only with ``session.*`` events).

SCORING_EVENT_TYPES = [events.STARTED, events.PROGRESS, events.COMPLETED, events.FAILED]
PAGE_ORDERS = {
    # A panel that follows every session mounted before the session's own page, or after it.
    "sessions first": lambda session_channel: ["sessions", session_channel],
    "session first": lambda session_channel: [session_channel, "sessions"],
}


def record_here(score, run) -> list[dict]:
    """Record ``run`` for ``score``, one transaction each; the web process relays them (or,
    with Redis, this process publishes them there)."""
    recorded = []
    for event_type, fields in run:
        with transaction.atomic():
            recorded.append(events.payload(events.record(event_type, score, **fields)))
    return recorded


def ids_of(recorded: list[dict]) -> list[int]:
    return [event["id"] for event in recorded]


def open_dashboard(dashboard, channels: list[str]) -> None:
    for channel in channels:
        dashboard.subscribe(channel)
    for event_type in SCORING_EVENT_TYPES:
        dashboard.on_event(event_type)
    dashboard.connect()


def assert_handlers_got(dashboard, session_events: list[dict], every_event: list[dict]) -> None:
    """The session's handler got exactly its events in id order; the ``sessions`` handler,
    none (the client routes no scoring event there); each global handler, every event of
    its type that the socket's channels carry (another session's progress is on none of
    them), those of the followed session once and in order."""
    session_id = session_events[0]["session_id"]
    got = ids_of(dashboard.received[f"session:{session_id}"])
    assert got == ids_of(session_events), f"the session's handler got {got}"
    assert dashboard.received["sessions"] == []
    carried = [
        event for event in every_event if event["session_id"] == session_id or event["type"] != events.PROGRESS
    ]
    for event_type in SCORING_EVENT_TYPES:
        of_type = dashboard.received[f"type:{event_type}"]
        assert set(ids_of(of_type)) == set(ids_of(event for event in carried if event["type"] == event_type))
        assert ids_of(event for event in of_type if event["session_id"] == session_id) == ids_of(
            event for event in session_events if event["type"] == event_type
        )


def of_session(score, recorded: list[dict]) -> list[dict]:
    return [event for event in recorded if event["session_id"] == str(score.session_id)]


@pytest.fixture(params=["memory", "redis"])
def dashboard_web(request, start_web, settings):
    """A web process with the in-memory layer (it relays what this process records), or one
    on Redis (where this process publishes what it records)."""
    if request.param == "redis":
        redis_url = request.getfixturevalue("redis_server_url")
        settings.CHANNEL_LAYERS = redis_channel_layer(redis_url)
        return start_web(redis_url=redis_url)
    return start_web()


@pytest.fixture
def followed_and_other():
    """A followed session with three scores (scored one after the other), and another session's score."""
    followed, other = make_session(), make_session()
    return [make_score(followed) for _ in range(3)], make_score(other)


@pytest.mark.parametrize("page_order", PAGE_ORDERS)
@pytest.mark.parametrize("client", SERVICES)
def test_dashboard_subscribed_before_two_scorings_gets_them_in_order_once_across_a_reconnect(
    dashboard_web, dashboard_bundles, followed_and_other, client, page_order
):
    """The socket subscribes to both channels; a scoring happens live, a second (and
    another session's) while the network is away; it reconnects, and a third starts."""
    (first, second, third), other = followed_and_other
    server = dashboard_web
    with DashboardClient.start(dashboard_bundles[client], server.http_url) as dashboard:
        open_dashboard(dashboard, PAGE_ORDERS[page_order](f"session:{first.session_id}"))
        live = record_here(first, SCORING_RUN)
        dashboard.wait_for_event(live[-1]["id"])
        dashboard.go_offline()
        missed = record_here(second, SCORING_RUN[:2]) + record_here(other, SCORING_RUN)
        missed += record_here(second, SCORING_RUN[2:])
        dashboard.go_online()
        # The next live event comes after all the server sent for the reconnect.
        after = record_here(third, SCORING_RUN[:1])
        dashboard.wait_for_event(after[0]["id"])

    followed = of_session(first, live + missed + after)
    assert [event["type"] for event in followed] == [kind for kind, _ in SCORING_RUN * 2] + [events.STARTED]
    assert_handlers_got(dashboard, followed, live + missed + after)


@pytest.mark.parametrize("page_order", PAGE_ORDERS)
@pytest.mark.parametrize("client", SERVICES)
def test_dashboard_subscribed_after_two_scorings_gets_them_in_order_once_then_across_a_reconnect(
    dashboard_web, dashboard_bundles, followed_and_other, client, page_order
):
    """The page opens after two scorings of its session (and another session's) were
    stored; then a third scoring is under way, finishes while the network is away, and
    the page reconnects."""
    (first, second, third), other = followed_and_other
    server = dashboard_web
    before = record_here(first, SCORING_RUN) + record_here(other, SCORING_RUN[:1])
    before += record_here(second, SCORING_RUN) + record_here(other, SCORING_RUN[1:])
    with DashboardClient.start(dashboard_bundles[client], server.http_url) as dashboard:
        open_dashboard(dashboard, PAGE_ORDERS[page_order](f"session:{first.session_id}"))
        live = record_here(third, SCORING_RUN[:2])
        dashboard.wait_for_event(live[-1]["id"])
        assert_handlers_got(dashboard, of_session(first, before + live), before + live)

        dashboard.go_offline()
        missed = record_here(third, SCORING_RUN[2:])
        dashboard.go_online()
        # A fourth scoring's start: it comes after all the server sent for the reconnect.
        after = record_here(make_score(first.session), SCORING_RUN[:1])
        dashboard.wait_for_event(after[0]["id"])

    every_event = before + live + missed + after
    assert_handlers_got(dashboard, of_session(first, every_event), every_event)
