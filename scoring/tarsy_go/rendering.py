"""A Go TARSy session as the judge reads it: text for ``{{SESSION_CONVERSATION}}``.

Pure functions over the session's "tarsy-go/1" document (docs/rendering.md, "Go TARSy").
Go TARSy's own judge reads each agent run's timeline events and the MCP tool lists; so
does ours, with what that leaves out added from the interaction details: every stage
type but scoring (synthesis, chat), sub-agents under their orchestrator, the raw result
beside its summary, and a result stored cut short in full when the agent's conversation
holds it. Scoring stages (Go's judge and its memory extraction) never reach the judge.

Everything is read through ``judge_view(document)``, the document less what the judge
never sees; ``rendered_values`` gives that view, so a review or a score added to the
session later changes neither the digest nor the prompt.
"""

import json
import math
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from scoring.judge.parts import (
    SHARED_RENDERED_FIELDS,
    AgentText,
    ToolResult,
    render_final_analysis,
    render_header,
    tool_line,
)

# What this rendering reads: the fields every source has, and its investigation.
RENDERED_FIELDS = (*SHARED_RENDERED_FIELDS, "source_document")

# Go TARSy's judge ("Reflection") and its memory extraction run in stages of this type.
HIDDEN_STAGE_TYPES = frozenset({"scoring"})
HIDDEN_INTERACTION_TYPES = frozenset({"scoring", "memory_extraction"})

# What of each piece of the document the rendering reads (the judge view keeps only these).
# Of the session detail, what the judge reads besides its stages.
_SESSION_KEYS = ("executive_summary_error", "labels", "cancelled_by", "cancel_reason")
_STAGE_KEYS = (
    "id", "stage_name", "stage_index", "stage_type", "status", "parallel_type", "referenced_stage_id",
)
_EXECUTION_KEYS = (
    "execution_id", "agent_name", "agent_index", "status", "llm_backend", "llm_provider", "model_name",
    "error_message", "task", "original_llm_provider", "original_llm_backend", "original_model_name",
    "fallback_reason", "fallback_error_code",
)
_TRACE_STAGE_KEYS = ("stage_id", "stage_name", "stage_type", "referenced_stage_id")
_LLM_ITEM_KEYS = ("id", "interaction_type", "model_name", "error_message", "created_at")
_MCP_ITEM_KEYS = ("id", "interaction_type", "server_name", "tool_name", "error_message", "created_at")
_EVENT_KEYS = ("stage_id", "execution_id", "sequence_number", "event_type", "status", "content", "metadata")
_LLM_DETAIL_KEYS = ("interaction_type", "model_name", "thinking_content", "error_message")
_MCP_DETAIL_KEYS = (
    "interaction_type", "server_name", "tool_name", "tool_arguments", "tool_result", "available_tools",
    "error_message",
)
# Of a conversation: the agent's own messages (for a run without timeline events) and the
# tool results it saw (a result the timeline stored cut short is there in full).
_CONVERSATION_ROLES = frozenset({"assistant", "tool"})
_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "tool_name")

# Go stores a tool result longer than 32 KB cut, with this marker at its end.
_STORAGE_CUT = re.compile(r"\n\n\[TRUNCATED: [^\n\]]*\]\Z")

_EVENT_LABELS = {
    "llm_thinking": "Internal Reasoning",
    "llm_response": "Agent Response",
    "final_analysis": "Final Analysis",
    "error": "Error",
    "task_assigned": "Task Assigned",
    "provider_fallback": "Provider Fallback",
    "google_search_result": "Google Search Result",
    "url_context_result": "URL Context Result",
    "code_execution": "Code Execution",
    "executive_summary": "Executive Summary",
}
# Events kept whole by fitting: the agent's conclusions, errors, the user's words, the chain's
# own records. The others (reasoning, responses, summaries, loaded skills and memories,
# search results, unknown types) are ``AgentText`` parts, which it may shorten.
_KEPT_WHOLE_EVENTS = frozenset(
    {"final_analysis", "error", "task_assigned", "provider_fallback", "executive_summary", "user_question"}
)
_LLM_CALL_LABELS = {
    "summarization": "Tool Result Summarization (a separate LLM call that condensed a tool result)",
    "forced_conclusion": "Forced Conclusion (the agent reached its iteration limit)",
}


def rendered_values(session) -> dict:
    """The values of ``RENDERED_FIELDS``, by name; the document as the judge view."""
    values = {name: getattr(session, name) for name in RENDERED_FIELDS}
    values["source_document"] = judge_view(values["source_document"])
    return values


