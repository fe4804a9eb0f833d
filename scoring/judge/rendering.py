"""A session as the judge reads it, whatever its source: text for ``{{SESSION_CONVERSATION}}``.

Each source renders its own document (``scoring.tarsy_bot.rendering``,
``scoring.tarsy_go.rendering``, docs/rendering.md); this module picks the one of a
session's source, and hashes what the judge reads.
"""

import hashlib
import json
import uuid

from scoring.models import SessionSource
from scoring.tarsy_bot import rendering as tarsy_bot_rendering
from scoring.tarsy_go import rendering as tarsy_go_rendering

_RENDERERS = {SessionSource.TARSY_BOT: tarsy_bot_rendering, SessionSource.TARSY_GO: tarsy_go_rendering}


def _renderer(session):
    return _RENDERERS[session.source]


def rendered_fields(source: str) -> tuple[str, ...]:
    """The session fields whose values the judge reads, for a session of ``source``."""
    return _RENDERERS[source].RENDERED_FIELDS


def rendered_values(session) -> dict:
    """What of the session reaches the judge prompt, by field name: the investigation
    digest hashes it and the injection scan reads it."""
    return _renderer(session).rendered_values(session)


def investigation_digest(session) -> str:
    """SHA-256 of the canonical JSON of ``rendered_values``: what the judge reads.

    The rendering's input rather than its text, so that a change to this service's
    renderer does not make every stored session look changed.
    """
    values = rendered_values(session)
    values["session_id"] = str(uuid.UUID(str(values["session_id"])))
    canonical = json.dumps(values, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def render_alert_data(alert_data) -> str:
    """The alert as sent to TARSy: a JSON object (tarsy-bot) shown as JSON, a text
    (Go TARSy keeps the alert as the text its sender posted) shown as it is."""
    if isinstance(alert_data, str):
        return alert_data
    return json.dumps(alert_data, indent=2, ensure_ascii=False)


def render_investigation(session) -> str:
    return "\n".join(render_investigation_parts(session))


def render_investigation_parts(session) -> list[str]:
    """The investigation's text in parts, to be joined with newlines; tool results are
    ``judge.parts.ToolResult`` parts."""
    return _renderer(session).render_investigation_parts(session)
