"""The sessions REST API: storing TARSy sessions, listing and reading them."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scoring import selectors, services
from scoring.api.sessions import SessionDetailSerializer
from scoring.models import AlertSession, MissingTool, SessionWrite
from tests.support.api import STARTED_AT_US, session_document
from tests.support.factories import T0_US, make_score, make_session

SESSIONS_URL = "/api/v1/sessions/"
DIMENSIONS = {"logical_flow": 15, "consistency": 18, "tool_relevance": 14, "synthesis_quality": 13}
STATUS_LIST = "pending, in_progress, paused, canceling, completed, failed, cancelled, timed_out"


def detail_url(session_id) -> str:
    return f"{SESSIONS_URL}{session_id}/"


def store(**overrides) -> dict:
    document = session_document(**overrides)
    services.ingest_session(document, written_by="test")
    return document


def test_a_session_is_created_then_updated_and_read_back_whole(api_client):
    document = session_document()
    messages = document["stages"][0]["llm_interactions"][0]["details"]["conversation"]["messages"]
    messages[1]["content"] = "Ünïcode, and the text \\u0000 (a backslash, not a NUL)."

    created = api_client.post(SESSIONS_URL, document, format="json")
    document["final_analysis"] = "Revised analysis."
    updated = api_client.post(SESSIONS_URL, document, format="json")
    detail = api_client.get(detail_url(document["session_id"]))

    assert created.status_code == 201
    assert created.json()["session_id"] == document["session_id"]
    assert "stages" not in created.json()
    assert updated.status_code == 200
    assert updated.json()["final_analysis"] == "Revised analysis."
    assert AlertSession.objects.count() == 1
    assert detail.status_code == 200
    body = detail.json()
    assert body["stages"] == document["stages"]
    assert body["session_level_interactions"] == document["session_level_interactions"]
    assert body["alert_data"] == document["alert_data"]
    assert body["investigation_bytes"] > 0


def test_sending_a_session_again_unchanged_leaves_it_alone(api_client):
    document = session_document()
    created = api_client.post(SESSIONS_URL, document, format="json")

    again = api_client.post(SESSIONS_URL, document, format="json")

    assert again.status_code == 200
    assert again.json()["updated_at"] == created.json()["updated_at"]
    assert SessionWrite.objects.count() == 1


def test_an_invalid_session_is_refused_with_its_field_errors(api_client):
    document = session_document(status="running")
    del document["stages"][0]["llm_interactions"][0]["details"]["conversation"]

    response = api_client.post(SESSIONS_URL, document, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "detail": f"status: 'running' is not a TARSy session status; expected one of: {STATUS_LIST}.; "
        "stages[0].llm_interactions[0].details.conversation: "
        'This field is required (an object with a "messages" list or null).',
        "status": [f"'running' is not a TARSy session status; expected one of: {STATUS_LIST}."],
        "stages[0].llm_interactions[0].details.conversation": [
            'This field is required (an object with a "messages" list or null).'
        ],
    }
    assert not AlertSession.objects.exists()


def test_a_list_body_is_refused_as_not_a_session(api_client):
    response = api_client.post(SESSIONS_URL, [session_document()], format="json")

    assert response.status_code == 400
    assert response.json() == {
        "detail": "Expected a TARSy session (a JSON object), got a list.",
        "non_field_errors": ["Expected a TARSy session (a JSON object), got a list."],
    }


def test_a_body_that_is_not_json_is_refused(api_client):
    malformed = api_client.post(SESSIONS_URL, '{"session_id": ', content_type="application/json")
    form = api_client.post(SESSIONS_URL, {"session_id": str(uuid.uuid4())})

    assert malformed.status_code == 400
    assert malformed.json()["detail"].startswith("JSON parse error")
    assert form.status_code == 415


def test_the_list_is_newest_first_and_filtered(api_client):
    oldest = store(started_at_us=STARTED_AT_US, status="failed")
    newest = store(started_at_us=STARTED_AT_US + 2, alert_type="database")
    middle = store(started_at_us=STARTED_AT_US + 1)

    everything = api_client.get(SESSIONS_URL).json()
    completed = api_client.get(SESSIONS_URL, {"status": "completed"}).json()
    kubernetes = api_client.get(SESSIONS_URL, {"alert_type": "kubernetes"}).json()
    unfiltered = api_client.get(SESSIONS_URL, {"status": "", "alert_type": ""}).json()

    def ids(page):
        return [item["session_id"] for item in page["results"]]

    assert ids(everything) == [newest["session_id"], middle["session_id"], oldest["session_id"]]
    assert ids(completed) == [newest["session_id"], middle["session_id"]]
    assert ids(kubernetes) == [middle["session_id"], oldest["session_id"]]
    assert ids(unfiltered) == ids(everything)


def test_an_unknown_status_filter_is_refused(api_client):
    response = api_client.get(SESSIONS_URL, {"status": "running"})

    assert response.status_code == 400
    assert response.json() == {
        "detail": f"status: 'running' is not a TARSy session status; expected one of: {STATUS_LIST}.",
        "status": [f"'running' is not a TARSy session status; expected one of: {STATUS_LIST}."],
    }


def test_the_list_is_paginated_by_50(api_client):
    for offset in range(51):
        store(started_at_us=STARTED_AT_US + offset)

    first = api_client.get(SESSIONS_URL).json()
    second = api_client.get(first["next"]).json()

    assert first["count"] == 51
    assert len(first["results"]) == 50
    assert first["results"][0]["started_at_us"] == STARTED_AT_US + 50
    assert [item["started_at_us"] for item in second["results"]] == [STARTED_AT_US]
    assert second["next"] is None


def test_the_detail_answers_the_investigation_as_stored_without_copying_it_item_by_item(api_client):
    # Copying each of 100,000 stages and their keys cost seconds of CPU per read.
    session, _ = services.ingest_session(session_document(), written_by="tarsy")
    answered = SessionDetailSerializer(session).data
    assert answered["stages"] is session.stages
    assert answered["session_level_interactions"] is session.session_level_interactions


def test_list_items_leave_out_the_investigation_and_never_load_it(api_client):
    store()

    with CaptureQueriesContext(connection) as queries:
        response = api_client.get(SESSIONS_URL)

    item = response.json()["results"][0]
    assert "stages" not in item and "session_level_interactions" not in item
    assert item["alert_type"] == "kubernetes" and item["investigation_bytes"] > 0
    session_queries = [query["sql"] for query in queries.captured_queries if "alert_sessions" in query["sql"]]
    assert session_queries, "the list should have queried the sessions table"
    assert not any('"stages"' in sql or '"session_level_interactions"' in sql for sql in session_queries)
    assert selectors.session_list().get().get_deferred_fields() == set(AlertSession.HEAVY_FIELDS)


def test_list_items_name_their_alert_and_carry_their_newest_score(api_client):
    make_session(started_at_us=T0_US + 4, alert_data={"alert": "KubeHpaMaxedOut", "message": "At max."})
    good = make_session(started_at_us=T0_US + 3, alert_data={"description": "Namespace stuck"})
    make_score(good, total_score=40, scored_at_us=T0_US)
    newest_good = make_score(good, total_score=88, prompt_hash="e" * 64, dimensions=DIMENSIONS)
    MissingTool.objects.create(score=newest_good, name="pods_log", key="pods-log", position=1)
    MissingTool.objects.create(score=newest_good, name="Read File", key="read-file", position=0)
    failed = make_session(started_at_us=T0_US + 2)
    make_score(failed, "failed", error_message="judge LLM timed out after 3 attempts")
    running = make_session(started_at_us=T0_US + 1)
    make_score(running, "in_progress")

    with CaptureQueriesContext(connection) as queries:
        items = api_client.get(SESSIONS_URL).json()["results"]

    # The count and the page, and the page's missing tools: not a query per session.
    assert len([query for query in queries.captured_queries if "session_scores" in query["sql"]]) == 1
    assert len([query for query in queries.captured_queries if "score_missing_tools" in query["sql"]]) == 1
    headings = [(item["alert_title"], item["alert_summary"]) for item in items]
    assert headings[:2] == [("KubeHpaMaxedOut", "At max."), ("kubernetes", "Namespace stuck")]
    assert [item["latest_score"] for item in items] == [
        None,
        {
            "score_id": str(good.scores.order_by("-scored_at_us").first().score_id),
            "status": "completed",
            "total_score": 88,
            "band": "good",
            "current_prompt_used": False,
            "error_message": None,
            "dimensions": DIMENSIONS,
            "missing_tools": ["Read File", "pods_log"],
        },
        {
            "score_id": str(failed.scores.get().score_id),
            "status": "failed",
            "total_score": None,
            "band": None,
            "current_prompt_used": True,
            "error_message": "the judge model's provider answered with an error",  # for a user not staff
            "dimensions": None,
            "missing_tools": [],
        },
        {
            "score_id": str(running.scores.get().score_id),
            "status": "in_progress",
            "total_score": None,
            "band": None,
            "current_prompt_used": True,
            "error_message": None,
            "dimensions": None,
            "missing_tools": [],
        },
    ]


def test_a_stored_session_is_answered_with_its_heading(api_client):
    document = session_document()
    document["alert_data"] = {"alert": "KubePodCrashLooping", "message": "payments-api restarts"}

    created = api_client.post(SESSIONS_URL, document, format="json").json()
    detail = api_client.get(detail_url(document["session_id"])).json()

    for answer in (created, detail):
        heading = (answer["alert_title"], answer["alert_summary"])
        assert heading == ("KubePodCrashLooping", "payments-api restarts")
    assert "latest_score" not in created


def test_an_unknown_session_is_404(api_client):
    session_id = uuid.uuid4()

    response = api_client.get(detail_url(session_id))

    assert response.status_code == 404
    assert response.json() == {"detail": f"No session with id {session_id}."}


@pytest.mark.parametrize("malformed_id", ["not-a-uuid", "12345", "7c9e6679-7425-40de-944b"])
def test_a_malformed_session_id_is_404_saying_ids_are_uuids(api_client, malformed_id):
    response = api_client.get(detail_url(malformed_id))

    assert response.status_code == 404
    assert response.json() == {
        "detail": f"No session with id '{malformed_id}': session ids are UUIDs "
        "(like 7c9e6679-7425-40de-944b-e07fc1f90ae7)."
    }


def test_the_schema_documents_every_sessions_response(api_client):
    schema = api_client.get("/api/schema/", {"format": "json"}).json()

    collection = schema["paths"]["/api/v1/sessions/"]
    item = schema["paths"]["/api/v1/sessions/{session_id}/"]
    assert set(collection["post"]["responses"]) == {"200", "201", "400", "401", "403", "415"}
    assert set(collection["get"]["responses"]) == {"200", "400", "401"}
    assert set(item["get"]["responses"]) == {"200", "401", "404"}
    assert {parameter["name"] for parameter in collection["get"]["parameters"]} >= {
        "status",
        "alert_type",
        "page",
    }
    components = schema["components"]["schemas"]
    request_schema = collection["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    tarsy_bot, tarsy_go = (
        components[one["$ref"].rsplit("/", 1)[1]] for one in components[request_schema.rsplit("/", 1)[1]]["oneOf"]
    )
    assert {"session_id", "status", "stages"} <= set(tarsy_bot["required"])
    assert "investigation_bytes" not in tarsy_bot["properties"]
    assert set(tarsy_go["required"]) == {
        "format", "session", "timeline", "trace", "llm_interactions", "mcp_interactions"
    }  # fmt: skip


def test_a_session_the_renderer_cannot_read_is_stored_and_its_scoring_says_why(api_client):
    """Validation leaves MCP details open; rendering them happens again at scoring."""
    document = session_document()
    document["stages"][0]["mcp_communications"].append(
        {
            "communication_id": str(uuid.uuid4()),
            "timestamp_us": STARTED_AT_US + 5,
            "step_description": "tool list in an unexpected shape",
            "details": {
                "server_name": "kubernetes-server",
                "communication_type": "tool_list",
                "available_tools": ["pods_list"],
            },
        }
    )

    response = api_client.post(SESSIONS_URL, document, format="json")

    assert response.status_code == 201, response.content
    assert AlertSession.objects.get(pk=document["session_id"]).judge_prompt_chars is None
