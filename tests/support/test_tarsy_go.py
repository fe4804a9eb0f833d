"""The rebuilt Go TARSy answers (tests/support/tarsy_go.py) give back Go TARSy's goldens.

Each answer is written out again the way Go TARSy's e2e suite wrote it (test/e2e/golden.go,
ported below: AssertGoldenJSON, AssertGoldenLLMInteraction, AssertGoldenMCPInteraction, the
timeline projection of helpers.go) and normalised by a port of test/e2e/normalize.go, with ids
registered as each e2e test registers them; the result must equal the golden file byte for byte.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest

from tests.support import tarsy_go
from tests.support.tarsy_go import (
    GOLDEN_DIR,
    LLM_DETAIL,
    SESSION_SCENARIOS,
    derive_timeline,
    go_json,
    golden_api_answers,
    golden_document,
    trace_executions,
)


@pytest.fixture(scope="module", autouse=True)
def goldens_present():
    if not GOLDEN_DIR.is_dir():
        pytest.skip(f"Go TARSy's goldens are missing: {GOLDEN_DIR}")


# ── test/e2e/normalize.go ──────────────────────────────────────────────────────────────────

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIMESTAMP_RE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})"
)
UNIX_TS_RE = re.compile(r'"(created_at|updated_at|started_at|completed_at|timestamp)":\s*[0-9]{10,13}')
DB_EVENT_ID_RE = re.compile(r'"db_event_id":\s*[0-9]+')
CONN_ID_RE = re.compile(r'"connection_id":\s*"[^"]*"')
DURATION_MS_RE = re.compile(r'"duration_ms":\s*[0-9]+')
CURRENT_TIME_LINE_RE = re.compile(r"Current time: [^\n]+")
CALENDAR_LINE_RE = re.compile(r"Calendar context \(UTC\): [^\n]+")
STAFFING_LINE_RE = re.compile(r"Staffing: [^\n]+")
SYSTEM_BODY_RE = re.compile(r"(=== MESSAGE: system ===\n)(.*?)((?:\n=== MESSAGE: )|\Z)", re.S)
MEMORY_AGE_RE = re.compile(r"(learned|updated) (?:just now|[0-9]+ [0-9A-Za-z_]+ ago)")
MEMORY_SCORE_RE = re.compile(r", score: -?[0-9]+\.[0-9]+")
SHORT_TIMESTAMP_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}")


class Normalizer:
    def __init__(self, session_id: str):
        self.session_id = session_id
        self.registered: dict[str, dict[str, str]] = {"STAGE_ID": {}, "EXEC_ID": {}, "INTERACTION_ID": {}}

    def register(self, kind: str, value: str) -> None:
        ids = self.registered[kind]
        ids.setdefault(value, f"{{{kind}_{len(ids) + 1}}}")

    def normalize(self, data: str) -> str:
        data = data.replace(self.session_id, "{SESSION_ID}")
        for ids in self.registered.values():
            for value, placeholder in ids.items():
                data = data.replace(value, placeholder)
        data = CURRENT_TIME_LINE_RE.sub("Current time: {CURRENT_TIME}", data)

        def system_body(match: re.Match) -> str:
            body = CALENDAR_LINE_RE.sub("Calendar context (UTC): {CALENDAR_CONTEXT}", match.group(2))
            return match.group(1) + STAFFING_LINE_RE.sub("Staffing: {STAFFING}", body) + match.group(3)

        data = SYSTEM_BODY_RE.sub(system_body, data)
        data = MEMORY_SCORE_RE.sub(", score: {SCORE}", data)
        data = MEMORY_AGE_RE.sub(r"\1 {AGE}", data)
        data = UUID_RE.sub("{UUID}", data)
        data = TIMESTAMP_RE.sub("{TIMESTAMP}", data)
        data = SHORT_TIMESTAMP_RE.sub("{SHORT_TIMESTAMP}", data)
        data = UNIX_TS_RE.sub(lambda m: m.group()[: m.group().index(":") + 1] + " {UNIX_TS}", data)
        data = DB_EVENT_ID_RE.sub('"db_event_id": {DB_EVENT_ID}', data)
        data = CONN_ID_RE.sub('"connection_id": "{CONN_ID}"', data)
        return DURATION_MS_RE.sub('"duration_ms": {DURATION_MS}', data)


def register_like_e2e(scenario: str, answers) -> Normalizer:
    """The ids each e2e test registers, in its order (pipeline_test.go, orchestrator_test.go,
    action_test.go, skills_test.go, scoring_test.go, memory_test.go)."""
    normalizer = Normalizer(answers.session_id)
    trace = decoded(answers.trace)
    stages = trace["stages"][:1] if scenario == "orchestrator" else trace["stages"]
    for stage in stages:
        normalizer.register("STAGE_ID", stage["stage_id"])
        for execution in stage["executions"]:
            groups = [execution]
            if scenario == "orchestrator":
                groups += execution.get("sub_agents", [])
            for group in groups:
                normalizer.register("EXEC_ID", group["execution_id"])
                if scenario == "action-chain":
                    continue
                for item in group["llm_interactions"] + group["mcp_interactions"]:
                    normalizer.register("INTERACTION_ID", item["id"])
    for item in trace["session_interactions"]:
        normalizer.register("INTERACTION_ID", item["id"])
    return normalizer


# ── test/e2e/golden.go and helpers.go ──────────────────────────────────────────────────────


def decoded(value):
    """What the e2e suite held: the API's JSON decoded into Go maps (keys sorted when written)."""
    return json.loads(go_json(value))