def render_investigation_parts(session) -> list[str]:
    """The investigation's text in parts, to be joined with newlines; tool results are
    ``ToolResult`` parts, the agent's own texts ``AgentText`` parts."""
    view = judge_view(session.source_document)
    out: list[str] = []
    render_header(session, out)
    _render_labels_and_cancellation(view["session"], out)
    investigation = _Investigation.build(view)
    investigation.render_tools(out)
    out.append("## INVESTIGATION TIMELINE\n")
    investigation.render_stages(out)
    _render_executive_summary(session, view, investigation.session_events, out)
    investigation.render_other_session_events(out)
    render_final_analysis(session, out)
    return out


def _render_labels_and_cancellation(session: dict, out: list[str]) -> None:
    """Go TARSy's labels of the session and who cancelled it, why, when it says (later Go
    TARSy versions): what the header of every source does not have."""
    lines = []
    labels = session.get("labels")
    if isinstance(labels, dict) and labels:
        lines.append("**Labels:** " + ", ".join(f"{_text(k)}={_text(v)}" for k, v in labels.items()))
    elif isinstance(labels, list) and labels:
        lines.append("**Labels:** " + ", ".join(_text(label) for label in labels))
    if session.get("cancelled_by") or session.get("cancel_reason"):
        reason = f" ({_text(session.get('cancel_reason'))})" if session.get("cancel_reason") else ""
        lines.append(f"**Cancelled by:** {_text(session.get('cancelled_by')) or 'unknown'}{reason}")
    if lines:
        out.append("\n".join(lines) + "\n")


# -- the judge view -----------------------------------------------------------


def judge_view(document) -> dict:
    """The document less what the judge never sees, in the API's own shapes: the keys the
    rendering reads, without scoring stages (their executions, timeline events and
    interactions), timeline events of stages the document does not list (a scoring may
    have started between two of the requests the document was assembled from), the
    session's review and score fields, and Go's own score and review activity."""
    document = _dict(document)
    session = _dict(document.get("session"))
    trace = _dict(document.get("trace"))
    stages = [s for s in _list(session.get("stages")) if isinstance(s, dict)]
    trace_stages = [s for s in _list(trace.get("stages")) if isinstance(s, dict)]

    hidden_stages = {_key(s.get("id")) for s in stages if _key(s.get("stage_type")) in HIDDEN_STAGE_TYPES}
    hidden_stages |= {
        _key(s.get("stage_id")) for s in trace_stages if _key(s.get("stage_type")) in HIDDEN_STAGE_TYPES
    }
    hidden_stages.discard(None)
    stages = [s for s in stages if _key(s.get("id")) not in hidden_stages]
    trace_stages = [s for s in trace_stages if _key(s.get("stage_id")) not in hidden_stages]

    view_stages = [_view_stage(s) for s in stages]
    view_trace_stages = [_view_trace_stage(s) for s in trace_stages]
    stage_ids = {_key(s.get("id")) for s in view_stages} | {
        _key(s.get("stage_id")) for s in view_trace_stages
    }
    stage_ids.discard(None)
    execution_ids: set = set()
    llm_ids: list = []
    mcp_ids: list = []
    for stage in view_stages:
        for execution in _walk_executions(stage["executions"]):
            execution_ids.add(_key(execution.get("execution_id")))
    for stage in view_trace_stages:
        for execution in _walk_executions(stage["executions"]):
            execution_ids.add(_key(execution.get("execution_id")))
            llm_ids += [i.get("id") for i in execution["llm_interactions"]]
            mcp_ids += [i.get("id") for i in execution["mcp_interactions"]]
    execution_ids.discard(None)

    timeline = []
    for event in _list(document.get("timeline")):
        if not isinstance(event, dict) or not _event_visible(event, stage_ids, execution_ids):
            continue
        timeline.append({k: event[k] for k in _EVENT_KEYS if k in event})

    llm_details = _dict(document.get("llm_interactions"))
    mcp_details = _dict(document.get("mcp_interactions"))
    view_llm = {}
    for iid in llm_ids:
        detail = llm_details.get(iid) if isinstance(iid, str) else None
        if isinstance(detail, dict) and _key(detail.get("interaction_type")) not in HIDDEN_INTERACTION_TYPES:
            view_llm[iid] = _view_llm_detail(detail)
    view_mcp = {}
    for iid in mcp_ids:
        detail = mcp_details.get(iid) if isinstance(iid, str) else None
        if isinstance(detail, dict):
            view_mcp[iid] = {k: detail[k] for k in _MCP_DETAIL_KEYS if k in detail}

    view_session = {"stages": view_stages}
    for key in _SESSION_KEYS:
        if key in session:
            view_session[key] = session[key]
    return {
        "session": view_session,
        "timeline": timeline,
        "trace": {"stages": view_trace_stages},
        "llm_interactions": view_llm,
        "mcp_interactions": view_mcp,
    }


