"""Scoring events: stored with the score change, published after commit, read back, pruned.
(The relay that publishes them from the table is in tests/realtime/test_relay.py.)"""

import logging
import os
import subprocess
import sys
import time
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer
from django.core.management import call_command
from django.db import transaction

from scoring.models import ScoringEvent
from scoring.realtime import events
from tests.support.events import IN_MEMORY_LAYER, listen, record_committed
from tests.support.factories import make_score, make_session
from tests.support.servers import REPO_DIR, redis_channel_layer
from tests.support.throwaway_servers import free_port


@pytest.fixture
def score(db):
    return make_score(make_session(), status="in_progress")


# --- channel names ------------------------------------------------------------------------


def test_parse_channel_accepts_sessions_and_canonicalises_session_uuids():
    session_id = uuid.uuid4()
    assert events.parse_channel("sessions") == "sessions"
    assert events.parse_channel(f"session:{str(session_id).upper()}") == f"session:{session_id}"


@pytest.mark.parametrize("name", ["session", "session:", "session:not-a-uuid", "Sessions", "alerts", None, 7])
def test_parse_channel_rejects_other_names(name):
    with pytest.raises(events.InvalidChannel):
        events.parse_channel(name)


def test_group_names_are_valid_channel_layer_group_names():
    session_id = uuid.uuid4()
    assert events.group_name("sessions") == "scoring.sessions"
    assert events.group_name(f"session:{session_id}") == f"scoring.session.{session_id}"
    for channel in ("sessions", f"session:{session_id}"):
        assert BaseChannelLayer().require_valid_group_name(events.group_name(channel))


# --- record -------------------------------------------------------------------------------