def marshal_indent(value) -> str:
    return go_json(_sorted(value), indent=2)


def _sorted(value):
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def assert_golden_json(value, normalizer: Normalizer) -> str:
    data = normalizer.normalize(marshal_indent(decoded(value)))
    return data if data.endswith("\n") else data + "\n"


def _string(value) -> str:
    return value if isinstance(value, str) else ""


def render_llm_interaction(detail: dict, normalizer: Normalizer) -> str:
    detail = decoded(detail)
    out = marshal_indent({k: v for k, v in detail.items() if k != "conversation"}) + "\n"
    conversation = detail.get("conversation") if isinstance(detail.get("conversation"), list) else []
    if conversation:
        out += "\n"
        for message in conversation:
            header = f"=== MESSAGE: {_string(message.get('role'))}"
            if _string(message.get("tool_call_id")):
                header += f" ({message['tool_call_id']}, {_string(message.get('tool_name'))})"
            out += header + " ===\n"
            if _string(message.get("content")):
                out += message["content"] + "\n"
            tool_calls = message.get("tool_calls")
            if isinstance(tool_calls, list) and tool_calls:
                out += "--- TOOL_CALLS ---\n"
                for call in tool_calls:
                    call_id, name = _string(call.get("id")), _string(call.get("name"))
                    out += f"[{call_id}] {name}({_string(call.get('arguments'))})\n"
            out += "\n"
    return normalizer.normalize(out)


def render_mcp_interaction(detail: dict, normalizer: Normalizer) -> str:
    detail = decoded(detail)
    sections = ("tool_arguments", "tool_result", "available_tools")
    out = marshal_indent({k: v for k, v in detail.items() if k not in sections}) + "\n"
    for key in sections:
        if detail.get(key) is not None:
            out += f"\n=== {key.upper()} ===\n" + marshal_indent(detail[key]) + "\n"
    return normalizer.normalize(out)


def golden_files(scenario: str, answers) -> dict[str, tuple[str, str]]:
    """file name -> (kind, interaction id), named as each e2e test names them."""
    trace = decoded(answers.trace)
    if scenario == "scoring":
        scoring = next(s for s in trace["stages"] if s["stage_type"] == "scoring")["executions"][0]
        labels = ["scoring_eval", "scoring_tool_report"]
        return {
            f"{i + 1:02d}_scoring_llm_{labels[i]}.golden": ("llm", item["id"])
            for i, item in enumerate(scoring["llm_interactions"])
        }
    groups = []
    for stage in trace["stages"][:1] if scenario == "orchestrator" else trace["stages"]:
        for execution in stage["executions"]:
            groups.append(execution)
            if scenario == "orchestrator":
                groups.extend(execution.get("sub_agents", []))
    entries = []
    for group in groups:
        own = [
            ("llm", i["id"], i["created_at"], i["interaction_type"], "") for i in group["llm_interactions"]
        ]
        own += [
            ("mcp", i["id"], i["created_at"], i.get("tool_name") or i["interaction_type"], i["server_name"])
            for i in group["mcp_interactions"]
        ]
        # Go compares the RFC3339Nano strings, not the times.
        tiebreak = 1 if scenario == "orchestrator" else 4
        own.sort(key=lambda entry: (entry[2], entry[tiebreak]))
        entries += [(group["agent_name"], *entry) for entry in own]
    entries += [("Session", "llm", i["id"], i["created_at"], i["interaction_type"], "")
                for i in trace["session_interactions"]]
    counters: dict[str, int] = {}
    files = {}
    for index, (agent, kind, interaction_id, _, label, _) in enumerate(entries):
        count = counters[f"{agent}_{label}"] = counters.get(f"{agent}_{label}", 0) + 1
        name = f"{index + 1:02d}_{agent}_{kind}_{label.replace(' ', '_')}_{count}.golden"
        files[name] = (kind, interaction_id)
    return files


