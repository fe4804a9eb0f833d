"""Real tarsy-bot session documents, exactly as its history API returned them.

They live beside the clone, in ``../shared/data/tarsy-bot/`` (not in the project): each
is imported (REST and import_sessions), rendered for the judge with every message, tool
call and error, and scored end to end against the fake judge LLM.
"""

import io
import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils.html import escape

from scoring import services
from scoring.judge.rendering import render_investigation
from scoring.models import AlertSession, ScoringStatus
from tests.support.factories import proxy_client, run_next_scoring
from tests.support.fake_llm import Reply
from tests.support.servers import REPO_DIR
from tests.support.judge_replies import evaluated

REAL_DIR = REPO_DIR.parent / "shared" / "data" / "tarsy-bot"
DOCUMENTS = sorted(REAL_DIR.glob("*.json"))
SESSIONS_URL = "/api/v1/sessions/"
NUL_NOTE = "NUL characters (\\u0000), which the database cannot store, replaced with U+FFFD in: "
TURN1 = evaluated("## Score breakdown\nLogical Flow: 20/25\n\n71")
TURN2 = "1. **kubernetes-server.get_events** - would have shown the eviction."

pytestmark = pytest.mark.django_db


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture
def real_documents() -> list[Path]:
    """The documents; without their folder, a failure in CI and a skip elsewhere."""
    if not REAL_DIR.is_dir():
        reason = f"the real tarsy-bot documents are missing: no folder {REAL_DIR}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return DOCUMENTS


def test_the_real_documents_are_there(real_documents):
    assert len(real_documents) >= 6


def real_document(real_documents: list[Path], prefix: str) -> Path:
    (path,) = [p for p in real_documents if p.name.startswith(prefix)]
    return path


# --- what the documents hold -------------------------------------------------------------


def executions(document: dict):
    """(stage number, stage, execution) for every agent run, in the document's order."""
    for number, stage in enumerate(document["stages"], start=1):
        yield number, stage, stage
        for child in stage.get("parallel_executions") or []:
            yield number, stage, child


def llm_calls(document: dict) -> list[dict]:
    calls = [i["details"] for _, _, e in executions(document) for i in e["llm_interactions"]]
    return calls + [i["details"] for i in document["session_level_interactions"] if i["type"] == "llm"]


def tool_calls(document: dict) -> list[dict]:
    return [
        c["details"]
        for _, _, e in executions(document)
        for c in e["mcp_communications"]
        if c["details"]["communication_type"] == "tool_call"
    ]


def result_forms(document: dict) -> list[str]:
    """Tool results as an agent's input may repeat them (shown once, above it)."""
    forms = []
    for call in tool_calls(document):
        result = call.get("tool_result")
        if result:
            forms += [json.dumps(result, indent=2), json.dumps(result, indent=2, ensure_ascii=False)]
            if isinstance(result.get("result"), str):
                forms.append(result["result"].rstrip())
    return sorted(set(forms), key=len, reverse=True)


def is_shown(content: str, rendered: str, forms: list[str]) -> bool:
    """Whether the judge reads all of a message: its text, less tool results shown elsewhere."""
    pieces = [content]
    for form in forms:
        pieces = [part for piece in pieces for part in piece.split(form)]
    return all(piece.strip() in rendered for piece in pieces)


# --- import ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem[:40])
def test_each_real_document_is_stored_through_the_rest_api_as_sent(path):
    document = load(path)
    client = proxy_client()

    created = client.post(SESSIONS_URL, document, format="json")
    assert created.status_code == 201, created.content[:500]
    stored = client.get(f"{SESSIONS_URL}{document['session_id']}/").json()

    for key in ("status", "alert_data", "final_analysis", "stages", "session_level_interactions"):
        assert stored[key] == document[key], key
    assert stored["ingest_notes"] == []


def test_import_sessions_stores_the_real_folder(real_documents):
    out, err = io.StringIO(), io.StringIO()

    call_command("import_sessions", str(REAL_DIR), stdout=out, stderr=err)

    assert out.getvalue().strip() == (
        f"unchanged: 0, created: {len(real_documents)}, updated: 0, rejected: 0; "
        f"tarsy-bot: {len(real_documents)}, tarsy-go: 0"
    )
    assert err.getvalue() == ""
    assert AlertSession.objects.count() == len(real_documents)


def test_the_real_documents_hold_failed_llm_calls_without_a_conversation(real_documents):
    """What made tarsy-bot's sessions unimportable: it stores none for a failed call."""
    failed = [call for path in real_documents for call in llm_calls(load(path)) if not call["success"]]
    assert failed
    assert all(call["conversation"] is None and call["error_message"] for call in failed)


# --- rendering ------------------------------------------------------------------------------


def rendered_document(path: Path) -> tuple[dict, str]:
    """The document as stored (PostgreSQL's jsonb orders keys its own way) and its render."""
    document = load(path)
    session, _ = services.ingest_session(document, written_by="test")
    session = AlertSession.objects.get(pk=session.pk)
    stored = dict(document, stages=session.stages)
    stored["session_level_interactions"] = session.session_level_interactions
    return stored, render_investigation(session)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem[:40])
