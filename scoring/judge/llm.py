"""Every judge LLM call goes through ``complete``: retries, backoff, timeouts, breaker.

litellm is imported on first use only: importing it takes seconds, and the web
process never calls the judge. litellm's own retries are off; we retry here so
that backoff, Retry-After and the deadline are ours and show in the logs.
See docs/llm.md.
"""

from __future__ import annotations

import contextvars
import email.utils
import json
import logging
import math
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import cache

from django.conf import settings
from django.db import connection

from scoring.judge import circuit, pacing, sampling, tokens
from scoring.judge.errors import (
    ContextWindowExceeded,
    DeadlineReached,
    InputTooLarge,
    JudgeLLMError,
    JudgeNotConfigured,
    RateLimited,
)
from scoring.judge.prompts import CHARS_PER_TOKEN, estimated_tokens
from scoring.ops import metrics

logger = logging.getLogger("scoring.judge.llm")

LOG_TEXT_LIMIT = 1000  # EP-0028's first draft ("Logging"): logged requests and replies are cut to this
DETAIL_LIMIT = 300  # provider text kept in a user-facing error message


@dataclass(frozen=True)
class LLMReply:
    content: str  # "" if the provider returned no content
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: Decimal | None  # None when litellm does not know the model's price; cache discount included
    model: str  # the judge model that answered (``sampling.judge_model``)
    # Of input_tokens, those the provider read from its prompt cache (None when it does not say).
    cached_input_tokens: int | None = None


@dataclass(frozen=True)
class Deadline:
    """When a judge job's calls must be over (a ``time.monotonic()`` timestamp), and the
    setting that set it, so that a job that runs out of time says which limit it met."""

    at: float
    setting: str  # "SCORING_JOB_TIMEOUT_S", "SCORING_REPORT_TIMEOUT_S"
    seconds: float

    @classmethod
    def from_setting(cls, setting: str) -> Deadline:
        """A job's deadline, ``settings.<setting>`` seconds from now."""
        seconds = getattr(settings, setting)
        return cls(time.monotonic() + seconds, setting, seconds)

    def left_s(self) -> float:
        return self.at - time.monotonic()

    @property
    def named(self) -> str:
        return f"{self.setting}={self.seconds:g}"


def max_input_chars() -> int:
    """The most characters of a prompt that ``check_input_size`` lets through."""
    return CHARS_PER_TOKEN * settings.SCORING_MAX_INPUT_TOKENS


def check_input_size(prompt_chars: int) -> None:
    """Refuse a prompt of ``prompt_chars`` characters whose estimated tokens exceed
    SCORING_MAX_INPUT_TOKENS (raises InputTooLarge)."""
    if prompt_chars > max_input_chars():
        tokens = estimated_tokens(prompt_chars)
        raise InputTooLarge(
            f"the judge prompt of this session is about {tokens:,} tokens (estimated at "
            f"{CHARS_PER_TOKEN} characters a token), over SCORING_MAX_INPUT_TOKENS="
            f"{settings.SCORING_MAX_INPUT_TOKENS:,}: nothing was sent to the judge"
        )


# --- One failed attempt, classified -------------------------------------------------------------

RETRYABLE_KINDS = {"timeout", "server", "connection", "dropped", "unreadable"}


@dataclass(frozen=True)
class _Failure:
    kind: str
    status: int | None
    detail: str
    retry_after: float | None = None
    received_chars: int = 0  # of the reply, streamed before the attempt failed

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS

    @property
    def summary(self) -> str:
        return f"{self.kind.replace('_', ' ')} ({self.status}): {self.detail}"

    def describe(self, attempts: int) -> str:
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        match self.kind:
            case "timeout":
                timeout = settings.SCORING_LLM_TIMEOUT_S
                return (
                    f"judge LLM request timed out: nothing received for {timeout:g} s "
                    f"(SCORING_LLM_TIMEOUT_S={timeout:g}){_so_far(self.received_chars)} ({tries})"
                )
            case "dropped":
                so_far = _so_far(self.received_chars)
                return f"judge LLM reply stream broke off{so_far} ({tries}): {self.detail}"
            case "server":
                return f"judge LLM provider error ({self.status}) after {tries}: {self.detail}"
            case "connection":
                where = settings.SCORING_LLM_API_BASE or "the provider's default address"
                return f"could not connect to the judge LLM at {where} ({tries}): {self.detail}"
            case "unreadable":
                return f"judge LLM returned an unreadable response after {tries}: {self.detail}"
            case "auth":
                return f"judge LLM rejected the credentials ({self.status}): {self.detail}"
            case "context_window":
                return f"session too large for the judge model's context window: {self.detail}"
            case "client":
                return f"judge LLM client is misconfigured: {self.detail}"
            case _:
                return f"judge LLM rejected the request ({self.status}): {self.detail}"


