"""Counting tokens as the judge model does (scoring/judge/tokens.py)."""

import json
import math
import threading
import uuid
from pathlib import Path

import pytest

from scoring import services
from scoring.judge import fitting, tokens
from scoring.models import JudgeTokenRatio, ScoringStatus
from tests.support.factories import run_next_scoring
from tests.support.fake_llm import ContextWindow, ModelTokenizer, Reply
from tests.support.long_sessions import log_lines, with_long_tool_output

SAMPLES = Path(__file__).resolve().parents[2] / "scoring" / "samples"
TURN1 = "## Score breakdown\nLogical Flow: 20/25\n\n71"
LOGS = log_lines(20_000)

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def model_tokenizer():
    return ModelTokenizer()


def score_long_session(size: int):
    document = with_long_tool_output(json.loads((SAMPLES / "01_single_stage_react.json").read_text()), size)
    document["session_id"] = str(uuid.uuid4())  # a session of its own each time
    session, _ = services.ingest_session(document, written_by="tarsy")
    services.score_request(session_id=session.session_id, triggered_by="bob")
    return run_next_scoring()


def test_litellm_counts_offline_with_the_models_tokenizer_or_openais(settings):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o-mini"
    assert tokens.litellm_count("hello world") == 2
    settings.SCORING_LLM_MODEL = "openai/fake-judge"  # a model litellm does not know: counted as OpenAI's
    assert tokens.litellm_count("hello world") == 2


@pytest.mark.parametrize("style", ["llama.cpp", "vllm"])
def test_a_server_that_tokenizes_counts_for_its_model(judge_llm, style):
    tokenizer = ModelTokenizer(style)
    judge_llm.set_tokenizer(tokenizer)

    assert tokens.count(LOGS) == tokenizer.count(LOGS) > tokens.litellm_count(LOGS) * 1.2
    assert tokens.method() == f"the provider's own tokenizer ({style} POST {judge_llm.url}/tokenize)"
    assert judge_llm.requests == []  # no judge call was made to count


def test_a_server_without_tokenize_leaves_the_count_to_litellm(judge_llm):
    assert tokens.count(LOGS) == tokens.litellm_count(LOGS)
    assert tokens.method().startswith("litellm's default tokenizer times the ratio learned")


def test_a_model_whose_tokenizer_litellm_has_is_counted_by_litellm(settings):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o"
    tokens.forget()
    JudgeTokenRatio.objects.create(
        model="openai/gpt-4o", ratio=2.0, provider_tokens=2, counted_tokens=1, learned_at_us=0
    )  # no ratio applies to it

    assert tokens.count(LOGS) == tokens.litellm_count(LOGS)
    assert tokens.method() == "litellm's tokenizer for the model"


def test_the_ratio_is_learned_from_the_answers_kept_for_every_process_and_fits_the_next_scoring(
    judge_llm, settings, model_tokenizer
):
    # A 32k model that counts as Qwen does, on a server with no /tokenize: litellm's count of a
    # log-heavy prompt falls a fifth short, so the first prompt, fitted by it, takes most of
    # the room kept for the replies (llama.cpp would cut the replies short at the window's end).
    settings.SCORING_LLM_CONTEXT_TOKENS = 32_768
    room = fitting.prompt_room(32_768) + fitting.MESSAGE_OVERHEAD_TOKENS  # turn 1's, framing included
    window = ContextWindow(32_768, Reply(TURN1), tokenizer=model_tokenizer)
    judge_llm.set_default(window)

    first = score_long_session(400_000)

    assert first.status == ScoringStatus.COMPLETED, first.error_message
    assert window.received[0] > room + 4_000
    learned = tokens.ratio()  # as the process's next fitting reads it, saving what it learned
    stored = JudgeTokenRatio.objects.get(model="openai/fake-judge")
    assert stored.ratio == learned
    assert 1.1 < stored.ratio == pytest.approx(stored.provider_tokens / stored.counted_tokens)

    tokens.forget()  # another worker process: it knows only the table
    assert tokens.ratio() == stored.ratio
    window.received.clear()

    second = score_long_session(400_000)

    assert second.status == ScoringStatus.COMPLETED, second.error_message
    assert room * 0.9 < window.received[0] <= room  # by the model's own count
    assert 0 < second.input_coverage < 1


def test_a_server_that_tokenizes_gets_prompts_within_its_window_at_once(judge_llm, settings, model_tokenizer):
    settings.SCORING_LLM_CONTEXT_TOKENS = 32_768
    judge_llm.set_tokenizer(model_tokenizer)
    window = ContextWindow(32_768, Reply(TURN1), tokenizer=model_tokenizer)
    judge_llm.set_default(window)

    score = score_long_session(400_000)

    assert score.status == ScoringStatus.COMPLETED, score.error_message
    room = fitting.prompt_room(32_768) + fitting.MESSAGE_OVERHEAD_TOKENS
    assert room * 0.9 < window.received[0] <= room  # by the model's own count
    assert not JudgeTokenRatio.objects.exists()  # nothing to learn: the server counts


def test_the_ratio_is_never_below_1(judge_llm, settings):
    # A provider that counts fewer tokens than litellm does (OpenAI's newer tokenizer, say).
    judge_llm.set_default(Reply(TURN1, prompt_tokens=3_000))

    score = score_long_session(100_000)

    assert score.status == ScoringStatus.COMPLETED, score.error_message
    assert tokens.ratio() == 1.0
    assert not JudgeTokenRatio.objects.exists()


def test_a_larger_ratio_replaces_a_smaller_one_and_never_the_reverse(settings):
    settings.SCORING_LLM_MODEL = "openai/fake-judge"
    tokens.forget()
    messages = [{"role": "user", "content": LOGS}]
    ours = tokens.litellm_count(LOGS) + tokens.MESSAGE_FRAMING_TOKENS + tokens.REPLY_PRIMING_TOKENS

    tokens.observe("openai/fake-judge", messages, int(ours * 1.3))
    assert tokens.ratio() == pytest.approx(1.3, abs=0.001)
    tokens.observe("openai/fake-judge", messages, int(ours * 1.1))
    tokens.forget()
    assert tokens.ratio() == pytest.approx(1.3, abs=0.001)
    tokens.observe("openai/fake-judge", messages, int(ours * 1.5))
    assert tokens.ratio() == pytest.approx(1.5, abs=0.001)
    tokens.forget()
    assert tokens.ratio() == pytest.approx(1.5, abs=0.001)
    assert tokens.count(LOGS) == math.ceil(tokens.litellm_count(LOGS) * tokens.ratio())


def test_an_answer_in_a_samples_thread_is_saved_by_the_next_fitting(settings):
    # Samples' threads hold no database connection: what they learn is saved from the job's thread.
    settings.SCORING_LLM_MODEL = "openai/fake-judge"
    tokens.forget()
    messages = [{"role": "user", "content": LOGS}]
    ours = tokens.litellm_count(LOGS) + tokens.MESSAGE_FRAMING_TOKENS + tokens.REPLY_PRIMING_TOKENS
    thread = threading.Thread(target=tokens.observe, args=("openai/fake-judge", messages, int(ours * 1.4)))
    thread.start()
    thread.join()
    assert not JudgeTokenRatio.objects.exists()

    fitting.fit_prompt(["a short investigation"], lambda investigation: investigation, 32_000)

    assert JudgeTokenRatio.objects.get().ratio == pytest.approx(1.4, abs=0.001)
