"""The criteria command: versions from text files, and their life from the command line; criteria
loaded from files score a session under their own hash (the fake judge over real HTTP)."""

import hashlib

import pytest
from django.core.management import CommandError, call_command

from scoring import services
from scoring.judge.prompts import JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS, JUDGE_PROMPT_SCORE, PROMPT_HASH
from scoring.models import CriteriaChange, CriteriaState, CriteriaVersion, ScoringStatus
from tests.support.criteria import corrected
from tests.support.factories import make_session, run_next_scoring
from tests.support.fake_llm import Reply
from tests.support.judge_replies import evaluated

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_criteria")]

SYSTEM = "You are the chain's own reviewer."
SCORE = "Judge this chain's work.\n{{SESSION_CONVERSATION}}\nAlert:\n{{ALERT_DATA}}\n\n{{OUTPUT_SCHEMA}}"
FOLLOWUP = "Which tools should it have used?"


def run(*args, capsys) -> str:
    call_command("criteria", *args)
    return capsys.readouterr().out


@pytest.fixture
def files(tmp_path):
    written = {}
    for name, text in (("system", SYSTEM), ("score", SCORE), ("followup", FOLLOWUP)):
        written[name] = tmp_path / f"{name}.txt"
        written[name].write_text(text + "\n")  # as an editor saves it
    return written


def test_criteria_from_files_score_a_session_of_their_chain_under_their_own_hash(files, capsys, judge_llm):
    out = run(
        "create", "--score-file", files["score"], "--followup-file", files["followup"],
        "--system-file", files["system"], "--scope", "chain:k8s-chain", "--description", "the chain's own",
        "--candidate", "--by", "carol", capsys=capsys,
    )  # fmt: skip
    version = CriteriaVersion.objects.get(description="the chain's own")
    own_hash = hashlib.sha256(f"{SYSTEM}\x00{SCORE}{FOLLOWUP}".encode()).hexdigest()
    assert out == f"v{version.pk} Chain k8s-chain is candidate, hash {own_hash}\n"
    assert run("promote", str(version.pk), "--reason", "trial went well", capsys=capsys) == (
        f"v{version.pk} Chain k8s-chain is current\n"
    )

    session = make_session(chain_id="k8s-chain", alert_data={"alert": "PodCrashLooping"})
    services.score_request(session_id=session.session_id, triggered_by="bob")
    judge_llm.push(Reply(evaluated("Logical Flow: 10/25\n\n40")), Reply("1. kubectl-logs"))
    score = run_next_scoring()

    assert (score.status, score.prompt_hash, score.total_score) == (ScoringStatus.COMPLETED, own_hash, 40)
    turn1, turn2 = judge_llm.requests
    assert turn1.messages[0] == {"role": "system", "content": SYSTEM}
    prompt = turn1.messages[1]["content"]
    assert prompt.startswith("Judge this chain's work.\n") and '"alert": "PodCrashLooping"' in prompt
    assert prompt.endswith("You MUST end your response with a single line containing ONLY the total score as an "
                           "integer (0-100)")  # fmt: skip
    assert turn2.messages[-1] == {"role": "user", "content": FOLLOWUP}


def test_the_shipped_prompts_from_files_hash_as_they_always_did(tmp_path, capsys):
    (tmp_path / "score.txt").write_text(JUDGE_PROMPT_SCORE + "\n")
    (tmp_path / "followup.txt").write_text(JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS)

    out = run(
        "create", "--score-file", tmp_path / "score.txt", "--followup-file", tmp_path / "followup.txt",
        "--scope", "alert_type:kubernetes", capsys=capsys,
    )  # fmt: skip

    assert out.endswith(f"is draft, hash {PROMPT_HASH}\n")


def test_list_show_rollback_and_retire(files, capsys):
    run(
        "create",
        "--score-file",
        files["score"],
        "--followup-file",
        files["followup"],
        "--candidate",
        capsys=capsys,
    )
    version = CriteriaVersion.objects.exclude(prompt_hash=PROMPT_HASH).get()
    run("promote", str(version.pk), "--reason", "stricter", "--by", "carol", capsys=capsys)

    listed = run("list", capsys=capsys).splitlines()
    assert listed[0].split("\t")[:4] == [f"v{version.pk}", "current", "global", version.prompt_hash]
    assert "\tretired\tglobal\t" + PROMPT_HASH in listed[1]
    shown = run("show", str(version.pk), capsys=capsys)
    assert (
        f"--- score prompt ---\n{SCORE}\n" in shown and "promote v" in shown and "by carol: stricter" in shown
    )

    out = run("rollback", "--scope", "global", "--reason", "too strict", capsys=capsys)
    assert (
        out
        == f"rolled back v{version.pk}: v{CriteriaVersion.objects.get(state='current').pk} is current again\n"
    )
    assert CriteriaVersion.objects.get(state=CriteriaState.CURRENT).prompt_hash == PROMPT_HASH
    assert CriteriaChange.objects.filter(action="rollback", reason="too strict").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["promote", "999999", "--reason", "x"], "no criteria version 999999"),
        (
            ["rollback", "--scope", "chain:none", "--reason", "x"],
            "the scope chain none has no current version",
        ),
        (
            ["create", "--score-file", "/nonexistent/score.txt", "--followup-file", "x"],
            "No such file or directory",
        ),
        (["calibrate", "999999"], "no criteria version 999999"),
        (["calibrate", "1", "--size", "0"], "size: from 1 to 12 examples, not 0"),
    ],
)
def test_refusals_say_why(args, message, capsys):
    with pytest.raises(CommandError, match=message):
        call_command("criteria", *args)


def test_a_file_that_is_not_utf8_or_misses_the_session_is_refused(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("Évaluez {{SESSION_CONVERSATION}}".encode("latin-1"))
    (tmp_path / "plain.txt").write_text("Judge it.")

    with pytest.raises(CommandError, match="The score file is not UTF-8 text"):
        call_command(
            "criteria",
            "create",
            "--score-file",
            tmp_path / "latin1.txt",
            "--followup-file",
            tmp_path / "plain.txt",
        )
    with pytest.raises(CommandError, match="no {{SESSION_CONVERSATION}} placeholder"):
        call_command(
            "criteria",
            "create",
            "--score-file",
            tmp_path / "plain.txt",
            "--followup-file",
            tmp_path / "plain.txt",
        )
    assert not CriteriaVersion.objects.exclude(prompt_hash=PROMPT_HASH).exists()


def test_calibrate_builds_a_candidate_with_the_corrections_and_show_lists_them(shipped_criteria, capsys):
    reviewed = corrected(95, 20, alert_type="kubernetes", note="Concluded without reading a log.")
    corrected(20, 90, alert_type="database")

    out = run("calibrate", str(shipped_criteria.pk), "--size", "1", "--by", "carol", capsys=capsys)

    built = CriteriaVersion.objects.get(state=CriteriaState.CANDIDATE)
    assert out == f"v{built.pk} global is candidate with 1 worked examples, hash {built.prompt_hash}\n"
    assert built.created_by == "carol" and built.prompt_hash != PROMPT_HASH
    shown = run("show", str(built.pk), capsys=capsys)
    assert (
        f"--- example 1: session {reviewed.session_id} (kubernetes), judge 95, reviewer 20 ---\n"
        "Concluded without reading a log.\n"
    ) in shown


def test_calibrate_says_when_no_review_corrects_the_judge(shipped_criteria):
    with pytest.raises(CommandError, match="no review corrects the judge"):
        call_command("criteria", "calibrate", str(shipped_criteria.pk))
