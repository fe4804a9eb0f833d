"""Go TARSy's session document: validation into AlertSession field values.

Go TARSy has no single answer holding a whole session, so the document is assembled from
its API's answers, each kept exactly as it came (docs/sync.md, "The Go TARSy document"):

    {"format": "tarsy-go/1",
     "session": GET /api/v1/sessions/:id,
     "timeline": GET /api/v1/sessions/:id/timeline,
     "trace": GET /api/v1/sessions/:id/trace,
     "llm_interactions": {id: GET .../trace/llm/:id, ...},
     "mcp_interactions": {id: GET .../trace/mcp/:id, ...},
     "score": GET /api/v1/sessions/:id/score, or null (404: never scored),
     "review_activity": GET /api/v1/sessions/:id/review-activity (optional)}

Only what this service relies on is checked: Go TARSy adds fields and enum values over
time (labels, compose stages, cache token counts...), so unknown keys and values are kept,
never refused. The whole document is stored (``source_document``); what every source
shares is copied to columns, with Go TARSy's own judge's score and its reviewers' verdict.
"""

from datetime import datetime

from scoring.models import AlertSession
from scoring.tarsy.documents import (
    DOCUMENT_ERRORS_KEY,
    DocumentCheck,
    InvalidSession,
    describe,
    finish_fields,
    json_path,
)

FORMAT_PREFIX = "tarsy-go/"
FORMAT = "tarsy-go/1"
# Go TARSy's stage type of its own judge's runs (ent/schema/stage.go).
SCORING_STAGE_TYPE = "scoring"
# The review activity action that records a reviewer's verdict (ent/schema/sessionreviewactivity.go).
REVIEW_COMPLETED = "complete"
# Keys of Go's GET /api/v1/sessions/:id that only that answer has: a document holding them at
# its top is that answer alone, not the assembled document.
_DETAIL_KEYS = {"id", "alert_data", "chain_id", "stages", "created_at"}
PARTIAL_DOCUMENT_ERROR = (
    "This is Go TARSy's session detail alone (GET /api/v1/sessions/:id). A Go TARSy session is "
    "imported as the document assembled from its API's answers (detail, timeline, trace, each "
    "interaction, score), which sync_sessions builds; see docs/sync.md, 'The Go TARSy document'."
)


def is_document(document) -> bool:
    """Whether ``document`` says it is a Go TARSy session document (of any version)."""
    return (
        isinstance(document, dict)
        and isinstance(document.get("format"), str)
        and document["format"].startswith(FORMAT_PREFIX)
    )


def refuse_partial_document(document) -> None:
    """Raises InvalidSession, saying what to send instead, for one of Go TARSy's answers sent
    alone (the session detail): read as a tarsy-bot document, it would fail on every field."""
    if isinstance(document, dict) and _DETAIL_KEYS <= document.keys() and "session_id" not in document:
        raise InvalidSession({DOCUMENT_ERRORS_KEY: [PARTIAL_DOCUMENT_ERROR]})


