"""The Go TARSy samples of ``scoring/samples/`` are Go TARSy's API answers, exactly.

Every object has the fields of the Go type its endpoint encodes, in Go's order, with ``omitempty``
honoured (the tables of tests/support/tarsy_go.py, the ones the rebuilt e2e goldens are checked
against); Go's maps (``map[string]any``: metadata, requests, tool arguments...) have their keys sorted,
as encoding/json writes them; and the answers agree with each other as Go's would: every interaction
the trace lists has its detail, the timeline's events belong to the listed executions in sequence,
ids are UUIDs, times RFC 3339 UTC in the order the work happened, counts and token sums add up, and
the session's score and review fields are those of the score and review activity.
"""

import copy
import re
import uuid

import pytest

from tests.support import tarsy_go as go
from tests.support.samples import SAMPLES, TARSY_GO_SAMPLES, load

GO_TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z")
# Fields that are Go maps (map[string]any, or a list of them): encoding/json sorts their keys.
GO_MAPS = {
    "llm_request", "llm_response", "response_metadata", "tool_arguments", "tool_result", "available_tools",
    "metadata", "mcp_selection",
}
TIME_FIELDS = {"created_at", "updated_at", "started_at", "completed_at", "feedback_edited_at"}


def shape_problems(document: dict) -> list[str]:
    """Where ``document`` differs from what Go's types would encode, by JSON path."""
    problems: list[str] = []

    def check(struct: go.GoStruct, value, path: str) -> None:
        if not isinstance(value, dict):
            problems.append(f"{path}: not an object")
            return
        try:
            built = struct.build(value)
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
            return
        if list(built) != list(value):
            problems.append(f"{path}: fields {list(value)}, Go writes {list(built)}")
        for key in GO_MAPS & value.keys():
            if repr(value[key]) != repr(_sorted(value[key])):
                problems.append(f"{path}.{key}: a Go map's keys are written sorted")

    def executions(items, path: str) -> None:
        for n, execution in enumerate(items):
            check(go.EXECUTION_OVERVIEW, execution, f"{path}[{n}]")
            executions(execution.get("sub_agents", []), f"{path}[{n}].sub_agents")

    def groups(items, path: str) -> None:
        for n, group in enumerate(items):
            check(go.TRACE_EXECUTION, group, f"{path}[{n}]")
            for m, item in enumerate(group.get("llm_interactions", [])):
                check(go.LLM_LIST_ITEM, item, f"{path}[{n}].llm_interactions[{m}]")
            for m, item in enumerate(group.get("mcp_interactions", [])):
                check(go.MCP_LIST_ITEM, item, f"{path}[{n}].mcp_interactions[{m}]")
            groups(group.get("sub_agents", []), f"{path}[{n}].sub_agents")

    if list(document) != [
        "format", "session", "timeline", "trace", "llm_interactions", "mcp_interactions", "score",
        "review_activity",
    ]:
        problems.append(f"the document's keys: {list(document)}")
    session = document["session"]
    check(go.SESSION_DETAIL, session, "session")
    for n, stage in enumerate(session.get("stages", [])):
        check(go.STAGE_OVERVIEW, stage, f"session.stages[{n}]")
        executions(stage.get("executions", []), f"session.stages[{n}].executions")
    for n, event in enumerate(document["timeline"]):
        check(go.TIMELINE_EVENT, event, f"timeline[{n}]")
    check(go.TRACE_LIST, document["trace"], "trace")
    for n, stage in enumerate(document["trace"]["stages"]):
        check(go.TRACE_STAGE, stage, f"trace.stages[{n}]")
        groups(stage["executions"], f"trace.stages[{n}].executions")
    for n, item in enumerate(document["trace"]["session_interactions"]):
        check(go.LLM_LIST_ITEM, item, f"trace.session_interactions[{n}]")
    for interaction_id, detail in document["llm_interactions"].items():
        path = f"llm_interactions.{interaction_id}"
        check(go.LLM_DETAIL, detail, path)
        for n, message in enumerate(detail.get("conversation", [])):
            check(go.CONVERSATION_MESSAGE, message, f"{path}.conversation[{n}]")
            for m, call in enumerate(message.get("tool_calls", [])):
                check(go.MESSAGE_TOOL_CALL, call, f"{path}.conversation[{n}].tool_calls[{m}]")
    for interaction_id, detail in document["mcp_interactions"].items():
        check(go.MCP_DETAIL, detail, f"mcp_interactions.{interaction_id}")
    if document["score"] is not None:
        check(go.SCORE, document["score"], "score")
    check(go.REVIEW_ACTIVITY, document["review_activity"], "review_activity")
    for n, item in enumerate(document["review_activity"].get("activities", [])):
        check(go.REVIEW_ACTIVITY_ITEM, item, f"review_activity.activities[{n}]")
    return problems