def _so_far(received_chars: int) -> str:
    return f" after {received_chars:,} characters of its reply" if received_chars else ""


def _classify(exc: Exception, streaming: bool) -> _Failure:
    """Sort a litellm exception into what we do about it (found by calling a fake provider).
    ``streaming``: it was raised while the reply streamed in (after the response's headers)."""
    import httpx
    import litellm
    import openai

    status = getattr(exc, "status_code", None)
    detail = _provider_detail(exc)
    causes = _cause_chain(exc)
    # Mid-stream, litellm raises its MidStreamFallbackError (a 503) with httpx's error as the cause.
    if isinstance(exc, litellm.Timeout) or any(isinstance(cause, httpx.TimeoutException) for cause in causes):
        return _Failure("timeout", status, detail)
    if streaming and any(isinstance(cause, httpx.TransportError) for cause in causes):
        return _Failure("dropped", status, detail)
    if isinstance(exc, litellm.ContextWindowExceededError):
        return _Failure("context_window", status, detail)
    if isinstance(exc, litellm.RateLimitError) or status == 429:
        return _Failure("rate_limited", 429, detail, _retry_after_s(exc))
    if status in (401, 403):
        return _Failure("auth", status, detail)
    # Bad or missing responses reach us as 500s; the cause chain says what really happened.
    if any(isinstance(cause, json.JSONDecodeError) for cause in causes):
        return _Failure("unreadable", status, detail)
    if any(isinstance(cause, (httpx.TransportError, openai.APIConnectionError)) for cause in causes):
        return _Failure("connection", status, detail)
    if type(causes[-1]) is openai.OpenAIError:  # raised by the client itself, e.g. no API key
        return _Failure("client", status, detail)
    if status is None or status >= 500:
        return _Failure("server", status, detail, _retry_after_s(exc))
    return _Failure("rejected", status, detail)


def _cause_chain(exc: BaseException) -> list[BaseException]:
    chain = []
    while exc is not None and len(chain) < 20:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


# litellm prefixes provider text with its class names: "litellm.RateLimitError: RateLimitError:
# OpenAIException - Rate limit reached". Operators need the provider's part.
_LITELLM_PREFIX = re.compile(r"^(?:[\w.]+: )*(?:\w+Exception - )?")


def _provider_detail(exc: Exception) -> str:
    text = str(getattr(exc, "message", None) or exc)
    return _truncate(_LITELLM_PREFIX.sub("", text, count=1).strip(), DETAIL_LIMIT)


