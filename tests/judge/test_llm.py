"""The judge LLM client, over real HTTP to the fake OpenAI-compatible server."""

import itertools
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import time
from decimal import Decimal

import pytest
from django.db import connections

from scoring.judge import circuit, errors, llm, pacing
from scoring.models import JudgePacing
from tests.support.fake_llm import (
    CloseConnection,
    Error,
    Garbage,
    Hang,
    Malformed,
    Reply,
    Together,
    Unstreamed,
    context_length_exceeded,
    rate_limited,
    unauthorized,
)
from tests.support.servers import REPO_DIR
from tests.support.throwaway_servers import free_port

pytestmark = pytest.mark.django_db

MESSAGES = [
    {"role": "system", "content": "You are a strict judge."},
    {"role": "user", "content": "Score this session."},
    {"role": "assistant", "content": "Total score: 40"},
    {"role": "user", "content": "Which tools were missing?"},
]


def deadline_in(seconds: float) -> llm.Deadline:
    """A scoring's deadline, as if SCORING_JOB_TIMEOUT_S were ``seconds``."""
    return llm.Deadline(time.monotonic() + seconds, "SCORING_JOB_TIMEOUT_S", seconds)


@pytest.fixture
def warm_judge_llm(judge_llm):
    """The fake judge, after one call: a process's first call loads much of litellm (seconds on
    a busy machine, holding the interpreter), which a worker process does as it starts
    (``llm.preload``) and a test timing a deadline must not count."""
    llm.complete(MESSAGES)
    judge_llm.reset()
    return judge_llm


def gaps(requests) -> list[float]:
    return [later.arrived - earlier.arrived for earlier, later in itertools.pairwise(requests)]


def test_reply_carries_content_tokens_and_model(judge_llm):
    judge_llm.push(Reply("Total score: 62", prompt_tokens=1234, completion_tokens=56))

    reply = llm.complete(MESSAGES)

    assert reply == llm.LLMReply("Total score: 62", 1234, 56, None, "openai/fake-judge", 0)


# OpenAI's names; the fake's Messages API sends Anthropic's.
ANNOUNCED_LIMITS = {"x-ratelimit-limit-requests": "120", "x-ratelimit-limit-tokens": "600000"}


@pytest.mark.parametrize("model", ["openai/fake-judge", "anthropic/claude-sonnet-4-5"])
def test_the_limits_a_providers_answers_announce_pace_the_calls_after_them(judge_llm, settings, model):
    settings.SCORING_LLM_MODEL = model
    if model.startswith("anthropic/"):
        settings.SCORING_LLM_API_BASE = judge_llm.url  # the fake's Messages API, with Anthropic's headers
    judge_llm.set_default(Reply("Total score: 40", headers=ANNOUNCED_LIMITS))

    llm.complete(MESSAGES)  # 120 requests and 600,000 tokens a minute, announced
    # Claude's token limit is not learned: it does not count cache reads (llm._learn_announced_limits).
    assert pacing.limits(model) == (114, 0 if model.startswith("anthropic/") else 570_000)
    llm.complete(MESSAGES)
    llm.complete(MESSAGES)

    # The first call was sent unpaced; the next two 60 / 114 s apart (the clock's own jitter aside).
    (gap,) = gaps(judge_llm.requests[1:])
    assert gap >= 0.4


def test_a_429_that_announces_the_limits_teaches_them_too(judge_llm):
    judge_llm.push(Error(429, headers={"Retry-After": "0", **ANNOUNCED_LIMITS}), Reply("Total score: 40"))

    llm.complete(MESSAGES)

    assert pacing.limits("openai/fake-judge") == (114, 570_000)


def test_reply_carries_the_tokens_the_provider_read_from_its_prompt_cache(judge_llm):
    judge_llm.push(Reply("Total score: 62", prompt_tokens=5000, completion_tokens=56, cached_tokens=4096))

    assert llm.complete(MESSAGES).cached_input_tokens == 4096