def _sorted(value):
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def test_the_samples_hold_go_tarsy_sessions_beside_tarsy_bot_ones():
    assert len(TARSY_GO_SAMPLES) >= 2
    assert len(SAMPLES) - len(TARSY_GO_SAMPLES) >= 9


@pytest.mark.parametrize("path", TARSY_GO_SAMPLES, ids=lambda p: p.stem)
def test_every_object_has_exactly_the_fields_go_writes_in_go_s_order(path):
    assert shape_problems(load(path)) == []


def test_the_shape_check_finds_an_extra_a_missing_an_empty_omitempty_or_a_moved_field():
    document = load(TARSY_GO_SAMPLES[0])
    cases = []
    extra = copy.deepcopy(document)
    extra["session"]["stages"][0]["executions"][0]["thinking_tokens"] = 12
    cases.append((extra, "executions[0]: ExecutionOverview has no field ['thinking_tokens']"))
    missing = copy.deepcopy(document)
    del missing["session"]["chat_id"]
    cases.append((missing, "session: SessionDetailResponse.chat_id is missing (Go always writes it)"))
    empty = copy.deepcopy(document)
    detail = next(iter(empty["llm_interactions"].values()))
    detail["response_metadata"] = {}
    cases.append((empty, "llm_interactions."))
    moved = copy.deepcopy(document)
    event = moved["timeline"][0]
    moved["timeline"][0] = {"event_type": event["event_type"], **event}
    cases.append((moved, "timeline[0]: fields"))
    unsorted = copy.deepcopy(document)
    call = next(e for e in unsorted["timeline"] if e["event_type"] == "llm_tool_call")
    call["metadata"] = dict(reversed(call["metadata"].items()))
    cases.append((unsorted, "metadata: a Go map's keys are written sorted"))

    for changed, expected in cases:
        problems = shape_problems(changed)
        assert len(problems) == 1 and expected in problems[0], problems


# --- The answers agree with each other -------------------------------------------------------


def trace_groups(trace: dict):
    """(stage group, execution group) with sub-agents after their orchestrator."""
    for stage in trace["stages"]:
        for group in stage["executions"]:
            yield stage, group
            for sub in group.get("sub_agents", []):
                yield stage, sub


def overviews(session: dict):
    for stage in session["stages"]:
        for execution in stage.get("executions", []):
            yield stage, execution
            for sub in execution.get("sub_agents", []):
                yield stage, sub


def moment(text: str):
    assert GO_TIME_RE.fullmatch(text), text
    return go.parse_go_time(text)


