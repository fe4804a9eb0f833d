"""With Redis, each web process keeps its connections whole in one pass (scoring.realtime.resync):
rejoining their groups and sending them from the table what they were not sent."""

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from scoring.realtime import events
from tests.realtime.test_consumers import PROXY_USER, TIMEOUT_S, LoopbackCommunicator, record, store_unpublished
from tests.support.factories import make_score, make_session
from tests.support.servers import redis_channel_layer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def score():
    return make_score(make_session(), status="in_progress")


@pytest.fixture
def redis_layer(settings, redis_server_url):
    settings.CHANNEL_LAYERS = redis_channel_layer(redis_server_url, prefix="resync-test")
    settings.SCORING_EVENT_RESYNC_S = 0.2
    return redis.Redis.from_url(redis_server_url)


async def subscribed(channel: str) -> LoopbackCommunicator:
    ws = LoopbackCommunicator(PROXY_USER)
    await ws.open()
    assert (await ws.request({"action": "subscribe", "channel": channel}))["type"] == "subscription.confirmed"
    return ws


def test_the_process_is_back_in_its_groups_after_redis_forgot_them(redis_layer, score):
    """A Redis restart forgets the groups: within a resync pass, the process's one membership
    of ``sessions`` is back, and live events reach every connection again."""
    group_key = get_channel_layer()._group_key(events.group_name("sessions"))

    async def scenario():
        sockets = [await subscribed("sessions") for _ in range(3)]
        members_before = redis_layer.zrange(group_key, 0, -1)
        redis_layer.delete(group_key)  # as a restarted Redis
        members_after = []
        for _ in range(50):
            members_after = redis_layer.zrange(group_key, 0, -1)
            if members_after:
                break
            await sockets[0].receive_nothing(0.1)
        stored = await record(events.COMPLETED, score, total_score=61)
        received = [await ws.receive_json_from(TIMEOUT_S) for ws in sockets]
        for ws in sockets:
            await ws.disconnect()
        return members_before, members_after, stored, received

    members_before, members_after, stored, received = async_to_sync(scenario)()
    assert len(members_before) == 1  # the process's channel, for its three connections
    assert members_after == members_before
    assert received == [stored] * 3


def test_an_unpublished_event_reaches_each_connection_of_its_channels_once(redis_layer, score):
    other = make_score(make_session(), status="in_progress")

    async def scenario():
        on_sessions = await subscribed("sessions")
        on_session = await subscribed(f"session:{score.session_id}")
        on_other = await subscribed(f"session:{other.session_id}")
        stored = await database_sync_to_async(store_unpublished)(score)
        received = [await on_sessions.receive_json_from(TIMEOUT_S), await on_session.receive_json_from(TIMEOUT_S)]
        # Passes go on resending nothing: each connection sends an event once.
        nothing = [await ws.receive_nothing(1.0) for ws in (on_sessions, on_session, on_other)]
        for ws in (on_sessions, on_session, on_other):
            await ws.disconnect()
        return stored, received, nothing

    stored, received, nothing = async_to_sync(scenario)()
    assert received == [stored, stored]
    assert nothing == [True, True, True]


def test_a_connection_that_left_a_channel_is_not_put_back_in_its_group(redis_layer, score):
    group_key = get_channel_layer()._group_key(events.group_name("sessions"))

    async def scenario():
        ws = await subscribed("sessions")
        assert (await ws.request({"action": "unsubscribe", "channel": "sessions"}))["type"] == "subscription.cancelled"
        await ws.receive_nothing(1.0)  # several passes
        members = redis_layer.zrange(group_key, 0, -1)
        await ws.disconnect()
        return members

    assert async_to_sync(scenario)() == []
