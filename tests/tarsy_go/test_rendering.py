"""The investigation text the judge reads of a Go TARSy session (scoring.tarsy_go.rendering).

Go TARSy's own judge is given a text built from the same data (its
pkg/queue/investigation_context.go); its six reference cases are in
``../shared/data/tarsy-go/judge-context-golden/``. Each case is rebuilt here as a
"tarsy-go/1" document with the inputs of Go's test (pkg/queue/scoring_executor_integration_test.go),
and every fact of Go's text must be in ours, in the same order. Our own Go TARSy samples
(scoring/samples/) are rendered against golden files in ``golden/rendering/``.
"""

import copy
import json
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scoring.judge import conversation
from scoring.judge.parts import ToolResult
from scoring.judge.rendering import investigation_digest, render_alert_data, render_investigation
from scoring.models import AlertSession
from scoring.tarsy_go import rendering
from tests.support.goldens import assert_matches_golden
from tests.support.samples import TARSY_GO_SAMPLES, load, unsaved_session
from tests.support.servers import REPO_DIR
from tests.support.tarsy_go_builder import GoSession, alert_session

GOLDEN_DIR = REPO_DIR.parent / "shared" / "data" / "tarsy-go" / "judge-context-golden"


def render(go: GoSession) -> str:
    return render_investigation(alert_session(go.document()))


def parts_of(go: GoSession) -> list[str]:
    return rendering.render_investigation_parts(alert_session(go.document()))


# --- Go's six cases, with the inputs of Go's tests ---------------------------------------------


def case_filters_stage_types() -> GoSession:
    go = GoSession()
    for name, index, stage_type in [
        ("Investigation", 0, "investigation"),
        ("Action", 1, "action"),
        ("Chat", 2, "chat"),
        ("Exec Summary", 3, "exec_summary"),
        ("Previous Scoring", 4, "scoring"),
    ]:
        # Go's test leaves the stage's and the execution's status at their default, pending.
        stage = go.stage(name, index, stage_type, status="pending")
        go.execution(stage, "test-agent", 1, status="pending")
    return go


def case_timeline_events() -> GoSession:
    go = GoSession()
    stage = go.stage("investigation", 0, status="pending")
    investigator = go.execution(stage, "Investigator", 1)
    go.event(investigator, "llm_thinking", "Analyzing pod metrics for anomalies")
    go.event(
        investigator,
        "llm_tool_call",
        "pod-1 Running, pod-2 CrashLoopBackOff",
        {"server_name": "k8s", "tool_name": "get_pods", "arguments": '{"namespace":"prod"}'},
    )
    go.event(investigator, "final_analysis", "Root cause: pod-2 is OOMKilled")
    return go


def case_parallel_with_synthesis() -> GoSession:
    go = GoSession()
    stage = go.stage("parallel-investigation", 0, status="pending")
    go.event(go.execution(stage, "LogAnalyzer", 1), "final_analysis", "Log analysis: detected OOM events")
    go.event(go.execution(stage, "MetricsChecker", 2), "final_analysis", "Memory usage at 98%, CPU normal")
    synthesis = go.stage("synthesis", 1, "synthesis", status="pending", referenced=stage)
    go.event(
        go.execution(synthesis, "Synthesizer", 1),
        "final_analysis",
        "Combined: OOM + high memory confirm memory leak",
    )
    return go


def case_executive_summary() -> GoSession:
    go = GoSession()
    go.execution(go.stage("investigation", 0, status="pending"), "Investigator", 1)
    go.event(None, "executive_summary", "Overall: memory leak in pod-2 caused cascading failures")
    return go


def case_orchestrated_stage() -> GoSession:
    go = GoSession()
    stage = go.stage("orchestrated-investigation", 0, status="pending")
    orchestrator = go.execution(stage, "Orchestrator", 1)
    go.event(orchestrator, "final_analysis", "Orchestrator conclusion: delegated to sub-agents")
    log_worker = go.execution(stage, "LogWorker", 2, parent=orchestrator, task="Analyze pod logs")
    go.event(log_worker, "final_analysis", "Sub-agent found: OOM in pod-2 logs")
    resource_worker = go.execution(
        stage, "ResourceWorker", 3, parent=orchestrator, task="Check resource limits"
    )
    go.event(resource_worker, "final_analysis", "Resource limits: memory limit 512Mi too low")
    return go


def case_full_pipeline() -> GoSession:
    go = GoSession()
    investigation = go.stage("investigation", 0, status="pending")
    for name, index, analysis in [
        ("Investigator", 1, "Found OOM events"),
        ("MetricsChecker", 2, "Memory at 98%"),
    ]:
        go.event(go.execution(investigation, name, index), "final_analysis", analysis)
    for name, index, stage_type, agent, analysis, referenced in [
        ("synthesis", 1, "synthesis", "Synthesizer", "Confirmed memory leak", investigation),
        ("remediation", 2, "action", "Remediator", "Restarted pod-2 successfully", None),
        ("exec-summary", 3, "exec_summary", "ExecSummaryAgent", "Investigation complete", None),
        ("chat", 4, "chat", "ChatAgent", "Chat response here", None),
        ("scoring", 5, "scoring", "ScoringAgent", "Old score: 70", None),
    ]:
        stage = go.stage(name, index, stage_type, status="pending", referenced=referenced)
        go.event(go.execution(stage, agent, 1), "final_analysis", analysis)
    go.event(None, "executive_summary", "Executive: memory leak caused cascading pod failures")
    return go