@pytest.mark.parametrize(
    ("model", "takes"),
    [
        ("anthropic/claude-sonnet-4-5", True),
        ("bedrock/anthropic.claude-3-5-sonnet-20241022-v2:0", True),
        ("vertex_ai/claude-sonnet-4-5", True),
        ("openai/gpt-4o", False),  # caches long prefixes by itself
        ("gemini/gemini-2.5-pro", False),
        ("deepseek/deepseek-chat", False),
        ("openai/fake-judge", False),  # an OpenAI-compatible server litellm knows nothing of
    ],
)
def test_cache_breakpoints_are_for_the_models_that_cache_only_what_is_marked(settings, model, takes):
    settings.SCORING_LLM_MODEL = model

    assert llm.takes_cache_breakpoints() is takes


def test_messages_are_sent_as_given_with_the_configured_model_and_key(judge_llm):
    llm.complete(MESSAGES)

    [request] = judge_llm.requests
    assert request.path == "/v1/chat/completions"
    assert request.messages == MESSAGES
    assert request.model == "fake-judge"
    assert request.headers["Authorization"] == "Bearer test-key"


def test_empty_content_is_an_empty_string(judge_llm):
    judge_llm.push(Reply(""))

    assert llm.complete(MESSAGES).content == ""


@pytest.mark.parametrize(
    "failure",
    [rate_limited(), Error(500), Error(502), Error(503), CloseConnection(), Malformed(), Garbage()],
    ids=["429", "500", "502", "503", "closed-connection", "malformed-json", "garbage"],
)
def test_transient_failures_are_retried_after_the_backoff(judge_llm, settings, failure):
    settings.SCORING_LLM_BACKOFF_S = 0.1
    judge_llm.push(failure, Reply("Total score: 70"))

    reply = llm.complete(MESSAGES)

    assert reply.content == "Total score: 70"
    requests = judge_llm.requests
    assert len(requests) == 2
    assert requests[1].messages == MESSAGES
    assert gaps(requests)[0] >= 0.1


def test_backoff_doubles_between_attempts(judge_llm, settings):
    settings.SCORING_LLM_BACKOFF_S = 0.1
    judge_llm.push(Error(500), Error(500), Error(500), Reply("Total score: 70"))

    assert llm.complete(MESSAGES).content == "Total score: 70"

    first, second, third = gaps(judge_llm.requests)
    assert first >= 0.1
    assert second >= 0.2
    assert third >= 0.4


def test_retry_after_header_sets_the_wait(judge_llm, settings):
    settings.SCORING_LLM_BACKOFF_S = 0.01
    judge_llm.push(rate_limited(retry_after="1"), Reply("ok"))

    assert llm.complete(MESSAGES).content == "ok"

    assert gaps(judge_llm.requests)[0] >= 1.0


def test_a_retry_after_beyond_the_in_place_limit_sends_the_call_back_to_wait(judge_llm, settings):
    settings.SCORING_LLM_MAX_RETRY_AFTER_S = 60
    judge_llm.push(rate_limited(retry_after="3600"), Reply("ok"))

    with pytest.raises(errors.RateLimited) as raised:
        llm.complete(MESSAGES)

    assert len(judge_llm.requests) == 1
    assert 3599 <= raised.value.retry_after_s <= 3600
    assert str(raised.value) == (
        "judge LLM rate-limited (429): the provider's quota is used up for now: Rate limit reached for requests"
    )


def test_429s_use_up_no_retries(judge_llm, settings):
    settings.SCORING_LLM_MAX_RETRIES = 1
    judge_llm.push(*[rate_limited(retry_after="0")] * 6, Error(500), Reply("ok"))

    assert llm.complete(MESSAGES).content == "ok"

    assert len(judge_llm.requests) == 8


def test_429s_wait_in_place_at_most_the_in_place_limit_in_all(judge_llm, settings):
    settings.SCORING_LLM_BACKOFF_S = 0.05
    settings.SCORING_LLM_MAX_RETRY_AFTER_S = 0.3
    judge_llm.set_default(rate_limited())  # no Retry-After: 0.05, 0.1, 0.2 s doubling

    with pytest.raises(errors.RateLimited):
        llm.complete(MESSAGES)

    assert len(judge_llm.requests) == 3


def test_429s_never_count_for_the_breaker(judge_llm, settings):
    settings.SCORING_CIRCUIT_FAILURE_THRESHOLD = 1
    judge_llm.set_default(rate_limited(retry_after="3600"))
    for _ in range(3):
        with pytest.raises(errors.RateLimited):
            llm.complete(MESSAGES)

    assert circuit.state("openai/fake-judge")["consecutive_failures"] == 0
    JudgePacing.objects.all().delete()  # the provider's hour of waiting, over
    judge_llm.set_default(Error(503))
    settings.SCORING_LLM_MAX_RETRIES = 0
    with pytest.raises(errors.JudgeLLMError):
        llm.complete(MESSAGES)
    assert circuit.state("openai/fake-judge")["state"] == "open"


