"""The investigation text the judge reads (scoring.judge.rendering), on every tarsy-bot sample
session (the Go TARSy samples are rendered in tests/tarsy_go/test_rendering.py).

Regenerate the golden files after an intended format change with
``UPDATE_GOLDENS=1 .venv/bin/pytest tests/tarsy_bot/test_rendering.py`` and review the diff.
"""

import copy
import json
from pathlib import Path

import pytest

from scoring.judge.prompts import JUDGE_PROMPT_SCORE, OUTPUT_SCHEMA_SCORE, fill_placeholders
from scoring.judge.rendering import render_alert_data, render_investigation
from scoring.models import AlertSession
from tests.support.goldens import assert_matches_golden
from tests.support.samples import SAMPLES_DIR, TARSY_BOT_SAMPLES

GOLDEN_DIR = Path(__file__).resolve().parent / "golden" / "rendering"
SAMPLES = TARSY_BOT_SAMPLES
MODEL_FIELDS = {f.name for f in AlertSession._meta.get_fields()}


def load_doc(name: str) -> dict:
    return json.loads((SAMPLES_DIR / name).read_text(encoding="utf-8"))


def session_from(doc: dict) -> AlertSession:
    return AlertSession(**{f: doc[f] for f in MODEL_FIELDS if f in doc})


def render_sample(name: str) -> str:
    return render_investigation(session_from(load_doc(name)))


def executions(doc: dict):
    def walk(stages):
        for stage in stages:
            yield stage
            yield from walk(stage.get("parallel_executions") or [])

    return list(walk(doc["stages"]))


def tool_calls(doc: dict):
    return [
        c["details"]
        for e in executions(doc)
        for c in e["mcp_communications"]
        if c["details"]["communication_type"] == "tool_call"
    ]


def all_interactions(doc: dict):
    return [i for e in executions(doc) for i in e["llm_interactions"]] + doc["session_level_interactions"]


