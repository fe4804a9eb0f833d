"""Go TARSy's API answers for its own e2e scenarios, rebuilt from the goldens it ships.

Go TARSy's e2e suite (``test/e2e`` at the commit named in ``../shared/data/tarsy-go/README.md``)
normalises what its API answered into golden files: ids and times become placeholders, the
interaction details become a text form (``test/e2e/golden.go``), the timeline a projection
(``ProjectTimelineForGolden``). This module turns them back into the JSON the API answered:

    answers = golden_api_answers("pipeline")    # GoldenAnswers: session, timeline, trace, ...
    document = golden_document("pipeline")      # the assembled "tarsy-go/1" document

How each part is rebuilt (tests/support/test_tarsy_go.py proves the rebuild re-normalises to the
goldens byte for byte):

- Field names and order are Go's: every object goes through the ``GoStruct`` of the Go type the
  handler encodes (``pkg/models``, ``ent``), which refuses a field the type does not have, requires
  those it always writes, and drops an ``omitempty`` one when Go would.
- Ids: ``{SESSION_ID}``, ``{STAGE_ID_n}``, ``{EXEC_ID_n}``, ``{INTERACTION_ID_n}`` become stable
  UUIDs; a ``{UUID}`` in an id field becomes the id of the stage, execution or interaction at that
  position (the session detail and the trace list list them in the same order), a ``{UUID}`` in
  text a UUID derived from its surroundings (so every copy of a tool result stays identical).
- Times: one clock lays the session out (stages in order, executions in agent order, each
  execution's interactions in the order the golden files number them, a sub-agent inside its
  orchestrator after the dispatch), so every ``created_at``/``started_at``/``completed_at`` is an
  RFC3339Nano time that increases the way the work happened, and every ``duration_ms`` is the
  difference of the times it spans. Chat and scoring stages run after the session completed.
  Times inside tool results get values derived from their JSON object, the prompt's
  ``Current time`` line the time of the call.
- The timeline: each projected event (``timeline.golden``) is given back the execution whose agent
  it names (``AnnotateTimelineWithAgent``); where one agent ran several executions, the execution
  whose interactions produced its content, else the one its sequence number continues.

What the material does not hold (each case is built as described, never invented otherwise):

- ``skills`` has no ``timeline.golden``: its timeline is derived from its interactions the way
  ``pkg/agent/controller/iterating.go`` writes events (``derive_timeline``; the tests check the
  derivation against the executions of the same kind in the scenarios that have a timeline, and
  against the investigation history Go wrote into the skills chat's prompt).
- The timeline's events are ent.TimelineEvent as the handler encodes them: ``edges`` is always
  there (``{}``: none loaded), the interaction links are never set (Go passes nil when it
  completes an event), and ``updated_at`` follows ``created_at`` for the events Go completes or
  rewrites later.
- ``action-chain`` has only ``session.golden``: its trace, interactions and timeline are built from
  the script of ``test/e2e/action_test.go`` (``ACTION_CHAIN_SCRIPT``: the LLM's thinking, text, tool
  calls and token usage, the MCP tools' results). The system and user prompts of its Investigator
  and Remediator are not in the material, so their conversations hold only the turns the script
  defines (``llm_request.messages_count`` still counts what Go sent); the executive summary's
  prompt is Go's fixed template, taken from the pipeline's executive summary interaction.
- ``orchestrator``'s executive-summary interaction has no golden detail; it is built the same way.
- ``scoring`` and ``memory-feedback`` have no ``session.golden``: their answers have no session (and
  ``scoring`` no timeline); ``scoring`` has the details of its two judge interactions only;
  ``memory-feedback``'s score is not in the material (None) and its review activity is what
  ``test/e2e/memory_test.go``'s review writes (an implicit claim, then the completion).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache

from tests.support.servers import REPO_DIR

GO_DATA_DIR = REPO_DIR.parent / "shared" / "data" / "tarsy-go"
GOLDEN_DIR = GO_DATA_DIR / "e2e-golden"
FORMAT = "tarsy-go/1"
SCENARIOS = ("pipeline", "orchestrator", "action-chain", "skills", "scoring", "memory-feedback")
SESSION_SCENARIOS = ("pipeline", "orchestrator", "action-chain", "skills")
# The day the goldens were made (a Friday: the prompts' calendar says WEEKDAY, staffing normal).
BASE_TIME = datetime(2026, 8, 21, 9, 0, tzinfo=timezone.utc)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# The provider every e2e agent uses (its configs' defaults.llm_provider).
E2E_PROVIDER = "test-provider"


# ── Go's JSON ──────────────────────────────────────────────────────────────────────────────

_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_GO_ESCAPE_RE = re.compile("[<>&\u2028\u2029]")


def go_json(value, indent: int | None = None) -> str:
    """What Go's encoding/json writes for ``value``: ``json.Marshal`` (compact) or
    ``json.MarshalIndent(value, "", "  ")`` with ``indent=2``. Go escapes <, > and & (and
    U+2028/9) in strings; the rest matches Python's output for the values JSON decodes to."""
    if indent:
        text = json.dumps(value, ensure_ascii=False, indent=indent)
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _GO_ESCAPE_RE.sub(lambda match: _GO_ESCAPES[match.group()], text)


def go_time(micros: int) -> str:
    """A time as Go's ``time.Time`` marshals it (RFC3339Nano: trailing zeros of the fraction
    dropped), in UTC, at PostgreSQL's microsecond precision."""
    moment = EPOCH + timedelta(microseconds=micros)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if micros % 1_000_000:
        text += "." + f"{micros % 1_000_000:06d}".rstrip("0")
    return text + "Z"


def micros_of(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


def parse_go_time(text: str) -> datetime:
    """An RFC3339 time as Go's ``time.Parse(time.RFC3339, ...)`` accepts it (fraction allowed)."""
    match = RFC3339_RE.fullmatch(text)
    if not match:
        raise ValueError(f"not RFC3339: {text!r}")
    return datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))


RFC3339_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


# ── Go's types ─────────────────────────────────────────────────────────────────────────────

PTR = "ptr"  # omitempty on a pointer: left out only when nil
VALUE = "value"  # omitempty on a value: left out when "", 0, false, nil or empty


@dataclass(frozen=True)
class GoStruct:
    """A Go struct as encoding/json writes it: its JSON names in declaration order, and which
    are ``omitempty`` (``PTR`` or ``VALUE``)."""

    name: str
    fields: tuple[str, ...]
    omitempty: dict = field(default_factory=dict)

    def build(self, values: dict) -> dict:
        unknown = [key for key in values if key not in self.fields]
        if unknown:
            raise ValueError(f"{self.name} has no field {unknown}")
        out = {}
        for name in self.fields:
            kind = self.omitempty.get(name)
            if name not in values:
                if kind is None:
                    raise ValueError(f"{self.name}.{name} is missing (Go always writes it)")
                continue
            value = values[name]
            if kind == PTR and value is None:
                continue
            if kind == VALUE and (value is None or value is False or value in ("", 0, [], {})):
                continue
            out[name] = value
        return out


def _struct(name: str, spec: str) -> GoStruct:
    """``spec``: the JSON names in order, ``?`` after a pointer omitempty, ``~`` after a value one."""
    fields, omitempty = [], {}
    for token in spec.split():
        if token[-1] in "?~":
            omitempty[token[:-1]] = PTR if token[-1] == "?" else VALUE
            token = token[:-1]
        fields.append(token)
    return GoStruct(name, tuple(fields), omitempty)