def project_timeline(answers) -> list[dict]:
    """ProjectAPITimelineForGolden + AnnotateAPITimelineWithAgent + SortTimelineProjection."""
    agents = {e["execution_id"]: e["agent_name"] for _, e, _ in trace_executions(answers.trace)}
    projected = []
    for event in decoded(answers.timeline):
        item = {"event_type": event.get("event_type"), "status": event.get("status"),
                "sequence": int(event.get("sequence_number", 0))}
        if _string(event.get("content")):
            item["content"] = event["content"]
        if isinstance(event.get("metadata"), dict) and event["metadata"]:
            item["metadata"] = event["metadata"]
        if isinstance(event.get("execution_id"), str) and event["execution_id"] in agents:
            item["agent"] = agents[event["execution_id"]]
        projected.append(item)
    # Events without an agent go last; then by agent, sequence, event type, content.
    return sorted(
        projected,
        key=lambda e: (
            e.get("agent", "") == "", e.get("agent", ""), e["sequence"], e["event_type"], e.get("content", "")
        ),
    )


def golden(scenario: str, name: str) -> str:
    return (GOLDEN_DIR / scenario / name).read_text(encoding="utf-8")


# ── The goldens, given back ────────────────────────────────────────────────────────────────


def scenarios_with(name: str) -> list[str]:
    return [s for s in tarsy_go.SCENARIOS if (GOLDEN_DIR / s / name).exists()]


def test_the_session_scenarios_are_those_with_a_session_golden():
    assert sorted(SESSION_SCENARIOS) == sorted(scenarios_with("session.golden"))


@pytest.mark.parametrize("scenario", scenarios_with("session.golden"))
def test_session_detail_renormalises_to_its_golden(scenario):
    answers = golden_api_answers(scenario)

    written = assert_golden_json(answers.session, register_like_e2e(scenario, answers))

    assert written == golden(scenario, "session.golden")


@pytest.mark.parametrize("scenario", scenarios_with("trace_list.golden"))
def test_trace_list_renormalises_to_its_golden(scenario):
    answers = golden_api_answers(scenario)

    written = assert_golden_json(answers.trace, register_like_e2e(scenario, answers))

    assert written == golden(scenario, "trace_list.golden")


@pytest.mark.parametrize("scenario", scenarios_with("trace_interactions"))
def test_each_interaction_detail_renormalises_to_its_golden(scenario):
    answers = golden_api_answers(scenario)
    normalizer = register_like_e2e(scenario, answers)
    files = golden_files(scenario, answers)

    assert sorted(files) == sorted(p.name for p in (GOLDEN_DIR / scenario / "trace_interactions").iterdir())
    for name, (kind, interaction_id) in files.items():
        if kind == "llm":
            written = render_llm_interaction(answers.llm_interactions[interaction_id], normalizer)
        else:
            written = render_mcp_interaction(answers.mcp_interactions[interaction_id], normalizer)
        assert written == golden(scenario, f"trace_interactions/{name}"), name


@pytest.mark.parametrize("scenario", scenarios_with("timeline.golden"))
def test_timeline_projects_to_its_golden(scenario):
    answers = golden_api_answers(scenario)

    written = assert_golden_json(project_timeline(answers), register_like_e2e(scenario, answers))

    assert written == golden(scenario, "timeline.golden")


def test_score_renormalises_to_its_golden():
    answers = golden_api_answers("scoring")

    written = assert_golden_json(answers.score, register_like_e2e("scoring", answers))

    assert written == golden("scoring", "score.golden")


