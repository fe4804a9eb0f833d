"""Sessions with one long tool output, made from a real session's shape.

A TARSy session document (``../shared/data/tarsy-bot/``, or ``scoring/samples`` of either
source) keeps its stages, messages and tool calls; one tool call's result (a ``get_logs`` one
where there is one, else the largest) grows to the size asked for with ``kubectl logs``-like
lines, as an incident's logs or a file read do. In a Go TARSy document the result grows as Go
keeps a long one that was not summarized: cut at 32 KB in the timeline and the trace, whole in
the agent's conversation. For the fitting tests and ``bench/bench_long_sessions.py``.
"""

import copy
import json

from scoring.models import AlertSession
from scoring.tarsy import ingest
from scoring.tarsy_go.document import is_document

SESSION_FIELDS = {field.name for field in AlertSession._meta.get_fields()}
LEVELS = ("info", "info", "info", "warn", "error", "debug")


def tool_calls(document: dict) -> list[dict]:
    """The details of every tool call in ``document``, parallel agents' included."""
    calls = []

    def walk(execution: dict) -> None:
        for comm in execution.get("mcp_communications") or []:
            details = comm.get("details") or {}
            if details.get("communication_type") == "tool_call" and details.get("success", True):
                calls.append(details)
        for child in execution.get("parallel_executions") or []:
            walk(child)

    for stage in document.get("stages") or []:
        walk(stage)
    return calls


def log_lines(size_chars: int) -> str:
    """``size_chars`` of deterministic container log lines, each different."""
    lines = []
    total = 0
    index = 0
    while total < size_chars:
        level = LEVELS[index % len(LEVELS)]
        line = (
            f"2025-06-0{1 + index // 8_640_000 % 9}T{index // 360_000 % 24:02d}:{index // 6_000 % 60:02d}:"
            f"{index // 100 % 60:02d}.{index % 100:02d}0Z level={level} pod=web-{index % 7} "
            f"request_id={index * 2_654_435_761 % 2**32:08x} "
            f"msg=\"handled GET /api/v1/orders/{index % 9973} "
            f"status={200 if level != 'error' else 503} duration_ms={index * 37 % 900}\""
        )
        lines.append(line)
        total += len(line) + 1
        index += 1
    return "\n".join(lines)[:size_chars]


def with_long_tool_output(document: dict, size_chars: int) -> dict:
    """A copy of ``document`` whose chosen tool result is ``size_chars`` long: its own text first."""
    if is_document(document):
        return _go_with_long_tool_output(document, size_chars)
    document = copy.deepcopy(document)
    calls = tool_calls(document)
    logs = [details for details in calls if "log" in str(details.get("tool_name"))]
    chosen = (logs or sorted(calls, key=lambda d: -len(json.dumps(d.get("tool_result")))))[0]
    result = chosen.get("tool_result")
    plain = isinstance(result, dict) and isinstance(result.get("result"), str)
    own = result["result"] if plain else json.dumps(result)
    chosen["tool_result"] = {"result": own + "\n" + log_lines(size_chars - len(own) - 1)}
    return document


def session_of(document: dict) -> AlertSession:
    """An unsaved session of ``document``, for rendering: a Go TARSy document as an import stores
    it, a tarsy-bot one (its history-API shape) field by field, unchecked."""
    if is_document(document):
        return AlertSession(**ingest.parse_document(document))
    return AlertSession(**{name: document[name] for name in SESSION_FIELDS if name in document})


# Go keeps a tool result in its timeline and trace cut at 8,000 tokens of 4 bytes
# (pkg/mcp/tokens.go, TruncateForStorage), at a line's end, with this marker.
GO_STORED_BYTES = 32_000


def go_stored(text: str) -> str:
    """``text`` as Go stores a tool result (sizes as Go's formatSize writes them)."""
    if len(text.encode()) <= GO_STORED_BYTES:
        return text
    kept = text.encode()[:GO_STORED_BYTES].decode(errors="ignore")
    kept = kept[: kept.rindex("\n")] if "\n" in kept else kept
    return (
        f"{kept}\n\n[TRUNCATED: Output exceeded storage display limit — Original size: "
        f"{len(text.encode()) // 1024}KB, limit: {GO_STORED_BYTES // 1024}KB]"
    )


def _go_with_long_tool_output(document: dict, size_chars: int) -> dict:
    """The chosen tool call is one whose result the agent saw as it was (not summarized, not an
    error): its timeline event and its MCP interaction hold it as Go stores it, the agent's
    conversation (each later LLM call's) holds it whole."""
    document = copy.deepcopy(document)
    timeline = document["timeline"]
    summarized = {
        (event["execution_id"], event["sequence_number"] - 1)
        for event in timeline
        if event.get("event_type") == "mcp_tool_summary"
    }
    calls = [
        event
        for event in timeline
        if event.get("event_type") == "llm_tool_call"
        and not event["metadata"].get("is_error")
        and (event["execution_id"], event["sequence_number"]) not in summarized
    ]
    logs = [event for event in calls if "log" in event["metadata"]["tool_name"]]
    chosen = (logs or sorted(calls, key=lambda event: -len(event["content"])))[0]
    metadata, own = chosen["metadata"], chosen["content"]
    whole = own + "\n" + log_lines(size_chars - len(own) - 1)
    chosen["content"] = go_stored(whole)
    tool = (metadata["server_name"], metadata["tool_name"])
    for detail in document["mcp_interactions"].values():
        result = detail.get("tool_result")
        if (detail.get("server_name"), detail.get("tool_name")) == tool and result.get("content") == own:
            result["content"] = go_stored(whole)
    wire_name = f"{metadata['server_name']}__{metadata['tool_name']}"
    for detail in document["llm_interactions"].values():
        for message in detail.get("conversation") or []:
            if message.get("tool_name") == wire_name and message.get("content") == own:
                message["content"] = whole
    return document


def with_long_observations(document: dict, size_chars: int) -> dict:
    """A copy of a tarsy-bot ReAct ``document`` about ``size_chars`` longer, its tool output
    carried as real ReAct sessions carry it: in the agent's next input, ``Observation:
    server.tool: {json}``, in that interaction and in every later one of the run (tarsy-bot
    stores the conversation so far in each). Two of its tool calls grow, half the size each,
    with log lines: the first's output is also its recorded result (as most calls are); the
    second's record kept no result (``{}``, as a call in tarsy-bot's own example session), so
    its output is in the agent's messages only."""
    document = copy.deepcopy(document)
    calls = [
        (execution, comm["details"])
        for execution in _executions(document)
        for comm in execution.get("mcp_communications") or []
        if (comm.get("details") or {}).get("communication_type") == "tool_call"
    ]
    for number, (execution, details) in enumerate(calls[-2:]):
        own = (details.get("tool_result") or {}).get("result") or ""
        text = own + "\n" + log_lines(size_chars // 2 - len(own) - 1)
        name = f"{details['server_name']}.{details['tool_name']}"
        observation = f"Observation: {name}: " + json.dumps({"result": text}, indent=2)
        details["tool_result"] = {"result": text} if number == 0 else {}
        for interaction in execution.get("llm_interactions") or []:
            for message in interaction["details"]["conversation"]["messages"]:
                if message["role"] == "user" and message["content"].startswith(f"Observation: {name}:"):
                    message["content"] = observation
    return document


def _executions(document: dict) -> list[dict]:
    executions = []
    for stage in document.get("stages") or []:
        executions.append(stage)
        executions.extend(stage.get("parallel_executions") or [])
    return executions
