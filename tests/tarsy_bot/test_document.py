"""Validation of TARSy session documents (scoring.tarsy_bot.document.parse_session)."""

import json
import uuid

import pytest

from scoring.tarsy.documents import MAX_REPORTED_ERRORS, InvalidSession
from scoring.tarsy_bot.document import parse_session
from tests.support.api import session_document, stage

STATUS_LIST = "pending, in_progress, paused, canceling, completed, failed, cancelled, timed_out"


def errors_of(document) -> dict:
    with pytest.raises(InvalidSession) as caught:
        parse_session(document)
    return caught.value.errors


def test_valid_document_maps_to_session_fields():
    document = session_document(chain_definition={"stages": []}, author=None, runbook_url=None)
    document["stages"][0]["tarsy_added_later"] = {"kept": True}

    fields = parse_session(document)

    assert fields["session_id"] == uuid.UUID(document["session_id"])
    assert fields["alert_type"] == "kubernetes"
    assert fields["status"] == "completed"
    assert fields["author"] == "" and fields["runbook_url"] == ""
    assert fields["error_message"] is None
    assert fields["alert_data"] == document["alert_data"]
    assert fields["stages"] == document["stages"]
    assert fields["stages"][0]["tarsy_added_later"] == {"kept": True}
    assert fields["session_level_interactions"] == document["session_level_interactions"]
    assert "chain_definition" not in fields


def test_optional_fields_may_be_absent():
    document = session_document()
    for key in (
        "agent_type",
        "chain_id",
        "author",
        "runbook_url",
        "error_message",
        "final_analysis",
        "final_analysis_summary",
        "completed_at_us",
        "session_level_interactions",
    ):
        del document[key]

    fields = parse_session(document)

    assert (fields["agent_type"], fields["chain_id"], fields["author"], fields["runbook_url"]) == (
        "",
        "",
        "",
        "",
    )
    assert fields["final_analysis"] is None and fields["completed_at_us"] is None
    assert fields["session_level_interactions"] == []


def test_investigation_bytes_is_the_utf8_size_of_the_investigation():
    document = session_document()
    document["stages"][0]["llm_interactions"][0]["details"]["conversation"]["messages"][0]["content"] = (
        "é" * 10
    )

    fields = parse_session(document)

    expected = sum(
        len(json.dumps(document[key], ensure_ascii=False, separators=(",", ":")).encode())
        for key in ("stages", "session_level_interactions")
    )
    assert fields["investigation_bytes"] == expected


def test_parallel_child_stages_are_accepted():
    document = session_document(stages=[stage(0, "investigate", parallel_executions=[stage(0), stage(0)])])

    assert parse_session(document)["stages"][0]["parallel_executions"][1]["stage_index"] == 0


def test_a_failed_llm_call_without_a_conversation_is_accepted():
    # TARSy sets the conversation only on success; a failed call keeps its error.
    document = session_document()
    details = document["stages"][0]["llm_interactions"][0]["details"]
    details.update(conversation=None, success=False, error_message="provider API error: timeout")

    stored = parse_session(document)["stages"][0]["llm_interactions"][0]["details"]

    assert stored["conversation"] is None
    assert stored["error_message"] == "provider API error: timeout"


@pytest.mark.parametrize(
    "document, message",
    [
        ([], "Expected a TARSy session (a JSON object), got a list."),
        ("text", "Expected a TARSy session (a JSON object), got a string."),
        (None, "Expected a TARSy session (a JSON object), got null."),
    ],
)
def test_a_document_must_be_an_object(document, message):
    assert errors_of(document) == {"non_field_errors": [message]}


def _set(path: str, value):
    """A change to a document: set the value at a dotted path (list items by number)."""

    def change(document):
        *parents, last = path.split(".")
        target = document
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if value is _DELETE:
            del target[last]
        else:
            target[int(last) if isinstance(target, list) else last] = value

    return change


_DELETE = object()
LLM = "stages.0.llm_interactions.0"
MCP = "stages.0.mcp_communications.0"