def test_every_message_tool_call_and_error_is_rendered(path):
    document, rendered = rendered_document(path)
    forms = result_forms(document)

    for call in llm_calls(document):
        for message in (call["conversation"] or {}).get("messages", []):
            assert is_shown(message["content"], rendered, forms), message["content"][:200]
        if call["thinking_content"]:
            assert f"**Internal Reasoning:**\n\n{call['thinking_content'].rstrip()}\n" in rendered
        if not call["success"]:
            assert f"**LLM Call Failed** ({call['model_name']}): {call['error_message']}\n" in rendered
    failed = sum(1 for call in llm_calls(document) if not call["success"])
    assert rendered.count("**LLM Call Failed**") == failed
    for call in tool_calls(document):
        header = f"**Tool Call:** {call['server_name']}.{call['tool_name']}("
        assert header + json.dumps(call["tool_arguments"] or {}, ensure_ascii=False) + ")" in rendered
        if call["success"]:
            assert call["tool_result"]["result"].rstrip() in rendered
        else:
            assert f"**Error:** {call['error_message']}\n" in rendered
    for _, _, execution in executions(document):
        if execution["error_message"]:
            assert f"**Stage Error:** {execution['error_message']}\n" in rendered


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem[:40])
def test_stages_are_numbered_in_tarsy_order_with_chats_after_the_chain(path):
    document, rendered = rendered_document(path)
    # tarsy-bot lists chain stages by stage_index, then its chats: every chat has stage_index 0.
    stages = document["stages"]
    chats = [stage["chat_id"] is not None for stage in stages]
    assert chats == sorted(chats)

    headings = [f"## Stage {n}: {stage['stage_name']}\n" for n, stage in enumerate(stages, start=1)]
    positions = [rendered.index(heading) for heading in headings]
    assert positions == sorted(positions)
    for number, stage in enumerate(stages, start=1):
        if stage["chat_user_message"]:
            question = rendered.index(stage["chat_user_message"]["content"])
            assert positions[number - 1] < question
            assert question > max(p for p, chat in zip(positions, chats) if not chat)
    for number, stage, execution in executions(document):
        if any(c["details"]["communication_type"] == "tool_list" for c in execution["mcp_communications"]):
            assert f"### {execution['agent']} (Stage {number}: {stage['stage_name']})\n" in rendered


def test_a_real_chain_with_chats_renders_them_after_its_last_stage(real_documents):
    document, rendered = rendered_document(real_document(real_documents, "native_thinking"))

    assert [s["stage_index"] for s in document["stages"]] == [0, 1, 2, 0, 0]
    assert rendered.index("## Stage 3: analysis") < rendered.index("## Stage 4: Chat Response")
    assert "## Stage 5: Chat Response" in rendered


def test_a_real_cancelled_parallel_stage_shows_its_agents_were_paused_first(real_documents):
    document, rendered = rendered_document(real_document(real_documents, "cancel_session_parallel"))

    children = document["stages"][0]["parallel_executions"]
    assert [child["stage_output"]["status"] for child in children] == ["paused", "paused"]
    for child in children:
        heading = rendered.index(f"#### Agent {child['parallel_index']}: {child['agent']} (")
        status = rendered[heading:].split("\n\n")[0].split("\n")[1:]
        assert status == [
            "**Status:** cancelled",
            f"**Iteration Strategy:** {child['iteration_strategy']}",
            "**Stage Error:** Cancelled by user",
            "**Earlier State:** paused (Paused at iteration 1)",
        ]


# --- scoring -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem[:40])
def test_each_real_document_is_scored_end_to_end(path, judge_llm):
    document, rendered = rendered_document(path)
    judge_llm.push(Reply(TURN1), Reply(TURN2))

    score, created = services.score_request(session_id=document["session_id"], triggered_by="test")
    run_next_scoring()

    score.refresh_from_db()
    assert created and score.status == ScoringStatus.COMPLETED, score.error_message
    assert score.total_score == 71
    assert score.missing_tools_analysis == TURN2
    assert rendered in judge_llm.requests[0].messages[0]["content"]


# --- NUL characters ------------------------------------------------------------------------


def with_nuls(document: dict) -> dict:
    """The document with NULs where tarsy-bot's tools put them: a process's command line."""
    document["final_analysis"] = "Root cause: PID 1 runs `python\x00manage.py`."
    call = tool_calls(document)[0]
    call["tool_result"]["result"] += "\n/proc/1/cmdline: python\x00manage.py\x00runserver\x00"
    return document


def test_a_real_session_with_nul_characters_is_stored_noted_and_scored(
    real_documents, judge_llm, admin_client
):
    sent = with_nuls(load(real_document(real_documents, "parallel_replica")))
    client = proxy_client()

    created = client.post(SESSIONS_URL, sent, format="json")
    again = client.post(SESSIONS_URL, sent, format="json")

    assert (created.status_code, again.status_code) == (201, 200)
    stored = client.get(f"{SESSIONS_URL}{sent['session_id']}/").json()
    expected = json.loads(json.dumps(sent).replace("\\u0000", "\\ufffd"))
    for key in ("alert_type", "final_analysis", "alert_data", "stages", "session_level_interactions"):
        assert stored[key] == expected[key], key
    (note,) = stored["ingest_notes"]
    assert note.startswith("4 " + NUL_NOTE + "final_analysis (1), stages[0].parallel_executions[0].")
    assert note.endswith(".details.tool_result.result (3).")
    session_page = admin_client.get(reverse("scoring:session-detail", args=[sent["session_id"]]))
    admin_page = admin_client.get(reverse("admin:scoring_alertsession_change", args=[sent["session_id"]]))
    for page in (session_page, admin_page):
        assert f"<li>{escape(note)}</li>" in page.content.decode()

    judge_llm.push(Reply(TURN1), Reply(TURN2))
    score, _ = services.score_request(session_id=sent["session_id"], triggered_by="test")
    run_next_scoring()
    score.refresh_from_db()
    assert score.status == ScoringStatus.COMPLETED, score.error_message
    assert "python\ufffdmanage.py\ufffdrunserver" in judge_llm.requests[0].messages[0]["content"]
