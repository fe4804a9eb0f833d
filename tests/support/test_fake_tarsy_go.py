"""The stand-in Go TARSy (tests/support/fake_tarsy_go.py), spoken to with plain HTTP."""

import copy
import http.client
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlencode

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.support.fake_tarsy_go import DASHBOARD_ITEM, StandInGoTarsy
from tests.support.tarsy_go import GOLDEN_DIR, SESSION_SCENARIOS, go_json, golden_document
from tests.support.tls import private_ca_certificate


@pytest.fixture(scope="module", autouse=True)
def goldens_present():
    if not GOLDEN_DIR.is_dir():
        pytest.skip(f"Go TARSy's goldens are missing: {GOLDEN_DIR}")


def get(url: str, headers: dict | None = None, context=None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def get_json(url: str, **kwargs):
    status, _, data = get(url, **kwargs)
    return status, json.loads(data)


def sessions(server, **query) -> tuple[int, dict]:
    return get_json(f"{server.url}/api/v1/sessions?{urlencode(query)}")


def test_each_endpoint_answers_the_document_as_go_encodes_it(tarsy_go):
    document = golden_document("pipeline")
    session_id = document["session"]["id"]
    base = f"{tarsy_go.url}/api/v1/sessions/{session_id}"
    llm_id = next(iter(document["llm_interactions"]))
    mcp_id = next(iter(document["mcp_interactions"]))

    status, headers, data = get(base)

    assert status == 200
    assert data == (go_json(document["session"]) + "\n").encode()
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert get_json(base + "/timeline") == (200, document["timeline"])
    assert get_json(base + "/trace") == (200, document["trace"])
    assert get_json(f"{base}/trace/llm/{llm_id}") == (200, document["llm_interactions"][llm_id])
    assert get_json(f"{base}/trace/mcp/{mcp_id}") == (200, document["mcp_interactions"][mcp_id])
    assert get_json(base + "/review-activity") == (200, {"activities": []})
    assert list(json.loads(get(base)[2])) == list(document["session"])  # Go's field order


def test_a_session_without_a_score_answers_404_with_go_s_body(tarsy_go):
    session_id = golden_document("skills")["session"]["id"]

    assert get_json(f"{tarsy_go.url}/api/v1/sessions/{session_id}/score") == (
        404, {"message": "resource not found"}
    )


def test_unknown_sessions_and_routes_answer_as_go_does(tarsy_go):
    base = f"{tarsy_go.url}/api/v1/sessions/00000000-0000-4000-8000-000000000000"

    assert get_json(base) == (404, {"message": "resource not found"})
    assert get_json(base + "/review-activity") == (404, {"message": "resource not found"})
    assert get_json(base + "/trace/llm/nope") == (404, {"message": "resource not found"})
    # Neither looks the session up: an unknown one has no events and no stages.
    assert get_json(base + "/timeline") == (200, [])
    assert get_json(base + "/trace") == (200, {"stages": [], "session_interactions": []})
    assert get_json(f"{tarsy_go.url}/api/v1/nothing") == (404, {"message": "Not Found"})


def test_an_interaction_is_found_by_its_id_whatever_the_session_in_the_path(tarsy_go):
    document = golden_document("orchestrator")
    llm_id = next(iter(document["llm_interactions"]))

    status, detail = get_json(f"{tarsy_go.url}/api/v1/sessions/other/trace/llm/{llm_id}")

    assert (status, detail) == (200, document["llm_interactions"][llm_id])


def test_the_list_pages_newest_first_with_go_s_pagination(tarsy_go):
    documents = [golden_document(s)["session"] for s in SESSION_SCENARIOS]
    newest_first = sorted(documents, key=lambda s: s["created_at"], reverse=True)

    status, first = sessions(tarsy_go, page=1, page_size=3)
    _, second = sessions(tarsy_go, page=2, page_size=3)
    _, beyond = sessions(tarsy_go, page=3, page_size=3)

    assert status == 200
    assert first["pagination"] == {"page": 1, "page_size": 3, "total_pages": 2, "total_items": 4}
    assert [s["id"] for s in first["sessions"] + second["sessions"]] == [s["id"] for s in newest_first]
    assert beyond["sessions"] == [] and beyond["pagination"]["page"] == 3
    assert first["cost_estimation_enabled"] is True
    assert list(first["sessions"][0]) == [f for f in DASHBOARD_ITEM.fields]


@pytest.mark.parametrize(
    ("query", "page", "page_size"),
    [({}, 1, 25), ({"page_size": "101"}, 1, 25), ({"page_size": "0"}, 1, 25), ({"page": "0"}, 1, 25),
     ({"page": "x", "page_size": "100"}, 1, 100), ({"page": "+2", "page_size": " 3"}, 2, 25)],
)
def test_pagination_parameters_go_does_not_accept_fall_back_to_its_defaults(tarsy_go, query, page, page_size):
    status, answer = sessions(tarsy_go, **query)

    assert status == 200
    assert (answer["pagination"]["page"], answer["pagination"]["page_size"]) == (page, page_size)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"status": "completed,bogus"}, "invalid status: bogus"),
        (
            {"sort_by": "name"},
            "invalid sort_by: must be created_at, status, alert_type, author, duration, score,"
            " or quality_rating",
        ),
        ({"sort_order": "up"}, "invalid sort_order: must be asc or desc"),
        ({"start_date": "2026-08-21"}, "invalid start_date: must be RFC3339"),
        ({"end_date": "yesterday"}, "invalid end_date: must be RFC3339"),
        ({"search": "ab"}, "search query must be at least 3 characters"),
        ({"review_status": "done"}, "invalid review_status: done"),
        ({"quality_rating": "good"}, "invalid quality_rating: good"),
    ],
)
def test_invalid_list_parameters_answer_400_with_go_s_message(tarsy_go, query, message):
    assert sessions(tarsy_go, **query) == (400, {"message": message})


