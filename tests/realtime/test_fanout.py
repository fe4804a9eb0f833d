"""scoring/realtime/fanout.py: a process sends each live event to its connections itself, the
event's JSON made once, through one membership per group of the channel layer (Redis)."""

import asyncio
import json
import uuid

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from scoring.realtime import events, fanout
from tests.support.events import IN_MEMORY_LAYER, Collector, record_committed
from tests.support.factories import make_score, make_session
from tests.support.servers import redis_channel_layer


def lifecycle_event(session_id, event_id=1) -> dict:
    return {"id": event_id, "type": events.COMPLETED, "session_id": str(session_id), "total_score": 70}


def test_an_event_goes_to_each_connection_of_its_channels_once_as_one_text(settings):
    settings.CHANNEL_LAYERS = IN_MEMORY_LAYER
    session_id, other_id = uuid.uuid4(), uuid.uuid4()
    on_sessions, on_session, on_both, on_other = (Collector(name) for name in ("a", "b", "c", "d"))
    completed = lifecycle_event(session_id)
    progress = {"id": 2, "type": events.PROGRESS, "session_id": str(session_id), "phase": events.PHASE_ANALYZING}

    async def scenario():
        process = fanout.Fanout()
        await process.add("sessions", on_sessions)
        await process.add(f"session:{session_id}", on_session)
        await process.add("sessions", on_both)
        await process.add(f"session:{session_id}", on_both)
        await process.add(f"session:{other_id}", on_other)
        await process.publish(completed)
        await process.publish(completed)  # its copy from a second group
        await process.publish(progress)

    async_to_sync(scenario)()
    assert on_sessions.received == [completed]
    assert on_session.received == on_both.received == [completed, progress]
    assert on_other.received == []
    texts = [on_sessions.texts[0], on_session.texts[0], on_both.texts[0]]
    assert texts == [json.dumps(completed)] * 3
    assert texts[0] is texts[1] is texts[2]  # encoded once


def test_a_connection_removed_or_forgotten_gets_nothing_more(settings):
    settings.CHANNEL_LAYERS = IN_MEMORY_LAYER
    session_id = uuid.uuid4()
    removed, forgotten, staying = Collector("a"), Collector("b"), Collector("c")

    async def scenario():
        process = fanout.Fanout()
        for listener in (removed, forgotten, staying):
            await process.add("sessions", listener)
        await process.add(f"session:{session_id}", forgotten)
        await process.remove("sessions", removed)
        process.forget(forgotten)
        await process.publish(lifecycle_event(session_id))
        return dict(process.listeners)

    listeners = async_to_sync(scenario)()
    assert (removed.received, forgotten.received, len(staying.received)) == ([], [], 1)
    assert listeners == {"sessions": {"c": staying}}


@pytest.fixture
def redis_layer(settings, redis_server_url):
    settings.CHANNEL_LAYERS = redis_channel_layer(redis_server_url, prefix=f"fanout-{uuid.uuid4().hex}")
    return redis.Redis.from_url(redis_server_url)


@pytest.mark.django_db(transaction=True)
def test_with_redis_the_process_is_one_member_of_each_group_its_connections_follow(redis_layer):
    """Three connections on ``sessions`` and one on the session's channel: the process is in
    both groups once, a lifecycle event (sent to both) reaches each connection once, and the
    process leaves a group with its last connection there."""
    score = make_score(make_session(), status="in_progress")
    session_channel = f"session:{score.session_id}"
    on_sessions = [Collector(f"sessions-{index}") for index in range(3)]
    on_session = Collector("session")
    layer = get_channel_layer()
    keys = [layer._group_key(events.group_name(channel)) for channel in ("sessions", session_channel)]

    async def scenario():
        process = fanout.of_this_loop()
        for listener in on_sessions:
            await process.add("sessions", listener)
        await process.add(session_channel, on_session)
        members = [redis_layer.zrange(key, 0, -1) for key in keys]
        completed = await database_sync_to_async(record_committed)(events.COMPLETED, score, total_score=64)
        for _ in range(100):  # until each got it, or 10 s
            if all(listener.received for listener in (*on_sessions, on_session)):
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.2)  # a second copy would come right after the first
        for listener in (*on_sessions, on_session):
            await process.remove("sessions", listener)
            await process.remove(session_channel, listener)
        return members, events.payload(completed)

    members, completed = async_to_sync(scenario)()
    assert [len(of_group) for of_group in members] == [1, 1]
    assert members[0] == members[1]  # the same process channel
    assert [listener.received for listener in on_sessions] == [[completed]] * 3
    assert on_session.received == [completed]
    assert [redis_layer.zrange(key, 0, -1) for key in keys] == [[], []]
