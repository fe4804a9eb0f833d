"""A tarsy-bot session as the judge reads it: text for ``{{SESSION_CONVERSATION}}``.

Pure functions over a session in tarsy-bot's history-API shape (see docs/rendering.md).
tarsy-bot stores the whole conversation-so-far in every LLM interaction, so each stage
keeps the message threads already shown and renders only what is new. Parts are
collected in one list and joined once: a 20 MB session is never copied piecemeal.
"""

import json
from dataclasses import dataclass, field

from scoring.judge.parts import (
    SHARED_RENDERED_FIELDS,
    AgentText,
    ToolResult,
    render_final_analysis,
    render_header,
    tool_line,
)

# Tool results shorter than this are left in the agent's input as they are; longer
# ones that the input repeats verbatim are replaced by a reference to the result above.
REPEATED_RESULT_MIN_CHARS = 256
# Long messages (system prompts) repeated in a later stage are shown once.
REPEATED_MESSAGE_MIN_CHARS = 256

ROLE_LABELS = {"system": "**System Prompt:**", "user": "**Input to Agent:**", "assistant": "**Agent Response:**"}
SPECIAL_INTERACTIONS = {
    "summarization": "**Tool Result Summarization** (a separate LLM call that condensed a tool result for the agent)",
    "forced_conclusion": "**Forced Conclusion** (the agent reached its iteration limit)",
}

# What this rendering reads: the fields every source has, and its investigation.
RENDERED_FIELDS = (*SHARED_RENDERED_FIELDS, "stages", "session_level_interactions")


def rendered_values(session) -> dict:
    """The values of ``RENDERED_FIELDS``, by name."""
    return {name: getattr(session, name) for name in RENDERED_FIELDS}


def render_investigation_parts(session) -> list[str]:
    """The investigation's text in parts, to be joined with newlines; tool results are
    ``ToolResult`` parts, the agent's messages and reasoning ``AgentText`` parts."""
    out: list[str] = []
    seen_messages: dict[str, str] = {}
    stages = sorted(session.stages or [], key=_stage_order)
    render_header(session, out)
    _render_available_tools(stages, out)
    out.append("## INVESTIGATION TIMELINE\n")
    for number, stage in enumerate(stages, start=1):
        _render_stage(stage, number, out, seen_messages)
    _render_session_level(session, out, seen_messages)
    render_final_analysis(session, out)
    return out


# -- session parts ------------------------------------------------------------


def _stage_order(stage) -> tuple:
    """TARSy's own order (its history repository): chain stages by stage_index, then chats.

    Every chat stage has stage_index 0, so chats would otherwise come before the
    stages they discuss; they follow in the order they were asked (start time).
    """
    is_chat = stage.get("chat_id") is not None
    return (is_chat, stage.get("stage_index", 0), stage.get("started_at_us") or 0)


def _agent_executions(stages):
    """(stage number, stage, execution) for every agent run, parallel children included."""
    for number, stage in enumerate(stages, start=1):
        children = stage.get("parallel_executions") or []
        if children:
            for child in sorted(children, key=lambda c: c.get("parallel_index", 0)):
                yield number, stage, child
        else:
            yield number, stage, stage


def _render_available_tools(stages, out: list[str]) -> None:
    out.append("## AVAILABLE TOOLS PER AGENT\n")
    any_tools = False
    for number, stage, execution in _agent_executions(stages):
        listed = False
        lines = []
        for comm in execution.get("mcp_communications") or []:
            details = comm.get("details") or {}
            if details.get("communication_type") != "tool_list":
                continue
            listed = True
            for server, tools in (details.get("available_tools") or {}).items():
                lines.extend(tool_line(server, t) for t in tools or [])
        if listed:
            any_tools = True
            out.append(f"### {execution.get('agent')} (Stage {number}: {stage.get('stage_name')})\n")
            out.append("\n".join(lines or ["(The tool lists were empty.)"]) + "\n")
    if not any_tools:
        out.append("(No tool lists were recorded.)\n")


def _model_label(execution) -> str:
    for interaction in execution.get("llm_interactions") or []:
        details = interaction.get("details") or {}
        return f"{details.get('provider') or execution.get('llm_provider') or '?'}, {details.get('model_name') or '?'}"
    return execution.get("llm_provider") or "no LLM calls"