def test_a_dropped_or_renamed_field_no_longer_gives_the_golden_back():
    answers = golden_api_answers("pipeline")
    normalizer = register_like_e2e("pipeline", answers)
    files = golden_files("pipeline", answers)
    name = next(n for n in files if n.startswith("07_"))  # thinking, tool calls and tool results
    detail = answers.llm_interactions[files[name][1]]
    expected = golden("pipeline", f"trace_interactions/{name}")
    dropped = {k: v for k, v in detail.items() if k != "thinking_content"}
    renamed = {("thinking" if k == "thinking_content" else k): v for k, v in detail.items()}
    without_tool_names = {
        **detail,
        "conversation": [{k: v for k, v in m.items() if k != "tool_name"} for m in detail["conversation"]],
    }
    session = {k: v for k, v in answers.session.items() if k != "chat_id"}

    assert render_llm_interaction(detail, normalizer) == expected
    for changed in (dropped, renamed, without_tool_names):
        assert render_llm_interaction(changed, normalizer) != expected
    assert assert_golden_json(session, normalizer) != golden("pipeline", "session.golden")


def test_a_go_type_refuses_fields_it_does_not_have_and_needs_those_it_always_writes():
    detail = next(iter(golden_api_answers("pipeline").llm_interactions.values()))

    with pytest.raises(ValueError, match="no field"):
        LLM_DETAIL.build({**detail, "thinking": "x"})
    with pytest.raises(ValueError, match="missing"):
        LLM_DETAIL.build({k: v for k, v in detail.items() if k != "conversation"})
    assert "response_metadata" not in LLM_DETAIL.build({**detail, "response_metadata": {}})
    assert LLM_DETAIL.build({**detail, "duration_ms": 0})["duration_ms"] == 0  # a pointer to 0 is written


# ── The answers hold together ──────────────────────────────────────────────────────────────


def parse(text: str) -> datetime:
    return tarsy_go.parse_go_time(text)


@pytest.mark.parametrize("scenario", SESSION_SCENARIOS)
def test_a_session_document_has_every_answer(scenario):
    document = golden_document(scenario)
    listed = [
        (kind, item["id"])
        for _, execution, _ in trace_executions(document["trace"])
        for kind in ("llm", "mcp")
        for item in execution[f"{kind}_interactions"]
    ] + [("llm", item["id"]) for item in document["trace"]["session_interactions"]]

    assert document["format"] == "tarsy-go/1"
    assert document["session"]["id"] == golden_api_answers(scenario).session_id
    assert sorted(i for k, i in listed if k == "llm") == sorted(document["llm_interactions"])
    assert sorted(i for k, i in listed if k == "mcp") == sorted(document["mcp_interactions"])
    assert document["timeline"]
    assert all(e["session_id"] == document["session"]["id"] for e in document["timeline"])
    assert document["review_activity"] == {"activities": []}
    assert document["score"] is None
    assert not tarsy_go.LEFT_PLACEHOLDER_RE.search(json.dumps(document, ensure_ascii=False))


@pytest.mark.parametrize("scenario", SESSION_SCENARIOS)
def test_times_follow_the_work_and_durations_match_them(scenario):
    answers = golden_api_answers(scenario)
    session = answers.session
    started, completed = parse(session["started_at"]), parse(session["completed_at"])
    windows = {}
    for stage in session["stages"]:
        for execution in stage["executions"]:
            for run in [execution, *execution.get("sub_agents", [])]:
                begin, end = parse(run["started_at"]), parse(run["completed_at"])
                assert run["duration_ms"] == (end - begin) // tarsy_go.timedelta(milliseconds=1)
                windows[run["execution_id"]] = (begin, end)
    details = {**answers.llm_interactions, **answers.mcp_interactions}

    assert parse(session["created_at"]) < started < completed
    assert session["duration_ms"] == (completed - started) // tarsy_go.timedelta(milliseconds=1)
    for _, execution, _ in trace_executions(answers.trace):
        begin, end = windows[execution["execution_id"]]
        for item in execution["llm_interactions"] + execution["mcp_interactions"]:
            assert begin < parse(item["created_at"]) < end
            assert details[item["id"]]["created_at"] == item["created_at"]
            assert details[item["id"]].get("duration_ms") == item.get("duration_ms")
    for event in answers.timeline:
        begin, end = windows[event["execution_id"]]
        assert begin < parse(event["created_at"]) <= parse(event["updated_at"]) <= end
    by_execution: dict = {}
    for event in answers.timeline:
        by_execution.setdefault(event["execution_id"], []).append(event)
    for events in by_execution.values():
        ordered = sorted(events, key=lambda e: e["sequence_number"])
        assert [parse(e["created_at"]) for e in ordered] == sorted(parse(e["created_at"]) for e in ordered)
    sequences = [e["sequence_number"] for e in answers.timeline]
    assert sequences == sorted(sequences)