def _view_stage(stage: dict) -> dict:
    view = {k: stage[k] for k in _STAGE_KEYS if k in stage}
    view["executions"] = [_view_execution(e) for e in _list(stage.get("executions")) if isinstance(e, dict)]
    return view


def _view_execution(execution: dict) -> dict:
    view = {k: execution[k] for k in _EXECUTION_KEYS if k in execution}
    view["sub_agents"] = [
        _view_execution(e) for e in _list(execution.get("sub_agents")) if isinstance(e, dict)
    ]
    return view


def _view_trace_stage(stage: dict) -> dict:
    view = {k: stage[k] for k in _TRACE_STAGE_KEYS if k in stage}
    view["executions"] = [
        _view_trace_execution(e) for e in _list(stage.get("executions")) if isinstance(e, dict)
    ]
    return view


def _view_trace_execution(execution: dict) -> dict:
    llm = [
        {k: i[k] for k in _LLM_ITEM_KEYS if k in i}
        for i in _list(execution.get("llm_interactions"))
        if isinstance(i, dict) and _key(i.get("interaction_type")) not in HIDDEN_INTERACTION_TYPES
    ]
    mcp = [
        {k: i[k] for k in _MCP_ITEM_KEYS if k in i}
        for i in _list(execution.get("mcp_interactions"))
        if isinstance(i, dict)
    ]
    return {
        "execution_id": execution.get("execution_id"),
        "agent_name": execution.get("agent_name"),
        "llm_interactions": llm,
        "mcp_interactions": mcp,
        "sub_agents": [
            _view_trace_execution(e) for e in _list(execution.get("sub_agents")) if isinstance(e, dict)
        ],
    }


def _view_llm_detail(detail: dict) -> dict:
    view = {k: detail[k] for k in _LLM_DETAIL_KEYS if k in detail}
    view["conversation"] = [
        {k: m[k] for k in _MESSAGE_KEYS if k in m}
        for m in _list(detail.get("conversation"))
        if isinstance(m, dict) and _key(m.get("role")) in _CONVERSATION_ROLES
    ]
    return view


def _walk_executions(executions: list):
    for execution in executions:
        yield execution
        yield from _walk_executions(execution["sub_agents"])


def _event_visible(event: dict, stage_ids: set, execution_ids: set) -> bool:
    if _key(_dict(event.get("metadata")).get("interaction_type")) in HIDDEN_INTERACTION_TYPES:
        return False
    execution_id, stage_id = _key(event.get("execution_id")), _key(event.get("stage_id"))
    if execution_id is None and stage_id is None:
        return True  # a session-level event (the executive summary)
    # An event of an execution the document does not list is shown under its stage, if listed.
    return execution_id in execution_ids or stage_id in stage_ids


# -- the investigation's structure --------------------------------------------


@dataclass
class _Agent:
    execution_id: object
    overview: dict = field(default_factory=dict)  # the session detail's execution overview
    trace: dict = field(default_factory=dict)  # the trace's execution group
    events: list = field(default_factory=list)
    sub_agents: list = field(default_factory=list)
    position: int = 0

    @property
    def name(self) -> str:
        return _text(self.overview.get("agent_name") or self.trace.get("agent_name")) or "unknown agent"

    @property
    def label(self) -> str:
        # As Go's judge shows it: backend, and the model (else the provider key).
        backend = _text(self.overview.get("llm_backend"))
        model = _text(self.overview.get("model_name") or self.overview.get("llm_provider"))
        details = ", ".join(p for p in (backend, model) if p)
        return f"{self.name} ({details})" if details else self.name

    @property
    def status(self) -> str:
        return _text(self.overview.get("status")) or "unknown"

    def order(self) -> tuple:
        index = self.overview.get("agent_index")
        return (index if isinstance(index, int) else math.inf, self.position)