def parse_session(document) -> dict:
    """AlertSession field values from one Go TARSy session document.

    Raises InvalidSession listing every problem found, by JSON path.
    """
    if document.get("format") != FORMAT:
        raise InvalidSession(
            {
                "format": [
                    f"Unknown Go TARSy document format {str(document.get('format'))[:40]!r}; "
                    f"this service reads {FORMAT!r}."
                ]
            }
        )
    check = _GoDocumentCheck()
    session = check.value(document, "session", "", "an object") or {}
    trace = check.value(document, "trace", "", "an object")
    if trace is not None:
        check.value(trace, "stages", "trace", "a list")
    for key in ("llm_interactions", "mcp_interactions"):
        interactions = check.value(document, key, "", "an object") or {}
        for interaction_id, detail in interactions.items():
            check.interaction(detail, json_path(key, interaction_id), key)
    for index, event in enumerate(check.value(document, "timeline", "", "a list") or []):
        check.timeline_event(event, f"timeline[{index}]")
    score = check.value(document, "score", "", "an object", required=False, nullable=True)
    activity = check.value(document, "review_activity", "", "an object", required=False, nullable=True)
    created = check.time(session, "created_at", "session", required=True)
    started = check.time(session, "started_at", "session", required=False)
    fields = {
        "session_id": check.uuid_field(session, "id", "session"),
        "alert_type": check.text(session, "alert_type", "session", column="alert_type") or "",
        "agent_type": "",
        "chain_id": check.text(session, "chain_id", "session", column="chain_id") or "",
        "status": check.status(session),
        "author": check.text(session, "author", "session", column="author") or "",
        "runbook_url": check.text(session, "runbook_url", "session") or "",
        # A session that never started (cancelled while queued) has only its creation time.
        "started_at_us": started if started is not None else created,
        "completed_at_us": check.time(session, "completed_at", "session", required=False),
        "error_message": check.text(session, "error_message", "session"),
        "alert_data": check.value(session, "alert_data", "session", "a string"),
        "final_analysis": check.text(session, "final_analysis", "session"),
        "final_analysis_summary": check.text(session, "executive_summary", "session"),
        "stages": [],
        "session_level_interactions": [],
        "source_document": document,
        **check.review(session, activity),
        **check.score(score, session),
    }
    for index, stage in enumerate(check.value(session, "stages", "session", "a list") or []):
        check.stage(stage, f"session.stages[{index}]")
    if check.errors:
        raise InvalidSession(check.reported_errors())
    return finish_fields(fields)


