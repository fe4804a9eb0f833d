"""A real scoring, end to end: the judge job runs in a worker process and a
WebSocket client on a web process sees its events as they happen."""

import asyncio

import httpx
import pytest

from tests.support.factories import make_session
from tests.support.fake_llm import Reply
from tests.support.servers import EventClient
from tests.support.judge_replies import evaluated

pytestmark = pytest.mark.processes

TURN1 = evaluated("Logical Flow: 15/25\nConsistency: 17/25\nTool Relevance: 13/25\nSynthesis Quality: 14/25\n\n59")
TURN2 = "1. **pods_log (previous container)** - the crash output was never read."
EXPECTED = [
    ("scoring.started", None),
    ("scoring.progress", "analyzing_methodology"),
    ("scoring.progress", "identifying_missing_tools"),
    ("scoring.completed", None),
]


def shape(events: list[dict]) -> list[tuple]:
    return [(event["type"], event.get("phase")) for event in events]


async def post_score(http_url: str, session_id) -> dict:
    async with httpx.AsyncClient(base_url=http_url, headers={"X-Forwarded-User": "alice"}) as client:
        response = await client.post(f"/api/v1/scoring/sessions/{session_id}/score", json={})
    assert response.status_code == 202, response.text
    return response.json()


def test_single_machine_a_client_sees_the_scoring_live_and_a_dropped_one_catches_up(
    start_web, start_worker, judge_llm
):
    judge_llm.push(Reply(TURN1, delay=1), Reply(TURN2, delay=1))
    web = start_web()
    start_worker(**judge_llm.env())
    session = make_session()
    channel = f"session:{session.session_id}"

    async def scenario():
        async with EventClient.connect(web.ws_url) as watcher:
            await watcher.subscribe(channel)
            async with EventClient.connect(web.ws_url) as dropped:
                await dropped.subscribe(channel)
                score = await post_score(web.http_url, session.session_id)
                seen_before_drop = await dropped.wait_for_events(1)
            live = await watcher.wait_for_events(4)
        async with EventClient.connect(web.ws_url) as back:
            missed, _ = await back.catchup(channel, seen_before_drop[-1]["id"])
        return score, live, seen_before_drop, missed

    score, live, seen_before_drop, missed = asyncio.run(scenario())
    assert shape(live) == EXPECTED
    assert {event["score_id"] for event in live} == {score["score_id"]}
    assert live[-1]["total_score"] == 59
    assert [event["id"] for event in live] == sorted(event["id"] for event in live)
    assert seen_before_drop + missed == live  # nothing lost across the disconnect


def test_a_client_offline_for_a_whole_scoring_gets_it_replayed_when_it_subscribes_again(
    start_web, start_worker, judge_llm
):
    """Go TARSy's dashboard (web/dashboard/src/services/websocket.ts) resubscribes
    after a reconnect and, having no ``db_event_id`` yet, asks for no catchup: the
    replay after ``subscribe`` must bring the whole scoring that ran meanwhile."""
    judge_llm.push(Reply(TURN1), Reply(TURN2))
    web = start_web()
    start_worker(**judge_llm.env())
    session = make_session()
    channel = f"session:{session.session_id}"

    async def scenario():
        async with EventClient.connect(web.ws_url) as client:
            assert await client.subscribe_with_replay(channel) == []
        score = await post_score(web.http_url, session.session_id)
        async with EventClient.connect(web.ws_url) as watcher:  # to know when it has ended
            await watcher.subscribe(channel)
            while (await watcher.wait_for_events(1))[0]["type"] != "scoring.completed":
                pass
        async with EventClient.connect(web.ws_url) as client:
            return score, await client.subscribe_with_replay(channel)

    score, replayed = asyncio.run(scenario())
    assert shape(replayed) == EXPECTED
    assert {event["score_id"] for event in replayed} == {score["score_id"]}
    assert all(event["db_event_id"] == event["id"] for event in replayed)


def test_with_redis_clients_on_two_web_processes_both_see_the_scoring(
    start_web, start_worker, judge_llm, redis_server_url
):
    judge_llm.push(Reply(TURN1, delay=1), Reply(TURN2, delay=1))
    first_web = start_web(redis_url=redis_server_url)
    second_web = start_web(redis_url=redis_server_url)
    start_worker(**judge_llm.env(), REDIS_URL=redis_server_url)
    session = make_session()
    channel = f"session:{session.session_id}"

    async def scenario():
        async with EventClient.connect(first_web.ws_url) as one, EventClient.connect(second_web.ws_url) as two:
            await one.subscribe(channel)
            await two.subscribe("sessions")
            await post_score(first_web.http_url, session.session_id)
            return await one.wait_for_events(4), await two.wait_for_events(2)

    on_first, on_second = asyncio.run(scenario())
    assert shape(on_first) == EXPECTED
    # The sessions channel carries started and completed, not progress.
    assert shape(on_second) == [EXPECTED[0], EXPECTED[3]]
    assert on_second[-1] == on_first[-1]