def test_an_orchestrator_sub_agent_runs_inside_its_orchestrator():
    session = golden_api_answers("orchestrator").session
    orchestrator = session["stages"][0]["executions"][0]
    sub = orchestrator["sub_agents"][0]

    assert parse(orchestrator["started_at"]) < parse(sub["started_at"]) < parse(sub["completed_at"])
    assert parse(sub["completed_at"]) < parse(orchestrator["completed_at"])


def test_chat_runs_after_the_session_completed():
    session = golden_api_answers("pipeline").session
    chats = [s for s in session["stages"] if s["stage_type"] == "chat"]

    assert len(chats) == 2
    for chat in chats:
        assert parse(chat["executions"][0]["started_at"]) > parse(session["completed_at"])


def test_the_timeline_has_go_s_ent_shape():
    event = golden_api_answers("orchestrator").timeline[0]
    sub_agent_event = next(
        e for e in golden_api_answers("orchestrator").timeline if e["event_type"] == "task_assigned"
    )

    assert list(event) == [
        "id", "session_id", "stage_id", "execution_id", "sequence_number", "created_at", "updated_at",
        "event_type", "status", "content", "metadata", "edges",
    ]
    assert event["edges"] == {}
    assert "parent_execution_id" in sub_agent_event


def test_the_rebuild_is_stable():
    assert golden_document("pipeline") == golden_document("pipeline")
    assert golden_api_answers("pipeline").session_id != golden_api_answers("skills").session_id


# ── Timelines derived where the material has none ──────────────────────────────────────────


def _derivable(answers, session) -> set[str]:
    """Executions of the kinds derive_timeline writes: google-native, no sub-agents, iterations,
    summarisations and executive summaries only."""
    backend = {e["execution_id"]: e["llm_backend"] for _, e in tarsy_go.session_executions(session)}
    kinds = {"iteration", "summarization", "executive_summary"}
    return {
        execution["execution_id"]
        for _, execution, parent in trace_executions(answers.trace)
        if parent is None
        and not execution.get("sub_agents")
        and backend[execution["execution_id"]] == "google-native"
        and {i["interaction_type"] for i in execution["llm_interactions"]} <= kinds
        and not any(i.get("tool_name") == "dispatch_agent" for i in execution["mcp_interactions"])
    }


@pytest.mark.parametrize("scenario", ["pipeline", "orchestrator"])
def test_the_derivation_writes_the_events_go_wrote_for_executions_of_its_kinds(scenario):
    answers = golden_api_answers(scenario)
    chosen = _derivable(answers, answers.session)
    derived = derive_timeline(
        answers.trace, answers.llm_interactions, answers.mcp_interactions, answers.session,
        tarsy_go.action_stage_ids(answers.session), chosen,
    )

    def key(execution_id, sequence, event_type, content, metadata):
        return (execution_id, sequence, event_type, content, json.dumps(metadata or {}, sort_keys=True))

    real = sorted(
        key(e["execution_id"], e["sequence_number"], e["event_type"], e.get("content", ""), e.get("metadata"))
        for e in answers.timeline
        if e["execution_id"] in chosen
    )
    made = sorted(
        key(e["_owner"]["execution"]["execution_id"], e["sequence"], e["event_type"], e["content"],
            e.get("metadata"))
        for e in derived
    )
    assert len(chosen) >= (5 if scenario == "pipeline" else 1)
    assert made == real


