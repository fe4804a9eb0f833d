"""A real model judges real sessions end to end (the ``real_model`` group: bin/test --real-model).

Qwen2.5-Coder-0.5B-Instruct on llama.cpp's server (tests/support/local_model.py) scores real
tarsy-bot session documents and Go TARSy's e2e sessions through the whole service: stored as
TARSy sends them, requested, claimed and judged as a worker does (replies streamed, counted by
the server's own /tokenize). The tests assert the structure of what comes back and what was
sent, never its quality: a small model's judgement
is not what is under test, and it is not the same from one llama.cpp build to the next.
"""

import itertools
import json

import pytest

from scoring import services
from scoring.judge import conversation, fitting, replies, sampling
from scoring.judge.prompts import (
    EVALUATION_FOLLOWUP_PROMPT,
    JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS,
    RESTATE_SCORE_PROMPT,
)
from scoring.models import ScoreTranscript, ScoringStatus
from tests.support.factories import run_next_scoring
from tests.support.local_model import MODEL, REPLY_CAP_TOKENS
from tests.support.long_sessions import with_long_tool_output
from tests.support.tarsy import REAL_DOCUMENTS_DIR, real_documents
from tests.support.tarsy_go import golden_document

pytestmark = [pytest.mark.real_model, pytest.mark.django_db, pytest.mark.timeout(900)]

# The smallest of each source, so that the group stays within minutes on two cores.
TARSY_BOT_SESSIONS = (
    "cancel_session_parallel__cancel_paused_parallel_session_cancels_all_paused_stages__20d54694",
    "single_agent_llm_failure__langchain_react_agent_llm_failure__29f47663",
)
GO_SCENARIOS = ("orchestrator", "action-chain")
# A log-heavy session, larger than the window: the judge must fit it (its get_logs result grown).
LONG_SESSION = TARSY_BOT_SESSIONS[0]
LONG_TOOL_OUTPUT_CHARS = 150_000
FITTED_WINDOW_TOKENS = 16_384


def tarsy_bot_document(name: str) -> dict:
    real_documents()  # fails in CI, skips elsewhere, when the folder is missing
    return json.loads((REAL_DOCUMENTS_DIR / f"{name}.json").read_text(encoding="utf-8"))


def score_document(document: dict):
    session, _ = services.ingest_session(document, written_by="tarsy")
    services.score_request(session_id=session.session_id, triggered_by="ci")
    return run_next_scoring()


def reply_of(call) -> str:
    return call.answer["choices"][0]["message"]["content"]


