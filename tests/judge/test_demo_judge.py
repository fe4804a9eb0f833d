"""The demo judge (``bin/run --demo-judge``): a whole scoring without a provider key."""

import json
import shlex
import subprocess
import sys

import pytest
from django.core.management import call_command

from scoring.criteria.services import with_examples_placeholder
from scoring.judge import demo_judge, replies
from scoring.judge.conversation import build_score_prompt, extract_score
from scoring.judge.prompts import (
    JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS,
    RESTATE_SCORE_PROMPT,
    SHIPPED_CRITERIA,
    CalibrationExample,
    Criteria,
)
from scoring.judge.rendering import render_investigation
from scoring.models import AlertSession
from tests.support.factories import make_session, operator_client  # noqa: F401 (fixture)
from tests.support.samples import SAMPLES_DIR, load
from tests.support.servers import REPO_DIR
from tests.support.throwaway_servers import free_port, stop_process
from tests.support.workers import wait_for

SAMPLE = REPO_DIR / "scoring" / "samples" / "03_parallel_agents.json"
GO_SAMPLES = ("11_go_crashloop.json", "12_go_parallel_agents.json")


def conversation(session) -> list[dict]:
    return [{"role": "user", "content": build_score_prompt(session)}]


@pytest.mark.django_db
def test_replies_follow_the_session_and_end_with_a_score_line():
    call_command("import_sessions", str(SAMPLE))
    session = AlertSession.objects.get(session_id=json.loads(SAMPLE.read_text())["session_id"])
    messages = conversation(session)

    turn1 = demo_judge.demo_reply(messages)
    total, analysis = extract_score(turn1)
    assert replies.has_evaluation(analysis)  # no follow-up asked of the demo judge
    messages += [
        {"role": "assistant", "content": turn1},
        {"role": "user", "content": JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS},
    ]
    turn2 = demo_judge.demo_reply(messages)

    assert total is not None and 0 <= total <= 100
    assert "Demo judge" in analysis and "Logical Flow:" in analysis and len(analysis.split()) >= 150
    assert str(session.session_id) in analysis
    # The sample's agents never called events_list: the demo names it, from the tool list it was sent.
    assert "kubernetes-server.events_list" in turn2 and "Demo judge" in turn2
    restate = {"role": "user", "content": RESTATE_SCORE_PROMPT}
    assert demo_judge.demo_reply([*messages[:1], restate]) == str(total)
    # A session with no tools and no final analysis scores lower, and its reply says why.
    bare = make_session(final_analysis="", status="failed")
    bare_total, bare_analysis = extract_score(demo_judge.demo_reply(conversation(bare)))
    assert bare_total < total
    assert "no final analysis" in bare_analysis


@pytest.mark.django_db
def test_a_calibrated_versions_examples_are_not_read_as_the_judged_session():
    call_command("import_sessions", str(SAMPLE))
    session = AlertSession.objects.get(session_id=json.loads(SAMPLE.read_text())["session_id"])
    other = make_session(alert_type="OtherAlert", final_analysis="", status="failed")
    example = CalibrationExample(
        session_id=str(other.session_id),
        alert_type=other.alert_type,
        judge_score=90,
        reviewer_score=20,
        note="Never read the logs.",
        excerpt=render_investigation(other),
    )
    criteria = Criteria(
        with_examples_placeholder(SHIPPED_CRITERIA.score_prompt),
        SHIPPED_CRITERIA.followup_prompt,
        examples=(example,),
    )
    prompt = build_score_prompt(session, criteria=criteria)
    # The example's session comes first in the prompt, before the one judged.
    assert prompt.index(f"**Session ID:** {other.session_id}") < prompt.index(
        f"**Session ID:** {session.session_id}"
    )

    calibrated = demo_judge.demo_reply([{"role": "user", "content": prompt}])

    assert calibrated == demo_judge.demo_reply(conversation(session))