INVALID_VALUES = [
    # Top-level fields.
    (_set("session_id", _DELETE), "session_id", "This field is required (a string)."),
    (_set("session_id", "not-a-uuid"), "session_id", "'not-a-uuid' is not a valid UUID."),
    (_set("session_id", 12), "session_id", "Expected a string, got an integer."),
    (_set("alert_type", _DELETE), "alert_type", "This field is required (a string)."),
    (_set("alert_type", "  "), "alert_type", "This field may not be blank."),
    (
        _set("alert_type", "k" * 256),
        "alert_type",
        "Ensure this field has no more than 255 characters (it has 256).",
    ),
    (_set("author", 7), "author", "Expected a string or null, got an integer."),
    (
        _set("status", "running"),
        "status",
        f"'running' is not a TARSy session status; expected one of: {STATUS_LIST}.",
    ),
    (_set("status", None), "status", "Expected a string, got null."),
    (_set("started_at_us", _DELETE), "started_at_us", "This field is required (an integer)."),
    (_set("started_at_us", "1767225600000000"), "started_at_us", "Expected an integer, got a string."),
    (_set("started_at_us", True), "started_at_us", "Expected an integer, got a boolean."),
    (
        _set("started_at_us", -1),
        "started_at_us",
        "Expected microseconds since the Unix epoch (0 to 9223372036854775807), got -1.",
    ),
    (_set("completed_at_us", 1.5), "completed_at_us", "Expected an integer or null, got a number."),
    (_set("alert_data", _DELETE), "alert_data", "This field is required (an object)."),
    (_set("alert_data", "severity=high"), "alert_data", "Expected an object, got a string."),
    (_set("stages", _DELETE), "stages", "This field is required (a list)."),
    (_set("stages", {}), "stages", "Expected a list, got an object."),
    (
        _set("session_level_interactions", {}),
        "session_level_interactions",
        "Expected a list or null, got an object.",
    ),
    # Stages.
    (_set("stages.0", "analysis"), "stages[0]", "Expected a stage (an object), got a string."),
    (_set("stages.0.execution_id", _DELETE), "stages[0].execution_id", "This field is required (a string)."),
    (_set("stages.0.stage_name", ""), "stages[0].stage_name", "This field may not be blank."),
    (_set("stages.0.stage_index", "0"), "stages[0].stage_index", "Expected an integer, got a string."),
    (_set("stages.0.llm_interactions", None), "stages[0].llm_interactions", "Expected a list, got null."),
    (
        _set("stages.0.mcp_communications", _DELETE),
        "stages[0].mcp_communications",
        "This field is required (a list).",
    ),
    (
        _set("stages.0.parallel_executions", _DELETE),
        "stages[0].parallel_executions",
        "This field is required (a list of child stages or null).",
    ),
    (
        _set("stages.0.parallel_executions", [{**stage(), "execution_id": None}]),
        "stages[0].parallel_executions[0].execution_id",
        "Expected a string, got null.",
    ),
    # Interactions.
    (_set(LLM, []), "stages[0].llm_interactions[0]", "Expected an interaction (an object), got a list."),
    (
        _set(f"{LLM}.details", _DELETE),
        "stages[0].llm_interactions[0].details",
        "This field is required (an object with the LLM details).",
    ),
    (
        _set(f"{LLM}.details.conversation", _DELETE),
        "stages[0].llm_interactions[0].details.conversation",
        'This field is required (an object with a "messages" list or null).',
    ),
    (
        _set(f"{LLM}.details.conversation", []),
        "stages[0].llm_interactions[0].details.conversation",
        'Expected an object with a "messages" list or null, got a list.',
    ),
    (
        _set(f"{LLM}.details.conversation.messages", "hi"),
        "stages[0].llm_interactions[0].details.conversation.messages",
        "Expected a list of {role, content} messages, got a string.",
    ),
    (
        _set(f"{LLM}.details.conversation.messages.1", "hi"),
        "stages[0].llm_interactions[0].details.conversation.messages[1]",
        "Expected a message (an object with role and content), got a string.",
    ),
    (
        _set(f"{LLM}.details.conversation.messages.1.role", _DELETE),
        "stages[0].llm_interactions[0].details.conversation.messages[1].role",
        "This field is required (a string).",
    ),
    (
        _set(f"{LLM}.details.conversation.messages.2.content", None),
        "stages[0].llm_interactions[0].details.conversation.messages[2].content",
        "Expected a string, got null.",
    ),
    (
        _set(f"{MCP}.details", "tool_call"),
        "stages[0].mcp_communications[0].details",
        "Expected an object with the MCP details, got a string.",
    ),
    (
        _set(f"{MCP}.details.server_name", _DELETE),
        "stages[0].mcp_communications[0].details.server_name",
        "This field is required (a string).",
    ),
    (
        _set(f"{MCP}.details.communication_type", ""),
        "stages[0].mcp_communications[0].details.communication_type",
        "This field may not be blank.",
    ),
    (
        _set("session_level_interactions.0.type", "chat"),
        "session_level_interactions[0].type",
        "Expected 'llm' or 'mcp' (the kind of interaction), got \"chat\".",
    ),
    (
        _set("session_level_interactions.0.details.conversation", "hi"),
        "session_level_interactions[0].details.conversation",
        'Expected an object with a "messages" list or null, got a string.',
    ),
]


