"""Go TARSy's session events waking the workers' periodic sync (scoring/tarsy_go/events.py), through
the real loop (``sync.run_periodically``) on a thread, against the stand-in Go TARSy with its
WebSocket (tests/support/fake_tarsy_go.py, tests/support/fake_tarsy_go_events.py)."""

import contextlib
import copy
import logging
import threading
import time

import pytest

from scoring.models import AlertSession, TarsySync
from scoring.tarsy import sync
from scoring.tarsy_go import events
from tests.support.fake_tarsy_go import StandInGoTarsy
from tests.support.tarsy_go import golden_document
from tests.support.workers import wait_for

# Long enough that nothing in these tests comes from the interval: only from the events.
LONG_INTERVAL_S = 300


@pytest.fixture(autouse=True)
def sync_settings(settings, tarsy_go, tarsy_go_events):
    tarsy_go.events = tarsy_go_events  # Go serves its WebSocket beside its API
    settings.TARSY_URL, settings.TARSY_TOKEN, settings.TARSY_TOKEN_FILE = tarsy_go.url, "", ""
    settings.TARSY_SYNC_INTERVAL_S = LONG_INTERVAL_S
    settings.TARSY_SYNC_BACKOFF_S, settings.TARSY_SYNC_TIMEOUT_S = 0.01, 10
    settings.TARSY_SYNC_EVENTS = True
    # Go's e2e sessions were created in August 2026: their reviews are looked for between full passes.
    settings.TARSY_SYNC_RECHECK_S = 10 * 365 * 86400


class Runs:
    """The runs of the periodic sync: how many started, how many ended."""

    def __init__(self):
        self.started = self.ended = 0

    def __len__(self) -> int:
        return self.started


@pytest.fixture
def runs(monkeypatch) -> Runs:
    counted = Runs()
    run = sync.sync_configured_tarsy

    def counting(stop=None):
        counted.started += 1
        try:
            return run(stop)
        finally:
            counted.ended += 1

    monkeypatch.setattr(sync, "sync_configured_tarsy", counting)
    return counted


def listeners() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "tarsy-events"]


@contextlib.contextmanager
def periodic_sync():
    """The workers' periodic sync on a thread, stopped as the cluster stops it."""
    stop = threading.Event()
    thread = threading.Thread(target=sync.run_periodically, args=(stop,), name="tarsy-sync")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
        for listener in listeners():
            listener.join(timeout=30)
    assert not thread.is_alive() and not listeners()


def wait_until_listening(tarsy_go_events, runs: Runs) -> int:
    """Until the listener subscribed and the run its subscription woke ended; the runs by then."""
    wait_for(
        lambda: tarsy_go_events.subscriber_count("sessions") == 1 and runs.ended >= 2,
        timeout_s=30,
        what="the first run, the listener and the run its subscription woke",
    )
    return len(runs)


def running_session(tarsy_go) -> tuple[str, dict]:
    """A session still running on the stand-in, and the document it has once finished."""
    finished = golden_document("skills")
    running = copy.deepcopy(finished)
    running["session"].update(status="in_progress", completed_at=None)
    tarsy_go.add(running)
    return finished["session"]["id"], finished


def stored(session_id: str) -> bool:
    return AlertSession.objects.filter(pk=session_id).exists()


def test_a_session_that_finishes_is_pulled_within_seconds_of_its_event(
    transactional_db, tarsy_go, tarsy_go_events, runs
):
    session_id, finished = running_session(tarsy_go)
    with periodic_sync():
        before = wait_until_listening(tarsy_go_events, runs)
        assert not stored(session_id)

        tarsy_go.add(finished)
        tarsy_go_events.session_status(session_id, "completed")

        wait_for(lambda: stored(session_id), timeout_s=20, what="the finished session")

    assert AlertSession.objects.get(pk=session_id).status == "completed"
    assert len(runs) == before + 1


def test_a_review_event_wakes_the_sync(transactional_db, tarsy_go, tarsy_go_events, runs):
    session_id = next(iter(tarsy_go.documents))
    with periodic_sync():
        wait_until_listening(tarsy_go_events, runs)
        reviewed = copy.deepcopy(tarsy_go.documents[session_id])
        reviewed["session"].update(review_status="reviewed", quality_rating="inaccurate", assignee="carol")
        tarsy_go.add(reviewed)

        tarsy_go_events.review_status(
            session_id, "carol", review_status="reviewed", quality_rating="inaccurate"
        )

        wait_for(
            lambda: AlertSession.objects.get(pk=session_id).source_reviewer == "carol",
            timeout_s=20,
            what="the review",
        )

    assert AlertSession.objects.get(pk=session_id).source_quality_rating == "inaccurate"