@pytest.mark.django_db
def test_under_criteria_with_a_system_prompt_and_their_own_follow_up_the_turns_are_answered_as_such():
    call_command("import_sessions", str(SAMPLE))
    session = AlertSession.objects.get(session_id=json.loads(SAMPLE.read_text())["session_id"])
    messages = [{"role": "system", "content": "You judge k8s chains."}, *conversation(session)]

    turn1 = demo_judge.demo_reply(messages)
    turn2 = demo_judge.demo_reply(
        [*messages, {"role": "assistant", "content": turn1}, {"role": "user", "content": "Which tools were missing?"}]
    )

    assert str(session.session_id) in turn1 and extract_score(turn1)[0] is not None
    assert "kubernetes-server.events_list" in turn2 and "Logical Flow:" not in turn2


@pytest.mark.django_db
def test_go_samples_are_read_from_their_tool_lines_calls_and_failed_results():
    """bin/run loads Go TARSy samples too: the demo judge reads their rendering as it reads tarsy-bot's."""
    call_command("import_sessions", *(str(SAMPLES_DIR / name) for name in GO_SAMPLES))
    sessions = {
        name: AlertSession.objects.get(session_id=load(SAMPLES_DIR / name)["session"]["id"])
        for name in GO_SAMPLES
    }
    replies = {}
    for name, session in sessions.items():
        messages = conversation(session)
        turn1 = demo_judge.demo_reply(messages)
        messages += [
            {"role": "assistant", "content": turn1},
            {"role": "user", "content": JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS},
        ]
        replies[name] = (extract_score(turn1), demo_judge.demo_reply(messages))

    (total, crashloop), crashloop_tools = replies["11_go_crashloop.json"]
    assert 0 <= total <= 100
    assert "made 5 tool call(s) over 4 distinct tool(s)" in crashloop and "call(s) failed" not in crashloop
    assert "Of the 8 tools available, the agent used 4." in crashloop
    assert "**kubernetes-server.pods_get**" in crashloop_tools  # listed by Go TARSy, never called
    (_, lag), lag_tools = replies["12_go_parallel_agents.json"]
    # Two agents' calls over both MCP servers; the metrics call's error result counts as a failure.
    assert "made 7 tool call(s) over 7 distinct tool(s)" in lag and "However, 1 call(s) failed" in lag
    assert "Of the 10 tools available, the agent used 7." in lag
    assert "**kubernetes-server.events_list**" in lag_tools


@pytest.fixture
def demo_judge_env():
    """The demo judge started as ``bin/run --demo-judge`` does; the settings it prints for the worker."""
    port = free_port()
    command = [sys.executable, "-m", "scoring.judge.demo_judge", "--port", str(port)]
    process = subprocess.Popen(
        command, cwd=REPO_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert "demo judge listening" in process.stdout.readline()
        printed = subprocess.run(
            [*command, "--env"], cwd=REPO_DIR, capture_output=True, text=True, check=True
        ).stdout
        yield dict(shlex.split(line)[1].split("=", 1) for line in printed.splitlines())
    finally:
        stop_process(process)


@pytest.mark.processes
def test_a_sample_is_scored_end_to_end_by_a_worker_on_the_demo_judge(
    start_worker, demo_judge_env, operator_client, client
):
    start_worker(**demo_judge_env)
    call_command("import_sessions", str(SAMPLE))
    session_id = json.loads(SAMPLE.read_text())["session_id"]
    url = f"/api/v1/scoring/sessions/{session_id}/score"

    assert operator_client.post(url).status_code == 202
    body = wait_for(
        lambda: (b := operator_client.get(url).json())["status"] in ("completed", "failed") and b,
        what="the demo scoring to end",
    )

    assert body["status"] == "completed", body
    assert 0 <= body["total_score"] <= 100
    assert body["score_analysis"].startswith("*Demo judge:")
    assert "kubernetes-server." in body["missing_tools_analysis"]
    assert body["judge_model"] == demo_judge.MODEL == "openai/DEMO-canned-judge-not-an-LLM"
    assert body["input_tokens"] > 0 and body["output_tokens"] > 0
    # The session page names the judge next to the score.
    page = client.get(f"/sessions/{session_id}/", HTTP_X_FORWARDED_USER="alice").content.decode()
    assert "DEMO-canned-judge-not-an-LLM" in page