def _retry_after_s(exc: Exception) -> float | None:
    """The Retry-After header of a failed response, in seconds (a number or an HTTP date)."""
    headers = getattr(exc, "litellm_response_headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


# --- The call -------------------------------------------------------------------------------------


@cache
def preload() -> None:
    """Load now what a process's first judge call would load: litellm (about 3 s on an idle
    core), then, through one call that litellm answers itself (``mock_response``: nothing is
    sent), its modules for a call to the judge model, the model's tokenizer and model
    information, the OpenAI SDK's API resources and httpx's transport (together about 0.7 s).
    Inside the first judge jobs every thread of the process would wait for them at once, on
    the jobs' deadlines, while a provider's quota went unused."""
    litellm = _litellm()
    model = sampling.judge_model()
    if not model:
        return
    messages = [{"role": "user", "content": "preload"}]
    try:
        chunks = list(litellm.completion(model=model, messages=messages, mock_response="preload", **STREAMED))
        litellm.stream_chunk_builder(chunks, messages=messages)
    except Exception as exc:  # noqa: BLE001 - a warm-up: the judge calls meet the same error, and fail the scoring with it
        logger.warning("could not prepare calls to the judge model %s: %s", model, _provider_detail(exc))
        return
    tokens.litellm_count("preload")
    model_input_window()
    takes_cache_breakpoints()
    import httpcore  # noqa: F401 - see above
    import openai.resources  # noqa: F401


def _litellm():
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback" banners on stdout
    return litellm


def complete(
    messages: list[dict],
    *,
    deadline: Deadline | None = None,
    patient: bool = False,
    max_tokens: int | None = None,
) -> LLMReply:
    """Send one chat conversation to the judge model and return its reply.

    ``deadline`` is when the call must be over, retries and waits for a slot included.
    ``max_tokens``, when given, caps the reply's length (``sampling.judge_reply_cap``).
    Raises ``JudgeLLMError`` (or a subclass) on failure,
    ``RateLimited`` when the provider's quota says wait longer than the call may wait
    in place: SCORING_LLM_MAX_RETRY_AFTER_S, or with ``patient`` up to the deadline (for
    a turn whose earlier turns would otherwise be asked again).
    """
    model = _callable_model()
    try:
        reply = _complete_with_retries(model, messages, deadline, patient, max_tokens)
    except JudgeLLMError as error:
        _record_failure(model, error)
        raise
    circuit.record_success(model)
    return reply


Ask = Callable[[list[dict]], LLMReply]


def run_concurrently(
    conversations: Sequence[Callable[[Ask], object]],
    *,
    deadline: Deadline | None = None,
    max_tokens: int | None = None,
) -> list:
    """Run each of ``conversations`` on a thread of its own, all at once; return what each
    returned, or the exception it raised, in the order given.

    Each is called with an ``ask(messages)`` that makes one judge call as ``complete`` does
    (its timeout, retries and the deadline) but touches no database, so that k conversations
    hold no more connections than one: the breaker is checked once before they start, and each
    call is counted in it here once all have ended, in the order the calls ended. Threads, not
    litellm's asyncio API: they reuse the retry loop above as it is, and wait on the network
    with the GIL released. Raises what ``complete`` raises before any call.
    """
    model = _callable_model()
    release_db_connection()  # this thread holds none while the calls are in flight
    call_errors: list[JudgeLLMError | None] = []  # None for a call that succeeded
    lock = threading.Lock()

    def ask(messages: list[dict]) -> LLMReply:
        try:
            reply = _complete_with_retries(model, messages, deadline, False, max_tokens)
        except JudgeLLMError as error:
            with lock:
                call_errors.append(error)
            raise
        with lock:
            call_errors.append(None)
        return reply

    with ThreadPoolExecutor(max_workers=len(conversations), thread_name_prefix="judge-sample") as pool:
        # A copy of this thread's context each, so that their log lines name the score.
        futures = [pool.submit(contextvars.copy_context().run, run, ask) for run in conversations]
    for error in call_errors:
        if error is None:
            circuit.record_success(model)
        else:
            _record_failure(model, error)
    return [future.exception() or future.result() for future in futures]


def _callable_model() -> str:
    """The judge model (``sampling.judge_model``), once the breaker lets calls through. The
    connection is kept for the pacing's read of the model's hold (``_wait_for_turn``), which
    gives it back."""
    model = sampling.judge_model()
    if not model:
        raise JudgeNotConfigured()
    circuit.check(model)
    return model


def _record_failure(model: str, error: JudgeLLMError) -> None:
    logger.warning("judge LLM call to %s failed: %s", model, error)
    if error.counts_for_circuit:
        circuit.record_failure(model, str(error))


def takes_cache_breakpoints() -> bool:
    """Whether the judge model caches a prompt prefix only where the request marks it with
    ``cache_control`` (Anthropic's Claude, directly or on Bedrock, Vertex AI, Azure AI), by
    litellm's own rule. OpenAI, Gemini and DeepSeek cache long prefixes without being asked;
    an OpenAI-compatible server could reject the mark, so it is sent only where it is taken."""
    from litellm.llms.anthropic.common_utils import supports_anthropic_cache_control

    _litellm()
    return supports_anthropic_cache_control(sampling.judge_model(), None)


def cost_usd_of(input_tokens: int, output_tokens: int) -> Decimal | None:
    """What the judge model's provider charges for these tokens, by litellm's price list (the
    local copy), no cache discount; None when it has no price for the model."""
    try:
        prompt_cost, completion_cost = _litellm().cost_per_token(
            model=sampling.judge_model(), prompt_tokens=input_tokens, completion_tokens=output_tokens
        )
    except Exception:  # noqa: BLE001 - litellm raises several kinds for a model it does not list
        return None
    return Decimal(str(prompt_cost)) + Decimal(str(completion_cost))


def model_input_window() -> int | None:
    """The judge model's context window for input, in tokens, from litellm's model
    list (the local copy: LITELLM_LOCAL_MODEL_COST_MAP); None when it does not know the model."""
    return _listed_input_window(sampling.judge_model())


def provider_of(model: str) -> str | None:
    """The provider litellm sends ``model``'s calls to (``openai`` for ``openai/...`` and
    ``gpt-4o``); None for a model it cannot place, whose every call would fail."""
    try:
        return _litellm().get_llm_provider(model)[1]
    except Exception:  # noqa: BLE001 - litellm raises several kinds for a model it cannot place
        return None


@cache
def _listed_input_window(model: str) -> int | None:
    """``model_input_window`` of one model, looked up once per process (the list is a local
    file, read at import; a lookup costs a scoring about half a millisecond)."""
    try:
        info = _litellm().get_model_info(model)
    except Exception:  # noqa: BLE001 - litellm raises several kinds for a model it does not list
        return None
    return info.get("max_input_tokens") or info.get("max_tokens") or None


def release_db_connection() -> None:
    """Give this thread's database connection back while it waits on the judge.

    Hundreds of judge calls can be in flight, each for up to a minute, and
    PostgreSQL allows 100 connections by default; the next query reconnects.
    """
    if not connection.in_atomic_block:
        connection.close()


def _complete_with_retries(
    model: str, messages: list[dict], deadline: Deadline | None, patient: bool, max_tokens: int | None
) -> LLMReply:
    """One judge call with its retries, each attempt in its turn (``pacing``) and on a free
    judge slot (``pacing.call_slots``, SCORING_JUDGE_CONCURRENCY). A 429 uses up no retry:
    every call to the model waits as the provider says (``pacing.hold``), this one in place
    up to SCORING_LLM_MAX_RETRY_AFTER_S in all (or with ``patient`` to the deadline); a longer
    wait raises ``RateLimited``, so that the scoring waits in the queue, holding no slot."""
    max_attempts = 1 + settings.SCORING_LLM_MAX_RETRIES
    failure: _Failure | None = None
    failed_attempts = 0  # 429s not counted
    rate_limits = 0
    waited_for_quota_s = 0.0
    in_place_limit_s = math.inf if patient and deadline is not None else settings.SCORING_LLM_MAX_RETRY_AFTER_S
    prompt_tokens = estimated_tokens(sum(len(str(message.get("content") or "")) for message in messages))
    while True:
        waited_for_quota_s += _wait_for_turn(model, prompt_tokens, in_place_limit_s - waited_for_quota_s, deadline, failure)
        if deadline is not None and deadline.left_s() <= 0:
            raise _deadline_reached(deadline, failure, failed_attempts, "before the call was sent")
        # The request's own timeout starts once it has a slot: waiting for one is not the judge's slowness.
        slots = _take_slot(deadline, failure, failed_attempts)
        try:
            return _complete_once(model, messages, deadline, failed_attempts + 1, max_tokens)
        except _AttemptFailed as failed:
            if failed.failure.kind == "deadline":
                raise _deadline_reached(deadline, failure, failed_attempts, failed.failure.detail) from None
            failure = failed.failure
        finally:
            if slots is not None:
                slots.release()
        if failure.kind == "rate_limited":
            rate_limits += 1
            wait = _quota_wait_s(rate_limits, failure)
            logger.info("judge LLM rate-limited (429): every call to %s waits %.2f s as the provider asks", model, wait)
            pacing.hold(model, wait)
            continue
        failed_attempts += 1
        if not failure.retryable:
            raise _error_for(failure, failed_attempts)
        if failed_attempts == max_attempts:
            raise _error_for(failure, max_attempts)
        wait = _backoff_s(failed_attempts, failure)
        if deadline is not None and wait >= deadline.left_s():
            raise _deadline_reached(deadline, failure, failed_attempts)
        logger.warning(
            "judge LLM attempt %d/%d failed, %s; retrying in %.2f s",
            failed_attempts,
            max_attempts,
            failure.summary,
            wait,
        )
        time.sleep(wait)


def _take_slot(deadline: Deadline | None, failure: _Failure | None, attempts: int):
    """Wait for a free judge slot (``pacing.call_slots``) and return the slots it was taken
    from, for the caller to give back (None: no limit); raise ``DeadlineReached`` at the deadline."""
    slots = pacing.call_slots()
    if slots is None:
        return None
    if slots.acquire(timeout=None if deadline is None else max(0.0, deadline.left_s())):
        if deadline is None or deadline.left_s() > 0:
            return slots
        slots.release()
    concurrency = settings.SCORING_JUDGE_CONCURRENCY
    waiting = f"while waiting for a free judge slot (SCORING_JUDGE_CONCURRENCY={concurrency})"
    raise _deadline_reached(deadline, failure, attempts, waiting)


def _wait_for_turn(
    model: str, prompt_tokens: int, longest_wait_s: float, deadline: Deadline | None, failure: _Failure | None
) -> float:
    """Wait for this attempt's turn (``pacing.take_turn``) and return how long that was; raise
    ``RateLimited`` when the turn is further away than ``longest_wait_s`` or the deadline."""
    if deadline is not None:
        longest_wait_s = min(longest_wait_s, deadline.left_s())
    wait = pacing.take_turn(model, prompt_tokens, longest_wait_s=max(0.0, longest_wait_s))
    release_db_connection()
    if wait > 0 and wait > longest_wait_s:
        if failure is not None and failure.kind == "rate_limited":
            raise RateLimited(_quota_message(failure), retry_after_s=wait)
        raise RateLimited(
            f"judge LLM rate-limited: {model}'s calls are paced (SCORING_LLM_RPM, SCORING_LLM_TPM, the "
            f"provider's announced limits or its Retry-After), and this one's turn is {wait:,.1f} s away",
            retry_after_s=wait,
        )
    if wait > 0:
        time.sleep(wait)
    return wait


def _quota_wait_s(rate_limits: int, failure: _Failure) -> float:
    """How long to wait after the ``rate_limits``-th 429 of a call: the provider's
    Retry-After, else exponential backoff. No jitter: every call to the model waits out the
    one shared hold (``pacing.hold``) and comes back when it ends, so jitter would only
    lengthen the hold (by a tenth, for the longest of many calls' jitters)."""
    if failure.retry_after is not None:
        return failure.retry_after
    return settings.SCORING_LLM_BACKOFF_S * 2 ** min(rate_limits - 1, 10)


def _quota_message(failure: _Failure) -> str:
    return f"judge LLM rate-limited (429): the provider's quota is used up for now: {failure.detail}"


def _deadline_reached(
    deadline: Deadline, failure: _Failure | None, attempts: int, doing: str = ""
) -> JudgeLLMError:
    """The error of a call whose job's ``deadline`` passed, naming the setting that set it:
    what the call was ``doing`` then, and its last failed attempt (``failure``, of ``attempts``)."""
    if failure is not None and failure.kind == "rate_limited":
        return RateLimited(_quota_message(failure))
    message = f"scoring deadline reached before the judge LLM answered: {deadline.named} s ran out"
    message += f" {doing}" if doing else ""
    if failure is not None:
        message += "; the last failed attempt: " + failure.describe(attempts)
    # Failed attempts before the deadline count against the provider; running out of time alone does not.
    return DeadlineReached(message, provider_failed=failure is not None)


def _backoff_s(attempt: int, failure: _Failure) -> float:
    if failure.retry_after is not None:
        return min(failure.retry_after, settings.SCORING_LLM_MAX_RETRY_AFTER_S)
    return settings.SCORING_LLM_BACKOFF_S * 2 ** (attempt - 1)


def _error_for(failure: _Failure, attempts: int) -> JudgeLLMError:
    message = failure.describe(attempts)
    return ContextWindowExceeded(message) if failure.kind == "context_window" else JudgeLLMError(message)


class _AttemptFailed(Exception):
    def __init__(self, failure: _Failure):
        super().__init__(failure.detail)
        self.failure = failure


# Every request asks for its reply streamed, with the usage in the stream's last chunk: the
# timeout (SCORING_LLM_TIMEOUT_S) is then the longest silence, so that a slow model that keeps
# writing is not cut off (docs/llm.md, "Timeouts and the job deadline").
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}
# An attempt's read timeout runs this much past its job's deadline, so that the deadline, not
# the timeout, ends an attempt that the deadline cuts short (and the message names it).
DEADLINE_GRACE_S = 1.0
# What a server answers a streamed request with when it does not stream (a JSON body, a proxy's
# page): litellm makes an empty reply of it, so it is told apart by its type.
NOT_A_STREAM = ("application/json", "text/html", "text/plain")