def test_retries_exhausted_on_server_errors(judge_llm, settings):
    settings.SCORING_LLM_MAX_RETRIES = 2
    judge_llm.set_default(Error(503, "upstream overloaded"))

    with pytest.raises(errors.JudgeLLMError) as raised:
        llm.complete(MESSAGES)

    assert len(judge_llm.requests) == 3
    assert str(raised.value) == "judge LLM provider error (503) after 3 attempts: upstream overloaded"


def test_unreadable_responses_exhaust_retries_with_a_clear_message(judge_llm):
    judge_llm.set_default(Malformed())

    with pytest.raises(errors.JudgeLLMError, match="^judge LLM returned an unreadable response after 4"):
        llm.complete(MESSAGES)

    assert len(judge_llm.requests) == 4


def test_hanging_server_times_out_on_every_attempt(judge_llm, settings):
    settings.SCORING_LLM_TIMEOUT_S = 0.5
    settings.SCORING_LLM_MAX_RETRIES = 1
    judge_llm.set_default(Hang(30))

    with pytest.raises(errors.JudgeLLMError) as raised:
        llm.complete(MESSAGES)

    assert str(raised.value) == (
        "judge LLM request timed out: nothing received for 0.5 s (SCORING_LLM_TIMEOUT_S=0.5) (2 attempts)"
    )
    assert len(judge_llm.requests) == 2


# --- Streamed replies: the timeout is the longest silence ---------------------------------------


def test_every_request_asks_for_its_reply_streamed_with_the_usage(judge_llm):
    llm.complete(MESSAGES)

    [request] = judge_llm.requests
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}


def test_a_slow_model_that_keeps_writing_is_not_cut_off_by_the_timeout(judge_llm, settings):
    settings.SCORING_LLM_TIMEOUT_S = 0.5
    # Nine events 0.25 s apart: over 2 s in all, four times the timeout, never 0.5 s of silence.
    judge_llm.push(Reply("A slow but steady analysis.\n\n70", chunk_delay=0.25, prompt_tokens=900, completion_tokens=9))

    started = time.monotonic()
    reply = llm.complete(MESSAGES)

    assert time.monotonic() - started > 2
    assert (reply.content, reply.input_tokens, reply.output_tokens) == ("A slow but steady analysis.\n\n70", 900, 9)
    assert len(judge_llm.requests) == 1


def test_a_stream_that_stalls_times_out_naming_the_setting_and_what_came(judge_llm, settings):
    settings.SCORING_LLM_TIMEOUT_S = 0.5
    settings.SCORING_LLM_MAX_RETRIES = 1
    # Events: the role, then pieces of 10 characters; silence after the third.
    judge_llm.set_default(Reply("x" * 80, stall_after=3))

    with pytest.raises(errors.JudgeLLMError) as raised:
        llm.complete(MESSAGES)

    assert str(raised.value) == (
        "judge LLM request timed out: nothing received for 0.5 s (SCORING_LLM_TIMEOUT_S=0.5) "
        "after 20 characters of its reply (2 attempts)"
    )
    assert len(judge_llm.requests) == 2


def test_a_stalled_stream_is_retried(judge_llm, settings):
    settings.SCORING_LLM_TIMEOUT_S = 0.5
    judge_llm.push(Reply("x" * 80, stall_after=3), Reply("Total score: 70"))

    assert llm.complete(MESSAGES).content == "Total score: 70"


def test_a_dropped_stream_is_retried_and_said_to_have_broken_off(judge_llm, settings):
    judge_llm.push(Reply("x" * 80, drop_after=4), Reply("Total score: 70"))
    assert llm.complete(MESSAGES).content == "Total score: 70"

    settings.SCORING_LLM_MAX_RETRIES = 1
    judge_llm.set_default(Reply("x" * 80, drop_after=4))
    with pytest.raises(errors.JudgeLLMError) as raised:
        llm.complete(MESSAGES)
    assert str(raised.value).startswith(
        "judge LLM reply stream broke off after 30 characters of its reply (2 attempts): "
    )
    assert "incomplete chunked read" in str(raised.value)