def test_record_stores_one_row_with_the_event_payload(score):
    event = record_committed(events.COMPLETED, score, total_score=73)

    stored = ScoringEvent.objects.get()
    assert stored.id == event.id
    payload = events.payload(stored)
    assert payload == {
        "id": event.id,
        # Go TARSy's dashboard resumes from db_event_id; tarsy-bot's from id.
        "db_event_id": event.id,
        "type": "scoring.completed",
        "score_id": str(score.score_id),
        "session_id": str(score.session_id),
        "timestamp_us": stored.timestamp_us,
        "total_score": 73,
    }
    assert abs(stored.timestamp_us - time.time_ns() // 1000) < 60_000_000


def test_each_event_type_carries_its_fields_and_channels(score):
    session_channel = f"session:{score.session_id}"
    started = record_committed(events.STARTED, score)
    progress = record_committed(events.PROGRESS, score, phase=events.PHASE_MISSING_TOOLS)
    failed = record_committed(events.FAILED, score, error_message="judge timed out")

    assert events.channels_of(started) == ["sessions", session_channel]
    assert events.channels_of(progress) == [session_channel]
    assert events.channels_of(failed) == ["sessions", session_channel]
    assert events.payload(progress)["phase"] == "identifying_missing_tools"
    assert events.payload(failed)["error_message"] == "judge timed out"
    assert started.id < progress.id < failed.id


@pytest.mark.parametrize(
    ("event_type", "fields"),
    [
        ("scoring.unknown", {}),
        (events.COMPLETED, {}),
        (events.FAILED, {"total_score": 3}),
        (events.STARTED, {"phase": events.PHASE_ANALYZING}),
        (events.PROGRESS, {"phase": "daydreaming"}),
    ],
)
def test_record_rejects_wrong_types_and_fields(score, event_type, fields):
    with pytest.raises(ValueError):
        events.record(event_type, score, **fields)
    assert not ScoringEvent.objects.exists()


def test_event_of_a_rolled_back_transaction_is_not_stored(score):
    with pytest.raises(RuntimeError), transaction.atomic():
        events.record(events.STARTED, score)
        raise RuntimeError("the score change failed")
    assert not ScoringEvent.objects.exists()


def test_in_memory_layer_leaves_publishing_to_the_relay(settings):
    settings.CHANNEL_LAYERS = IN_MEMORY_LAYER
    assert not events.publishes_directly()


@pytest.mark.django_db(transaction=True)
def test_record_publishes_to_redis_only_after_commit(settings, redis_server_url):
    settings.CHANNEL_LAYERS = redis_channel_layer(redis_server_url)
    score = make_score(make_session(), status="in_progress")

    async def scenario():
        layer = get_channel_layer()
        global_listener = await listen("sessions")
        session_listener = await listen(f"session:{score.session_id}")

        def record_in_transaction():
            with transaction.atomic():
                events.record(events.PROGRESS, score, phase=events.PHASE_ANALYZING)
                event = events.record(events.COMPLETED, score, total_score=80)
                assert not ScoringEvent.objects.filter(id__gt=event.id).exists()
            return event

        completed = await database_sync_to_async(record_in_transaction)()
        progress_message = await layer.receive(session_listener)
        completed_message = await layer.receive(session_listener)
        global_message = await layer.receive(global_listener)
        return completed, progress_message, completed_message, global_message

    completed, progress_message, completed_message, global_message = async_to_sync(scenario)()
    assert progress_message["event"]["type"] == "scoring.progress"
    assert completed_message == {"type": "scoring.event", "event": events.payload(completed)}
    # progress goes only to the session channel: the first global message is the completion.
    assert global_message == completed_message


def test_an_event_is_sent_only_to_the_groups_someone_is_in(settings, redis_server_url, monkeypatch):
    """Asked in one pipeline: a group nobody is in costs no group_send; nor does one whose
    only member expired (channels-redis's group_expiry), as group_send itself would drop it."""
    settings.CHANNEL_LAYERS = redis_channel_layer(redis_server_url, prefix=f"test-{uuid.uuid4()}")
    layer = get_channel_layer()
    sent_to = []
    send_to_group = layer.group_send

    async def group_send(group, message):
        sent_to.append(group)
        await send_to_group(group, message)

    monkeypatch.setattr(layer, "group_send", group_send)
    session_id = uuid.uuid4()
    completed = ScoringEvent(
        id=1,
        event_type=events.COMPLETED,
        score_id=uuid.uuid4(),
        session_id=session_id,
        on_sessions_channel=True,
        timestamp_us=time.time_ns() // 1000,
        fields={"total_score": 80},
    )
    session_group = events.group_name(f"session:{session_id}")

    async def scenario():
        await events.send_to_groups(layer, completed)
        to_nobody = list(sent_to)
        # A member added long ago, as by a connection that went without leaving its groups.
        stale = await layer.new_channel()
        await layer.connection(layer.consistent_hash("scoring.sessions")).zadd(
            layer._group_key("scoring.sessions"), {stale: time.time() - layer.group_expiry - 60}
        )
        listener = await listen(f"session:{session_id}")
        sent_to.clear()
        await events.send_to_groups(layer, completed)
        return to_nobody, list(sent_to), await layer.receive(listener)

    to_nobody, to_one, received = async_to_sync(scenario)()
    assert to_nobody == []
    assert to_one == [session_group]
    assert received == events.layer_message(completed)


def test_a_process_without_redis_does_not_load_redis_for_publishing():
    """Asking Redis about groups needs channels-redis only where a channels-redis layer has
    loaded it: a process without REDIS_URL starts without redis-py (about 70 ms)."""
    code = (
        "import sys, django; django.setup(); import scoring.realtime.events, scoring.urls; "
        "print(sorted(name for name in ('redis', 'channels_redis') if name in sys.modules))"
    )
    env = {name: value for name, value in os.environ.items() if name != "REDIS_URL"}
    env["DJANGO_SETTINGS_MODULE"] = "tarsy_scoring.settings"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_DIR, env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.django_db(transaction=True)
def test_unreachable_layer_is_logged_and_the_event_kept(settings, caplog):
    settings.CHANNEL_LAYERS = redis_channel_layer(f"redis://127.0.0.1:{free_port()}/0")
    score = make_score(make_session(), status="in_progress")

    with caplog.at_level(logging.ERROR, logger="scoring.realtime.events"):
        event = record_committed(events.FAILED, score, error_message="boom")
        assert events.flush_published(10)

    assert ScoringEvent.objects.filter(id=event.id).exists()
    assert f"could not publish scoring event {event.id}" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_a_hung_redis_neither_blocks_the_commit_nor_holds_up_later_events(
    settings, monkeypatch, silent_redis_url, caplog
):
    """Redis accepts connections and never answers: each commit returns at once (its
    event is only queued), and each send is given up after PUBLISH_TIMEOUT_S, so the
    events queued behind it are still tried."""
    settings.CHANNEL_LAYERS = redis_channel_layer(silent_redis_url)
    monkeypatch.setattr(events, "PUBLISH_TIMEOUT_S", 2.0)
    score = make_score(make_session(), status="in_progress")

    with caplog.at_level(logging.ERROR, logger="scoring.realtime.events"):
        recorded = [record_committed(events.PROGRESS, score, phase=events.PHASE_ANALYZING) for _ in range(3)]
        still_sending = not events.flush_published(0.1)
        drained = events.flush_published(15)

    assert still_sending  # the commits did not wait for Redis
    assert drained
    for event in recorded:
        assert f"could not publish scoring event {event.id}" in caplog.text


# --- catchup queries ----------------------------------------------------------------------


def test_events_after_pages_a_session_channel_oldest_first(score):
    other = make_score(make_session(), status="in_progress")
    recorded = [record_committed(events.PROGRESS, score, phase=events.PHASE_ANALYZING) for _ in range(5)]
    record_committed(events.STARTED, other)
    channel = f"session:{score.session_id}"

    page, has_more = events.events_after(channel, 0, limit=3)
    assert [event["id"] for event in page] == [event.id for event in recorded[:3]]
    assert has_more
    page, has_more = events.events_after(channel, page[-1]["id"], limit=3)
    assert [event["id"] for event in page] == [event.id for event in recorded[3:]]
    assert not has_more


def test_events_after_for_sessions_skips_progress(score):
    started = record_committed(events.STARTED, score)
    record_committed(events.PROGRESS, score, phase=events.PHASE_ANALYZING)
    completed = record_committed(events.COMPLETED, score, total_score=55)

    page, has_more = events.events_after("sessions", 0)
    assert [event["type"] for event in page] == ["scoring.started", "scoring.completed"]
    assert [event["id"] for event in page] == [started.id, completed.id]
    assert not has_more
    assert events.events_after("sessions", completed.id) == ([], False)


def test_recent_events_are_a_channels_newest_oldest_first_with_whether_older_were_left_out(score):
    other = make_score(make_session(), status="in_progress")
    recorded = [record_committed(events.PROGRESS, score, phase=events.PHASE_ANALYZING) for _ in range(5)]
    record_committed(events.STARTED, other)
    channel = f"session:{score.session_id}"

    assert events.recent_events(channel, limit=3) == ([events.payload(event) for event in recorded[2:]], True)
    assert events.recent_events(channel, limit=5) == ([events.payload(event) for event in recorded], False)
    assert [event["type"] for event in events.recent_events("sessions")[0]] == ["scoring.started"]


# --- pruning ------------------------------------------------------------------------------


def test_prune_deletes_only_events_older_than_the_retention(score, settings):
    settings.SCORING_EVENT_RETENTION_S = 3600
    old = record_committed(events.STARTED, score)
    recent = record_committed(events.COMPLETED, score, total_score=90)
    now_us = recent.timestamp_us
    ScoringEvent.objects.filter(id=old.id).update(timestamp_us=now_us - 3601 * 1_000_000)
    ScoringEvent.objects.filter(id=recent.id).update(timestamp_us=now_us - 3599 * 1_000_000)

    assert events.prune(now=now_us) == 1
    assert list(ScoringEvent.objects.values_list("id", flat=True)) == [recent.id]


def test_prune_command_uses_the_current_time(score, settings, capsys):
    settings.SCORING_EVENT_RETENTION_S = 60
    stale = record_committed(events.STARTED, score)
    ScoringEvent.objects.filter(id=stale.id).update(timestamp_us=stale.timestamp_us - 61 * 1_000_000)
    fresh = record_committed(events.FAILED, score, error_message="x")

    call_command("prune_scoring_events")

    assert "deleted 1 scoring events" in capsys.readouterr().out
    assert list(ScoringEvent.objects.values_list("id", flat=True)) == [fresh.id]


# --- relay --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_events_above_reads_every_channel_from_the_mark_with_each_event_s_channels():
    first, second = (make_score(make_session(), status="in_progress") for _ in range(2))
    with transaction.atomic():
        old = events.record(events.PROGRESS, first, phase=events.PHASE_ANALYZING)
        progress = events.record(events.PROGRESS, first, phase=events.PHASE_MISSING_TOOLS)
        done = events.record(events.COMPLETED, second, total_score=40)

    found = events.events_above(old.id, limit=10)

    assert [(event["id"], channels) for event, channels in found] == [
        (progress.id, [f"session:{first.session_id}"]),
        (done.id, ["sessions", f"session:{second.session_id}"]),
    ]
    assert [event["id"] for event, _ in events.events_above(0, limit=2)] == [old.id, progress.id]
    assert events.events_above(done.id, limit=10) == []