class _Stream:
    """One attempt's streamed reply, as it comes in (read on a thread of its own when the call
    has a deadline, so that the deadline ends the attempt to the moment)."""

    def __init__(self):
        self.chunks: list = []
        self.chars = 0
        self.started = False  # the response's headers came: what fails now fails mid-stream
        self.content_type = ""
        # Set when the deadline ended the attempt: the reading thread stops at the next chunk
        # and closes the stream, so that the judge stops writing a reply no one waits for.
        self.abandoned = False

    def read(self, litellm, model: str, messages: list[dict], timeout: float, max_tokens: int | None):
        capped = {"max_tokens": max_tokens} if max_tokens is not None else {}
        stream = litellm.completion(
            model=model,
            messages=messages,
            api_base=settings.SCORING_LLM_API_BASE,
            api_key=settings.SCORING_LLM_API_KEY,
            timeout=timeout,
            max_retries=0,  # the provider SDK's retries
            num_retries=0,  # litellm's retries
            **sampling.judge_sampling().request_params(),
            **capped,
            **STREAMED,
        )
        self.started = True
        headers = (getattr(stream, "_hidden_params", None) or {}).get("additional_headers") or {}
        self.content_type = headers.get(ANSWER_HEADER_PREFIX + "content-type", "")
        if self.content_type.startswith(NOT_A_STREAM):
            return None
        for chunk in stream:
            if self.abandoned:
                close = getattr(stream.completion_stream, "close", None)  # the provider SDK's stream
                if close is not None:
                    close()
                return None
            self.chunks.append(chunk)
            if chunk.choices:
                self.chars += len(chunk.choices[0].delta.content or "")
        return litellm.stream_chunk_builder(self.chunks, messages=messages)