def test_the_deadline_ends_a_reply_still_streaming_and_names_its_setting(warm_judge_llm, settings):
    judge_llm = warm_judge_llm
    settings.SCORING_LLM_TIMEOUT_S = 5
    judge_llm.set_default(Reply("x" * 80, chunk_delay=0.4))

    started = time.monotonic()
    with pytest.raises(errors.DeadlineReached) as raised:
        llm.complete(MESSAGES, deadline=deadline_in(1))

    assert 1 <= time.monotonic() - started < 1.5  # not the 5 s of SCORING_LLM_TIMEOUT_S
    assert re.fullmatch(
        r"scoring deadline reached before the judge LLM answered: SCORING_JOB_TIMEOUT_S=1 s ran out "
        r"while the reply was streaming in \(\d0 characters so far\)",
        str(raised.value),
    )
    # The reply no one waits for is not read to its end: the judge's next write finds the stream closed.
    deadline = time.monotonic() + 3
    while not judge_llm.streams_cut and time.monotonic() < deadline:
        time.sleep(0.05)
    assert judge_llm.streams_cut == 1


def test_usage_and_cache_reads_come_from_the_streams_last_event(judge_llm, settings):
    judge_llm.push(Reply("Total score: 62", prompt_tokens=5000, completion_tokens=56, cached_tokens=4096))
    reply = llm.complete(MESSAGES)
    assert (reply.input_tokens, reply.output_tokens, reply.cached_input_tokens) == (5000, 56, 4096)

    # Anthropic's stream: the input usage in message_start, the output in message_delta.
    settings.SCORING_LLM_MODEL = "anthropic/claude-sonnet-4-5"
    settings.SCORING_LLM_API_BASE = judge_llm.url
    judge_llm.push(Reply("Total score: 62", prompt_tokens=5000, completion_tokens=56, cached_tokens=4096))
    reply = llm.complete(MESSAGES)
    assert (reply.input_tokens, reply.output_tokens, reply.cached_input_tokens) == (5000, 56, 4096)
    assert reply.cost_usd > 0
    assert judge_llm.requests[-1].body["stream"] is True


def test_a_server_that_does_not_stream_is_an_unreadable_answer(judge_llm, settings):
    settings.SCORING_LLM_MAX_RETRIES = 0
    judge_llm.set_default(Unstreamed("Total score: 70"))

    with pytest.raises(errors.JudgeLLMError) as raised:
        llm.complete(MESSAGES)

    assert str(raised.value) == (
        "judge LLM returned an unreadable response after 1 attempt: "
        "a streamed reply was asked for, and the answer was application/json"
    )


# --- How many calls at once: SCORING_JUDGE_CONCURRENCY ------------------------------------------


def test_one_judge_slot_sends_one_call_at_a_time_and_no_timeout_runs_while_a_call_waits_for_it(
    judge_llm, settings
):
    settings.SCORING_JUDGE_CONCURRENCY = 1
    settings.SCORING_LLM_TIMEOUT_S = 0.5
    judge_llm.set_default(Reply("ok", delay=0.3))

    outcomes = llm.run_concurrently([lambda ask: ask(MESSAGES).content] * 3)

    # The third call waited 0.6 s for the slot, past its 0.5 s timeout, and was answered.
    assert outcomes == ["ok"] * 3
    assert all(gap >= 0.3 for gap in gaps(judge_llm.requests))


def test_without_a_limit_the_calls_go_at_once(judge_llm, settings):
    settings.SCORING_JUDGE_CONCURRENCY = 0
    judge_llm.set_default(Together([Reply("ok")] * 3, timeout=5))

    assert llm.run_concurrently([lambda ask: ask(MESSAGES).content] * 3) == ["ok"] * 3


def test_the_deadline_ends_a_wait_for_a_slot_and_says_so(warm_judge_llm, settings):
    judge_llm = warm_judge_llm
    settings.SCORING_JUDGE_CONCURRENCY = 1
    judge_llm.set_default(Reply("ok", delay=2))

    outcomes = llm.run_concurrently([lambda ask: ask(MESSAGES).content] * 2, deadline=deadline_in(1))

    ran_out = "scoring deadline reached before the judge LLM answered: SCORING_JOB_TIMEOUT_S=1 s ran out while"
    assert sorted(str(outcome) for outcome in outcomes) == [
        f"{ran_out} waiting 1.0 s for the reply's first chunk",  # the call sent
        f"{ran_out} waiting for a free judge slot (SCORING_JUDGE_CONCURRENCY=1)",  # the call never sent
    ]
    assert len(judge_llm.requests) == 1  # the other waited for the slot to its end


