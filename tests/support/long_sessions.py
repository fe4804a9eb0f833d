"""Sessions with one long tool output, made from a real session's shape.

A TARSy session document (``../shared/data/tarsy-bot/``, or ``scoring/samples``) keeps its
stages, messages and tool calls; one tool call's result (a ``get_logs`` one where there is
one, else the largest) grows to the size asked for with ``kubectl logs``-like lines, as an
incident's logs or a file read do. For the fitting tests and ``bench/bench_long_sessions.py``.
"""

import copy
import json

from scoring.models import AlertSession

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
    """An unsaved session of ``document`` (TARSy's history-API shape), for rendering."""
    return AlertSession(**{name: document[name] for name in SESSION_FIELDS if name in document})
