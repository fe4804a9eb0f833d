"""scoring/judge/replies.py: the criteria breakdown and the missing tools read from the
judge's text, on a corpus of replies in the styles judges write
(tests/judge/data/replies/: each folder's expected.json says what each reply gives)."""

import json
import re
from pathlib import Path

import pytest

from scoring.judge import conversation, demo_judge
from scoring.judge.prompts import JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS
from scoring.judge.replies import (
    DIMENSIONS,
    MIN_EVALUATION_WORDS,
    breakdown_warning,
    evaluation_words,
    has_evaluation,
    parse_dimensions,
    parse_missing_tools,
    tool_key,
)
from tests.support.judge_replies import BREAKDOWN_ALONE, EVALUATION, SCORE_ALONE, TOTAL_SCORE_LINE
from tests.support.samples import SAMPLES, load, unsaved_session

CORPUS = Path(__file__).parent / "data" / "replies"
SCORE_REPLIES = CORPUS / "score"
TOOL_REPLIES = CORPUS / "missing_tools"


def expectations(folder: Path) -> dict:
    return json.loads((folder / "expected.json").read_text())


def replies(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.glob("*.md"))


@pytest.mark.parametrize("folder", [SCORE_REPLIES, TOOL_REPLIES], ids=["score", "missing_tools"])
def test_every_reply_of_the_corpus_has_an_expectation(folder):
    assert replies(folder) == sorted(expectations(folder))


@pytest.mark.parametrize("name", replies(SCORE_REPLIES))
def test_the_breakdown_of_each_style_is_read(name):
    expected = expectations(SCORE_REPLIES)[name]
    # As the service gets it: the total from the last line, the analysis without it.
    total, analysis = conversation.extract_score((SCORE_REPLIES / name).read_text())
    assert total == expected["total"]

    dimensions = parse_dimensions(analysis)

    if expected["dimensions"] is None:
        assert dimensions is None
    else:
        assert dimensions == dict(zip(DIMENSIONS, expected["dimensions"]))
    assert breakdown_warning(dimensions, total) == expected["warning"]


@pytest.mark.parametrize("name", replies(TOOL_REPLIES))
def test_the_missing_tools_of_each_style_are_read(name):
    expected = expectations(TOOL_REPLIES)[name]

    tools = parse_missing_tools((TOOL_REPLIES / name).read_text())

    assert [tool.name for tool in tools] == expected
    assert [tool.key for tool in tools] == [tool_key(name) for name in expected]


@pytest.mark.parametrize(
    "written, key",
    [
        ("read-file", "read-file"),
        ("Read_File", "read-file"),
        ("**`read file`**", "read-file"),
        ("`kubectl-logs`:", "kubectl-logs"),
        ("read_file()", "read-file"),
        ("**read_file()**", "read-file"),
        ("pods_log(namespace, name)", "pods-log"),
        ('"list-processes".', "list-processes"),
        ("kubernetes-server.pods_log", "kubernetes-server.pods-log"),
        ("kubectl  logs --previous", "kubectl-logs-previous"),
    ],
)
def test_a_tool_key_folds_case_separators_and_surrounding_marks(written, key):
    assert tool_key(written) == key


def test_the_same_tool_written_twice_is_listed_once_as_first_written():
    reply = "1. **read_file** - the script\n2. `list-processes` - execution\n3. **Read-File** - the cron entry"

    assert [(tool.name, tool.key) for tool in parse_missing_tools(reply)] == [
        ("read_file", "read-file"),
        ("list-processes", "list-processes"),
    ]


@pytest.mark.parametrize("reply", ["", None, "   \n"])
def test_an_empty_reply_names_no_tool_and_has_no_breakdown(reply):
    assert parse_missing_tools(reply) == []
    assert parse_dimensions(reply) is None


@pytest.mark.parametrize(
    "reply, names",
    [
        ("## Tool 3 - kubectl-top\nWhy: the node's usage", ["kubectl-top"]),
        ("**Tool name:** `pods_log`\n**Rationale:** the output", ["pods_log"]),
        ("No critical missing tools were identified.", []),
        ("After review, no missing tools found.\n\n- `pods_top` - nice to have", []),
    ],
)
def test_short_replies_in_other_styles(reply, names):
    assert [tool.name for tool in parse_missing_tools(reply)] == names


def test_the_no_tools_sentence_after_a_list_does_not_cancel_it():
    reply = "1. **pods_log** - the crash's own output\n\nApart from this one, no critical missing tools identified."

    assert [tool.name for tool in parse_missing_tools(reply)] == ["pods_log"]


def test_points_out_of_the_criterion_range_are_not_points():
    analysis = "Logical Flow: 30/25\nConsistency: 18/25\nTool Relevance: 14/25\nSynthesis Quality: 13/25"

    assert parse_dimensions(analysis)["logical_flow"] is None


def test_a_breakdown_that_adds_up_and_no_breakdown_give_no_warning():
    assert breakdown_warning(dict(zip(DIMENSIONS, [15, 18, 14, 13])), 60) is None
    assert breakdown_warning(None, 60) is None


@pytest.mark.django_db
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda path: path.stem)
def test_the_demo_judges_replies_are_read_whole(sample):
    """What ``bin/run --demo-judge`` writes for each bundled sample session."""
    session = unsaved_session(load(sample))
    messages = [{"role": "user", "content": conversation.build_score_prompt(session)}]
    turn1 = demo_judge.demo_reply(messages)
    messages += [
        {"role": "assistant", "content": turn1},
        {"role": "user", "content": JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS},
    ]
    turn2 = demo_judge.demo_reply(messages)
    total, analysis = conversation.extract_score(turn1)

    dimensions = parse_dimensions(analysis)

    assert None not in dimensions.values()
    assert breakdown_warning(dimensions, total) is None
    written = re.findall(r"^\d+\. \*\*(.+?)\*\*", turn2, re.M)
    assert [tool.name for tool in parse_missing_tools(turn2)] == written


# --- Whether a turn-1 analysis holds an evaluation ------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [SCORE_ALONE, TOTAL_SCORE_LINE, BREAKDOWN_ALONE, "Good investigation.\n\n80", "## Score\n| Logical Flow | 15/25 |\n\n60"],
)
def test_what_the_real_model_wrote_holds_no_evaluation(reply):
    _, analysis = conversation.extract_score(reply)
    assert not has_evaluation(analysis)


def test_prose_beside_the_breakdown_is_an_evaluation_and_the_breakdown_counts_for_nothing():
    _, analysis = conversation.extract_score(f"{EVALUATION}\n\n{BREAKDOWN_ALONE}")
    assert has_evaluation(analysis)
    assert evaluation_words(analysis) == evaluation_words(EVALUATION)


def test_the_threshold_is_in_words():
    assert has_evaluation(" ".join(["word"] * MIN_EVALUATION_WORDS))
    assert not has_evaluation(" ".join(["word"] * (MIN_EVALUATION_WORDS - 1)) + " 12 34 56 -- **")


@pytest.mark.parametrize("sample", SAMPLES)
def test_the_demo_judges_analysis_of_every_sample_is_an_evaluation(sample):
    session = unsaved_session(load(sample))
    reply = demo_judge.demo_reply([{"role": "user", "content": conversation.build_score_prompt(session)}])
    assert has_evaluation(conversation.extract_score(reply)[1])
