"""Validation of tarsy-bot session documents into AlertSession field values.

A document is what tarsy-bot's ``GET /api/v1/history/sessions/{id}`` returns. Only
what this service relies on is checked: tarsy-bot adds fields over time, so unknown
keys are accepted (and kept, inside stages and interactions). Errors are keyed by
the JSON path of the offending value (``scoring.tarsy.documents``).
"""

import json

from scoring.models import SessionStatus
from scoring.tarsy.documents import (
    DOCUMENT_ERRORS_KEY,
    DocumentCheck,
    InvalidSession,
    describe,
    finish_fields,
    json_path,
)

STATUS_ERROR = (
    "'{input}' is not a TARSy session status; expected one of: " + ", ".join(SessionStatus.values) + "."
)


def is_document(document) -> bool:
    """Whether ``document`` has the shape of a tarsy-bot session (its ``session_id``
    and ``started_at_us``), however invalid its values."""
    return isinstance(document, dict) and "session_id" in document and "started_at_us" in document


def parse_session(document) -> dict:
    """AlertSession field values from one TARSy session document.

    Raises InvalidSession listing every problem found (up to
    MAX_REPORTED_ERRORS), so that one round of fixes is usually enough.
    """
    if not isinstance(document, dict):
        raise InvalidSession(
            {DOCUMENT_ERRORS_KEY: [f"Expected a TARSy session (a JSON object), got {describe(document)}."]}
        )
    check = _BotDocumentCheck()
    fields = {
        "session_id": check.uuid_field(document, "session_id", ""),
        "alert_type": check.text(document, "alert_type", "", required=True),
        "agent_type": check.text(document, "agent_type", "") or "",
        "chain_id": check.text(document, "chain_id", "") or "",
        "status": check.status(document),
        "author": check.text(document, "author", "") or "",
        "runbook_url": check.text(document, "runbook_url", "") or "",
        "started_at_us": check.timestamp(document, "started_at_us", required=True),
        "completed_at_us": check.timestamp(document, "completed_at_us", required=False),
        "error_message": check.text(document, "error_message", ""),
        "alert_data": check.value(document, "alert_data", "", "an object"),
        "final_analysis": check.text(document, "final_analysis", ""),
        "final_analysis_summary": check.text(document, "final_analysis_summary", ""),
        "stages": check.stages(document),
        "session_level_interactions": check.session_level_interactions(document),
    }
    if check.errors:
        raise InvalidSession(check.reported_errors())
    return finish_fields(fields)


class _BotDocumentCheck(DocumentCheck):
    """The checks of a tarsy-bot document's own parts."""

    def status(self, document: dict) -> str | None:
        value = self.value(document, "status", "", "a string")
        if value is not None and value not in SessionStatus.values:
            self.fail("status", STATUS_ERROR.format(input=value[:100]))
            return None
        return value

    def stages(self, document: dict) -> list | None:
        stages = self.value(document, "stages", "", "a list")
        for index, stage in enumerate(stages or []):
            self.stage(stage, f"stages[{index}]")
        return stages

    def stage(self, stage, path: str) -> None:
        if not isinstance(stage, dict):
            self.fail(path, f"Expected a stage (an object), got {describe(stage)}.")
            return
        for key in ("execution_id", "stage_name"):
            self.text(stage, key, path, required=True)
        self.value(stage, "stage_index", path, "an integer")
        for key, kind in (("llm_interactions", "llm"), ("mcp_communications", "mcp")):
            interactions = self.value(stage, key, path, "a list")
            for index, interaction in enumerate(interactions or []):
                self.interaction(interaction, f"{path}.{key}[{index}]", kind)
        children = self.value(
            stage, "parallel_executions", path, "a list", nullable=True, what=" of child stages"
        )
        for index, child in enumerate(children or []):
            self.stage(child, f"{path}.parallel_executions[{index}]")

    def session_level_interactions(self, document: dict) -> list:
        interactions = self.value(
            document, "session_level_interactions", "", "a list", required=False, nullable=True
        )
        for index, interaction in enumerate(interactions or []):
            self.interaction(interaction, f"session_level_interactions[{index}]", kind=None)
        return interactions or []

    def interaction(self, interaction, path: str, kind: str | None) -> None:
        """An LLM interaction or MCP communication; kind None means read it from ``type``."""
        if not isinstance(interaction, dict):
            self.fail(path, f"Expected an interaction (an object), got {describe(interaction)}.")
            return
        if kind is None:
            kind = interaction.get("type")
            if kind not in ("llm", "mcp"):
                self.fail(
                    json_path(path, "type"),
                    f"Expected 'llm' or 'mcp' (the kind of interaction), got {json.dumps(kind)[:100]}.",
                )
                return
        details = self.value(
            interaction, "details", path, "an object", what=f" with the {kind.upper()} details"
        )
        if details is None:
            return
        details_path = json_path(path, "details")
        if kind == "llm":
            self.llm_details(details, details_path)
        else:
            for key in ("server_name", "communication_type"):
                self.text(details, key, details_path, required=True)

    def llm_details(self, details: dict, path: str) -> None:
        # TARSy records a failed call with a null conversation (it is set only on success).
        conversation = self.value(
            details, "conversation", path, "an object", nullable=True, what=' with a "messages" list'
        )
        if conversation is None:
            return
        messages_path = json_path(path, "conversation")
        messages = self.value(
            conversation, "messages", messages_path, "a list", what=" of {role, content} messages"
        )
        for index, message in enumerate(messages or []):
            message_path = f"{messages_path}.messages[{index}]"
            if not isinstance(message, dict):
                self.fail(
                    message_path,
                    f"Expected a message (an object with role and content), got {describe(message)}.",
                )
                continue
            self.text(message, "role", message_path, required=True)
            self.value(message, "content", message_path, "a string")