def _complete_once(
    model: str, messages: list[dict], deadline: Deadline | None, attempt: int, max_tokens: int | None
) -> LLMReply:
    litellm = _litellm()
    import openai

    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("judge LLM request to %s: %s", model, _truncate(json.dumps(messages), LOG_TEXT_LIMIT))
    timeout = settings.SCORING_LLM_TIMEOUT_S
    if deadline is not None:
        timeout = min(timeout, deadline.left_s() + DEADLINE_GRACE_S)
    started = time.monotonic()
    stream = _Stream()
    try:
        if deadline is None:
            response = stream.read(litellm, model, messages, timeout, max_tokens)
        else:
            response = _by_deadline(
                lambda: stream.read(litellm, model, messages, timeout, max_tokens), deadline
            )
    except _DeadlinePassed:
        stream.abandoned = True
        metrics.observe_llm_call(time.monotonic() - started, "deadline")
        doing = (
            f"while the reply was streaming in ({stream.chars:,} characters so far)"
            if stream.chunks
            else f"while waiting {time.monotonic() - started:,.1f} s for the reply's first chunk"
        )
        raise _AttemptFailed(_Failure("deadline", None, doing, received_chars=stream.chars)) from None
    except openai.OpenAIError as exc:  # every litellm exception derives from it
        _learn_announced_limits(model, getattr(exc, "litellm_response_headers", None))  # a 429's too
        failure = replace(_classify(exc, stream.started), received_chars=stream.chars)
        metrics.observe_llm_call(time.monotonic() - started, failure.kind)
        raise _AttemptFailed(failure) from exc
    if response is None:
        metrics.observe_llm_call(time.monotonic() - started, "unreadable")
        detail = f"a streamed reply was asked for, and the answer was {stream.content_type or 'empty'}"
        raise _AttemptFailed(_Failure("unreadable", None, detail))
    metrics.observe_llm_call(time.monotonic() - started, "ok")
    hidden_params = getattr(response, "_hidden_params", None) or {}
    _learn_announced_limits(model, hidden_params.get("additional_headers"), ANSWER_HEADER_PREFIX)
    content, input_tokens, output_tokens, cached_input_tokens = _read_response(response)
    tokens.observe(model, messages, input_tokens)  # how the model counts, where nothing else tells
    logger.info(
        "judge LLM %s answered in %.1f s (attempt %d; %s input (%s cached) / %s output tokens)",
        model,
        time.monotonic() - started,
        attempt,
        input_tokens,
        cached_input_tokens,
        output_tokens,
    )
    logger.debug("judge LLM reply: %s", _truncate(content, LOG_TEXT_LIMIT))
    cost_usd = _cost_usd(hidden_params)
    return LLMReply(content, input_tokens, output_tokens, cost_usd, model, cached_input_tokens)