def _render_stage(stage, number: int, out: list[str], seen_messages: dict) -> None:
    out.append(f"## Stage {number}: {stage.get('stage_name')}\n")
    chat = stage.get("chat_user_message")
    if chat or stage.get("chat_id"):
        content = chat.get("content") if isinstance(chat, dict) else chat
        author = f" ({chat.get('author')})" if isinstance(chat, dict) and chat.get("author") else ""
        out.append(f"**Chat Follow-up Question{author}:**\n\n{content or '(not recorded)'}\n")
    children = stage.get("parallel_executions") or []
    if children:
        done = sum(1 for c in children if c.get("status") == "completed")
        out.append(f"### Parallel Execution: \"{stage.get('stage_name')}\" ({stage.get('parallel_type')}) - "
                   f"{done}/{len(children)} agents completed\n")
        _render_status(stage, out)
        for child in sorted(children, key=lambda c: c.get("parallel_index", 0)):
            out.append(f"#### Agent {child.get('parallel_index')}: {child.get('agent')} ({_model_label(child)})")
            _render_execution(child, out, f"Stage {number}, agent {child.get('parallel_index')}", seen_messages)
        return
    out.append(f"**Agent:** {stage.get('agent')} ({_model_label(stage)})")
    _render_execution(stage, out, f"Stage {number}", seen_messages)


def _render_status(execution, out: list[str]) -> None:
    lines = [f"**Status:** {execution.get('status')}"]
    if execution.get("iteration_strategy"):
        lines.append(f"**Iteration Strategy:** {execution.get('iteration_strategy')}")
    if execution.get("error_message"):
        lines.append(f"**Stage Error:** {execution.get('error_message')}")
    # A stage paused (waiting for the user) and then cancelled keeps its paused output.
    output = execution.get("stage_output")
    if isinstance(output, dict) and output.get("status") not in (None, execution.get("status")):
        summary = f" ({output['result_summary']})" if output.get("result_summary") else ""
        lines.append(f"**Earlier State:** {output.get('status')}{summary}")
    out.append("\n".join(lines) + "\n")


def _render_session_level(session, out: list[str], seen_messages: dict) -> None:
    interactions = session.session_level_interactions or []
    if not interactions and not session.final_analysis_summary:
        return
    out.append("## Executive Summary\n")
    if interactions:
        timeline = _AgentTimeline("Executive Summary", seen_messages)
        for interaction in sorted(interactions, key=lambda i: i.get("timestamp_us") or 0):
            if interaction.get("type") == "mcp":
                timeline.render_mcp(interaction, out)
            else:
                timeline.render_llm(interaction, out)
    else:
        out.append(session.final_analysis_summary.rstrip() + "\n")


# -- one agent's timeline -----------------------------------------------------


def _render_execution(execution, out: list[str], where: str, seen_messages: dict) -> None:
    _render_status(execution, out)
    events = [(i.get("timestamp_us") or 0, 0, i) for i in execution.get("llm_interactions") or []]
    events += [(c.get("timestamp_us") or 0, 1, c) for c in execution.get("mcp_communications") or []]
    events.sort(key=lambda e: (e[0], e[1]))
    timeline = _AgentTimeline(where, seen_messages)
    for _, kind, event in events:
        if kind == 0:
            timeline.render_llm(event, out)
        else:
            timeline.render_mcp(event, out)


@dataclass
class _Thread:
    messages: list
    summarization: bool