def test_the_action_stage_loses_its_marker_in_the_timeline_only():
    answers = golden_api_answers("action-chain")
    remediation = next(s for s in answers.session["stages"] if s["stage_type"] == "action")
    events = [e for e in answers.timeline if e["stage_id"] == remediation["id"]]
    final = next(e for e in events if e["event_type"] == "final_analysis")
    replies = [
        m["content"]
        for d in answers.llm_interactions.values()
        for m in d["conversation"]
        if m["role"] == "assistant" and m["content"].endswith("\nYES")
    ]

    assert final["content"] == answers.session["final_analysis"]
    assert not any(re.search(r"(?m)^\s*(YES|NO)\s*$", e.get("content", "")) for e in events)
    assert len(replies) == 1


def test_go_json_escapes_as_encoding_json_does():
    value = {"text": "<a href='x'>&</a>\u2028é"}

    assert go_json(value) == '{"text":"\\u003ca href=\'x\'\\u003e\\u0026\\u003c/a\\u003e\\u2028é"}'
    assert go_json({"a": [], "b": {}}, indent=2) == '{\n  "a": [],\n  "b": {}\n}'
    moment = datetime(2026, 8, 21, 9, 0, 1, 120000, tarsy_go.timezone.utc)
    assert tarsy_go.go_time(tarsy_go.micros_of(moment)) == "2026-08-21T09:00:01.12Z"  # RFC3339Nano


def format_timeline_events(events: list[dict]) -> str:
    """pkg/agent/context/investigation_formatter.go formatTimelineEvents: how Go writes an
    agent's timeline into a later prompt (the chat's investigation history)."""
    out, previous_was_response, last_response = "", False, ""
    index = 0
    while index < len(events):
        event = events[index]
        kind, content = event["event_type"], event.get("content", "")
        metadata = event.get("metadata") or {}
        if kind == "llm_thinking":
            previous_was_response = False
            out += f"**Internal Reasoning:**\n\n{content}\n\n"
        elif kind == "llm_response":
            previous_was_response, last_response = True, content
            out += f"**Agent Response:**\n\n{content}\n\n"
        elif kind == "llm_tool_call":
            previous_was_response, last_response = False, ""
            if metadata.get("server_name") and metadata.get("tool_name"):
                call = f"{metadata['server_name']}.{metadata['tool_name']}({metadata['arguments']})"
                header = f"**Tool Call:** {call}\n"
            else:
                header = f"**Tool Call:** {content}\n"
            following = events[index + 1] if index + 1 < len(events) else None
            if following and following["event_type"] == "mcp_tool_summary":
                out += header
                if following.get("content", "").strip():
                    out += f"**Result (summarized):**\n\n{following['content']}\n\n"
                index += 1
            else:
                out += header + (f"**Result:**\n\n{content}\n\n" if content else "")
        elif kind == "mcp_tool_summary":
            previous_was_response = False
            out += f"**Tool Result Summary:**\n\n{content}\n\n"
        elif kind == "final_analysis":
            if not (previous_was_response and content == last_response):
                out += f"**Final Analysis:**\n\n{content}\n\n"
            previous_was_response = False
        elif kind == "skill_loaded":
            previous_was_response = False
            name = metadata.get("skill_name", "")
            out += f"**Pre-loaded Skill: {name}**\n\n" if name else "**Pre-loaded Skill:**\n\n"
            out += content + "\n\n"
        else:
            previous_was_response = False
            out += f"**{kind.replace('_', ' ')}:**\n\n{content}\n\n"
        index += 1
    return out


@pytest.mark.parametrize("scenario", ["pipeline", "skills"])
def test_each_agent_s_timeline_is_what_the_chat_prompt_quotes(scenario):
    """The chat's prompt holds each earlier agent's timeline as Go formatted it: the rebuilt
    (pipeline) and derived (skills) timelines must format to the same text."""
    answers = golden_api_answers(scenario)
    chat = next(s for s in answers.trace["stages"] if s["stage_type"] == "chat")["executions"][0]
    prompt = answers.llm_interactions[chat["llm_interactions"][0]["id"]]["conversation"][1]["content"]
    checked = 0
    for stage, execution, _ in trace_executions(answers.trace):
        if stage["stage_type"] not in ("investigation", "action"):
            continue
        events = [e for e in answers.timeline if e["execution_id"] == execution["execution_id"]]
        body = format_timeline_events(sorted(events, key=lambda e: e["sequence_number"]))
        assert body in prompt, execution["agent_name"]
        checked += 1

    assert checked >= 2