def assert_judged_as_sent(score, judge) -> list:
    """What every scoring on a real model must show: a completed score in range, with an
    evaluation or the warning that it has none; conversations as the judge's turns make them,
    each within the model's window by the model's own count and sent with the judge's sampling
    settings; the tokens and replies the score and its transcript store are the model's."""
    assert score.status == ScoringStatus.COMPLETED, score.error_message
    assert 0 <= score.total_score <= 100
    assert score.judge_model == f"openai/{MODEL.name}"

    calls = judge.calls()
    assert all(call.status == 200 for call in calls)
    # Turn 1, then in this order any of: a restatement of the score when turn 1's last line held
    # none, a request for the evaluation when its reply held none, and turn 2, which is asked
    # only about an evaluation.
    assert [message["role"] for message in calls[0].messages] == ["user"]
    follow_ups = [call.messages[-1]["content"] for call in calls[1:]]
    order = [RESTATE_SCORE_PROMPT, EVALUATION_FOLLOWUP_PROMPT, JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS]
    assert follow_ups == [prompt for prompt in order if prompt in follow_ups]
    asked_turn2 = JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS in follow_ups
    # Each call continues the one before it, with the model's reply as it came.
    for earlier, later in itertools.pairwise(calls):
        assert later.messages[: len(earlier.messages) + 1] == [
            *earlier.messages,
            {"role": "assistant", "content": reply_of(earlier)},
        ]

    window = judge.window
    for call in calls:
        usage = call.answer["usage"]
        # The model's own count of what was sent, from its template and tokenizer, is what it
        # reports having read; with its reply, it is within the window.
        assert judge.model_count(call.messages) == usage["prompt_tokens"]
        assert usage["prompt_tokens"] + usage["completion_tokens"] <= window
        assert usage["completion_tokens"] <= REPLY_CAP_TOKENS
        # Sent with the judge's sampling settings, as the score records them.
        assert (call.request["temperature"], call.request["seed"]) == (score.judge_temperature, score.judge_seed)
    assert (score.judge_temperature, score.judge_seed) == (0, 0)
    # Turn 1's prompt, by the model's own count, left the room for the replies the window was
    # told to keep (the judge counts with the server's /tokenize).
    told_window = fitting.context_window()
    assert judge.model_count(calls[0].messages) <= told_window - 2 * sampling.REPLY_MAX_TOKENS

    # The evaluation, or the documented warning and no turn 2.
    if score.analysis_missing:
        assert replies.ANALYSIS_MISSING_WARNING in score.warnings
        assert not asked_turn2 and score.missing_tools_analysis is None
    else:
        assert replies.has_evaluation(score.score_analysis)
        assert asked_turn2 and score.missing_tools_analysis == reply_of(calls[-1])
        assert replies.ANALYSIS_MISSING_WARNING not in score.warnings
    # The score is one the model wrote, on a reply's last line.
    turn1_replies = [reply_of(call) for call in calls[: len(calls) - asked_turn2]]
    assert score.total_score in [conversation.extract_score(reply)[0] for reply in turn1_replies]

    # The score records what the model answered: its tokens, and in its transcript every
    # message as sent and every reply.
    assert score.input_tokens == sum(call.answer["usage"]["prompt_tokens"] for call in calls)
    assert score.output_tokens == sum(call.answer["usage"]["completion_tokens"] for call in calls)
    transcript = ScoreTranscript.objects.get(score=score).transcript
    assert (transcript["model"], transcript["temperature"], transcript["seed"]) == (score.judge_model, 0, 0)
    [recorded] = transcript["conversations"]
    assert recorded["messages"] == [*calls[-1].messages, {"role": "assistant", "content": reply_of(calls[-1])}]
    assert score.cost_usd is None  # litellm knows no price for a local model
    return calls


@pytest.mark.parametrize("name", TARSY_BOT_SESSIONS, ids=lambda name: name.rsplit("__", 1)[-1])
def test_a_real_model_scores_a_real_tarsy_bot_session(name, real_judge):
    score = score_document(tarsy_bot_document(name))

    assert_judged_as_sent(score, real_judge)
    assert score.input_coverage == 1.0  # small enough to be sent whole
    assert not any(fitting.is_fitting_warning(warning) for warning in score.warnings)


@pytest.mark.parametrize("scenario", GO_SCENARIOS)
def test_a_real_model_scores_a_go_tarsy_session(scenario, real_judge):
    score = score_document(golden_document(scenario))

    assert_judged_as_sent(score, real_judge)
    assert score.input_coverage == 1.0


def test_a_session_larger_than_the_window_is_fitted_and_sent_within_it(real_judge, settings):
    # The judge is told a smaller window than the server's, so that fitting cuts a log that a
    # 32k window would almost hold, at half the reading time; the server's own window bounds
    # nothing here, the one told to the judge must.
    settings.SCORING_LLM_CONTEXT_TOKENS = FITTED_WINDOW_TOKENS
    document = with_long_tool_output(tarsy_bot_document(LONG_SESSION), LONG_TOOL_OUTPUT_CHARS)

    score = score_document(document)

    calls = assert_judged_as_sent(score, real_judge)
    assert 0 < score.input_coverage < 1
    assert any(fitting.is_fitting_warning(warning) for warning in score.warnings)
    # What the model read of turn 1's prompt and the longest conversation, by its own count,
    # stayed within the window the judge was told.
    assert max(call.answer["usage"]["prompt_tokens"] for call in calls) <= FITTED_WINDOW_TOKENS
