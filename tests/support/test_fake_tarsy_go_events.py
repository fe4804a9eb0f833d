"""The stand-in for Go TARSy's WebSocket (tests/support/fake_tarsy_go_events.py)."""

import json

import pytest
from websockets.exceptions import ConnectionClosedError, InvalidStatus
from websockets.sync.client import connect

from tests.support.fake_tarsy_go_events import StandInGoTarsyEvents
from tests.support.workers import wait_for

SESSION = "6d5fff46-2a2e-44a1-b52c-509a4a502f63"


def receive(client) -> dict:
    return json.loads(client.recv(timeout=5))


def send(client, **message) -> None:
    client.send(json.dumps(message))


def test_a_connection_is_established_and_pings_get_pongs(tarsy_go_events):
    with connect(tarsy_go_events.url) as client:
        established = client.recv(timeout=5)
        send(client, action="ping")

        assert list(json.loads(established)) == ["connection_id", "type"]
        assert json.loads(established)["type"] == "connection.established"
        assert receive(client) == {"type": "pong"}


def test_a_subscriber_gets_the_stored_events_then_new_ones(tarsy_go_events):
    tarsy_go_events.session_status(SESSION, "in_progress")
    with connect(tarsy_go_events.url) as client, connect(tarsy_go_events.url) as lister:
        receive(client), receive(lister)
        send(client, action="subscribe", channel=f"session:{SESSION}")
        send(lister, action="subscribe", channel="sessions")
        confirmed, caught_up = receive(client), client.recv(timeout=5)
        assert receive(lister) == {"channel": "sessions", "type": "subscription.confirmed"}

        tarsy_go_events.session_status(SESSION, "completed")
        live, listed = client.recv(timeout=5), lister.recv(timeout=5)

    assert confirmed == {"channel": f"session:{SESSION}", "type": "subscription.confirmed"}
    assert list(json.loads(caught_up)) == ["db_event_id", "session_id", "status", "timestamp", "type"]
    assert json.loads(caught_up)["status"] == "in_progress"
    assert json.loads(live)["db_event_id"] == 2 and json.loads(live)["status"] == "completed"
    # The copy to the session list is not stored: no db_event_id, the payload struct's order.
    assert list(json.loads(listed)) == ["type", "session_id", "timestamp", "status"]


def test_catchup_replays_what_came_after_the_last_event_seen(tarsy_go_events):
    for status in ("in_progress", "completed"):
        tarsy_go_events.session_status(SESSION, status)
    tarsy_go_events.review_status(SESSION, "alice", review_status="in_progress", assignee="alice")
    with connect(tarsy_go_events.url) as client:
        receive(client)
        send(client, action="catchup", channel=f"session:{SESSION}", last_event_id=1)
        replayed = [receive(client), receive(client)]
        send(client, action="catchup", channel=f"session:{SESSION}")  # no last_event_id: nothing
        send(client, action="subscribe")
        error = receive(client)

    assert [e["db_event_id"] for e in replayed] == [2, 3]
    assert replayed[1] == {
        "actor": "alice", "assignee": "alice", "db_event_id": 3, "review_status": "in_progress",
        "session_id": SESSION, "timestamp": replayed[1]["timestamp"], "type": "review.status",
    }
    assert error == {"message": "channel is required for subscribe", "type": "error"}


def test_a_required_token_is_asked_for_with_401():
    server = StandInGoTarsyEvents(token="s3cret")
    try:
        with pytest.raises(InvalidStatus) as refused:
            connect(server.url)
        with connect(server.url, additional_headers={"Authorization": "Bearer s3cret"}) as client:
            assert receive(client)["type"] == "connection.established"
    finally:
        server.stop()

    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body) == {"message": "Unauthorized"}


def test_subscribers_are_counted_and_connections_can_be_dropped(tarsy_go_events):
    with connect(tarsy_go_events.url) as client, connect(tarsy_go_events.url) as other:
        receive(client), receive(other)
        send(client, action="subscribe", channel="sessions")
        receive(client)
        counted = tarsy_go_events.subscriber_count("sessions")

        tarsy_go_events.drop_connections()

        with pytest.raises(ConnectionClosedError):
            client.recv(timeout=5)
        with pytest.raises(ConnectionClosedError):
            other.recv(timeout=5)
    wait_for(lambda: not tarsy_go_events.subscriber_count("sessions"), timeout_s=10, what="unsubscribed")

    assert counted == 1
    with connect(tarsy_go_events.url) as again:  # it still takes new connections
        assert receive(again)["type"] == "connection.established"


def test_pings_are_counted_and_can_be_left_unanswered(tarsy_go_events):
    with connect(tarsy_go_events.url) as client:
        receive(client)
        send(client, action="ping")
        answered = receive(client)
        tarsy_go_events.answer_pings = False
        send(client, action="ping")

        with pytest.raises(TimeoutError):
            client.recv(timeout=0.5)

    assert answered == {"type": "pong"}
    assert tarsy_go_events.pings == 2
