"""TARSy session documents and API clients for the sessions tests.

Documents follow TARSy's ``GET /api/v1/history/sessions/{id}`` shape, trimmed
to one stage with one LLM interaction and one MCP communication, plus the
executive-summary interaction at session level.
"""

import copy
import uuid

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

STARTED_AT_US = 1_767_225_600_000_000


def llm_interaction(stage_execution_id: str | None, messages: list[dict] | None = None) -> dict:
    interaction_id = str(uuid.uuid4())
    return {
        "id": interaction_id,
        "event_id": interaction_id,
        "type": "llm",
        "timestamp_us": STARTED_AT_US + 2_000_000,
        "step_description": "LLM analysis using gpt-5",
        "duration_ms": 9000,
        "stage_execution_id": stage_execution_id,
        "details": {
            "interaction_id": interaction_id,
            "success": True,
            "model_name": "gpt-5",
            "provider": "openai-default",
            "input_tokens": 2100,
            "output_tokens": 95,
            "interaction_type": "investigation",
            "conversation": {
                "messages": messages
                or [
                    {"role": "system", "content": "You are an expert Site Reliability Engineer."},
                    {"role": "user", "content": "Namespace 'stuck-namespace' is stuck in Terminating."},
                    {"role": "assistant", "content": "Thought: check the namespace finalizers."},
                ]
            },
        },
    }


def mcp_communication(stage_execution_id: str) -> dict:
    communication_id = str(uuid.uuid4())
    return {
        "id": communication_id,
        "event_id": communication_id,
        "type": "mcp",
        "timestamp_us": STARTED_AT_US + 3_000_000,
        "step_description": "Call resources_get on kubernetes-server",
        "duration_ms": 420,
        "stage_execution_id": stage_execution_id,
        "details": {
            "tool_name": "resources_get",
            "server_name": "kubernetes-server",
            "communication_type": "tool_call",
            "tool_arguments": {"apiVersion": "v1", "kind": "Namespace", "name": "stuck-namespace"},
            "tool_result": {"result": "finalizers: [kubernetes]"},
            "available_tools": {},
            "success": True,
            "error_message": None,
        },
    }


def stage(
    stage_index: int = 0, stage_name: str = "analysis", parallel_executions: list | None = None
) -> dict:
    execution_id = str(uuid.uuid4())
    return {
        "execution_id": execution_id,
        "stage_id": f"{stage_name}_{stage_index}",
        "stage_index": stage_index,
        "stage_name": stage_name,
        "agent": "KubernetesAgent",
        "status": "completed",
        "started_at_us": STARTED_AT_US + 1_000_000,
        "completed_at_us": STARTED_AT_US + 38_500_000,
        "parallel_type": "single" if parallel_executions is None else "multi_agent",
        "parallel_executions": parallel_executions,
        "llm_interactions": [llm_interaction(execution_id)],
        "mcp_communications": [mcp_communication(execution_id)],
        "stage_output": {"status": "completed", "final_analysis": "Orphaned 'kubernetes' finalizer."},
    }


def session_document(session_id: uuid.UUID | str | None = None, **overrides) -> dict:
    """A valid TARSy session document; ``overrides`` replace top-level keys."""
    document = {
        "session_id": str(session_id or uuid.uuid4()),
        "alert_type": "kubernetes",
        "agent_type": "chain:kubernetes-agent-chain",
        "status": "completed",
        "author": "alice",
        "runbook_url": "https://runbooks.example.com/k8s-namespace-terminating.md",
        "started_at_us": STARTED_AT_US,
        "completed_at_us": STARTED_AT_US + 41_600_000,
        "duration_ms": 41600,
        "error_message": None,
        "alert_data": {"severity": "high", "namespace": "stuck-namespace", "alert": "NamespaceTerminating"},
        "final_analysis": "# Alert Analysis Report\n\nRemove the orphaned finalizer.",
        "final_analysis_summary": "Namespace stuck on an orphaned finalizer.",
        "chain_id": "kubernetes-agent-chain",
        "session_total_tokens": 8370,
        "stages": [stage()],
        "session_level_interactions": [llm_interaction(None)],
    }
    document.update(copy.deepcopy(overrides))
    return document


@pytest.fixture
def api_client(db):
    """A client signed in through Django's session login."""
    client = APIClient()
    client.force_login(get_user_model().objects.create_user(username="operator"))
    return client