# pkg/models/session.go
SESSION_DETAIL = _struct(
    "SessionDetailResponse",
    "id alert_data alert_type status chain_id author error_message final_analysis executive_summary"
    " executive_summary_error runbook_url slack_message_fingerprint? mcp_selection~ created_at started_at"
    " completed_at duration_ms chat_enabled chat_id chat_message_count total_stages completed_stages"
    " failed_stages has_parallel_stages has_action_stages actions_executed input_tokens output_tokens"
    " total_tokens cost_estimation_enabled estimated_cost_usd? cost_completeness~"
    " unpriced_interaction_count? llm_interaction_count mcp_interaction_count current_stage_index"
    " current_stage_id latest_score scoring_status score_id review_status assignee quality_rating"
    " action_taken investigation_feedback feedback_edited feedback_edited_by feedback_edited_at stages",
)
STAGE_OVERVIEW = _struct(
    "StageOverview",
    "id stage_name stage_index stage_type status parallel_type expected_agent_count referenced_stage_id?"
    " started_at completed_at executions~",
)
EXECUTION_OVERVIEW = _struct(
    "ExecutionOverview",
    "execution_id agent_name agent_index status llm_backend llm_provider model_name? started_at"
    " completed_at duration_ms error_message input_tokens output_tokens total_tokens estimated_cost_usd?"
    " cost_completeness~ unpriced_interaction_count? parent_execution_id? task? original_llm_provider?"
    " original_llm_backend? original_model_name? fallback_reason? fallback_error_code? fallback_attempt?"
    " sub_agents~",
)
DASHBOARD_ITEM = _struct(
    "DashboardSessionItem",
    "id alert_type chain_id status author created_at started_at completed_at duration_ms error_message"
    " executive_summary llm_interaction_count mcp_interaction_count input_tokens output_tokens total_tokens"
    " estimated_cost_usd? cost_completeness~ total_stages completed_stages has_parallel_stages has_sub_agents"
    " has_action_stages actions_executed chat_message_count provider_fallback_count current_stage_index"
    " current_stage_id matched_in_content latest_score scoring_status review_status assignee quality_rating"
    " action_taken investigation_feedback feedback_edited feedback_edited_by feedback_edited_at",
)
DASHBOARD_LIST = _struct("DashboardListResponse", "sessions pagination cost_estimation_enabled")
PAGINATION = _struct("PaginationInfo", "page page_size total_pages total_items")
REVIEW_ACTIVITY_ITEM = _struct(
    "ReviewActivityItem",
    "id actor action from_status to_status quality_rating? note? investigation_feedback? created_at",
)
REVIEW_ACTIVITY = _struct("ReviewActivityResponse", "activities")
# pkg/models/interaction.go
TRACE_LIST = _struct("TraceListResponse", "stages session_interactions")
TRACE_STAGE = _struct("TraceStageGroup", "stage_id stage_name stage_type referenced_stage_id? executions")
TRACE_EXECUTION = _struct(
    "TraceExecutionGroup", "execution_id agent_name llm_interactions mcp_interactions sub_agents~"
)
LLM_LIST_ITEM = _struct(
    "LLMInteractionListItem",
    "id interaction_type model_name input_tokens? output_tokens? total_tokens? duration_ms? error_message?"
    " created_at",
)
MCP_LIST_ITEM = _struct(
    "MCPInteractionListItem",
    "id interaction_type server_name tool_name? duration_ms? error_message? created_at",
)
LLM_DETAIL = _struct(
    "LLMInteractionDetailResponse",
    "id interaction_type model_name thinking_content? input_tokens? output_tokens? total_tokens?"
    " duration_ms? error_message? llm_request llm_response response_metadata~ created_at conversation",
)
CONVERSATION_MESSAGE = _struct("ConversationMessage", "role content tool_calls~ tool_call_id? tool_name?")
MESSAGE_TOOL_CALL = _struct("MessageToolCall", "id name arguments")
MCP_DETAIL = _struct(
    "MCPInteractionDetailResponse",
    "id interaction_type server_name tool_name? tool_arguments~ tool_result~ available_tools~ duration_ms?"
    " error_message? created_at",
)
# pkg/models/scoring.go
SCORE = _struct(
    "SessionScoreResponse",
    "score_id total_score score_analysis tool_improvement_report failure_tags prompt_hash score_triggered_by"
    " status stage_id started_at completed_at error_message",
)
# ent/timelineevent.go: every field omitempty but the times (structs) and the edges (none loaded: {}).
TIMELINE_EVENT = _struct(
    "ent.TimelineEvent",
    "id~ session_id~ stage_id? execution_id? parent_execution_id? sequence_number~ created_at updated_at"
    " event_type~ status~ content~ metadata~ llm_interaction_id? mcp_interaction_id? edges",
)


# ── Reading the goldens ────────────────────────────────────────────────────────────────────

ID_PLACEHOLDER_RE = re.compile(
    r"\{(SESSION_ID|STAGE_ID_\d+|EXEC_ID_\d+|INTERACTION_ID_\d+|CHAT_ID_\d+|MSG_ID_\d+)\}"
)
# What normalize.go writes for values it cannot keep; none may survive a rebuild.
LEFT_PLACEHOLDER_RE = re.compile(
    r"\{(UUID|TIMESTAMP|SHORT_TIMESTAMP|CURRENT_TIME|CALENDAR_CONTEXT|STAFFING|DURATION_MS|UNIX_TS"
    r"|DB_EVENT_ID|CONN_ID|AGE|SCORE|SESSION_ID|(?:STAGE|EXEC|INTERACTION|CHAT|MSG)_ID_\d+)\}"
)
MESSAGE_HEADER_RE = re.compile(r"(?m)^=== MESSAGE: (\w+)(?: \((.*), (.*)\))? ===\n")
TOOL_CALL_LINE_RE = re.compile(r"\[([^\]]*)\] ([^(]*)\((.*)\)")
MCP_SECTIONS = (
    ("tool_arguments", "\n=== TOOL_ARGUMENTS ===\n"),
    ("tool_result", "\n=== TOOL_RESULT ===\n"),
    ("available_tools", "\n=== AVAILABLE_TOOLS ===\n"),
)


