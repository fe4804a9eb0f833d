"""Events from a separate (worker-like) process reach WebSocket clients of real daphne processes.

Single-machine mode: in-memory channel layer, the web process relays stored
events. Redis mode: the recording process publishes through Redis to every web
process.
"""

import asyncio

import pytest
from websockets.exceptions import ConnectionClosed

from scoring import events
from scoring.consumers import CLOSE_UNAUTHENTICATED
from tests.support.factories import make_score, make_session
from tests.support.servers import EventClient, record_in_process

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


def test_worker_events_reach_a_subscriber_through_the_relay(start_daphne, score):
    server = start_daphne()

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


def test_client_that_disconnects_mid_run_catches_up_by_id(start_daphne, score):
    server = start_daphne()
    channel = f"session:{score.session_id}"

    async def scenario():
        async with EventClient.connect(server.ws_url) as client:
            await client.subscribe(channel)
            await record_elsewhere(server.env, score, SCORING_RUN[:1])
            [started] = await client.wait_for_events(1)
        # Offline while the rest of the run happens.
        rest_ids = await record_elsewhere(server.env, score, SCORING_RUN[1:])
        async with EventClient.connect(server.ws_url) as client:
            await client.subscribe(channel)
            replayed, complete = await client.catchup(channel, started["id"])
            # Live delivery resumes after the catchup.
            [failed_id] = await record_elsewhere(
                server.env, score, [(events.FAILED, {"error_message": "late"})]
            )
            [live] = await client.wait_for_events(1)
        return rest_ids, replayed, complete, failed_id, live

    rest_ids, replayed, complete, failed_id, live = asyncio.run(scenario())
    assert [event["id"] for event in replayed] == rest_ids
    assert complete == {
        "type": "catchup.complete",
        "channel": channel,
        "has_more": False,
        "last_event_id": rest_ids[-1],
    }
    assert (live["id"], live["type"]) == (failed_id, "scoring.failed")


def test_unauthenticated_client_is_closed_with_4401(start_daphne):
    server = start_daphne()

    async def scenario():
        with pytest.raises(ConnectionClosed) as closed:
            async with EventClient.connect(server.ws_url, user=None):
                pass
        return closed.value.rcvd.code

    assert asyncio.run(scenario()) == CLOSE_UNAUTHENTICATED


def test_redis_mode_delivers_to_clients_of_two_web_processes(start_daphne, redis_server_url, score):
    first_web, second_web = start_daphne(redis_url=redis_server_url), start_daphne(redis_url=redis_server_url)

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