def test_the_list_filters_as_go_does(tarsy_go):
    documents = {s: golden_document(s)["session"] for s in SESSION_SCENARIOS}
    orchestrator_created = documents["orchestrator"]["created_at"]

    def ids(**query):
        return {s["id"] for s in sessions(tarsy_go, **query)[1]["sessions"]}

    assert ids(status="completed,failed") == {s["id"] for s in documents.values()}
    assert ids(status="failed") == set()
    assert ids(chain_id="action-chain") == {documents["action-chain"]["id"]}
    assert ids(start_date=orchestrator_created, end_date="2026-08-21T09:20:00Z") == {
        documents["orchestrator"]["id"], documents["action-chain"]["id"]
    }
    assert ids(search="api-gateway") == {documents["action-chain"]["id"]}
    assert ids(scoring_status="not_scored") == {s["id"] for s in documents.values()}
    assert ids(review_status="reviewed") == set()


def test_the_list_sorts_computed_fields_with_nulls_last(tarsy_go):
    durations = sorted(golden_document(s)["session"]["duration_ms"] for s in SESSION_SCENARIOS)

    _, answer = sessions(tarsy_go, sort_by="duration", sort_order="asc")

    assert [s["duration_ms"] for s in answer["sessions"]] == durations


def test_list_items_carry_what_go_aggregates(tarsy_go):
    _, answer = sessions(tarsy_go)
    by_chain = {s["chain_id"]: s for s in answer["sessions"]}

    assert by_chain["action-chain"]["has_action_stages"] is True
    assert by_chain["action-chain"]["actions_executed"] is True
    assert [s["chain_id"] for s in answer["sessions"] if s["has_sub_agents"]] == ["orchestrator-chain"]
    assert by_chain["test-chain"]["chat_message_count"] == 2
    flags = {(s["matched_in_content"], s["provider_fallback_count"]) for s in answer["sessions"]}
    assert flags == {(False, 0)}


def test_a_required_token_is_asked_for_with_401():
    server = StandInGoTarsy([golden_document("skills")], token="s3cret")
    try:
        assert get_json(f"{server.url}/api/v1/sessions") == (401, {"message": "Unauthorized"})
        assert get_json(f"{server.url}/api/v1/sessions", headers={"Authorization": "Bearer wrong"})[0] == 401
        status, answer = get_json(f"{server.url}/api/v1/sessions", headers={"Authorization": "Bearer s3cret"})
        assert (status, answer["pagination"]["total_items"]) == (200, 1)
        assert get_json(f"{server.url}/health")[0] == 200  # outside /api: not behind the proxy
    finally:
        server.stop()


def test_it_serves_tls_with_the_given_certificate(tmp_path):
    certificate = private_ca_certificate(tmp_path)
    server = StandInGoTarsy(
        [golden_document("skills")], certfile=certificate.certificate, keyfile=certificate.key
    )
    try:
        context = ssl.create_default_context(cafile=str(certificate.ca_bundle))

        status, answer = get_json(f"{server.url}/health", context=context)

        assert server.url.startswith("https://")
        assert (status, answer["status"]) == (200, "healthy")
        with pytest.raises(urllib.error.URLError):
            get(f"{server.url}/health", context=ssl.create_default_context())
    finally:
        server.stop()