def test_connection_refused_is_retried_then_reported(judge_llm, settings):
    closed_port = free_port()  # free a moment ago: no listener
    settings.SCORING_LLM_API_BASE = f"http://127.0.0.1:{closed_port}/v1"

    with pytest.raises(errors.JudgeLLMError) as raised:
        llm.complete(MESSAGES)

    assert str(raised.value).startswith(
        f"could not connect to the judge LLM at http://127.0.0.1:{closed_port}/v1 (4 attempts)"
    )


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (unauthorized(), "judge LLM rejected the credentials (401): Incorrect API key provided: test-key."),
        (Error(403, "no access"), "judge LLM rejected the credentials (403): no access"),
        (Error(400, "bad temperature"), "judge LLM rejected the request (400): bad temperature"),
        (Error(404, "model not found"), "judge LLM rejected the request (404): model not found"),
    ],
    ids=["401", "403", "400", "404"],
)
def test_client_errors_are_not_retried(judge_llm, failure, message):
    judge_llm.set_default(failure)

    with pytest.raises(errors.JudgeLLMError) as raised:
        llm.complete(MESSAGES)

    assert str(raised.value) == message
    assert len(judge_llm.requests) == 1


def test_context_window_error_is_not_retried(judge_llm):
    judge_llm.set_default(context_length_exceeded())

    with pytest.raises(errors.ContextWindowExceeded) as raised:
        llm.complete(MESSAGES)

    assert str(raised.value).startswith(
        "session too large for the judge model's context window: This model's maximum context length"
    )
    assert len(judge_llm.requests) == 1


def test_the_deadline_ends_a_call_waiting_for_its_first_chunk_and_names_its_setting(warm_judge_llm):
    judge_llm = warm_judge_llm
    judge_llm.set_default(Hang(30))

    started = time.monotonic()
    with pytest.raises(errors.DeadlineReached) as raised:
        llm.complete(MESSAGES, deadline=deadline_in(0.5))

    assert 0.5 <= time.monotonic() - started < 1.5
    assert len(judge_llm.requests) == 1
    assert str(raised.value) == (
        "scoring deadline reached before the judge LLM answered: SCORING_JOB_TIMEOUT_S=0.5 s ran out "
        "while waiting 0.5 s for the reply's first chunk"
    )
    assert raised.value.counts_for_circuit is False  # running out of time says nothing of the provider


def test_no_retry_wait_past_the_deadline(judge_llm, settings):
    settings.SCORING_LLM_BACKOFF_S = 60
    judge_llm.set_default(Error(500, "boom"))

    with pytest.raises(errors.DeadlineReached) as raised:
        llm.complete(MESSAGES, deadline=deadline_in(5))

    assert str(raised.value) == (
        "scoring deadline reached before the judge LLM answered: SCORING_JOB_TIMEOUT_S=5 s ran out; "
        "the last failed attempt: judge LLM provider error (500) after 1 attempt: boom"
    )

    assert len(judge_llm.requests) == 1


def test_passed_deadline_sends_nothing(judge_llm):
    with pytest.raises(errors.DeadlineReached) as raised:
        llm.complete(MESSAGES, deadline=deadline_in(-1))

    assert str(raised.value) == (
        "scoring deadline reached before the judge LLM answered: SCORING_JOB_TIMEOUT_S=-1 s ran out "
        "before the call was sent"
    )

    assert judge_llm.requests == []


def test_no_model_configured(judge_llm, settings):
    settings.SCORING_LLM_MODEL = ""

    with pytest.raises(errors.JudgeNotConfigured) as raised:
        llm.complete(MESSAGES)

    assert str(raised.value) == "no judge model configured: set SCORING_LLM_MODEL"
    assert judge_llm.requests == []