@dataclass
class _Stage:
    stage_id: object
    overview: dict = field(default_factory=dict)
    trace: dict = field(default_factory=dict)
    agents: list = field(default_factory=list)
    position: int = 0

    @property
    def name(self) -> str:
        return _text(self.overview.get("stage_name") or self.trace.get("stage_name")) or "unnamed stage"

    @property
    def stage_type(self) -> str:
        return _text(self.overview.get("stage_type") or self.trace.get("stage_type"))

    def order(self) -> tuple:
        # Chats follow the stages they discuss, whatever their index.
        index = self.overview.get("stage_index")
        return (self.stage_type == "chat", index if isinstance(index, int) else math.inf, self.position)


@dataclass
class _Investigation:
    view: dict
    stages: list
    session_events: list

    @classmethod
    def build(cls, view: dict) -> "_Investigation":
        stages: dict = {}
        agents: dict = {}
        for stage in view["session"]["stages"]:
            entry = _stage_entry(stages, _key(stage.get("id")))
            entry.overview = stage
            for execution in stage["executions"]:
                entry.agents.append(_agent_from_overview(execution, agents))
        for stage in view["trace"]["stages"]:
            entry = _stage_entry(stages, _key(stage.get("stage_id")))
            entry.trace = stage
            for execution in stage["executions"]:
                agent = _agent_from_trace(execution, agents)
                if agent is not None:
                    entry.agents.append(agent)
        session_events = []
        for event in sorted(view["timeline"], key=_sequence):
            execution_id = _key(event.get("execution_id"))
            agent = agents.get(execution_id) if execution_id is not None else None
            if agent is None and (execution_id is not None or _key(event.get("stage_id")) is not None):
                stage = stages.get(_key(event.get("stage_id")))
                if stage is None:
                    continue
                # An execution the stage does not list (listed after the document was read).
                agent = agents[execution_id] = _Agent(execution_id, position=len(agents))
                stage.agents.append(agent)
            if agent is None:
                session_events.append(event)
            else:
                agent.events.append(event)
        ordered = sorted(stages.values(), key=_Stage.order)
        for stage in ordered:
            stage.agents.sort(key=_Agent.order)
        return cls(view, ordered, session_events)

    # -- AVAILABLE TOOLS ----------------------------------------------------

    def render_tools(self, out: list[str]) -> None:
        out.append("## AVAILABLE TOOLS PER AGENT\n")
        details = self.view["mcp_interactions"]
        any_list = False
        for number, stage in enumerate(self.stages, start=1):
            for agent in _agents_in_order(stage.agents):
                lists = [
                    i
                    for i in agent.trace.get("mcp_interactions", [])
                    if i.get("interaction_type") == "tool_list"
                ]
                if not lists:
                    continue
                any_list = True
                lines = []
                for item in sorted(lists, key=lambda i: _text(i.get("server_name"))):
                    lines += _tool_list_lines(item, details.get(_key(item.get("id"))))
                out.append(f"### {agent.name} (Stage {number}: {stage.name})\n")
                out.append("\n".join(lines or ["(The tool lists were empty.)"]) + "\n")
        if not any_list:
            out.append("(No tool lists were recorded.)\n")

    # -- INVESTIGATION TIMELINE --------------------------------------------

    def render_stages(self, out: list[str]) -> None:
        if not self.stages:
            out.append("(No stages were recorded.)\n")
        numbers = {stage.stage_id: n for n, stage in enumerate(self.stages, start=1)}
        for number, stage in enumerate(self.stages, start=1):
            out.append(f"## Stage {number}: {stage.name}\n")
            lines = [f"**Stage Type:** {stage.stage_type or 'unknown'}"]
            referenced = _key(
                stage.overview.get("referenced_stage_id") or stage.trace.get("referenced_stage_id")
            )
            if referenced is not None and referenced in numbers:
                lines[0] += f" (of Stage {numbers[referenced]}: {self.stages[numbers[referenced] - 1].name})"
            if stage.overview.get("status"):
                lines.append(f"**Stage Status:** {_text(stage.overview['status'])}")
            out.append("\n".join(lines) + "\n")
            parallel = len(stage.agents) > 1 or stage.overview.get("parallel_type")
            if not stage.agents:
                out.append("(No agent executions were recorded.)\n")
            elif not parallel:
                self._render_agent(stage.agents[0], f"**Agent:** {stage.agents[0].label}", 4, out)
            else:
                done = sum(1 for a in stage.agents if a.status == "completed")
                kind = _text(stage.overview.get("parallel_type")) or "multi_agent"
                out.append(f"### Parallel Agents ({kind}): {done}/{len(stage.agents)} agents completed\n")
                for agent in stage.agents:
                    index = agent.overview.get("agent_index", "?")
                    self._render_agent(agent, f"#### Agent {index}: {agent.label}", 5, out)

    def _render_agent(self, agent: _Agent, heading: str, sub_level: int, out: list[str]) -> None:
        lines = [heading]
        if agent.overview.get("task"):
            lines.append(f"**Task:** {_text(agent.overview['task'])}")
        lines.append(f"**Status:** {agent.status}")
        fallback = _fallback_line(agent.overview)
        if fallback:
            lines.append(fallback)
        if agent.overview.get("error_message"):
            lines.append(f"**Error:** {_text(agent.overview['error_message'])}")
        out.append("\n".join(lines) + "\n")
        timeline = _AgentTimeline(agent, self.view)
        if agent.events:
            timeline.render_events(out)
        elif agent.trace.get("llm_interactions") or agent.trace.get("mcp_interactions"):
            timeline.render_interactions(out)
        else:
            out.append("(No investigation history available)\n")
        for sub in sorted(agent.sub_agents, key=_Agent.order):
            index = sub.overview.get("agent_index", "?")
            self._render_agent(
                sub, f"{'#' * sub_level} Sub-agent {index} of {agent.name}: {sub.label}", sub_level + 1, out
            )

    def render_other_session_events(self, out: list[str]) -> None:
        others = [e for e in self.session_events if e.get("event_type") != "executive_summary"]
        if others:
            out.append("## Other Session Events\n")
            _AgentTimeline(_Agent(None, events=others), self.view).render_events(out)