class _DeadlinePassed(Exception):
    pass


def _by_deadline(read: Callable[[], object], deadline: Deadline):
    """What ``read()`` returns or raises, run on a thread of its own; ``_DeadlinePassed`` when
    it has not ended by ``deadline``. The thread left behind ends at the stream's next chunk
    (``_Stream.abandoned``) or within DEADLINE_GRACE_S, at its read timeout, and its outcome
    is dropped."""
    outcome: queue.SimpleQueue = queue.SimpleQueue()

    def run() -> None:
        try:
            outcome.put((True, read()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
            outcome.put((False, exc))

    context = contextvars.copy_context()  # so that its log lines name the score
    threading.Thread(target=context.run, args=(run,), name="judge-stream", daemon=True).start()
    try:
        ended, value = outcome.get(timeout=max(0.0, deadline.left_s()))
    except queue.Empty:
        raise _DeadlinePassed() from None
    if not ended:
        raise value
    return value


def _read_response(response) -> tuple[str, int | None, int | None, int | None]:
    try:
        content = response.choices[0].message.content or ""
    except (AttributeError, IndexError) as exc:
        raise _AttemptFailed(_Failure("unreadable", None, f"no choices in the response: {exc}")) from exc
    usage = getattr(response, "usage", None)
    # litellm normalises every provider's cache reads (OpenAI's prompt_tokens_details.cached_tokens,
    # Anthropic's cache_read_input_tokens) into prompt_tokens_details.cached_tokens, part of prompt_tokens.
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None)
    return content, getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None), cached