def test_errors_survive_pickling():
    raised = [
        errors.JudgeNotConfigured(),
        errors.DeadlineReached("scoring deadline reached", provider_failed=True),
        errors.ContextWindowExceeded("session too large"),
    ]

    copies = [pickle.loads(pickle.dumps(error)) for error in raised]

    assert [(type(copy), str(copy), copy.counts_for_circuit) for copy in copies] == [
        (type(error), str(error), error.counts_for_circuit) for error in raised
    ]


def test_cost_of_a_model_with_a_known_price(judge_llm, settings):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o-mini"
    judge_llm.push(Reply("Total score: 50", prompt_tokens=1_000_000, completion_tokens=1_000_000))

    reply = llm.complete(MESSAGES)

    assert judge_llm.requests[0].model == "gpt-4o-mini"
    assert isinstance(reply.cost_usd, Decimal)
    assert reply.cost_usd > 0
    assert reply.model == "openai/gpt-4o-mini"


def test_request_and_reply_bodies_are_logged_truncated(judge_llm, caplog):
    judge_llm.push(Reply("x" * 5000))
    caplog.set_level(logging.DEBUG, logger="scoring.judge.llm")

    llm.complete([{"role": "user", "content": "y" * 5000}])

    bodies = [record.getMessage() for record in caplog.records if record.levelno == logging.DEBUG]
    [request] = [body for body in bodies if body.startswith("judge LLM request")]
    [reply] = [body for body in bodies if body.startswith("judge LLM reply")]
    assert 950 < request.count("y") < 1000  # 1000 characters of the JSON, quotes and keys included
    assert request.endswith(f"… ({len(json.dumps([{'role': 'user', 'content': 'y' * 5000}]))} characters)")
    assert reply.count("x") == 1000
    assert reply.endswith("… (5000 characters)")
    outcomes = [record.getMessage() for record in caplog.records if record.levelno == logging.INFO]
    assert any("openai/fake-judge answered" in outcome for outcome in outcomes)


# --- The circuit breaker, seen through complete() ---------------------------------------------


def fail_calls(count: int) -> None:
    for _ in range(count):
        with pytest.raises(errors.JudgeLLMError):
            llm.complete(MESSAGES)


def test_breaker_opens_after_consecutive_failed_calls_and_fails_fast(judge_llm):
    judge_llm.set_default(unauthorized())
    fail_calls(5)
    assert len(judge_llm.requests) == 5

    with pytest.raises(errors.CircuitOpen) as raised:
        llm.complete(MESSAGES)

    assert len(judge_llm.requests) == 5
    assert str(raised.value).startswith(
        "judge LLM circuit breaker is open after 5 consecutive failed calls "
        "(last: judge LLM rejected the credentials (401)"
    )


def test_a_success_resets_the_count(judge_llm):
    judge_llm.push(*[unauthorized()] * 4, Reply("ok"), *[unauthorized()] * 4)
    fail_calls(4)
    llm.complete(MESSAGES)
    fail_calls(4)

    state = circuit.state("openai/fake-judge")
    assert (state["state"], state["consecutive_failures"]) == ("closed", 4)


def test_context_window_errors_do_not_count(judge_llm):
    judge_llm.set_default(context_length_exceeded())
    fail_calls(6)

    assert circuit.state("openai/fake-judge")["consecutive_failures"] == 0
    assert len(judge_llm.requests) == 6


def test_breaker_closes_after_cool_down_on_success(judge_llm, settings):
    settings.SCORING_CIRCUIT_COOLDOWN_S = 0.3
    judge_llm.push(*[Error(401)] * 5)
    fail_calls(5)
    with pytest.raises(errors.CircuitOpen):
        llm.complete(MESSAGES)

    time.sleep(0.35)
    assert llm.complete(MESSAGES).content == "This is the fake judge's reply."

    assert circuit.state("openai/fake-judge")["state"] == "closed"
    assert len(judge_llm.requests) == 6


def test_failed_probe_after_cool_down_reopens_the_breaker(judge_llm, settings):
    settings.SCORING_CIRCUIT_COOLDOWN_S = 0.3
    judge_llm.set_default(Error(401))
    fail_calls(5)

    time.sleep(0.35)
    fail_calls(1)  # the probe reaches the server and fails

    assert len(judge_llm.requests) == 6
    with pytest.raises(errors.CircuitOpen, match="after 6 consecutive failed calls"):
        llm.complete(MESSAGES)
    assert len(judge_llm.requests) == 6