CASES = {
    "context_filters_stage_types": case_filters_stage_types,
    "context_timeline_events": case_timeline_events,
    "context_parallel_with_synthesis": case_parallel_with_synthesis,
    "context_executive_summary": case_executive_summary,
    "context_orchestrated_stage": case_orchestrated_stage,
    "context_full_pipeline": case_full_pipeline,
}

# Go shows an execution's status as a session status: pending and active become in_progress.
GO_TERMINAL = ("completed", "failed", "cancelled", "timed_out")


def go_facts(golden: str) -> list[str]:
    """A pattern for each fact of Go's judge context, in Go's order: each stage's name,
    each agent with its backend and model, each status, each line of each event, the
    synthesis result and the executive summary. The alert (ours goes in {{ALERT_DATA}})
    and Go's decorations are left out."""
    lines = golden.split("\n")
    facts = []
    for line in lines[lines.index("## INVESTIGATION TIMELINE") + 1 :]:
        if not line.strip() or line[0] in "═📋" or line.startswith("<!-- PARALLEL_RESULTS_"):
            continue
        if match := re.fullmatch(r"## Stage \d+: (.+)", line):
            # Ours numbers every stage it shows (synthesis and chat too): names and order count.
            facts.append(rf"^## Stage \d+: {re.escape(match[1])}$")
        elif match := re.fullmatch(r"\*\*Agent:\*\* (.+)|#### Agent \d+: (.+)", line):
            # Ours shows a sub-agent under its orchestrator rather than beside it.
            agent = re.escape(match[1] or match[2])
            shown_as = (
                rf"\*\*Agent:\*\* {agent}",
                rf"#+ Agent \d+: {agent}",
                rf"#+ Sub-agent \d+ of .+: {agent}",
            )
            facts.append(rf"^({'|'.join(shown_as)})$")
        elif match := re.fullmatch(r"\*\*Status\*\*: (\w+)", line):
            shown = match[1]
            ours = re.escape(shown) if shown in GO_TERMINAL else rf"(?!{'|'.join(GO_TERMINAL)})\w+"
            facts.append(rf"^\*\*Status:\*\* {ours}$")
        elif line.startswith("### Parallel Investigation: "):
            continue  # its count of agents that succeeded follows from each agent's status, checked
        elif line == "### Synthesis Result":
            facts.append(r"^\*\*Stage Type:\*\* synthesis")
        else:
            facts.append(rf"^{re.escape(line)}$")
    return facts


def missing_facts(facts: list[str], rendered: str) -> list[str]:
    """The facts not found in ``rendered`` after the ones before them."""
    missing, position = [], 0
    for fact in facts:
        match = re.compile(fact, re.MULTILINE).search(rendered, position)
        if match is None:
            missing.append(fact)
        else:
            position = match.end()
    return missing


def golden(name: str) -> str:
    return (GOLDEN_DIR / f"{name}.golden").read_text(encoding="utf-8")