def _stage_entry(stages: dict, stage_id) -> _Stage:
    # A stage without an id is one of its own.
    key = stage_id if stage_id is not None else ("no id", len(stages))
    if key not in stages:
        stages[key] = _Stage(stage_id, position=len(stages))
    return stages[key]


def _agent_from_overview(execution: dict, agents: dict) -> _Agent:
    agent = _Agent(_key(execution.get("execution_id")), overview=execution, position=len(agents))
    if agent.execution_id is not None:
        agents.setdefault(agent.execution_id, agent)
    agent.sub_agents = [_agent_from_overview(e, agents) for e in execution["sub_agents"]]
    return agent


def _agent_from_trace(execution: dict, agents: dict, parent: _Agent | None = None) -> _Agent | None:
    """The trace's execution group joined to the agent the session detail lists; a new
    agent (returned) when it lists none."""
    execution_id = _key(execution.get("execution_id"))
    agent = agents.get(execution_id) if execution_id is not None else None
    new = agent is None
    if new:
        agent = _Agent(execution_id, position=len(agents))
        if execution_id is not None:
            agents[execution_id] = agent
        if parent is not None:
            parent.sub_agents.append(agent)
    agent.trace = execution
    for sub in execution["sub_agents"]:
        _agent_from_trace(sub, agents, agent)
    return agent if new and parent is None else None


def _agents_in_order(agents: list):
    for agent in agents:
        yield agent
        yield from _agents_in_order(sorted(agent.sub_agents, key=_Agent.order))


def _tool_list_lines(item: dict, detail) -> list[str]:
    server = _text(item.get("server_name"))
    if not isinstance(detail, dict):
        return [f"- (the tool list of {server or 'built-in tools'} was not recorded)"]
    error = detail.get("error_message") or item.get("error_message")
    if error:
        return [f"- {server or 'built-in tools'}: listing the tools failed: {_text(error)}"]
    tools = (tool if isinstance(tool, dict) else {"name": tool} for tool in _list(detail.get("available_tools")))
    return [tool_line(server, tool) for tool in tools if _text(tool.get("name"))]


def _fallback_line(execution: dict) -> str:
    original = execution.get("original_model_name") or execution.get("original_llm_provider")
    if not original:
        return ""
    was = ", ".join(_text(p) for p in (execution.get("original_llm_backend"), original) if p)
    now = ", ".join(
        _text(p)
        for p in (execution.get("llm_backend"), execution.get("model_name") or execution.get("llm_provider"))
        if p
    )
    line = f"**Provider Fallback:** from {was} to {now}"
    if execution.get("fallback_reason"):
        line += f" ({_text(execution['fallback_reason'])})"
    if execution.get("fallback_error_code"):
        line += f", error code {_text(execution['fallback_error_code'])}"
    return line