def test_there_are_enough_samples():
    assert len(SAMPLES) >= 9
    assert (SAMPLES_DIR / "00_tarsy_example.json") in SAMPLES


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_render_matches_golden(path):
    rendered = render_investigation(session_from(json.loads(path.read_text(encoding="utf-8"))))
    golden = GOLDEN_DIR / f"{path.stem}.txt"
    assert_matches_golden(rendered, golden, path.name)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_each_agent_message_is_rendered_exactly_once(path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    rendered = render_investigation(session_from(doc))
    labels = {"assistant": "**Agent Response:**", "system": "**System Prompt:**"}
    distinct = {
        (m["role"], m["content"].rstrip())
        for i in all_interactions(doc)
        for m in i["details"]["conversation"]["messages"]
        if m["role"] in labels and not m["content"].startswith("[same")
    }
    assert distinct
    for role, content in distinct:
        assert rendered.count(f"{labels[role]}\n\n{content}\n") == 1, content[:80]


def test_abbreviated_repeats_in_tarsy_example_are_not_rendered():
    rendered = render_sample("00_tarsy_example.json")
    assert "[same system message as above]" not in rendered
    assert "[same initial investigation request as above]" not in rendered
    assert rendered.count("Action: kubernetes-server.pods_log") == 1


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_every_tool_call_is_rendered_with_arguments_and_result_or_error(path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    rendered = render_investigation(session_from(doc))
    for call in tool_calls(doc):
        header = f"**Tool Call:** {call['server_name']}.{call['tool_name']}({json.dumps(call['tool_arguments'])})"
        assert header in rendered
        after = rendered[rendered.index(header) + len(header):]
        if call["success"]:
            result = call["tool_result"]
            text = result["result"] if set(result) == {"result"} else json.dumps(result, indent=2)
            assert after.startswith(f"\n**Result:**\n\n{text.rstrip()}\n")
        else:
            assert after.startswith(f"\n**Error:** {call['error_message']}\n")


def test_chats_follow_the_chain_stages_whatever_their_stage_index():
    # TARSy gives every chat stage stage_index 0 and lists it after the chain.
    chain = load_doc("02_multi_stage_chain.json")
    chat = load_doc("09_chat_followup.json")["stages"][-1]
    assert chat["stage_index"] == 0
    chain["stages"].append(chat)
    rendered = render_investigation(session_from(chain))

    last = len(chain["stages"])
    names = [stage["stage_name"] for stage in chain["stages"]]
    positions = [rendered.index(f"## Stage {n}: {name}\n") for n, name in enumerate(names, start=1)]
    assert positions == sorted(positions)
    assert f"### ChatAgent (Stage {last}: Chat Response)" in rendered
    assert positions[-1] < rendered.index(chat["chat_user_message"]["content"])


def test_available_tools_are_listed_per_agent():
    rendered = render_sample("03_parallel_agents.json")
    tools = rendered[rendered.index("## AVAILABLE TOOLS PER AGENT"):rendered.index("## INVESTIGATION TIMELINE")]
    k8s = tools[tools.index("### KubernetesAgent"):tools.index("### NetworkSecurityAgent")]
    net = tools[tools.index("### NetworkSecurityAgent"):]
    assert "- prometheus-server.query_range(query*, start*, end*, step) - " in k8s
    assert "network-server" not in k8s
    assert "- network-server.threat_intel_lookup(indicator*) - " in net
    assert "kubernetes-server" not in net


def test_parallel_agents_are_grouped_under_their_stage():
    doc = load_doc("03_parallel_agents.json")
    rendered = render_investigation(session_from(doc))
    stage1 = rendered.index("## Stage 1: investigation")
    agent1 = rendered.index("#### Agent 1: KubernetesAgent (openai-default, gpt-5)")
    agent2 = rendered.index("#### Agent 2: NetworkSecurityAgent (google-default, gemini-2.5-pro)")
    stage2 = rendered.index("## Stage 2: synthesis")
    assert stage1 < agent1 < agent2 < stage2
    assert "2/2 agents completed" in rendered[stage1:agent1]
    children = doc["stages"][0]["parallel_executions"]
    for child, (start, end) in zip(children, [(agent1, agent2), (agent2, stage2)]):
        for comm in child["mcp_communications"]:
            if comm["details"]["communication_type"] == "tool_call":
                assert f"**Tool Call:** {comm['details']['server_name']}.{comm['details']['tool_name']}(" in rendered[start:end]


@pytest.mark.parametrize("name", ["03_parallel_agents.json", "04_native_thinking.json"])
def test_thinking_content_is_rendered_before_the_response(name):
    doc = load_doc(name)
    rendered = render_investigation(session_from(doc))
    thoughts = [i["details"]["thinking_content"] for i in all_interactions(doc) if i["details"]["thinking_content"]]
    assert thoughts
    for thinking in thoughts:
        assert rendered.count(f"**Internal Reasoning:**\n\n{thinking}\n\n**Agent Response:**") == 1


def test_stages_render_in_stage_index_order():
    rendered = render_sample("02_multi_stage_chain.json")
    positions = [rendered.index(f"## Stage {n}: {name}") for n, name in
                 [(1, "data-collection"), (2, "verification"), (3, "analysis")]]
    assert positions == sorted(positions)
    assert "Previous Stage Data" in rendered[positions[1]:]


def test_system_prompt_repeated_in_a_later_stage_is_shown_once():
    rendered = render_sample("02_multi_stage_chain.json")
    assert rendered.count("## General SRE Agent Instructions") == 1
    assert "(Same message as in Stage 1.)" in rendered


def test_large_tool_result_is_shown_once_and_summarization_is_labelled():
    doc = load_doc("08_large_tool_output.json")
    log = next(c["tool_result"]["result"] for c in tool_calls(doc) if c["tool_name"] == "pods_log")
    assert len(log) > 200_000
    rendered = render_investigation(session_from(doc))
    assert rendered.count(log) == 1
    assert "**Tool Result Summarization**" in rendered
    assert "[the result of kubernetes-server.pods_log shown above]" in rendered
    summary = next(i for i in all_interactions(doc) if i["details"]["interaction_type"] == "summarization")
    assert summary["details"]["conversation"]["messages"][-1]["content"] in rendered


def test_failures_are_rendered():
    recovered = render_sample("05_failed_tool_recovery.json")
    assert "**LLM Call Failed** (gpt-5): litellm.RateLimitError" in recovered
    assert '**Error:** Failed to call tool resources_get on kubernetes-server' in recovered
    failed = render_sample("06_failed_session.json")
    assert "**Status:** failed" in failed
    assert "**Stage Error:** LLM interaction failed after retries" in failed
    assert "**Session Error:** Stage 'analysis' failed" in failed
    assert "(No final analysis: the session ended with status 'failed'.)" in failed


def test_in_progress_session_has_no_final_analysis():
    doc = load_doc("07_in_progress.json")
    assert doc["completed_at_us"] is None
    rendered = render_investigation(session_from(doc))
    assert "**Completed:** -" in rendered
    assert rendered.rstrip().endswith("(No final analysis: the session ended with status 'in_progress'.)")


def test_chat_follow_up_is_rendered_as_its_own_stage():
    rendered = render_sample("09_chat_followup.json")
    chat = rendered.index("## Stage 2: Chat Response")
    assert rendered.index("**Chat Follow-up Question (maria.lopez):**") > chat
    assert "Which zone are the volumes in, and do we have room there?" in rendered[chat:]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_final_analysis_and_executive_summary_are_rendered(path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    rendered = render_investigation(session_from(doc))
    if doc["final_analysis"]:
        assert rendered.endswith(f"## FINAL ANALYSIS\n\n{doc['final_analysis'].rstrip()}\n")
    if doc["final_analysis_summary"]:
        summary = rendered[rendered.index("## Executive Summary"):rendered.index("## FINAL ANALYSIS")]
        assert doc["final_analysis_summary"] in summary


def test_placeholder_like_text_in_session_data_survives_render_and_prompt():
    doc = copy.deepcopy(load_doc("01_single_stage_react.json"))
    planted = "config: {{ALERT_DATA}} and {{SESSION_CONVERSATION}} and {{OUTPUT_SCHEMA}}"
    call = next(c for c in doc["stages"][0]["mcp_communications"] if c["details"]["communication_type"] == "tool_call")
    call["details"]["tool_result"] = {"result": planted}
    doc["alert_data"]["message"] = "literal {{SESSION_CONVERSATION}} in the alert"
    session = session_from(doc)
    rendered = render_investigation(session)
    alert_text = render_alert_data(session.alert_data)
    assert planted in rendered
    prompt = fill_placeholders(
        JUDGE_PROMPT_SCORE,
        {"SESSION_CONVERSATION": rendered, "ALERT_DATA": alert_text, "OUTPUT_SCHEMA": OUTPUT_SCHEMA_SCORE},
    )
    assert planted in prompt
    assert prompt.count(rendered) == 1
    assert prompt.count(alert_text) == 1
    assert "literal {{SESSION_CONVERSATION}} in the alert" in prompt


def test_render_alert_data_is_indented_json_keeping_non_ascii():
    text = render_alert_data({"message": "Größe überschritten", "labels": {"team": "ops"}})
    assert text == '{\n  "message": "Größe überschritten",\n  "labels": {\n    "team": "ops"\n  }\n}'