# The response headers in which providers announce their limits a minute, the first found
# used: OpenAI's and Anthropic's.
REQUEST_LIMIT_HEADERS = ("x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit")
TOKEN_LIMIT_HEADERS = ("x-ratelimit-limit-tokens",)
# How litellm hands on an answer's headers (``additional_headers``): as the provider named them, prefixed.
ANSWER_HEADER_PREFIX = "llm_provider-"


def _learn_announced_limits(model: str, headers: Mapping[str, str] | None, prefix: str = "") -> None:
    """Tell the pacing the limits that a response's ``headers`` announce (``prefix`` before each name).

    No token limit for a model that caches only where marked (Anthropic's): its input-token
    limit does not count cache reads, which a scoring's later turns mostly are and the pacing,
    counting whole prompts before they are sent, cannot tell apart (and litellm renames its
    "tokens" limit, the smaller of its input and output ones, to OpenAI's name)."""
    if not headers:
        return
    requests_per_min = _first_limit(headers, REQUEST_LIMIT_HEADERS, prefix)
    tokens_per_min = None if takes_cache_breakpoints() else _first_limit(headers, TOKEN_LIMIT_HEADERS, prefix)
    pacing.learn_limits(model, requests_per_min, tokens_per_min)


def _first_limit(headers: Mapping[str, str], names: tuple[str, ...], prefix: str) -> int | None:
    for name in names:
        try:
            limit = int(headers.get(prefix + name))
        except (TypeError, ValueError):
            continue
        if limit > 0:
            return limit
    return None


def _cost_usd(hidden_params: dict) -> Decimal | None:
    """The reply's cost as litellm computed it for the response (``completion_cost``, the cache
    discount included), kept in its hidden parameters: computing it again cost the worker
    about a millisecond per call. None when litellm has no price for the model."""
    cost = hidden_params.get("response_cost")
    return None if cost is None else Decimal(str(cost))