# --- Several conversations at once (the judge's samples) --------------------------------------


def test_concurrent_conversations_each_give_what_they_returned_or_raised_in_the_order_given(judge_llm):
    judge_llm.set_default(Together([Reply("ok"), Reply("ok"), unauthorized()]))

    def conversation(number):
        return lambda ask: (number, ask(MESSAGES).content)

    outcomes = llm.run_concurrently([conversation(number) for number in range(3)])

    answered = [position for position, outcome in enumerate(outcomes) if isinstance(outcome, tuple)]
    assert [outcomes[position] for position in answered] == [(position, "ok") for position in answered]
    [error] = [outcome for outcome in outcomes if not isinstance(outcome, tuple)]
    assert isinstance(error, errors.JudgeLLMError) and str(error).startswith("judge LLM rejected the credentials (401)")


def test_every_call_of_concurrent_conversations_counts_in_the_breaker(judge_llm):
    judge_llm.set_default(unauthorized())

    outcomes = llm.run_concurrently([lambda ask: ask(MESSAGES)] * 3)

    assert all(isinstance(outcome, errors.JudgeLLMError) for outcome in outcomes)
    assert circuit.state("openai/fake-judge")["consecutive_failures"] == 3


def test_concurrent_conversations_are_refused_before_any_call_while_the_breaker_is_open(judge_llm):
    judge_llm.set_default(unauthorized())
    fail_calls(5)

    with pytest.raises(errors.CircuitOpen):
        llm.run_concurrently([lambda ask: ask(MESSAGES)] * 2)
    assert len(judge_llm.requests) == 5


@pytest.mark.django_db(transaction=True)
def test_no_judge_call_is_sent_while_its_thread_or_the_caller_holds_a_connection(judge_llm, monkeypatch):
    """Hundreds of judge calls wait on the network at once, and PostgreSQL allows a hundred
    connections: a call gives its thread's connection back before it is sent, and the thread
    that waits on concurrent calls gives back its own."""
    caller = connections["default"]  # this thread's
    held = []  # per call sent: (its thread holds a connection, the caller holds one)
    send = llm._complete_once

    def sending(*args, **kwargs):
        held.append((connections["default"].connection is not None, caller.connection is not None))
        return send(*args, **kwargs)

    monkeypatch.setattr(llm, "_complete_once", sending)
    judge_llm.set_default(Reply("ok"))

    llm.complete(MESSAGES)
    llm.run_concurrently([lambda ask: ask(MESSAGES)] * 2)

    assert held == [(False, False)] * 3


def test_importing_the_client_does_not_import_litellm():
    code = (
        "import sys, django; django.setup(); import scoring.judge.llm, scoring.judge.circuit; "
        "print(sorted(name for name in ('litellm', 'openai') if name in sys.modules))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tarsy_scoring.settings"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"


def test_preload_leaves_little_for_a_processs_first_judge_call_to_load(judge_llm):
    # Without the preload, the first call loads some 520 modules (0.4-0.7 s); a few lazy
    # imports of litellm's own are left.
    code = (
        "import json, sys, django; django.setup(); from scoring.judge import llm; llm.preload(); "
        "before = set(sys.modules); "
        "llm._complete_once(llm.settings.SCORING_LLM_MODEL, [{'role': 'user', 'content': 'hi'}], None, 1, None); "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    env = {**os.environ, **judge_llm.env(), "DJANGO_SETTINGS_MODULE": "tarsy_scoring.settings"}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_DIR, env=env, capture_output=True, text=True)

    assert result.returncode == 0, result.stderr
    loaded_by_the_call = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(judge_llm.requests) == 1
    assert len(loaded_by_the_call) < 10, loaded_by_the_call


def test_a_model_litellm_cannot_call_does_not_stop_a_worker_process_from_starting(settings, caplog):
    settings.SCORING_LLM_MODEL = "nosuchprovider/judge"

    llm.preload.__wrapped__()  # preload is cached per process

    assert "could not prepare calls to the judge model nosuchprovider/judge: " in caplog.text
    assert "LLM Provider NOT provided" in caplog.text


def test_the_input_window_comes_from_litellms_model_list(settings):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o-mini"
    assert llm.model_input_window() == 128_000
    settings.SCORING_LLM_MODEL = "openai/fake-judge"  # a model litellm does not list
    assert llm.model_input_window() is None