@pytest.mark.parametrize(
    "change, path, message", INVALID_VALUES, ids=[case[1] + ":" + case[2] for case in INVALID_VALUES]
)
def test_each_invalid_value_is_reported_at_its_path(change, path, message):
    document = session_document()
    change(document)

    assert errors_of(document) == {path: [message]}


NOTE_MIDDLE = "(\\u0000), which the database cannot store, replaced with U+FFFD in: "


def nuls_replaced(value):
    """The value with every NUL replaced by U+FFFD, in keys and strings alike."""
    return json.loads(json.dumps(value).replace("\\u0000", "\\ufffd"))


@pytest.mark.parametrize(
    "change, where",
    [
        (_set("final_analysis", "Root cause:\x00 finalizer"), "final_analysis (1)"),
        (_set("alert_type", "a\x00b\x00"), "alert_type (2)"),
        (_set("alert_data.namespace", "stuck\x00"), "alert_data.namespace (1)"),
        (
            _set(f"{MCP}.details.tool_result", {"result": "binary \x00 log"}),
            "stages[0].mcp_communications[0].details.tool_result.result (1)",
        ),
        (
            _set(f"{MCP}.details.tool_arguments", {"k\x00": "v"}),
            "stages[0].mcp_communications[0].details.tool_arguments (a key) (1)",
        ),
        (
            _set("session_level_interactions.0.details.conversation.messages.0.content", "\\\x00"),
            "session_level_interactions[0].details.conversation.messages[0].content (1)",
        ),
    ],
    ids=["text column", "twice", "alert_data", "stages", "a key", "after a backslash"],
)
def test_nul_characters_are_replaced_and_noted_because_postgresql_cannot_store_them(change, where):
    document = session_document()
    change(document)
    count = json.dumps(document).count("\\u0000")

    fields = parse_session(document)

    expected = nuls_replaced(document)
    for key in ("alert_type", "final_analysis", "alert_data", "stages", "session_level_interactions"):
        assert fields[key] == expected[key], key
    characters = "character" if count == 1 else "characters"
    assert fields["ingest_notes"] == [f"{count} NUL {characters} {NOTE_MIDDLE}{where}."]


def test_the_note_names_a_bounded_number_of_places():
    document = session_document(final_analysis="\x00")
    document["alert_data"] = {f"key{n}": "\x00\x00" for n in range(12)}

    (note,) = parse_session(document)["ingest_notes"]

    listed = ", ".join(["final_analysis (1)"] + [f"alert_data.key{n} (2)" for n in range(9)])
    assert note == f"25 NUL characters {NOTE_MIDDLE}{listed} and 3 more values."


def test_a_document_without_nuls_has_no_notes():
    assert parse_session(session_document())["ingest_notes"] == []


def test_the_text_backslash_u0000_is_not_a_nul():
    document = session_document(final_analysis="escape \\u0000 shown as text")
    document["stages"][0]["llm_interactions"][0]["details"]["conversation"]["messages"][0]["content"] = (
        "\\u0000"
    )

    fields = parse_session(document)

    assert fields["stages"] == document["stages"]
    assert fields["final_analysis"] == "escape \\u0000 shown as text"


def test_every_error_is_reported_at_once_and_on_one_line():
    document = session_document(status="running", alert_data=[])
    del document["stages"][0]["llm_interactions"][0]["details"]

    with pytest.raises(InvalidSession) as caught:
        parse_session(document)

    assert set(caught.value.errors) == {"status", "alert_data", "stages[0].llm_interactions[0].details"}
    assert str(caught.value) == (
        f"status: 'running' is not a TARSy session status; expected one of: {STATUS_LIST}.; "
        "alert_data: Expected an object, got a list.; "
        "stages[0].llm_interactions[0].details: This field is required (an object with the LLM details)."
    )


def test_errors_past_the_limit_are_counted_not_listed():
    document = session_document(stages=[{"stage_index": 0}] * 20)  # 5 errors each

    errors = errors_of(document)

    assert len(errors) == MAX_REPORTED_ERRORS + 1
    assert errors["non_field_errors"] == [
        f"{100 - MAX_REPORTED_ERRORS} more invalid values not listed; fix these and send the document again."
    ]