@pytest.mark.parametrize("path", TARSY_GO_SAMPLES, ids=lambda p: p.stem)
def test_every_interaction_the_trace_lists_has_its_detail_and_the_same_facts(path):
    document = load(path)
    listed = {
        kind: {
            item["id"]: item
            for _, group in trace_groups(document["trace"])
            for item in group[f"{kind}_interactions"]
        }
        for kind in ("llm", "mcp")
    }
    for kind in ("llm", "mcp"):
        details = document[f"{kind}_interactions"]
        assert sorted(details) == sorted(listed[kind])
        for interaction_id, item in listed[kind].items():
            detail = details[interaction_id]
            assert {k: detail.get(k) for k in item} == item, interaction_id
    # The session detail and the trace list the same stages and executions, in the same order.
    session = document["session"]
    assert [s["id"] for s in session["stages"]] == [s["stage_id"] for s in document["trace"]["stages"]]
    assert [(e["execution_id"], e["agent_name"]) for _, e in overviews(session)] == [
        (g["execution_id"], g["agent_name"]) for _, g in trace_groups(document["trace"])
    ]


@pytest.mark.parametrize("path", TARSY_GO_SAMPLES, ids=lambda p: p.stem)
def test_ids_are_uuids_and_times_are_rfc3339_utc(path):
    document = load(path)

    def walk(value, key=None):
        if isinstance(value, dict):
            for name, item in value.items():
                yield from walk(item, name)
        elif isinstance(value, list):
            for item in value:
                yield from walk(item, key)
        else:
            yield key, value

    ids = times = 0
    answers = {k: document[k] for k in ("session", "timeline", "trace", "score", "review_activity")}
    for key, value in walk(answers):
        if value is None:
            continue
        if key in ("id", "session_id", "stage_id", "execution_id", "parent_execution_id", "score_id",
                   "current_stage_id", "referenced_stage_id", "chat_id"):
            assert str(uuid.UUID(value)) == value and uuid.UUID(value).version == 4, (key, value)
            ids += 1
        if key in TIME_FIELDS:
            moment(value)
            times += 1
    for detail in [*document["llm_interactions"].values(), *document["mcp_interactions"].values()]:
        assert str(uuid.UUID(detail["id"])) == detail["id"]
        moment(detail["created_at"])
    assert ids > 20 and times > 20


@pytest.mark.parametrize("path", TARSY_GO_SAMPLES, ids=lambda p: p.stem)
def test_timeline_events_belong_to_their_executions_in_sequence_and_in_time(path):
    document = load(path)
    session = document["session"]
    windows = {
        e["execution_id"]: (stage["id"], moment(e["started_at"]), moment(e["completed_at"]))
        for stage, e in overviews(session)
    }
    by_execution: dict = {}
    for event in document["timeline"]:
        assert event["session_id"] == session["id"]
        stage_id, begin, end = windows[event["execution_id"]]
        assert event["stage_id"] == stage_id
        assert begin < moment(event["created_at"]) <= moment(event["updated_at"]) <= end
        assert event["status"] == "completed" and event["edges"] == {}
        by_execution.setdefault(event["execution_id"], []).append(event)
    sequences = [e["sequence_number"] for e in document["timeline"]]
    assert sequences == sorted(sequences)  # GET /timeline orders by sequence number
    for events in by_execution.values():
        assert sorted(e["sequence_number"] for e in events) == list(range(1, len(events) + 1))
        ordered = sorted(events, key=lambda e: e["sequence_number"])
        assert [moment(e["created_at"]) for e in ordered] == sorted(moment(e["created_at"]) for e in ordered)
    assert set(by_execution) == set(windows)  # every execution wrote its events


@pytest.mark.parametrize("path", TARSY_GO_SAMPLES, ids=lambda p: p.stem)
def test_times_follow_the_work_and_durations_match_them(path):
    document = load(path)
    session = document["session"]
    created, started, completed = (moment(session[k]) for k in ("created_at", "started_at", "completed_at"))
    assert created < started < completed
    assert session["duration_ms"] == (completed - started) // go.timedelta(milliseconds=1)
    windows = {}
    for stage, execution in overviews(session):
        begin, end = moment(execution["started_at"]), moment(execution["completed_at"])
        assert execution["duration_ms"] == (end - begin) // go.timedelta(milliseconds=1)
        assert end <= moment(stage["completed_at"])
        windows[execution["execution_id"]] = (begin, end)
        if stage["stage_type"] not in ("scoring", "chat"):
            assert end < completed
    for _, group in trace_groups(document["trace"]):
        begin, end = windows[group["execution_id"]]
        for kind in ("llm", "mcp"):
            created_ats = [moment(i["created_at"]) for i in group[f"{kind}_interactions"]]
            assert created_ats == sorted(created_ats)  # the trace lists them by creation
            assert all(begin < at < end for at in created_ats)