@dataclass
class _AgentTimeline:
    """One agent run's interleaved LLM and MCP events, rendering each message once."""

    where: str
    seen_messages: dict
    threads: list = field(default_factory=list)
    # Tool results shown since the last LLM call, which the next input may repeat.
    pending_results: list = field(default_factory=list)

    def render_mcp(self, comm: dict, out: list[str]) -> None:
        details = comm.get("details") or {}
        server = details.get("server_name")
        if details.get("communication_type") == "tool_list":
            if details.get("success", True):
                count = sum(len(t or []) for t in (details.get("available_tools") or {}).values())
                out.append(f"**Tool Discovery:** {server} - {count} tools (listed under AVAILABLE TOOLS PER AGENT)\n")
            else:
                out.append(f"**Tool Discovery:** {server} - FAILED: {details.get('error_message')}\n")
            return
        name = f"{server}.{details.get('tool_name')}"
        arguments = json.dumps(details.get("tool_arguments") or {}, ensure_ascii=False)
        out.append(f"**Tool Call:** {name}({arguments})")
        if not details.get("success", True):
            out.append(f"**Error:** {details.get('error_message')}\n")
            return
        result = details.get("tool_result")
        text = _result_text(result)
        out.extend(("**Result:**", "", ToolResult(text, name), ""))
        self.pending_results.append((name, result, text))

    def render_llm(self, interaction: dict, out: list[str]) -> None:
        details = interaction.get("details") or {}
        messages = (details.get("conversation") or {}).get("messages") or []
        summarization = details.get("interaction_type") == "summarization"
        new = self._new_messages(messages, summarization)
        label = SPECIAL_INTERACTIONS.get(details.get("interaction_type"))
        if label:
            out.append(label + "\n")
        thinking = details.get("thinking_content")
        for index, message in enumerate(new):
            role = message.get("role")
            if role == "assistant" and thinking and index == len(new) - 1:
                out.append(self._reasoning(thinking))
                thinking = None
            label = ROLE_LABELS.get(role, f"**{role}:**")
            text = AgentText(self._message_text(message), f"{label.strip('*:')} ({self.where})")
            out.extend((label, "", text, ""))
        if thinking:
            out.append(self._reasoning(thinking))
        if details.get("success") is False:
            out.append(f"**LLM Call Failed** ({details.get('model_name')}): {details.get('error_message')}\n")
        if not summarization:
            self.pending_results = []

    def _reasoning(self, thinking: str) -> AgentText:
        return AgentText(f"**Internal Reasoning:**\n\n{thinking.rstrip()}\n", f"Internal Reasoning ({self.where})")

    def _new_messages(self, messages: list, summarization: bool) -> list:
        """The messages of this interaction not yet shown, and the thread bookkeeping."""
        best = None
        for thread in self.threads:
            n = len(thread.messages)
            if n <= len(messages) and (best is None or n > len(best.messages)) and _same_prefix(thread.messages, messages):
                best = thread
        if best is None:
            # TARSy's examples abbreviate repeated messages ("[same system message as above]"),
            # so a newer interaction may still continue the latest thread of its kind.
            for thread in reversed(self.threads):
                if thread.summarization == summarization:
                    n = len(thread.messages)
                    if n < len(messages) and all(a.get("role") == b.get("role") for a, b in zip(thread.messages, messages)):
                        best = thread
                    break
        if best is None:
            self.threads.append(_Thread(messages, summarization))
            return messages
        start = len(best.messages)
        best.messages = messages
        return messages[start:]

    def _message_text(self, message: dict) -> str:
        content = message.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, indent=2, ensure_ascii=False)
        if len(content) >= REPEATED_MESSAGE_MIN_CHARS:
            first = self.seen_messages.get(content)
            if first is not None:
                return f"(Same message as in {first}.)"
            self.seen_messages[content] = self.where
        if message.get("role") == "user":
            content = self._refer_to_results(content)
        return content.rstrip()

    def _refer_to_results(self, content: str) -> str:
        for name, result, text in self.pending_results:
            # Every form is at least as long as the text: a shorter input cannot hold one.
            if len(text) < REPEATED_RESULT_MIN_CHARS or len(content) < len(text):
                continue
            for form in _result_forms(result, text):
                if form in content:
                    content = content.replace(form, f"[the result of {name} shown above]")
                    break
        return content


def _same_prefix(prefix: list, messages: list) -> bool:
    return all(
        a.get("role") == b.get("role") and a.get("content") == b.get("content") for a, b in zip(prefix, messages)
    )


def _result_text(result) -> str:
    if isinstance(result, dict) and set(result) == {"result"} and isinstance(result["result"], str):
        return result["result"].rstrip()
    if result in (None, {}, ""):
        return "(empty result)"
    return json.dumps(result, indent=2, ensure_ascii=False)


def _result_forms(result, text: str):
    """How an agent's input may carry a tool result verbatim (TARSy serializes it as JSON)."""
    yield json.dumps(result, indent=2)
    yield json.dumps(result, indent=2, ensure_ascii=False)
    yield text
