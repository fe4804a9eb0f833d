"""A Go TARSy session as the judge reads it (placeholder until the rendering lands)."""

from scoring.judge.parts import render_header

RENDERED_FIELDS = (
    "session_id",
    "alert_type",
    "chain_id",
    "status",
    "started_at_us",
    "completed_at_us",
    "runbook_url",
    "error_message",
    "alert_data",
    "final_analysis",
    "final_analysis_summary",
    "source_document",
)


def rendered_values(session) -> dict:
    return {name: getattr(session, name) for name in RENDERED_FIELDS}


def render_investigation_parts(session) -> list[str]:
    out: list[str] = []
    render_header(session, out)
    out.append("## FINAL ANALYSIS\n")
    out.append((session.final_analysis or "").rstrip() + "\n")
    return out
