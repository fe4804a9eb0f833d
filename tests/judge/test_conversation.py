import pytest

from scoring.judge.conversation import extract_score


@pytest.mark.parametrize(
    ("reply", "score", "analysis"),
    [
        ("Analysis here.\n\n67", 67, "Analysis here."),
        ("Analysis.\n67   \n\n  ", 67, "Analysis."),
        ("Analysis.\n**75**", 75, "Analysis."),
        ("Analysis.\n`42`", 42, "Analysis."),
        ("Analysis.\nTotal: 67", 67, "Analysis."),
        ("Analysis.\n0", 0, "Analysis."),
        ("Analysis.\n100", 100, "Analysis."),
        ("42", 42, ""),
        ("Line one\r\nLine two\r\n58\r\n", 58, "Line one\r\nLine two"),
    ],
)
def test_score_is_taken_from_the_last_line(reply, score, analysis):
    assert extract_score(reply) == (score, analysis)


@pytest.mark.parametrize(
    "reply",
    [
        "Analysis.\n101",
        "Analysis.\n-1",
        "Analysis.\n7.5",
        "Analysis.\nScore: 67/100",
        "Analysis.\nseventy",
        "",
        "   \n  ",
        "Score 67 out of a possible hundred.",
        "Analysis.\n999999999999999999999",
    ],
)
def test_reply_without_a_valid_score_line_gives_none_and_keeps_the_whole_text(reply):
    assert extract_score(reply) == (None, reply.rstrip())