def _render_executive_summary(session, view: dict, session_events: list, out: list[str]) -> None:
    summaries = [
        _text(e.get("content")).rstrip() for e in session_events if e.get("event_type") == "executive_summary"
    ]
    stored = (session.final_analysis_summary or "").rstrip()
    if stored and stored not in summaries:
        summaries.append(stored)
    error = view["session"].get("executive_summary_error")
    if not summaries and not error:
        return
    out.append("## Executive Summary\n")
    out.extend(s + "\n" for s in summaries if s)
    if error:
        out.append(f"**Executive Summary Error:** {_text(error)}\n")


# -- one agent's timeline -----------------------------------------------------


class _AgentTimeline:
    """One agent run's timeline events, with what the interaction details add."""

    def __init__(self, agent: _Agent, view: dict):
        self.view = view
        self.agent = agent
        # The run's tool_call interactions by (server, tool), in order: the n-th call of a
        # tool in the timeline is the n-th interaction of that tool.
        self.mcp_calls: dict = defaultdict(deque)
        for item in agent.trace.get("mcp_interactions", []):
            if item.get("interaction_type") == "tool_call":
                key = (_text(item.get("server_name")), _text(item.get("tool_name")))
                self.mcp_calls[key].append(item)
        self._tool_messages = None

    def render_events(self, out: list[str]) -> None:
        events = self.agent.events
        last_response = None
        forced = False
        i = 0
        while i < len(events):
            event = events[i]
            kind = _text(event.get("event_type"))
            content = _text(event.get("content")).rstrip()
            metadata = _dict(event.get("metadata"))
            if metadata.get("forced_conclusion") is True and not forced:
                forced = True
                out.append(_forced_label(metadata))
            if kind == "llm_tool_call":
                following = events[i + 1] if i + 1 < len(events) else None
                summary = following if _dict(following).get("event_type") == "mcp_tool_summary" else None
                self._render_tool_call(event, summary, out)
                i += 2 if summary else 1
                last_response = None
                continue
            if kind == "final_analysis" and last_response == content and _completed(event):
                # Go's rule: a final analysis repeating the response just shown is not repeated.
                out.append("**Final Analysis:** the agent's response above.\n")
            elif kind == "mcp_tool_summary":
                out.append(self._agent_block(_summary_label(metadata, event, standalone=True), content))
            elif kind == "skill_loaded":
                name = _text(metadata.get("skill_name"))
                # As Go labels it: the skill's name, and no colon after it.
                label = (
                    _label(f"Pre-loaded Skill: {name}", event, colon=False)
                    if name
                    else _label("Pre-loaded Skill", event)
                )
                out.append(self._agent_block(label, content))
            elif kind == "memory_injected":
                count = _count(metadata.get("count"))
                label = f"Pre-loaded Memories ({count})" if count else "Pre-loaded Memories"
                out.append(self._agent_block(_label(label, event), content))
            elif kind == "user_question":
                author = _text(metadata.get("author"))
                label = f"Chat Follow-up Question ({author})" if author else "Chat Follow-up Question"
                out.append(_block(_label(label, event), content))
            elif kind == "provider_fallback":
                out.append(_block(_label("Provider Fallback", event), content + _fallback_details(metadata)))
            else:
                name = _EVENT_LABELS.get(kind) or (kind.replace("_", " ") if kind else "event")
                block = _block if kind in _KEPT_WHOLE_EVENTS else self._agent_block
                out.append(block(_label(name, event), content))
            last_response = content if kind == "llm_response" and _completed(event) else None
            i += 1

    def _render_tool_call(self, event: dict, summary, out: list[str]) -> None:
        metadata = _dict(event.get("metadata"))
        server, tool = _text(metadata.get("server_name")), _text(metadata.get("tool_name"))
        queue = self.mcp_calls.get((server, tool))
        item = queue.popleft() if queue else None
        detail = _dict(self.view["mcp_interactions"].get(_key(item.get("id")))) if item else {}
        name = f"{server}.{tool}" if server and tool else tool or server or "unknown tool"
        arguments = metadata.get("arguments")
        if not isinstance(arguments, str):
            arguments = arguments if arguments is not None else detail.get("tool_arguments")
            arguments = "" if arguments is None else json.dumps(arguments, ensure_ascii=False)
        out.append(f"**Tool Call:** {name}({arguments})")
        content = _text(event.get("content"))
        raw = _mcp_result_text(detail)
        # A tool whose result is always summarized (past sessions) has the summary in the
        # timeline and its raw result in the interaction.
        pre_summarized = bool(metadata.get("summarization_model") or metadata.get("summarization_provider"))
        text = self._full_result((raw or "") if pre_summarized else (content or raw or ""))
        is_error = metadata.get("is_error") is True or bool(detail.get("error_message"))
        if text:
            label = _label("Result (error)" if is_error else "Result", event)
            out.extend((label, "", ToolResult(text.rstrip(), name), ""))
        elif not pre_summarized:
            status = _text(event.get("status")) or "unknown"
            out.append(f"**Result:** (none recorded; the call's status is '{status}')\n")
        if detail.get("error_message") and _text(detail["error_message"]) not in text:
            out.append(f"**Tool Error:** {_text(detail['error_message'])}\n")
        if pre_summarized:
            out.append(self._agent_block(_summary_label(metadata, event, standalone=False), content.rstrip()))
        if summary is not None:
            out.append(
                self._agent_block(
                    _summary_label(_dict(summary.get("metadata")), summary, standalone=False),
                    _text(summary.get("content")).rstrip(),
                )
            )

    def _agent_block(self, label: str, content: str) -> AgentText:
        """``_block`` as a part that fitting may shorten, named by its label and the agent."""
        return AgentText(_block(label, content), f"{label.strip('*:')} ({self.agent.name})")

    def _full_result(self, text: str) -> str:
        """The whole result where the timeline stored it cut short and the agent's
        conversation holds it (Go cuts stored results at 32 KB; the agent saw them whole
        unless they were summarized)."""
        tail = len(text) - 512  # the marker is at the end: a 20 MB result is not searched
        match = _STORAGE_CUT.search(text, max(tail, 0))
        if not match:
            return text
        kept = text[: match.start()]
        for message in self.tool_messages():
            if len(message) > len(kept) and message.startswith(kept):
                return message
        return text

    def tool_messages(self) -> list:
        if self._tool_messages is None:
            seen, found = set(), []
            for item in self.agent.trace.get("llm_interactions", []):
                detail = self.view["llm_interactions"].get(_key(item.get("id")))
                # Each call's conversation repeats the messages before it.
                for message in _dict(detail).get("conversation", []):
                    content = message.get("content")
                    if message.get("role") != "tool" or not isinstance(content, str):
                        continue
                    call_id = message.get("tool_call_id")
                    key = (
                        call_id
                        if isinstance(call_id, str) and call_id
                        else (content[:256], content[-256:], len(content))
                    )
                    if key not in seen:
                        seen.add(key)
                        found.append(content)
            self._tool_messages = found
        return self._tool_messages

    def render_interactions(self, out: list[str]) -> None:
        """A run without timeline events (an older session, or a timeline not fetched):
        its LLM calls and tool calls from the trace, in the order they were made."""
        out.append("(No timeline events were recorded for this agent: its LLM and tool calls follow.)\n")
        items = [(_moment(i), 0, n, i) for n, i in enumerate(self.agent.trace.get("llm_interactions", []))]
        items += [
            (_moment(i), 1, n, i)
            for n, i in enumerate(self.agent.trace.get("mcp_interactions", []))
            if i.get("interaction_type") != "tool_list"
        ]
        for _, kind, _, item in sorted(items, key=lambda t: t[:3]):
            if kind == 0:
                self._render_llm_call(item, out)
            else:
                self._render_mcp_call(item, out)

    def _render_llm_call(self, item: dict, out: list[str]) -> None:
        detail = self.view["llm_interactions"].get(_key(item.get("id")))
        kind = _text(item.get("interaction_type")) or "unknown"
        model = _text(item.get("model_name") or _dict(detail).get("model_name")) or "unknown model"
        out.append(f"**LLM Call** ({_LLM_CALL_LABELS.get(kind, kind)}, {model})\n")
        error = item.get("error_message") or _dict(detail).get("error_message")
        if not isinstance(detail, dict):
            out.append("(Its details were not recorded.)\n")
        else:
            if detail.get("thinking_content"):
                out.append(self._agent_block("**Internal Reasoning:**", _text(detail["thinking_content"]).rstrip()))
            replies = [m for m in detail.get("conversation", []) if m.get("role") == "assistant"]
            if replies and not error:
                reply = replies[-1]
                calls = [
                    f"- {_text(_dict(c).get('name'))}({_text(_dict(c).get('arguments'))})"
                    for c in _list(reply.get("tool_calls"))
                ]
                text = _text(reply.get("content")).rstrip() or "(no text)"
                if calls:
                    text += "\n\nTool calls requested:\n" + "\n".join(calls)
                out.append(self._agent_block("**Agent Response:**", text))
        if error:
            out.append(f"**LLM Call Failed** ({model}): {_text(error)}\n")

    def _render_mcp_call(self, item: dict, out: list[str]) -> None:
        detail = _dict(self.view["mcp_interactions"].get(_key(item.get("id"))))
        server, tool = _text(item.get("server_name")), _text(item.get("tool_name"))
        name = f"{server}.{tool}" if server and tool else tool or server or "unknown tool"
        arguments = detail.get("tool_arguments")
        out.append(
            f"**Tool Call:** {name}({'' if arguments is None else json.dumps(arguments, ensure_ascii=False)})"
        )
        error = item.get("error_message") or detail.get("error_message")
        raw = _mcp_result_text(detail)
        if raw is not None:
            label = (
                "**Result (error):**"
                if error or _dict(detail.get("tool_result")).get("is_error") is True
                else "**Result:**"
            )
            out.extend((label, "", ToolResult(self._full_result(raw).rstrip(), name), ""))
        if error:
            out.append(f"**Tool Error:** {_text(error)}\n")
        elif raw is None:
            out.append("**Result:** (not recorded)\n")