def rfc3339_us(value) -> int | None:
    """An RFC 3339 time after 1970 (Go's time.Time in JSON) in microseconds since the Unix epoch;
    None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None or moment.year < 1970:
        return None
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


class _GoDocumentCheck(DocumentCheck):
    """The checks of a Go TARSy document's parts."""

    def text(self, obj: dict, key: str, parent: str, *, column: str | None = None) -> str | None:
        """A string, null or absent; one copied to ``column`` must fit it."""
        value = self.value(obj, key, parent, "a string", required=False, nullable=True)
        max_length = column and AlertSession._meta.get_field(column).max_length
        if value is not None and max_length and len(value) > max_length:
            self.fail(
                json_path(parent, key),
                f"Ensure this field has no more than {max_length} characters (it has {len(value)}).",
            )
            return None
        return value

    def status(self, session: dict) -> str | None:
        """Go TARSy's status as it is: a value this service does not know is kept (such a
        session cannot be scored until a sync brings one of the finished statuses)."""
        value = self.value(session, "status", "session", "a string")
        max_length = AlertSession._meta.get_field("status").max_length
        if value is not None and not 0 < len(value) <= max_length:
            self.fail("session.status", f"Expected a status of 1 to {max_length} characters.")
            return None
        return value

    def time(self, obj: dict, key: str, parent: str, *, required: bool) -> int | None:
        """An RFC 3339 time (Go's time.Time in JSON), in microseconds since the Unix epoch."""
        value = self.value(obj, key, parent, "a string", required=required, nullable=not required)
        if value is None:
            return None
        time_us = rfc3339_us(value)
        if time_us is None:
            self.fail(json_path(parent, key), f"Expected an RFC 3339 time after 1970, got {value[:60]!r}.")
        return time_us

    def stage(self, stage, path: str) -> None:
        if not isinstance(stage, dict):
            self.fail(path, f"Expected a stage (an object), got {describe(stage)}.")
            return
        self.value(stage, "id", path, "a string")
        self.value(stage, "stage_name", path, "a string")
        for index, execution in enumerate(
            self.value(stage, "executions", path, "a list", required=False, nullable=True) or []
        ):
            if not isinstance(execution, dict):
                self.fail(f"{path}.executions[{index}]", f"Expected an execution, got {describe(execution)}.")

    def timeline_event(self, event, path: str) -> None:
        if not isinstance(event, dict):
            self.fail(path, f"Expected a timeline event (an object), got {describe(event)}.")
            return
        self.value(event, "event_type", path, "a string")
        self.value(event, "content", path, "a string", required=False)
        self.value(event, "metadata", path, "an object", required=False, nullable=True)

    def interaction(self, detail, path: str, kind: str) -> None:
        if not isinstance(detail, dict):
            self.fail(path, f"Expected an interaction's detail (an object), got {describe(detail)}.")
            return
        if kind == "mcp_interactions":
            self.value(detail, "server_name", path, "a string")
            return
        messages = self.value(detail, "conversation", path, "a list", required=False, nullable=True)
        for index, message in enumerate(messages or []):
            message_path = f"{path}.conversation[{index}]"
            if not isinstance(message, dict):
                self.fail(message_path, f"Expected a message (an object), got {describe(message)}.")
                continue
            self.value(message, "role", message_path, "a string")
            self.value(message, "content", message_path, "a string")

    def review(self, session: dict, activity: dict | None) -> dict:
        """The reviewers' verdict, as copied to the session's columns; who gave it and when
        come from the review activity (its last completion), when the document has it."""
        activities = (
            self.value(activity, "activities", "review_activity", "a list", required=False, nullable=True)
            if activity is not None
            else None
        )
        completed = [
            (index, item)
            for index, item in enumerate(activities or [])
            if isinstance(item, dict) and item.get("action") == REVIEW_COMPLETED
        ]
        index, last = completed[-1] if completed else (None, {})
        reviewer = last.get("actor") if isinstance(last.get("actor"), str) else None
        reviewed_at = (
            self.time(last, "created_at", f"review_activity.activities[{index}]", required=False) if last else None
        )
        status = self.text(session, "review_status", "session", column="source_review_status") or ""
        if status == "reviewed" and reviewer is None:
            reviewer = self.text(session, "assignee", "session")
        return {
            "source_review_status": status,
            "source_quality_rating": self.text(session, "quality_rating", "session", column="source_quality_rating")
            or "",
            "source_action_taken": self.text(session, "action_taken", "session") or "",
            "source_investigation_feedback": self.text(session, "investigation_feedback", "session") or "",
            "source_reviewer": (reviewer or "")[:255],
            "source_reviewed_at_us": reviewed_at,
        }

    def score(self, score: dict | None, session: dict) -> dict:
        """Go TARSy's own judge's score, when it completed one; its model is the one its
        scoring stage ran on (the score answer does not name it)."""
        completed = score is not None and score.get("status") == "completed"
        total = self.value(score, "total_score", "score", "an integer", nullable=True) if completed else None
        if total is None:
            return {
                "source_score_total": None,
                "source_score_prompt_hash": "",
                "source_score_model": "",
                "source_score_failure_tags": [],
                "source_scored_at_us": None,
            }
        tags = self.value(score, "failure_tags", "score", "a list", required=False, nullable=True) or []
        return {
            "source_score_total": total,
            "source_score_prompt_hash": (self.text(score, "prompt_hash", "score") or "")[:64],
            "source_score_model": _scoring_model(session, score.get("stage_id"))[:255],
            "source_score_failure_tags": [tag for tag in tags if isinstance(tag, str)],
            "source_scored_at_us": self.time(score, "completed_at", "score", required=False),
        }


def _scoring_model(session: dict, stage_id) -> str:
    """The model of the scoring stage's run that made the score (the newest scoring stage
    when the score names none)."""
    stages = [
        stage
        for stage in _list(session.get("stages"))
        if isinstance(stage, dict) and stage.get("stage_type") == SCORING_STAGE_TYPE
    ]
    chosen = next((stage for stage in stages if stage.get("id") == stage_id), stages[-1] if stages else None)
    for execution in _list((chosen or {}).get("executions")):
        if isinstance(execution, dict):
            return str(execution.get("model_name") or execution.get("llm_provider") or "")
    return ""


def _list(value) -> list:
    """``value`` if it is a list, else none: a part of the wrong type is reported by the checks,
    not tripped over here."""
    return value if isinstance(value, list) else []
