"""scoring/realtime/relay.py: the relay hands the process's fan-out the event rows committed
after it started (with the in-memory layer, where nothing else publishes them), ids
committed late included."""

import time

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

from scoring.models import ScoringEvent
from scoring.realtime import events, fanout
from scoring.realtime.relay import GAP_GRACE_S, EventRelay
from scoring.selectors import latest_event_id
from tests.support.events import IN_MEMORY_LAYER, Collector, record_committed
from tests.support.factories import make_score, make_session


@pytest.mark.django_db(transaction=True)
def test_relay_hands_on_rows_committed_after_it_started_including_late_ids(settings):
    """PostgreSQL hands out ids before commit, so a lower id can commit after a
    higher one has been relayed: the relay keeps looking for skipped ids."""
    settings.CHANNEL_LAYERS = IN_MEMORY_LAYER
    score = make_score(make_session(), status="in_progress")
    before = record_committed(events.STARTED, score)

    async def scenario():
        listener = Collector()
        await fanout.of_this_loop().add(f"session:{score.session_id}", listener)
        relay = EventRelay()
        assert relay.relaying
        relay.after_id = await database_sync_to_async(latest_event_id)()

        def commit_with_a_hole():
            first = record_committed(events.PROGRESS, score, phase=events.PHASE_ANALYZING)
            third = ScoringEvent.objects.create(
                id=first.id + 2,
                event_type=events.PROGRESS,
                score_id=score.score_id,
                session_id=score.session_id,
                on_sessions_channel=False,
                timestamp_us=first.timestamp_us,
                fields={"phase": events.PHASE_MISSING_TOOLS},
            )
            return first, third

        first, third = await database_sync_to_async(commit_with_a_hole)()
        await relay.relay_new_events()
        relayed = [event["id"] for event in listener.received]
        assert relay.after_id == third.id and set(relay.gaps) == {first.id + 1}

        late = await database_sync_to_async(ScoringEvent.objects.create)(
            id=first.id + 1,
            event_type=events.COMPLETED,
            score_id=score.score_id,
            session_id=score.session_id,
            on_sessions_channel=True,
            timestamp_us=first.timestamp_us,
            fields={"total_score": 12},
        )
        await relay.relay_new_events()
        relayed = [event["id"] for event in listener.received]
        return relayed, first, third, late, relay.gaps

    relayed, first, third, late, gaps_left = async_to_sync(scenario)()
    assert before.id not in relayed
    assert relayed == [first.id, third.id, late.id]
    assert gaps_left == {}


def test_relay_gives_up_on_a_skipped_id_after_the_grace_period():
    relay = EventRelay()
    relay.after_id = 10
    relay.mark_seen(13)
    assert set(relay.gaps) == {11, 12}
    relay.gaps[11] = time.monotonic() - 1
    relay.expire_gaps()
    assert set(relay.gaps) == {12}
    assert relay.gaps[12] <= time.monotonic() + GAP_GRACE_S
    relay.mark_seen(12)
    relay.mark_seen(13)
    assert relay.gaps == {} and relay.after_id == 13