# -- small helpers ------------------------------------------------------------


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _key(value):
    """``value`` as a set member or dict key: what is not a string or a number (an id
    that is a list in a damaged document) as its JSON text."""
    return value if value is None or isinstance(value, (str, int, float)) else _text(value)


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count(value) -> int | None:
    """A positive count from a JSON number; None for anything else."""
    return int(value) if _is_number(value) and math.isfinite(value) and value > 0 else None


def _sequence(event: dict):
    number = event.get("sequence_number")
    return number if _is_number(number) else math.inf


def _moment(item: dict) -> tuple:
    """A sortable creation time: Go writes RFC 3339 with as many fractional digits as
    needed, so its texts do not sort as times."""
    try:
        moment = datetime.fromisoformat(_text(item.get("created_at")))
    except ValueError:
        return (1, 0.0)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (0, moment.timestamp())


def _completed(event: dict) -> bool:
    return _text(event.get("status")) in ("", "completed")


def _label(name: str, event: dict, colon: bool = True) -> str:
    """``**Name:**``; an event that did not complete (a response cut off by a failure, a
    timeout or a cancel) says its status."""
    status = _text(event.get("status"))
    if status not in ("", "completed"):
        name += f" ({status})"
    return f"**{name}:**" if colon else f"**{name}**"