@pytest.mark.parametrize("path", TARSY_GO_SAMPLES, ids=lambda p: p.stem)
def test_counts_tokens_and_costs_add_up(path):
    document = load(path)
    session = document["session"]
    items = {
        item["id"]: (group["execution_id"], item)
        for _, group in trace_groups(document["trace"])
        for item in group["llm_interactions"]
    }

    assert session["llm_interaction_count"] == len(document["llm_interactions"])
    assert session["mcp_interaction_count"] == len(document["mcp_interactions"])
    assert session["total_stages"] == len(session["stages"])
    assert session["completed_stages"] == sum(s["status"] == "completed" for s in session["stages"])
    assert session["has_parallel_stages"] == any(s["parallel_type"] for s in session["stages"])
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        assert session[key] == sum(i[key] for _, i in items.values())
        for _, execution in overviews(session):
            own = [i for owner, i in items.values() if owner == execution["execution_id"]]
            assert execution[key] == sum(i[key] for i in own)
    executions = [e for _, e in overviews(session)]
    assert session["estimated_cost_usd"] == pytest.approx(sum(e["estimated_cost_usd"] for e in executions))
    for stage in session["stages"]:
        assert stage["expected_agent_count"] == len(stage["executions"])
    main = [s for s in session["stages"] if s["stage_type"] not in ("chat", "scoring")]
    assert session["current_stage_index"] == main[-1]["stage_index"]
    assert session["current_stage_id"] == main[-1]["id"]


@pytest.mark.parametrize("path", TARSY_GO_SAMPLES, ids=lambda p: p.stem)
def test_the_session_s_score_and_review_are_those_of_its_score_and_review_activity(path):
    document = load(path)
    session, score = document["session"], document["score"]
    if score is None:
        assert (session["latest_score"], session["scoring_status"], session["score_id"]) == (None, None, None)
        assert not any(s["stage_type"] == "scoring" for s in session["stages"])
    else:
        assert (session["latest_score"], session["scoring_status"], session["score_id"]) == (
            score["total_score"], score["status"], score["score_id"]
        )
        stage = next(s for s in session["stages"] if s["id"] == score["stage_id"])
        assert stage["stage_type"] == "scoring"
        assert moment(score["started_at"]) < moment(stage["executions"][0]["started_at"])
        assert moment(score["completed_at"]) < moment(stage["executions"][0]["completed_at"])
        listed = trace_group(document, stage["id"])["llm_interactions"]
        turns = [document["llm_interactions"][item["id"]] for item in listed]
        assert turns[0]["conversation"][-1]["content"] == f"{score['score_analysis']}\n{score['total_score']}"
        assert turns[-1]["conversation"][-1]["content"] == score["tool_improvement_report"]
    completions = [a for a in document["review_activity"]["activities"] if a["action"] == "complete"]
    if session["review_status"] == "reviewed":
        last = completions[-1]
        assert (session["assignee"], session["quality_rating"], session["action_taken"]) == (
            last["actor"], last["quality_rating"], last["note"]
        )
        assert session["investigation_feedback"] == last["investigation_feedback"]
        assert moment(last["created_at"]) > moment(session["completed_at"])
    else:
        assert completions == []


def trace_group(document: dict, stage_id: str) -> dict:
    stage = next(s for s in document["trace"]["stages"] if s["stage_id"] == stage_id)
    return stage["executions"][0]
