"""A real model judges real sessions end to end (the ``real_model`` group: bin/test --real-model).

Qwen2.5-Coder-0.5B-Instruct on llama.cpp's server (tests/support/local_model.py) scores real
tarsy-bot session documents and Go TARSy's e2e sessions through the whole service: stored as
TARSy sends them, requested, claimed and judged as a worker does. The tests assert the
structure of what comes back and what was sent, never its quality: a small model's judgement
is not what is under test, and it is not the same from one llama.cpp build to the next.
"""

import itertools
import json

import pytest

from scoring import services
from scoring.judge import conversation, fitting
from scoring.judge.prompts import JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS, RESTATE_SCORE_PROMPT
from scoring.models import ScoringStatus
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


def assert_judged_as_sent(score, judge) -> list:
    """What every scoring on a real model must show: a completed score in range, and
    conversations as the judge's turns make them, each within the model's window by the
    model's own count, whose tokens and replies are the ones the score stores."""
    assert score.status == ScoringStatus.COMPLETED, score.error_message
    assert 0 <= score.total_score <= 100
    assert score.judge_model == f"openai/{MODEL.name}"

    calls = judge.calls()
    assert all(call.status == 200 for call in calls)
    # Turn 1, a restatement of the score when turn 1's last line held none, then turn 2.
    assert len(calls) in (2, 3)
    *turn1, turn2 = calls
    assert [message["role"] for message in turn1[0].messages] == ["user"]
    if len(turn1) == 2:
        assert turn1[1].messages[-1] == {"role": "user", "content": RESTATE_SCORE_PROMPT}
    assert turn2.messages[-1] == {"role": "user", "content": JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS}
    # Each conversation continues the one before it, with the model's reply as it came.
    for earlier, later in itertools.pairwise(calls):
        reply = earlier.answer["choices"][0]["message"]["content"]
        assert later.messages[: len(earlier.messages) + 1] == [
            *earlier.messages,
            {"role": "assistant", "content": reply},
        ]

    window = judge.window
    for call in calls:
        usage = call.answer["usage"]
        # The model's own count of what was sent, from its template and tokenizer, is what it
        # reports having read; with its reply, it is within the window.
        assert judge.model_count(call.messages) == usage["prompt_tokens"]
        assert usage["prompt_tokens"] + usage["completion_tokens"] <= window
        assert usage["completion_tokens"] <= REPLY_CAP_TOKENS

    # The score records what the model answered: its tokens, its replies.
    assert score.input_tokens == sum(call.answer["usage"]["prompt_tokens"] for call in calls)
    assert score.output_tokens == sum(call.answer["usage"]["completion_tokens"] for call in calls)
    turn1_reply = turn1[0].answer["choices"][0]["message"]["content"]
    if len(turn1) == 1:
        assert (score.total_score, score.score_analysis) == conversation.extract_score(turn1_reply)
    else:  # the score is the restated one; the analysis is turn 1's whole reply
        restated = turn1[1].answer["choices"][0]["message"]["content"]
        assert score.total_score == conversation.extract_score(restated)[0]
        assert score.score_analysis == turn1_reply.rstrip()
    assert score.missing_tools_analysis == turn2.answer["choices"][0]["message"]["content"]
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
