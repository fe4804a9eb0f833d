"""What every source's rendering of a session for the judge shares: the header, the lines of
the available tools, and the parts that ``scoring.judge.fitting`` may shorten (tool results
and the agent's own texts)."""

from datetime import UTC, datetime

# The session fields every source's rendering reads (the header, the alert data through
# ``judge.rendering.render_alert_data``, the final analysis and its summary); each source adds
# the fields its investigation is kept in. Injection scanning covers them and the investigation
# digest hashes them: a field rendered and missing from a source's list fails a test.
SHARED_RENDERED_FIELDS = (
    "session_id",
    "alert_type",
    "chain_id",
    "agent_type",  # the header's, when there is no chain
    "status",
    "started_at_us",
    "completed_at_us",
    "runbook_url",
    "error_message",
    "alert_data",
    "final_analysis",
    "final_analysis_summary",
)


class Cuttable(str):
    """A part of the rendered investigation that ``scoring.judge.fitting`` may shorten, with
    what it is (``label``), for the marker and the warning of a cut."""

    label: str

    def __new__(cls, text: str, label: str):
        part = super().__new__(cls, text)
        part.label = label
        return part


class ToolResult(Cuttable):
    """A tool result's text, with the tool's name."""

    tool: str

    def __new__(cls, text: str, tool: str):
        part = super().__new__(cls, text, f"{tool} output")
        part.tool = tool
        return part


class AgentText(Cuttable):
    """A text of the agent's conversation (its input, which carries observations, a response,
    its reasoning), with what it is and where (``"Agent Response (Stage 2)"``)."""


def format_time(us) -> str:
    if us is None:
        return "-"
    return datetime.fromtimestamp(us / 1_000_000, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def render_header(session, out: list[str]) -> None:
    lines = [
        "## SESSION",
        "",
        f"**Session ID:** {session.session_id}",
        f"**Alert Type:** {session.alert_type}",
        f"**Chain:** {session.chain_id or session.agent_type}",
        f"**Status:** {session.status}",
        f"**Started:** {format_time(session.started_at_us)}",
        f"**Completed:** {format_time(session.completed_at_us)}",
    ]
    if session.started_at_us and session.completed_at_us:
        lines.append(f"**Duration:** {(session.completed_at_us - session.started_at_us) / 1_000_000:.1f}s")
    runbook = getattr(session, "runbook_url", "")
    if runbook:
        lines.append(f"**Runbook:** {runbook}")
    if session.error_message:
        lines.append(f"**Session Error:** {session.error_message}")
    out.append("\n".join(lines) + "\n")


def tool_line(server: str, tool: dict) -> str:
    """One available tool: ``- server.name(param*, other) - description`` (* marks a required
    parameter; no server for an agent's built-in tools)."""
    schema = tool.get("inputSchema") or {}
    required = set(schema.get("required") or [])
    params = ", ".join(f"{name}{'*' if name in required else ''}" for name in schema.get("properties") or {})
    prefix = f"{server}." if server else ""
    return f"- {prefix}{tool.get('name')}({params}) - {tool.get('description') or ''}".rstrip(" -")


def render_final_analysis(session, out: list[str]) -> None:
    out.append("## FINAL ANALYSIS\n")
    if session.final_analysis:
        out.append(session.final_analysis.rstrip() + "\n")
    else:
        out.append(f"(No final analysis: the session ended with status '{session.status}'.)\n")