def stable_uuid(scenario: str, key: str) -> str:
    """A version-4 UUID, as Go's ``uuid.New()`` makes them, that is the same on every run."""
    digest = hashlib.sha256(f"tarsy-go/{scenario}/{key}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _golden_text(scenario: str, name: str) -> str | None:
    path = GOLDEN_DIR / scenario / name
    return path.read_text(encoding="utf-8") if path.exists() else None


def split_metadata(text: str) -> tuple[str, str]:
    """A golden interaction's metadata JSON (MarshalIndent: only its last brace is in column 0)
    and what follows it."""
    end = text.index("\n}\n") + 2
    return text[:end], text[end + 1 :]


def parse_conversation(text: str) -> list[dict]:
    """The ``conversation`` that AssertGoldenLLMInteraction wrote as ``=== MESSAGE ===`` blocks:
    a header (with ``(tool_call_id, tool_name)`` for tool results), the content and a newline
    when there is content, ``--- TOOL_CALLS ---`` lines ``[id] name(arguments)``, a blank line."""
    if not text:
        return []
    if not text.startswith("\n"):
        raise ValueError("a conversation follows the metadata after a blank line")
    text = text[1:]
    headers = list(MESSAGE_HEADER_RE.finditer(text))
    if not headers or headers[0].start() != 0:
        raise ValueError("the conversation does not start with a message header")
    messages = []
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        body = text[header.end() : end]
        if not body.endswith("\n"):
            raise ValueError(f"message {index} does not end with a blank line")
        body = body[:-1]
        message = {"role": header.group(1)}
        tool_calls = []
        marker = body.rfind("--- TOOL_CALLS ---\n")
        if marker != -1 and (marker == 0 or body[marker - 1] == "\n"):
            lines = body[marker + len("--- TOOL_CALLS ---\n") :].split("\n")
            calls = [TOOL_CALL_LINE_RE.fullmatch(line) for line in lines[:-1]]
            if lines[-1] == "" and calls and all(calls):
                for call in calls:
                    call_id, name, arguments = call.groups()
                    tool_calls.append(
                        MESSAGE_TOOL_CALL.build({"id": call_id, "name": name, "arguments": arguments})
                    )
                body = body[:marker]
        if body and not body.endswith("\n"):
            raise ValueError(f"message {index}: content is written with a newline after it")
        message["content"] = body[:-1] if body else ""
        message["tool_calls"] = tool_calls
        if header.group(2) is not None:
            message["tool_call_id"] = header.group(2)
            message["tool_name"] = header.group(3)
        messages.append(CONVERSATION_MESSAGE.build(message))
    return messages


def parse_mcp_sections(text: str) -> dict:
    """The tool_arguments / tool_result / available_tools sections AssertGoldenMCPInteraction wrote."""
    found = {}
    rest = text
    for key, marker in MCP_SECTIONS:
        if rest.startswith(marker):
            rest = rest[len(marker) :]
            decoder = json.JSONDecoder()
            value, end = decoder.raw_decode(rest)
            found[key] = value
            if rest[end] != "\n":
                raise ValueError(f"{key} is followed by a newline")
            rest = rest[end + 1 :]
    if rest:
        raise ValueError(f"unexpected text after the MCP sections: {rest[:60]!r}")
    return found


def _load_json(text: str):
    # {DURATION_MS} stands where a number was: a string until the clock gives it a value.
    return json.loads(text.replace("{DURATION_MS}", '"{DURATION_MS}"'))


# ── Text inside the answers ────────────────────────────────────────────────────────────────

_CONTENT_PLACEHOLDER_RE = re.compile(r"\{(TIMESTAMP|UUID)\}")


def _object_context(text: str, start: int, end: int) -> str:
    """The JSON object around a placeholder (from the last ``{`` before it to the first ``}``
    after it, other placeholders' braces aside, the placeholder itself marked), which is the same
    in every copy of a tool result."""
    opening = start
    while True:
        opening = text.rfind("{", 0, opening)
        if opening == -1 or not _CONTENT_PLACEHOLDER_RE.match(text, opening):
            break
    closing = end
    while True:
        closing = text.find("}", closing)
        if closing == -1 or not _ends_placeholder(text, closing):
            break
        closing += 1
    before = text[opening + 1 if opening != -1 else max(0, start - 80) : start]
    after = text[end : closing if closing != -1 else end + 80]
    return before + "@@" + after


def _ends_placeholder(text: str, closing: int) -> bool:
    opening = text.rfind("{", 0, closing)
    match = _CONTENT_PLACEHOLDER_RE.match(text, opening) if opening != -1 else None
    return match is not None and match.end() == closing + 1


def fill_text(scenario: str, text: str, call_time: datetime | None = None) -> str:
    """A normalised text with realistic values: ``{TIMESTAMP}`` / ``{UUID}`` from their JSON object,
    the prompt's calendar lines from the time of the call."""
    moment = call_time or BASE_TIME

    def content_value(match: re.Match) -> str:
        context = _object_context(text, match.start(), match.end())
        digest = int.from_bytes(hashlib.sha256(f"{scenario}|{context}".encode()).digest()[:8], "big")
        if match.group(1) == "UUID":
            return stable_uuid(scenario, f"text/{context}")
        # Within the month before the session: data the tools reported, not the session's times.
        when = BASE_TIME - timedelta(days=1) - timedelta(seconds=digest % (30 * 86400))
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")

    weekday = moment.strftime("%A")
    text = text.replace(
        "Current time: {CURRENT_TIME}", f"Current time: {moment:%Y-%m-%dT%H:%M:%SZ} ({weekday})"
    )
    text = text.replace(
        "Calendar context (UTC): {CALENDAR_CONTEXT}",
        f"Calendar context (UTC): {moment:%Y-%m-%d} — {weekday} — WEEKDAY",
    )
    text = text.replace("Staffing: {STAFFING}", "Staffing: normal")
    text = _CONTENT_PLACEHOLDER_RE.sub(content_value, text)
    left = LEFT_PLACEHOLDER_RE.search(text)
    if left:
        around = text[max(0, left.start() - 60) : left.end()]
        raise ValueError(f"{scenario}: no value for {left.group()} in {around!r}")
    return text


def _fill_strings(scenario: str, value, call_time: datetime | None = None):
    if isinstance(value, str):
        return fill_text(scenario, value, call_time)
    if isinstance(value, list):
        return [_fill_strings(scenario, item, call_time) for item in value]
    if isinstance(value, dict):
        return {key: _fill_strings(scenario, item, call_time) for key, item in value.items()}
    return value


# ── The answers ────────────────────────────────────────────────────────────────────────────


@dataclass
class GoldenAnswers:
    """What Go TARSy's API answered for one e2e session (None where the material has nothing)."""

    scenario: str
    session_id: str
    session: dict | None
    timeline: list | None
    trace: dict | None
    llm_interactions: dict
    mcp_interactions: dict
    score: dict | None
    review_activity: dict | None


def golden_api_answers(scenario: str) -> GoldenAnswers:
    """The answers of ``scenario`` (a fresh copy: callers may change it)."""
    return copy.deepcopy(_rebuilt(scenario))


def golden_document(scenario: str) -> dict:
    """The "tarsy-go/1" document of ``scenario``: the answers, as each endpoint gave them."""
    answers = golden_api_answers(scenario)
    return {
        "format": FORMAT,
        "session": answers.session,
        "timeline": answers.timeline,
        "trace": answers.trace,
        "llm_interactions": answers.llm_interactions,
        "mcp_interactions": answers.mcp_interactions,
        "score": answers.score,
        "review_activity": answers.review_activity,
    }


def trace_executions(trace: dict):
    """(stage group, execution group, parent execution group or None) in the trace list's order."""
    for stage in trace["stages"]:
        for execution in stage["executions"]:
            yield stage, execution, None
            for sub in execution.get("sub_agents", []):
                yield stage, sub, execution


def session_executions(session: dict):
    """(stage overview, execution overview) with sub-agents after their orchestrator."""
    for stage in session["stages"]:
        for execution in stage.get("executions", []):
            yield stage, execution
            for sub in execution.get("sub_agents", []):
                yield stage, sub


@lru_cache(maxsize=None)
def _rebuilt(scenario: str) -> GoldenAnswers:
    if scenario not in SCENARIOS:
        raise ValueError(f"no Go TARSy e2e scenario {scenario!r}")
    return _Rebuild(scenario).answers()


def _stable_number(scenario: str, key: str, low: int, high: int) -> int:
    digest = hashlib.sha256(f"{scenario}#{key}".encode()).digest()
    return low + int.from_bytes(digest[:4], "big") % (high - low + 1)


class _Rebuild:
    def __init__(self, scenario: str):
        self.scenario = scenario
        self.session_id = stable_uuid(scenario, "SESSION_ID")
        self.details: dict[str, dict] = {}  # interaction id -> detail (placeholders still in)
        self.order: list[str] = []  # interaction ids in the golden files' order
        self.kind: dict[str, str] = {}  # interaction id -> "llm" | "mcp"

    def ids(self, text: str) -> str:
        return ID_PLACEHOLDER_RE.sub(lambda match: stable_uuid(self.scenario, match.group(1)), text)

    # --- reading -------------------------------------------------------------------------------

    def answers(self) -> GoldenAnswers:
        scenario = self.scenario
        session_text = _golden_text(scenario, "session.golden")
        session = _load_json(self.ids(session_text)) if session_text else None
        if scenario == "action-chain":
            trace = self.action_chain_trace(session)
        else:
            trace = _load_json(self.ids(_golden_text(scenario, "trace_list.golden")))
            self.read_interactions()
        if session is not None:
            self.fill_structural_ids(session, trace)
        if scenario == "orchestrator":
            self.add_executive_summary_detail(trace, session, self.final_analysis(session))
        projection_text = _golden_text(scenario, "timeline.golden")
        projection = _load_json(self.ids(projection_text)) if projection_text else None

        layout = _Layout(self, session, trace)
        trace = self.finish_trace(trace, layout)
        llm, mcp = self.finish_details(trace, layout)
        if projection is not None:
            events = self.assign_executions(projection, trace, llm, mcp)
        elif session is not None:
            events = derive_timeline(trace, llm, mcp, session, action_stage_ids(session))
        else:
            events = None
        timeline = self.finish_timeline(events, llm, mcp, layout) if events is not None else None
        if session is not None:
            session = self.finish_session(session, layout)
        score_text = _golden_text(scenario, "score.golden")
        score = self.finish_score(_load_json(self.ids(score_text)), layout) if score_text else None
        return GoldenAnswers(
            scenario=scenario,
            session_id=self.session_id,
            session=session,
            timeline=timeline,
            trace=trace,
            llm_interactions=llm,
            mcp_interactions=mcp,
            score=score,
            review_activity=self.review_activity(session, layout),
        )

    def read_interactions(self) -> None:
        folder = GOLDEN_DIR / self.scenario / "trace_interactions"
        for path in sorted(folder.glob("*.golden")):
            text = self.ids(path.read_text(encoding="utf-8"))
            metadata, rest = split_metadata(text)
            detail = _load_json(metadata)
            kind = "llm" if "_llm_" in path.name else "mcp"
            if kind == "llm":
                detail["conversation"] = parse_conversation(rest)
            else:
                detail.update(parse_mcp_sections(rest))
            self.details[detail["id"]] = detail
            self.kind[detail["id"]] = kind
            self.order.append(detail["id"])

    def fill_structural_ids(self, session: dict, trace: dict) -> None:
        """``{UUID}`` where an id was: the id of what stands at that position (the session detail
        and the trace list hold the same stages and executions in the same order)."""

        def fill(value: str, key: str) -> str:
            return stable_uuid(self.scenario, key) if value == "{UUID}" else value

        for i, stage in enumerate(session["stages"], 1):
            stage["id"] = fill(stage["id"], f"stage@{i}")
            for j, execution in enumerate(stage.get("executions", []), 1):
                execution["execution_id"] = fill(execution["execution_id"], f"exec@{i}.{j}")
                for k, sub in enumerate(execution.get("sub_agents", []), 1):
                    sub["execution_id"] = fill(sub["execution_id"], f"exec@{i}.{j}.{k}")
        for i, stage in enumerate(trace["stages"], 1):
            stage["stage_id"] = fill(stage["stage_id"], f"stage@{i}")
            for j, execution in enumerate(stage["executions"], 1):
                execution["execution_id"] = fill(execution["execution_id"], f"exec@{i}.{j}")
                for k, sub in enumerate(execution.get("sub_agents", []), 1):
                    sub["execution_id"] = fill(sub["execution_id"], f"exec@{i}.{j}.{k}")
                for group in [execution, *execution.get("sub_agents", [])]:
                    for kind in ("llm", "mcp"):
                        for n, item in enumerate(group[f"{kind}_interactions"], 1):
                            item["id"] = fill(item["id"], f"{kind}@{group['execution_id']}.{n}")
        by_index = {stage["stage_index"]: stage["id"] for stage in session["stages"]}
        if session["current_stage_id"] == "{UUID}":
            session["current_stage_id"] = by_index[session["current_stage_index"]]
        if session["chat_id"] == "{UUID}":
            session["chat_id"] = stable_uuid(self.scenario, "chat")
        if [s["id"] for s in session["stages"]] != [s["stage_id"] for s in trace["stages"]]:
            raise ValueError(f"{self.scenario}: the session and the trace list disagree on the stages")
        trace_execs = [(e["execution_id"], e["agent_name"]) for _, e, _ in trace_executions(trace)]
        session_execs = [(e["execution_id"], e["agent_name"]) for _, e in session_executions(session)]
        if trace_execs != session_execs:
            raise ValueError(f"{self.scenario}: the session and the trace list disagree on the executions")

    @staticmethod
    def final_analysis(session: dict) -> str:
        return session["final_analysis"]

    # --- what the material lacks ---------------------------------------------------------------

    def executive_summary_prompt(self, final_analysis: str) -> list[dict]:
        """Go's executive-summary prompt (a fixed template, pkg/agent/prompt/templates.go) around
        ``final_analysis``: the pipeline's, whose analysis it summarised, with this one instead."""
        name = "trace_interactions/32_ExecSummaryAgent_llm_executive_summary_1.golden"
        text = _golden_text("pipeline", name)
        system, user, _ = parse_conversation(split_metadata(text)[1])
        pipeline_final = _load_json(_golden_text("pipeline", "session.golden"))["final_analysis"]
        if user["content"].count(pipeline_final) != 1:
            raise ValueError("the pipeline's executive-summary prompt does not hold its final analysis once")
        return [system, {**user, "content": user["content"].replace(pipeline_final, final_analysis)}]

    def add_executive_summary_detail(self, trace: dict, session: dict, final_analysis: str) -> None:
        """The detail of an executive-summary interaction the goldens do not show, from its list
        item, the summary the session holds and Go's prompt (pkg/agent/controller/single_shot.go
        records iteration 1 of 2 messages)."""
        for _, execution, _ in trace_executions(trace):
            for item in execution["llm_interactions"]:
                if item["interaction_type"] != "executive_summary" or item["id"] in self.details:
                    continue
                summary = session["executive_summary"]
                detail = {
                    key: item[key]
                    for key in ("id", "interaction_type", "model_name", "input_tokens", "output_tokens",
                                "total_tokens", "duration_ms", "created_at")
                    if key in item
                }
                detail["llm_request"] = {"iteration": 1, "messages_count": 2}
                detail["llm_response"] = {"text_length": len(summary.encode()), "tool_calls_count": 0}
                detail["conversation"] = [
                    *self.executive_summary_prompt(final_analysis),
                    CONVERSATION_MESSAGE.build({"role": "assistant", "content": summary}),
                ]
                self.details[item["id"]] = detail
                self.kind[item["id"]] = "llm"
                self.order.append(item["id"])

    def action_chain_trace(self, session: dict) -> dict:
        """The trace list of test/e2e/action_test.go's session, from its script (ACTION_CHAIN_SCRIPT)
        and the session detail's stages and executions; the details of its interactions too."""
        stages = []
        for i, stage in enumerate(session["stages"], 1):
            executions = []
            for execution in stage["executions"]:
                script = ACTION_CHAIN_SCRIPT[execution["agent_name"]]
                exec_id = execution["execution_id"]
                llm_items, mcp_items = [], []
                conversation: list[dict] = []
                tools = script.get("tools", ())
                if tools:
                    mcp_id = stable_uuid(self.scenario, f"mcp@{exec_id}.tool_list")
                    mcp_items.append(self.scripted_mcp(mcp_id, "tool_list", None, None, tools))
                for n, turn in enumerate(script["turns"], 1):
                    llm_id = stable_uuid(self.scenario, f"llm@{exec_id}.{n}")
                    calls = [
                        MESSAGE_TOOL_CALL.build({"id": c, "name": name, "arguments": args})
                        for c, name, args in turn.get("tool_calls", ())
                    ]
                    if execution["agent_name"] == "ExecSummaryAgent":
                        conversation = self.executive_summary_prompt(session["final_analysis"])
                        sent = 2
                    else:
                        sent = 2 + len(conversation)  # system and user prompts, then the turns so far
                    reply = CONVERSATION_MESSAGE.build(
                        {"role": "assistant", "content": turn["text"], "tool_calls": calls}
                    )
                    conversation = [*conversation, reply]
                    usage = turn["usage"]
                    detail = {
                        "id": llm_id,
                        "interaction_type": script["interaction_type"],
                        "model_name": execution["model_name"],
                        "thinking_content": turn.get("thinking"),
                        "input_tokens": usage[0],
                        "output_tokens": usage[1],
                        "total_tokens": usage[2],
                        "duration_ms": "{DURATION_MS}",
                        "llm_request": {"iteration": n, "messages_count": sent},
                        "llm_response": {
                            "text_length": len(turn["text"].encode()),
                            "tool_calls_count": len(calls),
                        },
                        "created_at": "{TIMESTAMP}",
                        "conversation": list(conversation),
                    }
                    self.details[llm_id] = LLM_DETAIL.build(detail)
                    self.kind[llm_id] = "llm"
                    self.order.append(llm_id)
                    listed = {k: detail[k] for k in LLM_LIST_ITEM.fields if k in detail}
                    llm_items.append(LLM_LIST_ITEM.build(listed))
                    for call_id, name, args in turn.get("tool_calls", ()):
                        server, tool = name.split("__", 1)
                        result = ACTION_CHAIN_TOOL_RESULTS[tool]
                        mcp_id = stable_uuid(self.scenario, f"mcp@{exec_id}.{call_id}")
                        mcp_items.append(
                            self.scripted_mcp(mcp_id, "tool_call", tool, json.loads(args), result)
                        )
                        answer = {"role": "tool", "content": result}
                        answer.update(tool_call_id=call_id, tool_name=name)
                        conversation.append(CONVERSATION_MESSAGE.build(answer))
                executions.append(
                    TRACE_EXECUTION.build(
                        {"execution_id": exec_id, "agent_name": execution["agent_name"],
                         "llm_interactions": llm_items,
                         "mcp_interactions": sorted(mcp_items, key=lambda m: self.order.index(m["id"]))}
                    )
                )
            stages.append(
                TRACE_STAGE.build(
                    {"stage_id": stage["id"], "stage_name": stage["stage_name"],
                     "stage_type": stage["stage_type"], "executions": executions}
                )
            )
        return TRACE_LIST.build({"stages": stages, "session_interactions": []})

    def scripted_mcp(self, mcp_id: str, kind: str, tool: str | None, arguments, result_or_tools) -> dict:
        detail = {"id": mcp_id, "interaction_type": kind, "server_name": "test-mcp"}
        detail["created_at"] = "{TIMESTAMP}"
        if kind == "tool_list":
            # The e2e MCP servers describe each tool as "test tool: <name>" (test/e2e/mcp_helpers.go).
            detail["available_tools"] = [
                {"description": f"test tool: {name}", "name": name} for name in result_or_tools
            ]
        else:
            detail.update(
                tool_name=tool, tool_arguments=arguments, duration_ms="{DURATION_MS}",
                tool_result={"content": result_or_tools, "is_error": False},
            )
        self.details[mcp_id] = MCP_DETAIL.build(detail)
        self.kind[mcp_id] = "mcp"
        self.order.append(mcp_id)
        return MCP_LIST_ITEM.build({k: detail[k] for k in MCP_LIST_ITEM.fields if k in detail})

    # --- finishing each answer -----------------------------------------------------------------

    def finish_trace(self, trace: dict, layout: _Layout) -> dict:
        def item(struct: GoStruct, values: dict) -> dict:
            values = dict(values)
            values["created_at"] = go_time(layout.interaction_time[values["id"]])
            if values.get("duration_ms") == "{DURATION_MS}":
                values["duration_ms"] = layout.interaction_duration[values["id"]]
            return struct.build(values)

        def group(execution: dict) -> dict:
            values = dict(execution)
            values["llm_interactions"] = [item(LLM_LIST_ITEM, i) for i in execution["llm_interactions"]]
            values["mcp_interactions"] = [item(MCP_LIST_ITEM, i) for i in execution["mcp_interactions"]]
            if "sub_agents" in execution:
                values["sub_agents"] = [group(sub) for sub in execution["sub_agents"]]
            return TRACE_EXECUTION.build(values)

        stages = [
            TRACE_STAGE.build({**stage, "executions": [group(e) for e in stage["executions"]]})
            for stage in trace["stages"]
        ]
        sessions = [item(LLM_LIST_ITEM, i) for i in trace["session_interactions"]]
        return TRACE_LIST.build({"stages": stages, "session_interactions": sessions})

    def finish_details(self, trace: dict, layout: _Layout) -> tuple[dict, dict]:
        llm, mcp = {}, {}
        listed = [
            (kind, item)
            for _, execution, _ in trace_executions(trace)
            for kind in ("llm", "mcp")
            for item in execution[f"{kind}_interactions"]
        ] + [("llm", item) for item in trace["session_interactions"]]
        for kind, item in listed:
            detail = self.details.get(item["id"])
            if detail is None:
                continue  # the material has no detail of it (the scoring scenario)
            detail = dict(detail)
            detail["created_at"] = item["created_at"]
            if detail.get("duration_ms") == "{DURATION_MS}":
                detail["duration_ms"] = item["duration_ms"]
            call_time = layout.call_start(item["id"])
            if kind == "llm":
                detail["conversation"] = [
                    CONVERSATION_MESSAGE.build(_fill_strings(self.scenario, message, call_time))
                    for message in detail["conversation"]
                ]
                for key in ("thinking_content", "llm_request", "llm_response", "response_metadata"):
                    if key in detail:
                        detail[key] = _fill_strings(self.scenario, detail[key], call_time)
                llm[item["id"]] = LLM_DETAIL.build(detail)
            else:
                for key in ("tool_arguments", "tool_result", "available_tools"):
                    if key in detail:
                        detail[key] = _fill_strings(self.scenario, detail[key], call_time)
                mcp[item["id"]] = MCP_DETAIL.build(detail)
        for interaction_id, detail in self.details.items():
            if interaction_id not in llm and interaction_id not in mcp:
                raise ValueError(f"{self.scenario}: interaction {interaction_id} is not in the trace list")
        return llm, mcp

    def assign_executions(self, projection: list, trace: dict, llm: dict, mcp: dict) -> list[dict]:
        """Each projected event with the execution that wrote it (``agent`` names its agent)."""
        by_agent: dict[str, list[dict]] = {}
        for stage, execution, parent in trace_executions(trace):
            by_agent.setdefault(execution["agent_name"], []).append(
                {"stage": stage, "execution": execution, "parent": parent}
            )
        events = [dict(event) for event in projection]
        for agent, candidates in by_agent.items():
            mine = [event for event in events if event.get("agent") == agent]
            if len(candidates) == 1:
                for event in mine:
                    event["_owner"] = candidates[0]
                continue
            outputs = [_execution_outputs(c["execution"], llm, mcp) for c in candidates]
            for event in mine:
                content = fill_text(self.scenario, event.get("content", ""))
                holders = [c for c, out in zip(candidates, outputs) if content and content in out]
                if len(holders) == 1:
                    event["_owner"] = holders[0]
            progress = True
            while progress:
                progress = False
                for event in mine:
                    if "_owner" in event:
                        continue
                    fits = [c for c in candidates if _continues(c, event, mine)]
                    if len(fits) == 1:
                        event["_owner"] = fits[0]
                        progress = True
            unplaced = [event for event in mine if "_owner" not in event]
            if unplaced:
                raise ValueError(f"{self.scenario}: cannot tell which {agent} execution wrote {unplaced}")
        for event in events:
            if event.get("agent") and "_owner" not in event:
                raise ValueError(f"{self.scenario}: no execution of agent {event['agent']!r}")
        return events

    def finish_timeline(self, events: list[dict], llm: dict, mcp: dict, layout: _Layout) -> list[dict]:
        """ent.TimelineEvent objects, in the order GET /timeline answers (sequence_number, then as
        written: PostgreSQL returns ties in the order they were inserted)."""
        by_execution: dict[str | None, list[dict]] = {}
        for event in events:
            owner = event.get("_owner")
            by_execution.setdefault(owner["execution"]["execution_id"] if owner else None, []).append(event)
        out = []
        for execution_id, own in by_execution.items():
            own = sorted(own, key=lambda e: e["sequence"])
            execution = own[0]["_owner"]["execution"] if execution_id else None
            times = layout.event_times(own, execution, llm, mcp, self.scenario)
            for rank, (event, (created, updated)) in enumerate(zip(own, times)):
                owner = event.get("_owner")
                parent = owner["parent"] if owner else None
                values = {
                    "id": stable_uuid(self.scenario, f"event/{execution_id}/{rank}"),
                    "session_id": self.session_id,
                    "stage_id": owner["stage"]["stage_id"] if owner else None,
                    "execution_id": execution_id,
                    "parent_execution_id": parent["execution_id"] if parent else None,
                    "sequence_number": event["sequence"],
                    "created_at": go_time(created),
                    "updated_at": go_time(updated),
                    "event_type": event["event_type"],
                    "status": event["status"],
                    "content": fill_text(self.scenario, event.get("content", "")),
                    "metadata": _fill_strings(self.scenario, event.get("metadata")),
                    "edges": {},
                }
                out.append((event["sequence"], created, TIMELINE_EVENT.build(values)))
        return [event for _, _, event in sorted(out, key=lambda entry: entry[:2])]

    def finish_session(self, session: dict, layout: _Layout) -> dict:
        def timed(values: dict, times: tuple[int, int] | None, keys=("started_at", "completed_at")) -> None:
            for key, value in zip(keys, times or (None, None)):
                if values.get(key) == "{TIMESTAMP}":
                    values[key] = go_time(value)
            if values.get("duration_ms") == "{DURATION_MS}":
                values["duration_ms"] = (times[1] - times[0]) // 1000

        def execution(values: dict) -> dict:
            values = dict(values)
            timed(values, layout.execution_window[values["execution_id"]])
            if "sub_agents" in values:
                values["sub_agents"] = [execution(sub) for sub in values["sub_agents"]]
            return EXECUTION_OVERVIEW.build(values)

        values = dict(session)
        values["created_at"] = go_time(layout.session_created)
        timed(values, (layout.session_started, layout.session_completed))
        stages = []
        for stage in session["stages"]:
            stage = dict(stage)
            if stage.get("completed_at") == "{TIMESTAMP}":
                stage["completed_at"] = go_time(layout.stage_completed[stage["id"]])
            if "executions" in stage:
                stage["executions"] = [execution(e) for e in stage["executions"]]
            stages.append(STAGE_OVERVIEW.build(stage))
        values["stages"] = stages
        return SESSION_DETAIL.build(_fill_strings(self.scenario, values))

    def finish_score(self, score: dict, layout: _Layout) -> dict:
        started, completed = layout.stage_window[score["stage_id"]]
        score = dict(score)
        score["score_id"] = stable_uuid(self.scenario, "score")
        score["started_at"] = go_time(started - 2_000)
        score["completed_at"] = go_time(completed + 1_000)
        return SCORE.build(_fill_strings(self.scenario, score))

    def review_activity(self, session: dict | None, layout: _Layout) -> dict | None:
        if self.scenario in REVIEWS:
            review = REVIEWS[self.scenario]
            at = layout.review_time
            activities = [
                REVIEW_ACTIVITY_ITEM.build(
                    {"id": stable_uuid(self.scenario, "review/claim"), "actor": review["actor"],
                     "action": "claim", "from_status": "needs_review", "to_status": "in_progress",
                     "created_at": go_time(at)}
                ),
                REVIEW_ACTIVITY_ITEM.build(
                    {"id": stable_uuid(self.scenario, "review/complete"), "actor": review["actor"],
                     "action": "complete", "from_status": "in_progress", "to_status": "reviewed",
                     "quality_rating": review["quality_rating"], "note": review["action_taken"],
                     "investigation_feedback": review["investigation_feedback"],
                     "created_at": go_time(at + 1)}
                ),
            ]
            return REVIEW_ACTIVITY.build({"activities": activities})
        if session is None:
            return None
        # The e2e sessions were never reviewed: no activity (needs_review is where a session starts).
        return REVIEW_ACTIVITY.build({"activities": []})


def _execution_outputs(execution: dict, llm: dict, mcp: dict) -> set[str]:
    """What an execution's interactions produced: thinking, the reply of each LLM call, tool results."""
    out = set()
    for item in execution["llm_interactions"]:
        detail = llm.get(item["id"])
        if detail is None:
            continue
        if detail.get("thinking_content"):
            out.add(detail["thinking_content"])
        replies = [m for m in detail["conversation"] if m["role"] == "assistant"]
        if replies:
            out.add(replies[-1]["content"])
    for item in execution["mcp_interactions"]:
        detail = mcp.get(item["id"])
        if detail and isinstance(detail.get("tool_result"), dict):
            out.add(detail["tool_result"].get("content", ""))
    out.discard("")
    return out


def _continues(candidate: dict, event: dict, events: list[dict]) -> bool:
    """Whether ``event`` can be the next or previous event of ``candidate``'s execution: its
    sequence numbers are consecutive and end with its final_analysis."""
    own = [e for e in events if e.get("_owner") is candidate]
    sequences = {e["sequence"] for e in own}
    if event["sequence"] in sequences:
        return False
    finals = [e["sequence"] for e in own if e["event_type"] == "final_analysis"]
    if finals and event["sequence"] > min(finals):
        return False
    if event["event_type"] == "final_analysis" and any(s > event["sequence"] for s in sequences):
        return False
    return event["sequence"] - 1 in sequences or event["sequence"] + 1 in sequences


def action_stage_ids(session: dict) -> set[str]:
    return {stage["id"] for stage in session["stages"] if stage["stage_type"] == "action"}


# ── The clock ──────────────────────────────────────────────────────────────────────────────

# Stages that run after the session completed (pkg/queue: chat on a user's message, scoring after).
LATE_STAGE_TYPES = ("chat", "scoring")
# Executions that run once a reviewer has rated the session (the memory-feedback scenario).
AFTER_REVIEW_AGENTS = ("FeedbackReflector",)


class _Layout:
    """The times of one session, laid out in the order its work happened (microseconds)."""

    def __init__(self, rebuild: _Rebuild, session: dict | None, trace: dict):
        self.rebuild = rebuild
        self.scenario = rebuild.scenario
        self.interaction_time: dict[str, int] = {}
        self.interaction_duration: dict[str, int] = {}
        self.execution_window: dict[str, tuple[int, int]] = {}
        self.stage_window: dict[str, tuple[int, int]] = {}
        self.stage_completed: dict[str, int] = {}
        offset = timedelta(minutes=7 * SCENARIOS.index(self.scenario))
        self.session_created = micros_of(BASE_TIME + offset) + self.pause("created", 1_000, 900_000)
        self.session_started = self.session_created + self.pause("started", 40_000, 250_000)
        self.now = self.session_started
        self.session_completed = None
        self.review_time = None
        late_done = False
        deferred = []
        for stage in trace["stages"]:
            if stage["stage_type"] in LATE_STAGE_TYPES and not late_done:
                self.complete_session()
                late_done = True
            if stage["stage_type"] == "chat":
                self.now += self.pause(f"chat/{stage['stage_id']}", 20_000_000, 90_000_000)
            start = self.now
            for execution in stage["executions"]:
                if execution["agent_name"] in AFTER_REVIEW_AGENTS:
                    deferred.append((stage, execution))
                    continue
                self.lay_execution(execution)
            done = self.now + self.pause(f"stage/{stage['stage_id']}", 800, 6_000)
            self.stage_completed[stage["stage_id"]] = done
            self.stage_window[stage["stage_id"]] = (start, self.stage_completed[stage["stage_id"]])
            self.now = self.stage_completed[stage["stage_id"]]
        if not late_done:
            self.complete_session()
        if self.scenario in REVIEWS:
            self.review_time = self.now + self.pause("review", 60_000_000, 300_000_000)
            self.now = self.review_time + 1
        for stage, execution in deferred:
            self.lay_execution(execution)
            self.stage_completed[stage["stage_id"]] = self.now + 900
            self.stage_window[stage["stage_id"]] = (self.stage_window[stage["stage_id"]][0], self.now + 900)

    def pause(self, key: str, low: int, high: int) -> int:
        return _stable_number(self.scenario, key, low, high)

    def complete_session(self) -> None:
        self.session_completed = self.now + self.pause("completed", 2_000, 40_000)
        self.now = self.session_completed + self.pause("after", 500_000, 2_000_000)

    def items(self, execution: dict) -> list[str]:
        """The execution's interactions in the order they happened: the golden files' numbering
        when every one has a file, else tool lists, the first LLM call, its tool calls, the rest."""
        ids = [i["id"] for i in execution["llm_interactions"] + execution["mcp_interactions"]]
        order = self.rebuild.order
        if all(i in order for i in ids):
            return sorted(ids, key=order.index)
        lists = [i["id"] for i in execution["mcp_interactions"] if i["interaction_type"] == "tool_list"]
        calls = [i["id"] for i in execution["mcp_interactions"] if i["interaction_type"] != "tool_list"]
        llms = [i["id"] for i in execution["llm_interactions"]]
        return lists + llms[:1] + calls + llms[1:]

    def lay_execution(self, execution: dict) -> None:
        exec_id = execution["execution_id"]
        start = self.now + self.pause(f"start/{exec_id}", 3_000, 30_000)
        self.now = start + self.pause(f"setup/{exec_id}", 5_000, 60_000)
        subs = list(execution.get("sub_agents", []))
        kinds = {i["id"]: ("llm", i) for i in execution["llm_interactions"]}
        kinds.update({i["id"]: ("mcp", i) for i in execution["mcp_interactions"]})
        for interaction_id in self.items(execution):
            kind, item = kinds[interaction_id]
            if kind == "llm":
                duration = self.pause(f"llm/{interaction_id}", 350_000, 2_400_000)
            elif item["interaction_type"] == "tool_list":
                duration = self.pause(f"list/{interaction_id}", 200, 3_000)
            else:
                duration = self.pause(f"tool/{interaction_id}", 2_000, 180_000)
            self.now += duration
            # Trailing zeros of the fraction are dropped in JSON, which would change how the
            # times compare as strings (Go's e2e sorts interactions so): keep six digits.
            if self.now % 10 == 0:
                self.now += 1
            # Go records an interaction once it returned; duration_ms is time.Since(start).Milliseconds().
            self.interaction_time[interaction_id] = self.now
            self.interaction_duration[interaction_id] = duration // 1000
            self.now += self.pause(f"gap/{interaction_id}", 300, 9_000)
            if subs and item.get("tool_name") == "dispatch_agent":
                for sub in subs:
                    self.lay_execution(sub)
                subs = []
        for sub in subs:
            self.lay_execution(sub)
        end = self.now + self.pause(f"end/{exec_id}", 1_000, 20_000)
        self.execution_window[exec_id] = (start, end)
        self.now = end

    def call_start(self, interaction_id: str) -> datetime:
        moment = self.interaction_time[interaction_id] - self.interaction_duration[interaction_id] * 1000
        return EPOCH + timedelta(microseconds=moment)

    def event_times(self, events: list[dict], execution: dict | None, llm: dict, mcp: dict,
                    scenario: str) -> list[tuple[int, int]]:
        """(created_at, updated_at) of an execution's events, in sequence order, placed by the
        interaction that produced each: thinking and text while its LLM call streams (completed
        when it ends), a final analysis after it, a tool call from the call's start to its end;
        anything else just after the event before it."""
        if execution is None:
            start, end = self.session_started, self.session_completed
            anchors = {}
        else:
            start, end = self.execution_window[execution["execution_id"]]
            anchors = _interaction_outputs(execution, llm, mcp)
        used: set = set()
        times = []
        previous = start
        for rank, event in enumerate(events):
            content = fill_text(scenario, event.get("content", ""))
            kind = event["event_type"]
            candidates = anchors.get((kind, content), [])
            found = next((a for a in candidates if (kind, a) not in used), None)
            streamed = kind in ("llm_thinking", "llm_response", "llm_tool_call", "mcp_tool_summary")
            if found:
                used.add((kind, found))
                done = self.interaction_time[found]
                began = done - self.interaction_duration[found] * 1000
                if kind == "final_analysis":
                    created = updated = done + 300 + rank
                elif kind == "llm_tool_call":
                    created, updated = began - 150, done + 150
                else:
                    share = 3 if kind == "llm_thinking" else 6
                    created, updated = began + (done - began) * share // 10, done - 400
            else:
                created = previous + 1_000
                updated = created + (600 if streamed else 0)
            created = max(created, previous + 1)
            updated = max(updated, created)
            if event.get("_rewritten"):
                updated = end  # the action stage's marker is stripped once the stage ends
            times.append((created, updated))
            previous = created
        return times


def _interaction_outputs(execution: dict, llm: dict, mcp: dict) -> dict:
    """(event type, content) -> the interactions of ``execution`` that produced such an event."""
    anchors: dict = {}
    for item in execution["llm_interactions"]:
        detail = llm.get(item["id"])
        if detail is None:
            continue
        replies = [m for m in detail["conversation"] if m["role"] == "assistant"]
        reply = replies[-1]["content"] if replies else ""
        if detail.get("thinking_content"):
            anchors.setdefault(("llm_thinking", detail["thinking_content"]), []).append(item["id"])
        kinds = ("mcp_tool_summary",) if detail["interaction_type"] == "summarization" else (
            "llm_response", "final_analysis")
        for kind in kinds:
            for text in {reply, strip_action_marker(reply)}:  # an action stage's events lose the marker
                anchors.setdefault((kind, text), []).append(item["id"])
    for item in execution["mcp_interactions"]:
        detail = mcp.get(item["id"])
        if detail and isinstance(detail.get("tool_result"), dict):
            key = ("llm_tool_call", detail["tool_result"].get("content", ""))
            anchors.setdefault(key, []).append(item["id"])
    return anchors


# ── Timelines the goldens do not show ──────────────────────────────────────────────────────

SUMMARY_NOTE_RE = re.compile(r"\[NOTE: The output from (\S+)\.(\S+) was (\d+) tokens \(estimated\)")
QUESTION_RE = re.compile(r"\*\*Question:\*\* (.*)\n")
ACTION_MARKER_RE = re.compile(r"\n\s*(YES|NO)\s*$")


def _split_tool_name(name: str) -> tuple[str, str, str]:
    """(server_name, tool_name, tool_type) as executeToolCall writes them (tool_execution.go):
    ``server__tool`` is an MCP tool; a plain name here is a skill tool (load_skill)."""
    if "__" in name:
        server, tool = name.split("__", 1)
        return server, tool, "mcp"
    if name == "load_skill":
        return "", name, "skill"
    raise ValueError(f"no derivation for the tool {name!r}")


def strip_action_marker(text: str) -> str:
    """The text without the YES/NO line an action agent ends with (controller.ExtractActionsTaken)."""
    return ACTION_MARKER_RE.sub("", text).rstrip()


def derive_timeline(
    trace: dict,
    llm: dict,
    mcp: dict,
    session: dict,
    action_stages: set[str],
    executions: set[str] | None = None,
) -> list[dict]:
    """Projected events (as ``timeline.golden`` holds them, with ``_owner``) that Go writes for
    the executions of a session (or those of ``executions``): google-native iterating agents,
    chat, executive summary (pkg/agent/controller/iterating.go, pkg/queue/chat_executor.go,
    single_shot.go)."""
    events: list[dict] = []
    provider = {e["execution_id"]: e.get("llm_provider") for _, e in session_executions(session)}
    skill_bodies = _loaded_skill_bodies(mcp)
    backend = {e["execution_id"]: e["llm_backend"] for _, e in session_executions(session)}
    for stage, execution, parent in trace_executions(trace):
        if executions is not None and execution["execution_id"] not in executions:
            continue
        owner = {"stage": stage, "execution": execution, "parent": parent}
        if backend[execution["execution_id"]] != "google-native":
            kind = backend[execution["execution_id"]]
            raise ValueError(f"no derivation for {execution['agent_name']}'s {kind} backend")
        own: list[dict] = []
        sequence = 0

        def add(event_type: str, content: str, metadata: dict | None = None) -> None:
            nonlocal sequence
            sequence += 1
            event = {"agent": execution["agent_name"], "content": content, "event_type": event_type,
                     "sequence": sequence, "status": "completed", "_owner": owner}
            if metadata:
                event["metadata"] = metadata
            own.append(event)

        details = [llm[i["id"]] for i in execution["llm_interactions"]]
        calls = [mcp[i["id"]] for i in execution["mcp_interactions"] if i["interaction_type"] == "tool_call"]
        summaries = [d for d in details if d["interaction_type"] == "summarization"]
        iterations = [d for d in details if d["interaction_type"] in ("iteration", "forced_conclusion")]
        if stage["stage_type"] == "chat":
            sequence = max([e["sequence"] for e in events], default=0)
            question = QUESTION_RE.search(iterations[0]["conversation"][1]["content"]).group(1)
            add("user_question", question, {"author": session["author"]})
        for detail in details:
            if detail["interaction_type"] == "executive_summary":
                reply = detail["conversation"][-1]["content"]
                add("llm_response", reply)
                add("final_analysis", reply, {"interaction_type": "executive_summary"})
        if iterations:
            # Required skills: their bodies open the system prompt's "Pre-loaded Skills" section.
            system = iterations[0]["conversation"][0]["content"]
            section = system.partition("## Pre-loaded Skills\n")[2]
            for name in re.findall(r"(?m)^### (\S+)\n\n", section):
                body = skill_bodies.get(name)
                if body is None or f"### {name}\n\n{body.rstrip()}" not in section:
                    continue  # a heading inside a skill's body
                add("skill_loaded", body, {"skill_name": name})
        for n, detail in enumerate(iterations):
            reply = [m for m in detail["conversation"] if m["role"] == "assistant"][-1]
            if detail.get("thinking_content"):
                add("llm_thinking", detail["thinking_content"], {"source": "native"})
            if reply["content"]:
                add("llm_response", reply["content"])
            following = iterations[n + 1]["conversation"] if n + 1 < len(iterations) else []
            for call in reply.get("tool_calls", []):
                server, tool, tool_type = _split_tool_name(call["name"])
                result = calls.pop(0)
                if result["tool_name"] != tool:
                    recorded = result["tool_name"]
                    raise ValueError(f"tool call {call['id']} is not the next recorded ({recorded})")
                add("llm_tool_call", result["tool_result"]["content"],
                    {"arguments": call["arguments"], "is_error": result["tool_result"]["is_error"],
                     "server_name": server, "tool_name": tool, "tool_type": tool_type})
                answer = next((m for m in following if m.get("tool_call_id") == call["id"]), None)
                note = SUMMARY_NOTE_RE.match(answer["content"]) if answer else None
                if note:
                    summary = summaries.pop(0)
                    add("mcp_tool_summary", summary["conversation"][-1]["content"],
                        {"original_tokens": int(note.group(3)), "server_name": server,
                         "summarization_model": summary["model_name"],
                         "summarization_provider": provider[execution["execution_id"]], "tool_name": tool})
            if not reply.get("tool_calls"):
                add("final_analysis", reply["content"])
        if stage["stage_id"] in action_stages:
            for event in own:
                if event["event_type"] in ("llm_response", "final_analysis"):
                    cleaned = strip_action_marker(event["content"])
                    if cleaned != event["content"]:
                        event["content"] = cleaned
                        event["_rewritten"] = True
        events.extend(own)
    return events


def _loaded_skill_bodies(mcp: dict) -> dict[str, str]:
    """Skill bodies as load_skill returned them ("## Skill: <name>\\n\\n<body>", skill/tool_executor.go)."""
    bodies = {}
    for detail in mcp.values():
        if detail.get("tool_name") == "load_skill":
            for part in re.split(r"(?m)^(?=## Skill: )", detail["tool_result"]["content"]):
                match = re.match(r"## Skill: (\S+)\n\n", part)
                if match:
                    bodies[match.group(1)] = part[match.end() :]
    return bodies


# ── What test/e2e/action_test.go scripts ───────────────────────────────────────────────────

ACTION_CHAIN_SCRIPT = {
    "Investigator": {
        "interaction_type": "iteration",
        "tools": ("get_service_status", "restart_service"),
        "turns": (
            {"thinking": "Let me check the service status.", "text": "Checking service health.",
             "tool_calls": (("call-1", "test-mcp__get_service_status", '{"service":"api-gateway"}'),),
             "usage": (80, 25, 105)},
            {"thinking": "Service is down, confirmed by health check.",
             "text": "Investigation complete: api-gateway is DOWN. "
                     "Health check confirms 503 errors since 10:00 UTC.",
             "usage": (100, 40, 140)},
        ),
    },
    "Remediator": {
        "interaction_type": "iteration",
        "tools": ("get_service_status", "restart_service"),
        "turns": (
            {"thinking": "Evidence is clear — api-gateway is down. Restarting the service.",
             "text": "Restarting api-gateway based on confirmed outage.",
             "tool_calls": (("call-2", "test-mcp__restart_service", '{"service":"api-gateway"}'),),
             "usage": (120, 30, 150)},
            {"thinking": "Service restarted successfully.",
             "text": "Investigation complete: api-gateway was DOWN.\n\n## Actions Taken\n"
                     "Restarted api-gateway. Service now healthy (200 OK).\nYES",
             "usage": (100, 50, 150)},
        ),
    },
    "ExecSummaryAgent": {
        "interaction_type": "executive_summary",
        "turns": (
            {"text": "api-gateway outage detected and remediated by automated restart.",
             "usage": (60, 20, 80)},
        ),
    },
}
ACTION_CHAIN_TOOL_RESULTS = {
    "get_service_status": '{"service":"api-gateway","status":"DOWN","error":"503 Service Unavailable",'
    '"since":"10:00 UTC"}',
    "restart_service": '{"service":"api-gateway","action":"restart","result":"success",'
    '"new_status":"healthy"}',
}
# The review test/e2e/memory_test.go makes (PATCH /sessions/review, action "complete" from
# needs_review: pkg/services/session_service_review.go writes a claim and a completion).
REVIEWS = {
    "memory-feedback": {
        "actor": "api-client",
        "quality_rating": "partially_accurate",
        "action_taken": "Needs more evidence on resource limits.",
        "investigation_feedback": "The investigation missed checking Kubernetes resource limits. "
        "Always verify limits before diagnosing OOM.",
    },
}