def test_events_close_together_make_one_run_and_others_none(
    transactional_db, tarsy_go, tarsy_go_events, runs
):
    session_id, finished = running_session(tarsy_go)
    with periodic_sync():
        before = wait_until_listening(tarsy_go_events, runs)
        # What does not change what the sync stores wakes nothing.
        tarsy_go_events.session_status(session_id, "in_progress")
        tarsy_go_events.score_updated(session_id, "in_progress")
        tarsy_go_events.publish("sessions", {"type": "session.progress", "session_id": session_id})
        time.sleep(sync.WAKE_DEBOUNCE_S + 1)
        assert len(runs) == before

        # Go publishes these one after the other when a session ends.
        tarsy_go.add(finished)
        tarsy_go_events.session_status(session_id, "completed")
        tarsy_go_events.review_status(session_id, "system", review_status="needs_review")
        tarsy_go_events.score_updated(session_id, "completed")
        wait_for(lambda: stored(session_id), timeout_s=20, what="the finished session")
        time.sleep(sync.WAKE_DEBOUNCE_S + 1)  # time enough for a second run, were one coming

    assert len(runs) == before + 1


def test_a_dropped_connection_is_made_again_and_what_came_meanwhile_is_pulled(
    transactional_db, tarsy_go, tarsy_go_events, runs, caplog
):
    caplog.set_level(logging.INFO, logger="scoring.tarsy_go.events")
    session_id, finished = running_session(tarsy_go)
    with periodic_sync():
        wait_until_listening(tarsy_go_events, runs)
        tarsy_go.add(finished)  # it finishes while the connection is down: its event is lost

        tarsy_go_events.drop_connections()

        wait_for(lambda: stored(session_id), timeout_s=20, what="the session that finished meanwhile")
        assert tarsy_go_events.subscriber_count("sessions") == 1

    ws_url = tarsy_go.url.replace("http://", "ws://") + "/api/v1/ws"
    assert caplog.text.count(f"listening to the session events of {ws_url}") == 2
    assert f"session events from {ws_url}: the connection ended" in caplog.text


def test_without_a_websocket_it_says_so_once_and_polling_goes_on(
    transactional_db, settings, tarsy_go, runs, caplog
):
    caplog.set_level(logging.INFO, logger="scoring.tarsy_go.events")
    tarsy_go.events = None  # e.g. a proxy in front of Go TARSy that routes no WebSocket
    settings.TARSY_SYNC_INTERVAL_S = 0.2
    session_id, finished = running_session(tarsy_go)
    with periodic_sync():
        wait_for(lambda: len(runs) >= 2, timeout_s=30, what="two runs")
        tarsy_go.add(finished)
        wait_for(lambda: stored(session_id), timeout_s=30, what="the finished session, polled")
        wait_for(lambda: "no session events from" in caplog.text, timeout_s=20, what="the listener's try")

    ws_url = tarsy_go.url.replace("http://", "ws://") + "/api/v1/ws"
    said = [r for r in caplog.records if r.name == "scoring.tarsy_go.events" and r.levelno >= logging.INFO]
    assert [r.getMessage() for r in said] == [
        f"no session events from {ws_url} (answered 404 Not Found): sessions are pulled every "
        f"TARSY_SYNC_INTERVAL_S; trying again in {events.ABSENT_RETRY_S:g} s"
    ]
    assert tarsy_go.request_counts()["/api/v1/ws"] == 1  # tried again only much later


def test_a_tarsy_bot_gets_no_listener(transactional_db, settings, tarsy, runs):
    settings.TARSY_URL, settings.TARSY_SYNC_INTERVAL_S = tarsy.url, 0.2
    with periodic_sync():
        wait_for(lambda: len(runs) >= 3, timeout_s=30, what="three runs")
        assert not listeners()

    assert AlertSession.objects.count() == len(tarsy.documents)
    assert not [path for path, _ in tarsy.requests if path.endswith("/ws")]


def test_tarsy_sync_events_off_starts_no_listener(
    transactional_db, settings, tarsy_go, tarsy_go_events, runs
):
    settings.TARSY_SYNC_EVENTS = False
    settings.TARSY_SYNC_INTERVAL_S = 0.2
    with periodic_sync():
        wait_for(lambda: len(runs) >= 3, timeout_s=30, what="three runs")
        assert not listeners()

    assert tarsy_go.request_counts()["/api/v1/ws"] == 0
    assert TarsySync.objects.get(source=tarsy_go.url).last_success_at_us is not None