def _block(label: str, content: str) -> str:
    return f"{label}\n\n{content or '(empty)'}\n"


def _summary_label(metadata: dict, event: dict, standalone: bool) -> str:
    parts = []
    tokens = _count(metadata.get("original_tokens"))
    if standalone:
        server, tool = _text(metadata.get("server_name")), _text(metadata.get("tool_name"))
        if tool:
            parts.append(f"of {server + '.' if server else ''}{tool}")
    if tokens:
        parts.append(f"from about {tokens:,} tokens")
    if metadata.get("summarization_model"):
        parts.append(f"by {_text(metadata['summarization_model'])}")
    name = "Result (summarized for the agent" + (" " + " ".join(parts) if parts else "") + ")"
    return _label(name, event)


def _forced_label(metadata: dict) -> str:
    used, limit = metadata.get("iterations_used"), metadata.get("max_iterations")
    count = f": {used} of {limit} iterations" if used is not None and limit is not None else ""
    return f"**Forced Conclusion** (the agent reached its iteration limit{count} and was asked to conclude)\n"


def _fallback_details(metadata: dict) -> str:
    was = _text(metadata.get("original_model") or metadata.get("original_provider"))
    now = _text(metadata.get("fallback_model") or metadata.get("fallback_provider"))
    details = []
    if was and now:
        details.append(f"model {was} -> {now}")
    if metadata.get("reason"):
        details.append(f"reason: {_text(metadata['reason'])}")
    if metadata.get("error_code"):
        details.append(f"error code: {_text(metadata['error_code'])}")
    return f" ({'; '.join(details)})" if details else ""


def _mcp_result_text(detail: dict):
    """The text of an MCP interaction's result (Go stores ``{"content": ..., "is_error": ...}``);
    None when it has none."""
    result = detail.get("tool_result")
    if result is None:
        return None
    if isinstance(result, dict) and isinstance(result.get("content"), str):
        return result["content"]
    return json.dumps(result, indent=2, ensure_ascii=False)
