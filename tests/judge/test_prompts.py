import dataclasses
import hashlib

from scoring.judge import prompts

SPEC_PROMPT_HASH = "9868eccb666e33b29b7c24e27994ef21511b20dc617f1fe48783ace3c735c2bf"


def test_prompt_hash_is_pinned_to_the_spec_prompts():
    assert prompts.PROMPT_HASH == SPEC_PROMPT_HASH


def test_prompt_hash_is_sha256_of_both_prompts_concatenated():
    joined = prompts.JUDGE_PROMPT_SCORE + prompts.JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS
    assert prompts.PROMPT_HASH == hashlib.sha256(joined.encode()).hexdigest()


def test_prompts_have_no_trailing_newline_and_carry_their_placeholders():
    assert not prompts.JUDGE_PROMPT_SCORE.endswith("\n")
    assert not prompts.JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS.endswith("\n")
    assert prompts.JUDGE_PROMPT_SCORE.startswith("You are a computer security expert")
    assert prompts.JUDGE_PROMPT_SCORE.endswith("{{OUTPUT_SCHEMA}}")
    for placeholder in ("{{SESSION_CONVERSATION}}", "{{ALERT_DATA}}", "{{OUTPUT_SCHEMA}}"):
        assert prompts.JUDGE_PROMPT_SCORE.count(placeholder) == 1
    assert prompts.JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS.endswith('"No critical missing tools identified."')


def test_each_placeholder_is_substituted_once():
    filled = prompts.fill_placeholders(
        prompts.JUDGE_PROMPT_SCORE,
        {"SESSION_CONVERSATION": "CONV", "ALERT_DATA": "ALERT", "OUTPUT_SCHEMA": "SCHEMA"},
    )
    assert "{{" not in filled
    assert filled.count("CONV") == 1 and filled.endswith("\n\nSCHEMA")


def test_placeholder_text_inside_session_data_is_never_substituted():
    hostile = "tool said {{ALERT_DATA}} and {{OUTPUT_SCHEMA}} and {{SESSION_CONVERSATION}}"
    filled = prompts.fill_placeholders(
        "A {{SESSION_CONVERSATION}} B {{ALERT_DATA}} C {{OUTPUT_SCHEMA}}",
        {"SESSION_CONVERSATION": hostile, "ALERT_DATA": '{"x": "{{SESSION_CONVERSATION}}"}', "OUTPUT_SCHEMA": "S"},
    )
    assert filled == f'A {hostile} B {{"x": "{{{{SESSION_CONVERSATION}}}}"}} C S'


def test_unknown_placeholder_like_text_in_the_template_is_left_alone():
    assert prompts.fill_placeholders("{{OTHER}} {{ALERT_DATA}}", {"ALERT_DATA": "a"}) == "{{OTHER}} a"


def test_criteria_without_a_system_prompt_hash_as_ep_0028_defines_it():
    assert prompts.SHIPPED_CRITERIA.prompt_hash == SPEC_PROMPT_HASH
    own = prompts.Criteria(score_prompt="S {{SESSION_CONVERSATION}}", followup_prompt="F")
    assert own.prompt_hash == hashlib.sha256(b"S {{SESSION_CONVERSATION}}F").hexdigest()


def test_a_system_prompt_is_part_of_the_hash_and_cannot_pass_for_the_score_prompt():
    with_system = prompts.Criteria(score_prompt="B", followup_prompt="C", system_prompt="A")
    moved = prompts.Criteria(score_prompt="AB", followup_prompt="C")

    assert with_system.prompt_hash == hashlib.sha256(b"A\x00BC").hexdigest()
    assert with_system.prompt_hash != moved.prompt_hash


def test_the_shipped_criteria_have_no_problem():
    assert prompts.criteria_problems(prompts.SHIPPED_CRITERIA) == []


EXAMPLE = prompts.CalibrationExample(
    session_id="8a1f0c7e-0000-4000-8000-000000000001",
    alert_type="kubernetes",
    judge_score=90,
    reviewer_score=20,
    note="Never read the pod logs.",
    excerpt="## SESSION\n...",
)


def test_worked_examples_are_part_of_the_hash_after_the_texts_and_the_hash_without_them_is_unchanged():
    plain = prompts.Criteria(score_prompt="S {{CALIBRATION_EXAMPLES}}", followup_prompt="F")
    calibrated = prompts.Criteria("S {{CALIBRATION_EXAMPLES}}", "F", examples=(EXAMPLE,))
    shipped_again = prompts.Criteria(
        prompts.JUDGE_PROMPT_SCORE, prompts.JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS, examples=()
    )

    assert shipped_again.prompt_hash == SPEC_PROMPT_HASH
    assert plain.prompt_hash == hashlib.sha256(b"S {{CALIBRATION_EXAMPLES}}F").hexdigest()
    expected = b"S {{CALIBRATION_EXAMPLES}}F\x00" + prompts.examples_json((EXAMPLE,)).encode()
    assert calibrated.prompt_hash == hashlib.sha256(expected).hexdigest() != plain.prompt_hash
    noted_otherwise = prompts.Criteria(
        plain.score_prompt, "F", examples=(dataclasses.replace(EXAMPLE, note="Fair."),)
    )
    assert noted_otherwise.prompt_hash != calibrated.prompt_hash


def test_examples_need_their_placeholder_in_the_score_prompt_and_it_only_there():
    without_place = prompts.Criteria("{{SESSION_CONVERSATION}}", "F", examples=(EXAMPLE,))
    in_followup = prompts.Criteria("{{SESSION_CONVERSATION}}", "F {{CALIBRATION_EXAMPLES}}")

    assert prompts.criteria_problems(without_place) == [
        "The score prompt has no {{CALIBRATION_EXAMPLES}} placeholder: the judge would not see the examples."
    ]
    assert prompts.criteria_problems(in_followup) == [
        "The follow-up prompt has a placeholder ({{...}}); only the score prompt is filled in."
    ]
