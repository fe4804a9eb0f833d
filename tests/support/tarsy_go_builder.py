"""Go TARSy session documents ("tarsy-go/1") for tests, built up in Go's API shapes.

``GoSession`` records stages, agent executions (sub-agents under their orchestrator),
timeline events and LLM / MCP interactions, and ``document()`` assembles what Go's API
would answer: the session detail (``models.SessionDetailResponse``, stages with their
``executions`` and ``sub_agents``), the timeline (``ent.TimelineEvent`` list), the trace
(``models.TraceListResponse``) and each interaction's detail by id.
"""

import copy
import uuid
from datetime import UTC, datetime, timedelta

from scoring.models import AlertSession, SessionSource

STARTED_AT = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _us(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


class GoSession:
    def __init__(
        self,
        *,
        status="completed",
        alert_data="test alert data",
        alert_type="test-alert",
        chain_id="test-chain",
        author="test-user",
        final_analysis=None,
        executive_summary=None,
        error_message=None,
        runbook_url=None,
    ):
        self.session_id = str(uuid.uuid4())
        self.detail = {
            "id": self.session_id,
            "alert_data": alert_data,
            "alert_type": alert_type,
            "status": status,
            "chain_id": chain_id,
            "author": author,
            "error_message": error_message,
            "final_analysis": final_analysis,
            "executive_summary": executive_summary,
            "executive_summary_error": None,
            "runbook_url": runbook_url,
            "created_at": _iso(STARTED_AT),
            "started_at": _iso(STARTED_AT),
            "completed_at": _iso(STARTED_AT + timedelta(minutes=3)),
            "review_status": "needs_review",
            "assignee": None,
            "quality_rating": None,
            "action_taken": None,
            "investigation_feedback": None,
            "feedback_edited": False,
            "feedback_edited_by": None,
            "feedback_edited_at": None,
            "latest_score": None,
            "scoring_status": None,
            "score_id": None,
        }
        self.stages: list[dict] = []
        self.executions: dict[str, dict] = {}  # execution id -> its overview
        self.trace_groups: dict[str, dict] = {}  # execution id -> its trace group
        self.timeline: list[dict] = []
        self.llm: dict[str, dict] = {}
        self.mcp: dict[str, dict] = {}
        self.score = None
        self._clock = STARTED_AT
        self._sequence: dict = {}

    def _tick(self) -> str:
        self._clock += timedelta(milliseconds=250)
        return _iso(self._clock)

    def stage(
        self,
        name,
        index,
        stage_type="investigation",
        *,
        status="completed",
        referenced=None,
        parallel_type=None,
    ) -> dict:
        stage = {
            "id": str(uuid.uuid4()),
            "stage_name": name,
            "stage_index": index,
            "stage_type": stage_type,
            "status": status,
            "parallel_type": parallel_type,
            "expected_agent_count": 1,
            "started_at": None,
            "completed_at": None,
            "executions": [],
        }
        if referenced is not None:
            stage["referenced_stage_id"] = referenced["id"]
        self.stages.append(stage)
        return stage

    def execution(
        self,
        stage,
        agent_name,
        agent_index=1,
        *,
        status="completed",
        backend="langchain",
        provider=None,
        model=None,
        parent=None,
        task=None,
        error=None,
        **extra,
    ) -> dict:
        execution = {
            "execution_id": str(uuid.uuid4()),
            "agent_name": agent_name,
            "agent_index": agent_index,
            "status": status,
            "llm_backend": backend,
            "llm_provider": provider,
            "started_at": self._tick(),
            "completed_at": None,
            "duration_ms": None,
            "error_message": error,
            "input_tokens": 0,
            "output_tokens": 0,
            "total_tokens": 0,
            **extra,
        }
        if model is not None:
            execution["model_name"] = model
        group = {
            "execution_id": execution["execution_id"],
            "agent_name": agent_name,
            "llm_interactions": [],
            "mcp_interactions": [],
        }
        if parent is None:
            stage["executions"].append(execution)
        else:
            execution["parent_execution_id"] = parent["execution_id"]
            if task is not None:
                execution["task"] = task
            parent.setdefault("sub_agents", []).append(execution)
            self.trace_groups[parent["execution_id"]].setdefault("sub_agents", []).append(group)
        execution["_stage_id"] = stage["id"]
        self.executions[execution["execution_id"]] = execution
        self.trace_groups[execution["execution_id"]] = group
        stage["expected_agent_count"] = len(stage["executions"])
        return execution

    def event(
        self, execution, event_type, content, metadata=None, *, sequence=None, status="completed"
    ) -> dict:
        """A timeline event of ``execution`` (None: a session-level event)."""
        key = execution["execution_id"] if execution else None
        if sequence is None:
            sequence = self._sequence.get(key, 0) + 1
        self._sequence[key] = max(self._sequence.get(key, 0), sequence)
        moment = self._tick()
        event = {
            "id": str(uuid.uuid4()),
            "session_id": self.session_id,
            "sequence_number": sequence,
            "created_at": moment,
            "updated_at": moment,
            "event_type": event_type,
            "status": status,
            "content": content,
            "metadata": metadata if metadata is not None else {},
            "edges": {},
        }
        if execution is not None:
            event["stage_id"] = execution["_stage_id"]
            event["execution_id"] = execution["execution_id"]
            if execution.get("parent_execution_id"):
                event["parent_execution_id"] = execution["parent_execution_id"]
        self.timeline.append(event)
        return event

    def llm_call(
        self,
        execution,
        interaction_type="iteration",
        *,
        conversation=(),
        thinking=None,
        error=None,
        model="test-model",
    ) -> str:
        interaction_id = str(uuid.uuid4())
        moment = self._tick()
        item = {
            "id": interaction_id,
            "interaction_type": interaction_type,
            "model_name": model,
            "input_tokens": 10,
            "output_tokens": 5,
            "total_tokens": 15,
            "duration_ms": 100,
            "created_at": moment,
        }
        if error is not None:
            item["error_message"] = error
        self.trace_groups[execution["execution_id"]]["llm_interactions"].append(item)
        detail = {
            **item,
            "llm_request": {"messages_count": len(conversation)},
            "llm_response": {},
            "conversation": [dict(m) for m in conversation],
        }
        if thinking is not None:
            detail["thinking_content"] = thinking
        self.llm[interaction_id] = detail
        return interaction_id

    def mcp_call(
        self,
        execution,
        interaction_type="tool_call",
        *,
        server="test-mcp",
        tool=None,
        arguments=None,
        result=None,
        available_tools=None,
        error=None,
    ) -> str:
        interaction_id = str(uuid.uuid4())
        item = {
            "id": interaction_id,
            "interaction_type": interaction_type,
            "server_name": server,
            "created_at": self._tick(),
        }
        if tool is not None:
            item["tool_name"] = tool
        if error is not None:
            item["error_message"] = error
        self.trace_groups[execution["execution_id"]]["mcp_interactions"].append(item)
        detail = dict(item)
        if arguments is not None:
            detail["tool_arguments"] = arguments
        if result is not None:
            detail["tool_result"] = {"content": result, "is_error": False}
        if available_tools is not None:
            detail["available_tools"] = available_tools
        self.mcp[interaction_id] = detail
        return interaction_id

    def document(self) -> dict:
        stages = copy.deepcopy(self.stages)
        for stage in stages:
            for execution in _walk(stage["executions"]):
                execution.pop("_stage_id", None)
        trace_stages = []
        for stage in self.stages:
            trace_stages.append(
                {
                    "stage_id": stage["id"],
                    "stage_name": stage["stage_name"],
                    "stage_type": stage["stage_type"],
                    **(
                        {"referenced_stage_id": stage["referenced_stage_id"]}
                        if "referenced_stage_id" in stage
                        else {}
                    ),
                    "executions": [
                        copy.deepcopy(self.trace_groups[e["execution_id"]]) for e in stage["executions"]
                    ],
                }
            )
        return {
            "format": "tarsy-go/1",
            "session": {**copy.deepcopy(self.detail), "stages": stages, "total_stages": len(stages)},
            "timeline": sorted(copy.deepcopy(self.timeline), key=lambda e: e["sequence_number"]),
            "trace": {"stages": trace_stages, "session_interactions": []},
            "llm_interactions": copy.deepcopy(self.llm),
            "mcp_interactions": copy.deepcopy(self.mcp),
            "score": copy.deepcopy(self.score),
        }


def _walk(executions):
    for execution in executions:
        yield execution
        yield from _walk(execution.get("sub_agents") or [])


def alert_session(document: dict) -> AlertSession:
    """An unsaved AlertSession of a Go TARSy document, its shared columns filled as ingest fills them."""
    detail = document["session"]

    def us(value):
        return _us(datetime.fromisoformat(value)) if value else None

    return AlertSession(
        session_id=detail["id"],
        source=SessionSource.TARSY_GO,
        alert_type=detail.get("alert_type") or "",
        chain_id=detail.get("chain_id") or "",
        status=detail["status"],
        author=detail.get("author") or "",
        runbook_url=detail.get("runbook_url") or "",
        started_at_us=us(detail.get("started_at")),
        completed_at_us=us(detail.get("completed_at")),
        error_message=detail.get("error_message"),
        alert_data=detail.get("alert_data") or "",
        final_analysis=detail.get("final_analysis"),
        final_analysis_summary=detail.get("executive_summary"),
        source_document=document,
    )