def test_the_token_file_is_read_on_each_connection_and_no_token_is_logged(
    transactional_db, settings, tmp_path, tarsy_go_events, runs, caplog
):
    caplog.set_level(logging.DEBUG)  # websockets' own debug lines too: they list the request's headers
    token_file = tmp_path / "token"
    token_file.write_text("first-token-0123\n")
    server = StandInGoTarsy(token="first-token-0123")
    server.events = tarsy_go_events
    settings.TARSY_URL, settings.TARSY_TOKEN_FILE = server.url, str(token_file)
    try:
        with periodic_sync():
            wait_until_listening(tarsy_go_events, runs)
            # The kubelet rotates a projected token by replacing the file.
            rotated = tmp_path / "token.new"
            rotated.write_text("second-token-4567\n")
            rotated.replace(token_file)
            server.token = "second-token-4567"

            tarsy_go_events.drop_connections()

            wait_for(
                lambda: caplog.text.count("listening to the session events") == 2,
                timeout_s=20,
                what="the connection made again with the new token",
            )
            server.token = "wrong"  # now refused: said, without the token
            tarsy_go_events.drop_connections()
            wait_for(lambda: "answered 401 Unauthorized" in caplog.text, timeout_s=20, what="the refusal")
    finally:
        server.stop()

    # The stand-in's own server logs the headers it got: this service's lines are the others.
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name != "websockets.server")
    theirs = "\n".join(r.getMessage() for r in caplog.records if r.name == "websockets.server")
    assert "< Authorization: Bearer second-token-4567" in theirs
    assert "> Authorization: Bearer <credentials>" in ours  # websockets writes the headers at DEBUG
    assert "first-token" not in ours and "second-token" not in ours


@pytest.mark.parametrize(
    ("event", "wakes"),
    [
        ({"type": "session.status", "session_id": "s", "status": "completed"}, True),
        ({"type": "session.status", "session_id": "s", "status": "failed"}, True),
        ({"type": "session.status", "session_id": "s", "status": "cancelled"}, True),
        ({"type": "session.status", "session_id": "s", "status": "timed_out"}, True),
        ({"type": "session.status", "session_id": "s", "status": "in_progress"}, False),
        ({"type": "session.status", "session_id": "s", "status": "cancelling"}, False),
        ({"type": "session.status", "session_id": "s", "status": ["completed"]}, False),
        ({"type": "review.status", "session_id": "s", "review_status": "reviewed", "actor": "carol"}, True),
        ({"type": "review.status", "session_id": "s", "assignee": "carol", "actor": "carol"}, True),
        ({"type": "session.score_updated", "session_id": "s", "scoring_status": "completed"}, True),
        ({"type": "session.score_updated", "session_id": "s", "scoring_status": "failed"}, True),
        ({"type": "session.score_updated", "session_id": "s", "scoring_status": "in_progress"}, False),
        ({"type": "session.score_updated", "session_id": "s", "scoring_status": "memorizing"}, False),
        ({"type": "session.progress", "session_id": "s", "status_text": "completed"}, False),
        ({"type": "pong"}, False),
        (["session.status"], False),
        ("completed", False),
    ],
)
def test_which_events_wake_the_sync(event, wakes):
    assert events.wakes_sync(event) is wakes


@pytest.mark.parametrize(
    ("base_url", "ws_url"),
    [
        ("http://127.0.0.1:8080", "ws://127.0.0.1:8080/api/v1/ws"),
        ("https://tarsy.example.com", "wss://tarsy.example.com/api/v1/ws"),
        ("https://example.com/tarsy", "wss://example.com/tarsy/api/v1/ws"),
    ],
)
def test_the_websocket_is_beside_the_api(base_url, ws_url):
    assert events.websocket_url(base_url) == ws_url


def test_it_pings_as_go_s_dashboard_and_a_connection_without_pongs_is_made_again(
    tarsy_go, tarsy_go_events, monkeypatch, caplog
):
    caplog.set_level(logging.INFO, logger="scoring.tarsy_go.events")
    monkeypatch.setattr(events, "PING_INTERVAL_S", 0.3)
    monkeypatch.setattr(events, "PONG_TIMEOUT_S", 1.0)
    stop = threading.Event()
    thread = events.start_listener(sync.configured_client(), lambda: None, stop)
    try:
        wait_for(lambda: tarsy_go_events.pings >= 3, timeout_s=20, what="three pings")
        assert tarsy_go.request_counts()["/api/v1/ws"] == 1  # answered: the connection stays

        tarsy_go_events.answer_pings = False  # a connection a proxy left hanging

        wait_for(lambda: tarsy_go.request_counts()["/api/v1/ws"] >= 2, timeout_s=20, what="a new connection")
    finally:
        stop.set()
        thread.join(timeout=10)

    assert not thread.is_alive()
    assert "no pong within 1 s; reconnecting in 0.5 s" in caplog.text


def test_the_listener_ends_when_told_even_while_waiting_to_try_again(settings, tarsy_go):
    tarsy_go.events = None
    client = sync.configured_client()
    stop = threading.Event()
    thread = events.start_listener(client, lambda: None, stop)
    wait_for(lambda: tarsy_go.request_counts()["/api/v1/ws"] == 1, timeout_s=20, what="a try")

    stop.set()
    thread.join(timeout=10)

    assert not thread.is_alive()