def test_it_fails_drops_and_slows_when_told(tarsy_go):
    url = f"{tarsy_go.url}/api/v1/sessions"
    tarsy_go.fail_next(503, times=2, after=1)

    assert [get(url)[0] for _ in range(4)] == [200, 503, 503, 200]

    tarsy_go.fail_next("drop")
    with pytest.raises((http.client.RemoteDisconnected, urllib.error.URLError, ConnectionError)):
        get(url)

    tarsy_go.slow(0.3, "/api/v1/sessions/")
    started = time.monotonic()
    get(url)
    fast = time.monotonic() - started
    started = time.monotonic()
    get(f"{url}/nope")
    assert time.monotonic() - started >= 0.3 > fast


def test_it_counts_requests_per_path(tarsy_go):
    session_id = golden_document("pipeline")["session"]["id"]
    for _ in range(2):
        get(f"{tarsy_go.url}/api/v1/sessions/{session_id}")
    get(f"{tarsy_go.url}/api/v1/sessions?page=2")

    counts = tarsy_go.request_counts()

    assert counts[f"/api/v1/sessions/{session_id}"] == 2
    assert counts["/api/v1/sessions"] == 1
    assert tarsy_go.list_requests() == [{"page": ["2"]}]


def test_it_counts_the_most_requests_in_flight_at_once(tarsy_go):
    url = f"{tarsy_go.url}/api/v1/sessions"
    tarsy_go.slow(0.3)
    threads = [threading.Thread(target=get, args=(url,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    get(url)  # alone: the peak stays

    assert tarsy_go.peak_in_flight == 3
    assert tarsy_go.in_flight == 0
    assert 4 * 0.3 <= tarsy_go.busy_s < 4 * 0.3 + 1

    tarsy_go.reset_counts()

    assert (tarsy_go.peak_in_flight, tarsy_go.busy_s, tarsy_go.request_counts()) == (0, 0.0, {})


def test_a_session_can_be_replaced_while_it_runs(tarsy_go):
    document = copy.deepcopy(golden_document("skills"))
    session_id = document["session"]["id"]
    activity = {"id": "a1", "actor": "alice", "action": "claim", "from_status": "needs_review",
                "to_status": "in_progress", "created_at": "2026-08-21T12:00:00.5Z"}
    document["session"].update(review_status="in_progress", assignee="alice")
    document["review_activity"] = {"activities": [activity]}

    tarsy_go.add(document)

    assert get_json(f"{tarsy_go.url}/api/v1/sessions/{session_id}/review-activity") == (
        200, {"activities": [activity]}
    )
    status, answer = sessions(tarsy_go, review_status="in_progress")
    assert [s["id"] for s in answer["sessions"]] == [session_id]
    assert answer["sessions"][0]["assignee"] == "alice"
    assert answer["pagination"]["total_items"] == 1


def test_other_methods_are_not_allowed(tarsy_go):
    request = urllib.request.Request(f"{tarsy_go.url}/api/v1/sessions", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=5)

    assert error.value.code == 405
    assert json.loads(error.value.read()) == {"message": "Method Not Allowed"}


def test_its_websocket_is_the_events_stand_in_behind_the_api_s_token(tarsy_go_events):
    server = StandInGoTarsy(token="s3cret")
    ws_url = server.url.replace("http://", "ws://") + "/api/v1/ws"
    try:
        with pytest.raises(InvalidStatus) as absent:
            connect(ws_url, additional_headers={"Authorization": "Bearer s3cret"})
        server.events = tarsy_go_events
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url, additional_headers={"Authorization": "Bearer wrong"})
        with connect(ws_url, additional_headers={"Authorization": "Bearer s3cret"}) as client:
            established = json.loads(client.recv(timeout=5))
            client.send(json.dumps({"action": "subscribe", "channel": "sessions"}))
            confirmed = json.loads(client.recv(timeout=5))
            tarsy_go_events.session_status("6d5fff46-2a2e-44a1-b52c-509a4a502f63", "completed")
            event = json.loads(client.recv(timeout=5))
    finally:
        server.stop()

    assert absent.value.response.status_code == 404
    assert refused.value.response.status_code == 401
    assert established["type"] == "connection.established"
    assert confirmed == {"channel": "sessions", "type": "subscription.confirmed"}
    assert (event["type"], event["status"]) == ("session.status", "completed")
    assert server.request_counts()["/api/v1/ws"] == 3