def test_every_case_of_go_has_its_golden_and_nothing_else():
    assert sorted(p.stem for p in GOLDEN_DIR.glob("context_*.golden")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_fact_of_go_judge_context_is_in_ours_in_order(name):
    text = golden(name)
    facts = go_facts(text)
    assert len(facts) >= 5
    rendered = render(CASES[name]())
    assert missing_facts(facts, rendered) == []
    # The alert, first in Go's text, is the prompt's {{ALERT_DATA}}.
    alert = text.split("## ORIGINAL ALERT\n\n", 1)[1].split("\n\n", 1)[0]
    assert render_alert_data(alert_session(CASES[name]().document()).alert_data) == alert


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fact_check_fails_when_a_fact_is_missing_or_out_of_order(name):
    facts = go_facts(golden(name))
    rendered = render(CASES[name]())
    stages = re.findall(r"^## Stage \d+: .+\n", rendered, re.MULTILINE)
    event_lines = [f for f in facts if not f.startswith(("^## Stage", "^(\\*\\*Agent", "^\\*\\*Status"))]
    dropped = rendered.replace(re.sub(r"\\(.)", r"\1", event_lines[-1][1:-1]) + "\n", "", 1)
    assert missing_facts(facts, dropped)
    if len(stages) > 1:
        swapped = rendered.replace(stages[0], "\0").replace(stages[1], stages[0]).replace("\0", stages[1])
        assert missing_facts(facts, swapped)


def test_what_go_leaves_out_ours_shows_and_scoring_stays_out():
    rendered = render(case_full_pipeline())
    # The synthesis stage is shown with its agent; the chat after the stages it discusses.
    assert "**Stage Type:** synthesis (of Stage 1: investigation)" in rendered
    assert (
        rendered.index("Executive: memory leak")
        > rendered.index("Chat response here")
        > rendered.index("Investigation complete")
    )
    assert "Old score: 70" not in rendered
    assert "ScoringAgent" not in rendered
    assert "scoring" not in re.findall(r"^\*\*Stage Type:\*\* (\w+)", rendered, re.MULTILINE)
    filtered = render(case_filters_stage_types())
    assert "Previous Scoring" not in filtered


# --- Scoring stages, reviews and scores never reach the judge ------------------------------------


def scored_session() -> GoSession:
    """A session Go TARSy's judge scored and its reviewers reviewed, with marked texts everywhere."""
    go = GoSession(final_analysis="Pod-1 is OOMKilled.")
    stage = go.stage("investigation", 1)
    investigator = go.execution(stage, "Investigator", 1, model="test-model")
    go.event(investigator, "llm_response", "Checking pods.")
    go.event(investigator, "final_analysis", "Pod-1 is OOMKilled.")
    reflection = go.stage("Reflection", 2, "scoring")
    scorer = go.execution(reflection, "ScoringAgent", 1)
    go.event(scorer, "llm_response", "JUDGED-BEFORE-VERDICT: the investigation deserves 75")
    go.event(
        scorer,
        "final_analysis",
        "JUDGED-BEFORE-MEMORY: remember this",
        {"interaction_type": "memory_extraction"},
    )
    go.llm_call(
        scorer, "scoring", conversation=[{"role": "assistant", "content": "JUDGED-BEFORE-VERDICT 75"}]
    )
    go.mcp_call(scorer, "tool_list", available_tools=[{"name": "JUDGED-BEFORE-TOOL", "description": "x"}])
    reflector = go.execution(reflection, "FeedbackReflector", 2)
    go.llm_call(
        reflector,
        "memory_extraction",
        conversation=[{"role": "assistant", "content": "JUDGED-BEFORE-MEMORY"}],
    )
    go.score = {"total_score": 75, "score_analysis": "JUDGED-BEFORE-VERDICT analysis", "status": "completed"}
    go.detail.update(
        latest_score=75,
        scoring_status="completed",
        score_id="s-1",
        review_status="reviewed",
        quality_rating="accurate",
        action_taken="JUDGED-BEFORE-REVIEW restarted",
        investigation_feedback="JUDGED-BEFORE-REVIEW good",
        assignee="maria",
    )
    return go


def test_scoring_stages_reviews_and_scores_never_reach_the_prompt():
    go = scored_session()
    document = go.document()
    document["review_activity"] = {"activities": [{"note": "JUDGED-BEFORE-REVIEW note"}]}
    # A scoring started between two of the requests: its stage is not in the session's list.
    late = copy.deepcopy(document["timeline"][0])
    late.update(stage_id="late-stage", execution_id="late-execution", content="JUDGED-BEFORE-VERDICT late")
    document["timeline"].append(late)
    session = alert_session(document)
    prompt = conversation.build_score_prompt(session, boundary_token="t" * 16)
    assert "Checking pods." in prompt
    assert "JUDGED-BEFORE" not in prompt
    assert "ScoringAgent" not in prompt and "FeedbackReflector" not in prompt and "Reflection" not in prompt
    assert "JUDGED-BEFORE" not in json.dumps(rendering.rendered_values(session), default=str)


def test_a_review_or_a_score_added_later_does_not_change_the_digest():
    go = GoSession(final_analysis="Pod-1 is OOMKilled.")
    stage = go.stage("investigation", 1)
    investigator = go.execution(stage, "Investigator", 1)
    go.event(investigator, "final_analysis", "Pod-1 is OOMKilled.")
    go.mcp_call(investigator, "tool_list", available_tools=[{"name": "get_pods", "description": "pods"}])
    before = investigation_digest(alert_session(go.document()))

    reflection = go.stage("Reflection", 2, "scoring")
    scorer = go.execution(reflection, "ScoringAgent", 1)
    go.event(scorer, "llm_response", "Score: 75")
    go.llm_call(scorer, "scoring", conversation=[{"role": "assistant", "content": "75"}])
    go.score = {"total_score": 75}
    go.detail.update(
        latest_score=75,
        scoring_status="completed",
        score_id="s-1",
        review_status="reviewed",
        quality_rating="accurate",
        action_taken="restarted",
        investigation_feedback="good",
        assignee="maria",
        feedback_edited=True,
        feedback_edited_by="maria",
        feedback_edited_at="2026-03-03T10:00:00Z",
        llm_interaction_count=9,
        total_tokens=999,
    )
    document = go.document()
    document["review_activity"] = {"activities": [{"action": "complete"}]}
    assert investigation_digest(alert_session(document)) == before

    go.event(investigator, "llm_response", "A later chat's answer.")
    assert investigation_digest(alert_session(go.document())) != before


def test_the_rendering_reads_only_the_judge_view():
    go = rich_session()
    document = go.document()
    view = rendering.judge_view(document)
    assert rendering.judge_view(view) == view
    session = alert_session(document)
    from_view = alert_session(document)
    from_view.source_document = view
    assert render_investigation(from_view) == render_investigation(session)


class RecordingSession:
    """A session that records which of its model fields are read."""

    FIELDS = frozenset(f.attname for f in AlertSession._meta.concrete_fields)

    def __init__(self, session):
        self._session = session
        self.read: set[str] = set()

    def __getattr__(self, name):
        if name in self.FIELDS:
            self.read.add(name)
        return getattr(self._session, name)


def test_rendering_reads_only_the_fields_it_declares():
    read = set()
    # The header shows the agent type where there is no chain.
    for changes in ({}, {"chain_id": ""}):
        session = alert_session(rich_session().document())
        for name, value in changes.items():
            setattr(session, name, value)
        recording = RecordingSession(session)
        conversation.build_score_prompt(recording)
        # ``source`` picks the renderer; it is not shown.
        assert recording.read - {"source"} <= set(rendering.RENDERED_FIELDS)
        read |= recording.read - {"source"}
    assert read == set(rendering.RENDERED_FIELDS)


# --- What the judge sees of an agent's run -------------------------------------------------------

BIG_LOG = "".join(
    f"2026-03-02T09:{i // 60 % 60:02d}:{i % 60:02d}Z level=info pod=web-{i % 7} line {i}\n"
    for i in range(1200)
)


def storage_cut(text: str) -> str:
    """Go's TruncateForStorage: 32 KB kept at a line break, and a marker."""
    kept = text[:32_000].rsplit("\n", 1)[0]
    return (
        kept
        + f"\n\n[TRUNCATED: Output exceeded storage display limit — Original size: {len(text) // 1024}KB, "
        "limit: 31KB]"
    )


def rich_session() -> GoSession:
    go = GoSession(final_analysis="pod-1 OOMKilled; raise its limit.", executive_summary="Pod-1 OOM killed.")
    stage = go.stage("investigation", 1)
    collector = go.execution(
        stage, "DataCollector", 1, backend="google-native", provider="test-provider", model="test-model"
    )
    go.mcp_call(
        collector,
        "tool_list",
        server="test-mcp",
        available_tools=[
            {"name": "get_logs", "description": ""},
            {"name": "get_pods", "description": "test tool: get_pods"},
        ],
    )
    go.mcp_call(
        collector, "tool_list", server="", available_tools=[{"name": "load_skill", "description": "Skills"}]
    )
    go.event(collector, "skill_loaded", "## Skill: networking\nUse dig.", {"skill_name": "networking"})
    go.event(
        collector,
        "memory_injected",
        "- [procedural, positive, score: 0.90] Check limits first.",
        {"count": 1, "memory_ids": ["m-1"]},
    )
    go.event(collector, "llm_thinking", "Let me check the pods.", {"source": "native"})
    go.event(collector, "llm_response", "I'll look up the pods.")
    go.llm_call(
        collector,
        conversation=[
            {"role": "system", "content": "SYSTEM PROMPT"},
            {"role": "assistant", "content": "I'll look up the pods."},
        ],
    )
    go.event(
        collector,
        "llm_tool_call",
        '[{"name":"pod-1","status":"OOMKilled"}]',
        {
            "server_name": "test-mcp",
            "tool_name": "get_pods",
            "arguments": '{"namespace":"default"}',
            "is_error": False,
            "tool_type": "mcp",
        },
    )
    go.mcp_call(
        collector,
        server="test-mcp",
        tool="get_pods",
        arguments={"namespace": "default"},
        result='[{"name":"pod-1","status":"OOMKilled"}]',
    )
    go.event(
        collector,
        "mcp_tool_summary",
        "Pod pod-1 is OOMKilled.",
        {
            "server_name": "test-mcp",
            "tool_name": "get_pods",
            "original_tokens": 156,
            "summarization_model": "test-model",
        },
    )
    go.event(
        collector,
        "llm_tool_call",
        storage_cut(BIG_LOG),
        {
            "server_name": "test-mcp",
            "tool_name": "get_logs",
            "arguments": '{"pod":"pod-1"}',
            "is_error": False,
        },
    )
    go.mcp_call(
        collector, server="test-mcp", tool="get_logs", arguments={"pod": "pod-1"}, result=storage_cut(BIG_LOG)
    )
    go.event(
        collector,
        "llm_tool_call",
        "Error executing tool: connection refused",
        {"server_name": "prometheus-mcp", "tool_name": "query", "arguments": '{"q":"up"}', "is_error": True},
    )
    go.mcp_call(
        collector, server="prometheus-mcp", tool="query", arguments={"q": "up"}, error="connection refused"
    )
    go.event(
        collector,
        "google_search_result",
        "Google Search: 'oom' → Sources: Resource Management",
        {"queries": ["oom"], "source": "gemini"},
    )
    go.event(collector, "error", "LLM request failed: 503 overloaded")
    go.event(
        collector,
        "provider_fallback",
        "Provider fallback: test-provider → fast-provider",
        {"original_model": "test-model", "fallback_model": "fast-model", "reason": "503 overloaded"},
    )
    go.event(
        collector,
        "llm_thinking",
        "Logs confirm the OOM.",
        {"forced_conclusion": True, "iterations_used": 3, "max_iterations": 3},
    )
    go.event(collector, "llm_response", "pod-1 is OOMKilled.", {"forced_conclusion": True})
    go.event(collector, "final_analysis", "pod-1 is OOMKilled.", {"forced_conclusion": True})
    go.llm_call(
        collector,
        conversation=[
            {
                "role": "tool",
                "content": '[{"name":"pod-1"}]',
                "tool_call_id": "c1",
                "tool_name": "test-mcp__get_pods",
            },
            {"role": "tool", "content": BIG_LOG, "tool_call_id": "c2", "tool_name": "test-mcp__get_logs"},
            {"role": "assistant", "content": "pod-1 is OOMKilled."},
        ],
    )
    go.detail["executive_summary_error"] = None
    return go


def test_an_agent_run_is_rendered_with_every_kind_of_event():
    rendered = render(rich_session())
    expected_in_order = [
        "## AVAILABLE TOOLS PER AGENT",
        "### DataCollector (Stage 1: investigation)",
        "- load_skill() - Skills",
        "- test-mcp.get_logs()\n",
        "- test-mcp.get_pods() - test tool: get_pods",
        "## INVESTIGATION TIMELINE",
        "## Stage 1: investigation",
        "**Agent:** DataCollector (google-native, test-model)",
        "**Pre-loaded Skill: networking**\n\n## Skill: networking\nUse dig.\n",
        "**Pre-loaded Memories (1):**\n\n- [procedural, positive, score: 0.90] Check limits first.\n",
        "**Internal Reasoning:**\n\nLet me check the pods.\n",
        "**Agent Response:**\n\nI'll look up the pods.\n",
        (
            '**Tool Call:** test-mcp.get_pods({"namespace":"default"})\n**Result:**\n\n'
            '[{"name":"pod-1","status":"OOMKilled"}]\n'
        ),
        (
            "**Result (summarized for the agent from about 156 tokens by test-model):**\n\n"
            "Pod pod-1 is OOMKilled.\n"
        ),
        '**Tool Call:** test-mcp.get_logs({"pod":"pod-1"})\n**Result:**\n\n' + BIG_LOG,
        (
            '**Tool Call:** prometheus-mcp.query({"q":"up"})\n**Result (error):**\n\n'
            "Error executing tool: connection refused\n"
        ),
        "**Google Search Result:**\n\nGoogle Search: 'oom' → Sources: Resource Management\n",
        "**Error:**\n\nLLM request failed: 503 overloaded\n",
        (
            "**Provider Fallback:**\n\nProvider fallback: test-provider → fast-provider "
            "(model test-model -> fast-model; reason: 503 overloaded)\n"
        ),
        (
            "**Forced Conclusion** (the agent reached its iteration limit: 3 of 3 iterations "
            "and was asked to conclude)"
        ),
        "**Internal Reasoning:**\n\nLogs confirm the OOM.\n",
        "**Agent Response:**\n\npod-1 is OOMKilled.\n",
        "**Final Analysis:** the agent's response above.\n",
        "## Executive Summary\n\nPod-1 OOM killed.\n",
        "## FINAL ANALYSIS\n\npod-1 OOMKilled; raise its limit.\n",
    ]
    positions = [rendered.find(text) for text in expected_in_order]
    assert -1 not in positions, expected_in_order[positions.index(-1)]
    assert positions == sorted(positions)
    # Prompts are not shown (Go's judge does not see them either); the log is shown once, whole.
    assert "SYSTEM PROMPT" not in rendered
    assert rendered.count(BIG_LOG) == 1
    assert "[TRUNCATED:" not in rendered


def test_tool_results_are_tool_result_parts_named_by_tool():
    parts = parts_of(rich_session())
    results = {part.tool: str(part) for part in parts if isinstance(part, ToolResult)}
    assert results == {
        "test-mcp.get_pods": '[{"name":"pod-1","status":"OOMKilled"}]',
        "test-mcp.get_logs": BIG_LOG.rstrip(),
        "prometheus-mcp.query": "Error executing tool: connection refused",
    }
    # Nothing else is: calls, arguments, summaries and errors are kept whole by fitting.
    assert not any(isinstance(p, ToolResult) for p in parts if "**" in p)


def test_a_result_cut_in_storage_stays_cut_when_the_agent_saw_a_summary():
    go = GoSession()
    agent = go.execution(go.stage("investigation", 1), "Investigator", 1)
    go.event(
        agent,
        "llm_tool_call",
        storage_cut(BIG_LOG),
        {"server_name": "k8s", "tool_name": "logs", "arguments": "{}"},
    )
    go.event(agent, "mcp_tool_summary", "Thousands of info lines.", {"original_tokens": 9000})
    go.llm_call(
        agent, conversation=[{"role": "tool", "content": "Thousands of info lines.", "tool_call_id": "c"}]
    )
    rendered = render(go)
    assert storage_cut(BIG_LOG) in rendered  # Go's marker says how large the result was
    assert (
        "**Result (summarized for the agent from about 9,000 tokens):**\n\nThousands of info lines."
        in rendered
    )


def test_a_result_go_stored_as_its_summary_is_shown_raw_from_the_interaction_and_summarized():
    go = GoSession()
    agent = go.execution(go.stage("investigation", 1), "Investigator", 1)
    go.event(
        agent,
        "llm_tool_call",
        "Two past sessions saw this OOM.",
        {
            "server_name": "",
            "tool_name": "search_past_sessions",
            "arguments": '{"q":"oom"}',
            "summarization_model": "fast-model",
        },
    )
    go.mcp_call(
        agent, server="", tool="search_past_sessions", arguments={"q": "oom"}, result='[{"id":"s-1"}]'
    )
    rendered = render(go)
    assert (
        '**Tool Call:** search_past_sessions({"q":"oom"})\n**Result:**\n\n[{"id":"s-1"}]\n\n'
        "**Result (summarized for the agent by fast-model):**\n\nTwo past sessions saw this OOM.\n"
    ) in rendered


def test_parallel_agents_replicas_sub_agents_chats_and_fallbacks():
    go = GoSession()
    stage = go.stage("scaling-review", 1, parallel_type="replica")
    for index in (1, 2):
        go.event(
            go.execution(
                stage,
                f"ScalingReviewer-{index}",
                index,
                status="completed" if index == 1 else "failed",
                error=None if index == 1 else "context deadline exceeded",
            ),
            "llm_response",
            "Recommend min=2 max=5.",
        )
    orchestrate = go.stage("orchestrate", 2)
    orchestrator = go.execution(
        orchestrate,
        "SREOrchestrator",
        1,
        model="test-model",
        backend="google-native",
        original_llm_provider="google-default",
        original_model_name="gemini-pro",
        original_llm_backend="google-native",
        fallback_reason="quota exhausted",
    )
    go.event(
        orchestrator,
        "llm_tool_call",
        '{"status":"accepted"}',
        {
            "server_name": "orchestrator",
            "tool_name": "dispatch_agent",
            "arguments": '{"name":"LogAnalyzer","task":"Find errors"}',
        },
    )
    go.event(orchestrator, "final_analysis", "Payment service OOM.")
    sub = go.execution(orchestrate, "LogAnalyzer", 1, parent=orchestrator, task="Find errors")
    go.event(sub, "task_assigned", "Find errors")
    go.event(sub, "final_analysis", "2,847 5xx errors.")
    chat = go.stage("Chat", 3, "chat")
    go.event(go.execution(chat, "ChatAgent", 1), "user_question", "What caused it?", {"author": "maria"})
    rendered = render(go)
    expected_in_order = [
        "## Stage 1: scaling-review",
        "### Parallel Agents (replica): 1/2 agents completed",
        "#### Agent 1: ScalingReviewer-1 (langchain)\n**Status:** completed",
        (
            "#### Agent 2: ScalingReviewer-2 (langchain)\n**Status:** failed\n"
            "**Error:** context deadline exceeded"
        ),
        "## Stage 2: orchestrate",
        (
            "**Agent:** SREOrchestrator (google-native, test-model)\n**Status:** completed\n"
            "**Provider Fallback:** from google-native, gemini-pro to google-native, test-model "
            "(quota exhausted)"
        ),
        '**Tool Call:** orchestrator.dispatch_agent({"name":"LogAnalyzer","task":"Find errors"})',
        "**Final Analysis:**\n\nPayment service OOM.",
        (
            "#### Sub-agent 1 of SREOrchestrator: LogAnalyzer (langchain)\n**Task:** Find errors\n"
            "**Status:** completed"
        ),
        "**Task Assigned:**\n\nFind errors",
        "**Final Analysis:**\n\n2,847 5xx errors.",
        "## Stage 3: Chat\n\n**Stage Type:** chat",
        "**Chat Follow-up Question (maria):**\n\nWhat caused it?",
    ]
    positions = [rendered.find(text) for text in expected_in_order]
    assert -1 not in positions, expected_in_order[positions.index(-1)]
    assert positions == sorted(positions)


def test_events_follow_their_sequence_numbers_and_chats_follow_the_chain():
    go = GoSession()
    chat = go.stage("Chat", 0, "chat")  # listed first, with a lower index
    go.event(go.execution(chat, "ChatAgent", 1), "user_question", "And now?")
    agent = go.execution(go.stage("investigation", 1), "Investigator", 1)
    go.event(agent, "final_analysis", "Second.", sequence=2)
    go.event(agent, "llm_response", "First.", sequence=1)
    rendered = render(go)
    assert rendered.index("## Stage 1: investigation") < rendered.index("## Stage 2: Chat")
    assert rendered.index("First.") < rendered.index("Second.")


# --- Robustness: what Go may add, and what a document may lack --------------------------------


def test_unknown_stage_types_event_types_and_statuses_are_rendered_generically():
    go = GoSession(status="cancelling")
    stage = go.stage("Compose Output", 1, "compose_output", status="paused")
    agent = go.execution(stage, "Composer", 1, status="waiting_for_input")
    go.event(agent, "shell_command", "kubectl get pods", {"cwd": "/"})
    go.event(agent, "llm_response", "Half a sent", status="interrupted")
    go.event(
        agent, "llm_tool_call", "partial", {"server_name": "k8s", "tool_name": "get"}, status="streaming"
    )
    go.event(agent, "memory_injected", "a memory", {"count": "three"})
    document = go.document()
    odd = document["timeline"]
    odd.append(
        {
            **odd[0],
            "event_type": None,
            "content": 42,
            "metadata": ["not", "a", "dict"],
            "sequence_number": "x",
        }
    )
    odd.append({**odd[0], "event_type": "final_analysis", "content": None, "status": None})
    document["session"]["stages"].append({"stage_name": None, "executions": [{"agent_name": 7}], "status": 3})
    document["trace"]["stages"].append({"stage_id": None, "executions": None})
    document["llm_interactions"]["x"] = "not a dict"
    rendered = render_investigation(alert_session(document))
    for text in [
        "**Stage Type:** compose_output",
        "**Stage Status:** paused",
        "**Status:** waiting_for_input",
        "**shell command:**\n\nkubectl get pods",
        "**Agent Response (interrupted):**\n\nHalf a sent",
        "**Result (streaming):**\n\npartial",
        "**Pre-loaded Memories:**\n\na memory",
        "**event:**\n\n42",
        "**Final Analysis:**\n\n(empty)",
        "**Agent:** 7",
        "**Stage Status:** 3",
    ]:
        assert text in rendered


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
FUZZED_DOCUMENTS = [
    go.document()
    for go in (rich_session(), scored_session(), case_full_pipeline(), case_orchestrated_stage())
]


def value_paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from value_paths(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from value_paths(item, path + (index,))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_value_anywhere_in_the_document_renders_without_an_exception(data):
    original = data.draw(st.sampled_from(FUZZED_DOCUMENTS))
    document = copy.deepcopy(original)
    paths = list(value_paths(document))[1:]
    for path in data.draw(st.lists(st.sampled_from(paths), min_size=1, max_size=6)):
        container = document
        try:
            for key in path[:-1]:
                container = container[key]
            container[path[-1]] = data.draw(JSON_VALUES)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change replaced this value's container
    session = alert_session(original)
    session.source_document = document
    assert render_investigation(session).startswith("## SESSION")
    json.dumps(rendering.rendered_values(session), default=str)


@pytest.mark.parametrize(
    "document",
    [
        None,
        {},
        {"format": "tarsy-go/1"},
        {"session": [], "timeline": {}, "trace": "", "llm_interactions": []},
    ],
)
def test_a_document_without_an_investigation_renders_the_session_and_its_final_analysis(document):
    session = alert_session(GoSession(final_analysis="Done.").document())
    session.source_document = document
    rendered = render_investigation(session)
    assert "(No stages were recorded.)" in rendered
    assert rendered.endswith("## FINAL ANALYSIS\n\nDone.\n")


def test_an_agent_without_timeline_events_is_rendered_from_its_interactions():
    go = GoSession()
    agent = go.execution(go.stage("investigation", 1), "Investigator", 1)
    go.llm_call(
        agent,
        thinking="Check pods first.",
        conversation=[
            {"role": "system", "content": "SYSTEM"},
            {
                "role": "assistant",
                "content": "Looking.",
                "tool_calls": [{"id": "c1", "name": "k8s__get_pods", "arguments": '{"ns":"prod"}'}],
            },
        ],
    )
    go.mcp_call(agent, server="k8s", tool="get_pods", arguments={"ns": "prod"}, result="pod-2 OOMKilled")
    go.mcp_call(agent, server="k8s", tool="get_logs", arguments={"pod": "pod-2"}, error="timeout")
    missing = go.llm_call(agent, error="503 overloaded")
    go.llm_call(agent, conversation=[{"role": "assistant", "content": "pod-2 is OOMKilled."}])
    document = go.document()
    del document["timeline"]
    del document["llm_interactions"][missing]
    parts = rendering.render_investigation_parts(alert_session(document))
    rendered = "\n".join(parts)
    expected_in_order = [
        "**LLM Call** (iteration, test-model)",
        "**Internal Reasoning:**\n\nCheck pods first.",
        '**Agent Response:**\n\nLooking.\n\nTool calls requested:\n- k8s__get_pods({"ns":"prod"})',
        '**Tool Call:** k8s.get_pods({"ns": "prod"})\n**Result:**\n\npod-2 OOMKilled',
        '**Tool Call:** k8s.get_logs({"pod": "pod-2"})\n**Tool Error:** timeout',
        (
            "**LLM Call** (iteration, test-model)\n\n(Its details were not recorded.)\n\n"
            "**LLM Call Failed** (test-model): 503 overloaded"
        ),
        "**Agent Response:**\n\npod-2 is OOMKilled.",
    ]
    positions = [rendered.find(text) for text in expected_in_order]
    assert -1 not in positions, expected_in_order[positions.index(-1)]
    assert positions == sorted(positions)
    assert "SYSTEM" not in rendered
    assert [p for p in parts if isinstance(p, ToolResult)] == ["pod-2 OOMKilled"]


def test_stages_only_the_trace_lists_are_rendered():
    go = GoSession()
    agent = go.execution(go.stage("investigation", 1), "Investigator", 1)
    go.event(agent, "final_analysis", "Found it.")
    document = go.document()
    document["session"]["stages"] = []
    rendered = render_investigation(alert_session(document))
    assert "## Stage 1: investigation" in rendered
    assert "**Agent:** Investigator\n**Status:** unknown" in rendered
    assert "**Final Analysis:**\n\nFound it." in rendered


def test_a_twenty_megabyte_tool_output_renders_quickly_as_a_tool_result():
    line = "2026-03-02T09:30:00.000Z level=info pod=web-0 msg=request served in 12ms path=/api/v1/items\n"
    log = line * (20_000_000 // len(line))
    go = GoSession()
    agent = go.execution(go.stage("investigation", 1), "Investigator", 1)
    go.event(
        agent,
        "llm_tool_call",
        storage_cut(log),
        {"server_name": "k8s", "tool_name": "pods_log", "arguments": '{"pod":"web-0"}'},
    )
    go.mcp_call(agent, server="k8s", tool="pods_log", arguments={"pod": "web-0"}, result=storage_cut(log))
    go.event(agent, "final_analysis", "Nothing wrong in the logs.")
    # The agent saw the whole log, in each later call's conversation.
    for _ in range(3):
        go.llm_call(agent, conversation=[{"role": "tool", "content": log, "tool_call_id": "c1"}])
    session = alert_session(go.document())
    started = time.perf_counter()
    parts = rendering.render_investigation_parts(session)
    elapsed = time.perf_counter() - started
    print(f"rendered a {len(log) / 1e6:.0f} MB tool output in {elapsed * 1000:.0f} ms")
    results = [p for p in parts if isinstance(p, ToolResult)]
    assert [(r.tool, len(r)) for r in results] == [("k8s.pods_log", len(log.rstrip()))]


def test_what_later_go_tarsy_versions_add_is_shown_to_the_judge():
    go = GoSession(status="cancelled", final_analysis=None)
    go.detail.update(labels={"team": "payments", "env": "prod"}, cancelled_by="alice", cancel_reason="duplicate")
    stage = go.stage("compose output", 2, "compose")
    composer = go.execution(stage, "Composer", 1, cache_read_tokens=120, reasoning_effort="high")
    go.llm_call(composer, "composition", conversation=[{"role": "assistant", "content": "Composed report."}])
    go.event(composer, "llm_response", "Composed report.")

    rendered = render(go)

    assert "**Labels:** team=payments, env=prod" in rendered
    assert "**Cancelled by:** alice (duplicate)" in rendered
    assert "## Stage 1: compose output" in rendered and "Composed report." in rendered


# --- The bundled samples ---------------------------------------------------------------------------

SAMPLE_GOLDEN_DIR = Path(__file__).resolve().parent / "golden" / "rendering"


def render_sample(path: Path) -> str:
    return render_investigation(unsaved_session(load(path)))


@pytest.mark.parametrize("path", TARSY_GO_SAMPLES, ids=lambda p: p.stem)
def test_sample_render_matches_golden(path):
    """After an intended format change regenerate the golden files with
    ``UPDATE_GOLDENS=1 .venv/bin/pytest tests/tarsy_go/test_rendering.py -k golden``; review the diff."""
    rendered = render_sample(path)
    golden = SAMPLE_GOLDEN_DIR / f"{path.stem}.txt"
    assert_matches_golden(rendered, golden, path.name)


def test_every_golden_render_has_its_sample():
    assert sorted(p.stem for p in SAMPLE_GOLDEN_DIR.glob("*.txt")) == [p.stem for p in TARSY_GO_SAMPLES]


@pytest.mark.parametrize("path", TARSY_GO_SAMPLES, ids=lambda p: p.stem)
def test_a_sample_shows_every_tool_its_calls_and_their_results_and_nothing_of_go_s_judge(path):
    document = load(path)
    rendered = render_sample(path)
    tools = rendered[: rendered.index("## INVESTIGATION TIMELINE")]
    for detail in document["mcp_interactions"].values():
        if detail["interaction_type"] == "tool_list":
            for tool in detail["available_tools"]:
                assert f"- {detail['server_name']}.{tool['name']}() - {tool['description']}\n" in tools
    calls = [e for e in document["timeline"] if e["event_type"] == "llm_tool_call"]
    assert calls
    positions: dict = {}  # each agent's calls in their order; parallel agents' interleave in the timeline
    for call in sorted(calls, key=lambda e: (e["execution_id"], e["sequence_number"])):
        metadata = call["metadata"]
        name = f"{metadata['server_name']}.{metadata['tool_name']}"
        header = f"**Tool Call:** {name}({metadata['arguments']})\n"
        label = "**Result (error):**" if metadata["is_error"] else "**Result:**"
        text = f"{header}{label}\n\n{call['content']}\n"
        positions[call["execution_id"]] = rendered.index(text, positions.get(call["execution_id"], 0))
    for summary in (e for e in document["timeline"] if e["event_type"] == "mcp_tool_summary"):
        model = summary["metadata"]["summarization_model"]
        assert f"tokens by {model}):**\n\n{summary['content']}\n" in rendered
    score = document["score"]
    if score is not None:
        assert "## Dimension Assessments" in score["score_analysis"]
        assert "## Dimension Assessments" not in rendered and score["tool_improvement_report"] not in rendered
        assert "ScoringAgent" not in rendered and "Reflection" not in rendered
