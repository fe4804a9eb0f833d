"""An OpenAI-compatible chat-completions server on loopback, to fake the judge LLM.

The judge is faked only at the network edge: litellm talks real HTTP to this
server, from the test process or from worker processes the tests start. Tests
script what the server does, one step per request, and read back every request
it received. It keeps a prompt cache as providers do (``PromptCache``): OpenAI-style
requests report the repeated prefix in ``usage.prompt_tokens_details.cached_tokens``;
Anthropic's Messages API (``POST /v1/messages``, for litellm's ``anthropic/`` models with
``api_base`` set to the server's URL without ``/v1``) caches only up to a ``cache_control``
block and reports ``cache_read_input_tokens`` / ``cache_creation_input_tokens``.
A request with ``"stream": true`` gets its reply as the provider streams it (server-sent
events: OpenAI's ``chat.completion.chunk`` events with the usage last when
``stream_options.include_usage`` asks for it, Anthropic's ``message_start`` ...
``message_stop``), and a ``Reply`` can stream slowly (``chunk_delay``) or drop its stream
half-way (``drop_after``).

    fake_llm.push(Error(429, headers={"Retry-After": "1"}), Reply("Total score: 70"))

Given a ``ModelTokenizer`` (``set_tokenizer``), it counts as a model whose tokenizer litellm does
not have: ``POST /tokenize`` at its root answers as llama.cpp's server or vLLM does, and every
reply's ``usage.prompt_tokens`` is that tokenizer's count of the messages.

Run it alone for benchmarks and ``bin/topology --fake-llm`` (to try the service, see
``bin/run --demo-judge`` instead):

    python -m tests.support.fake_llm --port 8999 --reply "Looks thorough.\n\n70" --delay 2

The HTTP serving is the demo judge's (``scoring.judge.demo_judge``); the pytest fixtures are in
``tests/support/fake_llm_fixtures.py``, so that this module imports without pytest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from scoring.judge.demo_judge import (
    ChatCompletionsServer,
    ChatHandler,
    ChatRequest,
    chat_completion,
    completion_chunks,
    error_body,
    wants_stream,
)

DEFAULT_REPLY_TEXT = "This is the fake judge's reply."
STREAM_PIECES = 8


# --- Steps: what the server does with one request ------------------------------------------


@dataclass(frozen=True)
class Reply:
    """A chat.completion with ``content`` ("" for an empty reply), after ``delay`` seconds.

    Streamed (to a request that asks for it): in ``STREAM_PIECES`` pieces of content, each
    ``chunk_delay`` seconds after the one before, as a model writes; after ``drop_after``
    events the connection closes before the stream's end; after ``stall_after`` events
    nothing more comes (as ``Hang``)."""

    content: str = DEFAULT_REPLY_TEXT
    delay: float = 0.0
    chunk_delay: float = 0.0
    drop_after: int | None = None
    stall_after: int | None = None
    prompt_tokens: int | None = None  # default: a rough count of the request's characters
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # default: what the server's prompt cache holds of the request
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Error:
    """An HTTP error status with OpenAI's JSON error body and optional headers."""

    status: int
    message: str = "fake provider error"
    code: str | None = None
    type: str = "server_error"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """Send nothing for ``seconds`` (longer than the client's timeout), then close."""

    seconds: float = 30.0


@dataclass(frozen=True)
class CloseConnection:
    """Close the connection without sending any response."""


@dataclass(frozen=True)
class Malformed:
    """A 200 response whose JSON body is cut off half-way (streamed: its first event's)."""


@dataclass(frozen=True)
class Garbage:
    """A 200 response whose body is not JSON at all."""


@dataclass(frozen=True)
class Unstreamed:
    """A whole chat.completion as JSON, whether the request asked for a stream or not: a
    server that does not stream."""

    content: str = DEFAULT_REPLY_TEXT


Step = Reply | Error | Hang | CloseConnection | Malformed | Garbage | Unstreamed


class Together:
    """A default (``set_default``) that holds each request until ``len(steps)`` of them are in
    the server at once, then answers each with the next of ``steps``: proof that a client sent
    them concurrently. If they do not all come within ``timeout`` seconds, those waiting (and
    any later) get a 500 saying so, so that a test of concurrency fails instead of hanging."""

    def __init__(self, steps: Sequence[Step], timeout: float = 10.0):
        self._steps = deque(steps)
        self._barrier = threading.Barrier(len(steps), timeout=timeout)
        self._lock = threading.Lock()

    def __call__(self, body: dict | None) -> Step:
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            return Error(500, f"fewer than {self._barrier.parties} requests were in the server at once")
        with self._lock:
            return self._steps.popleft()


def rate_limited(retry_after: str | None = None) -> Error:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Error(429, "Rate limit reached for requests", "rate_limit_exceeded", "requests", headers)


def context_length_exceeded(window: int = 128_000, requested: int = 250_000) -> Error:
    """OpenAI's answer to a request over the model's context window, in its words."""
    return Error(
        400,
        f"This model's maximum context length is {window} tokens. However, your messages resulted in "
        f"{requested} tokens. Please reduce the length of the messages.",
        "context_length_exceeded",
        "invalid_request_error",
    )


class ContextWindow:
    """A default (``set_default``) that answers as a model with a context window of ``tokens``
    does: a request whose messages are over it gets ``context_length_exceeded`` with the real
    figures, the others ``then`` (a step, or a function of the request body) with those
    figures as ``usage.prompt_tokens``. Messages are counted as OpenAI counts them for
    gpt-4o (its tokenizer and per-message framing, through litellm, offline), which is
    not how the judge counts a model litellm does not know: as with a real provider, the
    two counts differ a little. With ``tokenizer`` they are counted as that model's
    (``ModelTokenizer.count_messages``). ``received`` lists each request's count."""

    def __init__(
        self,
        tokens: int,
        then: Step | Callable[[dict | None], Step] = Reply(),
        tokenizer: ModelTokenizer | None = None,
    ):
        import litellm  # here, not at the first request: the import takes seconds

        if tokenizer is not None:
            self._count = tokenizer.count_messages
        else:
            self._count = lambda messages: litellm.token_counter(model="gpt-4o", messages=messages)
        self.tokens = tokens
        self._then = then
        self._lock = threading.Lock()
        self.received: list[int] = []

    def __call__(self, body: dict | None) -> Step:
        used = self._count((body or {}).get("messages") or [])
        with self._lock:
            self.received.append(used)
        if used > self.tokens:
            return context_length_exceeded(self.tokens, used)
        step = self._then(body) if callable(self._then) else self._then
        return replace(step, prompt_tokens=used) if isinstance(step, Reply) else step


class ModelTokenizer:
    """A model's own tokenizer, as a server that has it counts: OpenAI's (cl100k, through
    litellm) but each digit a token of its own, as Qwen's tokenizer splits numbers, and a chat
    template's framing around each message (Qwen's ``<|im_start|>role\n ... <|im_end|>\n``).
    On log lines, full of times and ids, it counts about a third more than litellm's default
    count; on a whole log-heavy session about a fifth, as Qwen did.

    ``style`` is the server's /tokenize: "llama.cpp" (``{"content"}`` -> ``{"tokens"}``) or
    "vllm" (``{"model", "prompt"}`` -> ``{"count", "max_model_len", "tokens"}``)."""

    MESSAGE_FRAMING = 5
    REPLY_PRIMING = 3

    def __init__(self, style: str = "llama.cpp", max_model_len: int = 32_768):
        import litellm  # here, not at the first request: the import takes seconds

        self._token_counter = litellm.token_counter
        self.style = style
        self.max_model_len = max_model_len
        self.requests = 0

    def count(self, text: str) -> int:
        digits = sum(len(run) - math.ceil(len(run) / 3) for run in re.findall(r"\d+", text))
        return self._token_counter(model="gpt-3.5-turbo", text=text) + digits

    def count_messages(self, messages: list[dict]) -> int:
        texts = [
            content if isinstance(content := message.get("content") or "", str) else
            "".join(block.get("text", "") for block in content)
            for message in messages
        ]
        return sum(self.count(text) + self.MESSAGE_FRAMING for text in texts) + self.REPLY_PRIMING

    def answer(self, body: dict | None) -> tuple[int, dict]:
        """The status and body of the server's answer to ``POST /tokenize``."""
        self.requests += 1
        body = body or {}
        if self.style == "llama.cpp":
            # llama.cpp's server tokenizes "content" if there is one, else answers no tokens.
            text = body.get("content")
            return 200, {"tokens": list(range(self.count(text))) if isinstance(text, str) else []}
        if not isinstance(body.get("prompt"), str) or not body.get("model"):
            return 400, error_body("1 validation error for TokenizeRequest: prompt: Field required", "BadRequestError")
        count = self.count(body["prompt"])
        return 200, {"count": count, "max_model_len": self.max_model_len, "tokens": list(range(count))}


def unauthorized() -> Error:
    return Error(401, "Incorrect API key provided: test-key.", "invalid_api_key", "invalid_request_error")


# --- The prompt cache ------------------------------------------------------------------------

ANTHROPIC_MESSAGES_PATH = "/v1/messages"
TOKENIZE_PATH = "/tokenize"
CHARS_PER_TOKEN = 4  # the demo judge's rough count
MIN_CACHED_TOKENS = 1024  # OpenAI and Anthropic (Sonnet) cache no shorter prefix
OPENAI_CACHE_STEP_TOKENS = 128  # OpenAI's cache hits grow in steps of 128 tokens past 1024


def message_chars(message: dict) -> int:
    """Characters of a message's text: its content, or the text of its content blocks."""
    content = message.get("content") or ""
    return len(content) if isinstance(content, str) else sum(len(block.get("text", "")) for block in content)


def prompt_tokens(messages: list[dict]) -> int:
    """The messages' tokens, roughly (4 characters a token), as the demo judge counts them."""
    return max(1, sum(message_chars(message) for message in messages) // CHARS_PER_TOKEN)


def _marks_breakpoint(message: dict) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any("cache_control" in block for block in content)


class PromptCache:
    """A provider's prompt cache, by whole messages as they arrived (byte for byte, so that a
    prefix resent with any change misses). OpenAI caches every prompt's prefixes by itself;
    Anthropic only a prefix that ends in a block marked with ``cache_control``. The cache is
    filled as each reply is made, so requests in flight together can each find it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._prefixes: set[str] = set()

    def clear(self) -> None:
        with self._lock:
            self._prefixes.clear()

    def openai_cached_tokens(self, messages: list[dict]) -> int:
        """Tokens of the longest prefix seen before, in steps of 128 past the minimum; caches every prefix."""
        prefixes = _prefixes(messages)
        with self._lock:
            hit = max((tokens for digest, tokens, _ in prefixes if digest in self._prefixes), default=0)
            self._prefixes.update(digest for digest, _, _ in prefixes)
        return hit // OPENAI_CACHE_STEP_TOKENS * OPENAI_CACHE_STEP_TOKENS if hit >= MIN_CACHED_TOKENS else 0

    def anthropic_cache_tokens(self, messages: list[dict]) -> tuple[int, int]:
        """(read, written): the longest marked prefix seen before, and what the last breakpoint adds to it."""
        marked = [(digest, tokens) for digest, tokens, breakpoint in _prefixes(messages) if breakpoint]
        with self._lock:
            read = max((tokens for digest, tokens in marked if digest in self._prefixes), default=0)
            if not marked or marked[-1][1] < MIN_CACHED_TOKENS or marked[-1][0] in self._prefixes:
                return read, 0
            self._prefixes.add(marked[-1][0])
        return read, marked[-1][1] - read


def _prefixes(messages: list[dict]) -> list[tuple[str, int, bool]]:
    """For each prefix of ``messages``: its digest, its tokens, and whether it ends in a cache breakpoint."""
    digest, chars, prefixes = hashlib.sha256(), 0, []
    for message in messages:
        digest.update(json.dumps(message, sort_keys=True).encode())
        chars += message_chars(message)
        prefixes.append((digest.hexdigest(), chars // CHARS_PER_TOKEN, _marks_breakpoint(message)))
    return prefixes


class AccountQuota:
    """A default (``set_default``) that answers as ``reply`` within an account-wide quota, as
    OpenAI, Anthropic and Gemini do: at most ``requests_per_s`` requests in any second and
    ``tokens_per_min`` prompt tokens (4 characters a token, as ``chat_completion`` counts) in any
    minute, over every client of the server; beyond it a 429 with OpenAI's body and a
    ``Retry-After`` of whole seconds (as the providers send it). ``answered`` and
    ``rate_limited`` count the requests of each kind.

    With ``announce``, every answer carries the quota in OpenAI's headers (a minute's worth:
    ``x-ratelimit-limit-requests``, ``x-ratelimit-limit-tokens``), as OpenAI and Anthropic send
    theirs (Anthropic's named ``anthropic-ratelimit-*``); without, none, as Gemini. OpenAI
    too enforces a minute's request limit over shorter periods, as this quota does over a second."""

    def __init__(
        self,
        reply: Reply = Reply(),
        *,
        requests_per_s: float | None = None,
        tokens_per_min: int | None = None,
        announce: bool = False,
    ):
        self.requests_per_s = requests_per_s
        self.tokens_per_min = tokens_per_min
        self.headers = self._limit_headers() if announce else {}
        self.reply = replace(reply, headers={**reply.headers, **self.headers})
        self.answered = 0
        self.rate_limited = 0
        self._lock = threading.Lock()
        self._recent: deque[tuple[float, int]] = deque()  # (time, prompt tokens) of answered requests

    def __call__(self, body: dict | None) -> Step:
        tokens = sum(len(str(message.get("content") or "")) for message in (body or {}).get("messages", [])) // 4
        with self._lock:
            now = time.monotonic()
            while self._recent and self._recent[0][0] <= now - 60:
                self._recent.popleft()
            wait = self._wait_s(now, tokens)
            if wait > 0:
                self.rate_limited += 1
                return self._refusal(wait)
            self._recent.append((now, tokens))
            self.answered += 1
        return self.reply

    def _limit_headers(self) -> dict[str, str]:
        headers = {}
        if self.requests_per_s is not None:
            headers["x-ratelimit-limit-requests"] = str(int(self.requests_per_s * 60))
        if self.tokens_per_min is not None:
            headers["x-ratelimit-limit-tokens"] = str(self.tokens_per_min)
        return headers

    def _wait_s(self, now: float, tokens: int) -> float:
        waits = [0.0]
        if self.requests_per_s is not None:
            last_second = [at for at, _ in self._recent if at > now - 1]
            if len(last_second) >= self.requests_per_s:
                waits.append(last_second[-int(self.requests_per_s)] + 1 - now)
        if self.tokens_per_min is not None:
            used = sum(count for _, count in self._recent)
            for at, count in self._recent:  # until enough of the minute's tokens have expired
                if used + tokens <= self.tokens_per_min:
                    break
                used -= count
                waits.append(at + 60 - now)
        return max(waits)

    def _refusal(self, wait: float) -> Error:
        limit = "requests per second (RPS)" if self.requests_per_s is not None else "tokens per min (TPM)"
        return Error(
            429,
            f"Rate limit reached for fake-judge in organization org-fake on {limit}. "
            f"Please try again in {wait:.3f}s.",
            "rate_limit_exceeded",
            "requests" if self.requests_per_s is not None else "tokens",
            {"Retry-After": str(max(1, math.ceil(wait))), **self.headers},
        )


# --- The server -------------------------------------------------------------------------------


class FakeLLMServer:
    """A thread-safe scripted server; ``steps`` run first-in first-out, then ``default``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, default: Step | Callable = Reply()):
        self._lock = threading.Lock()
        self._steps: deque[Step] = deque()
        self._requests: list[ChatRequest] = []
        self._default = default
        # Set to release requests that are hanging, so they do not outlive a test.
        self._release = threading.Event()
        self._httpd = ChatCompletionsServer((host, port), self._answer)
        self._httpd.paths = (*self._httpd.paths, ANTHROPIC_MESSAGES_PATH, TOKENIZE_PATH)
        self.prompt_cache = PromptCache()
        self.tokenizer: ModelTokenizer | None = None
        self._thread: threading.Thread | None = None
        # Streamed replies the client stopped reading before their end (it closed the connection).
        self.streams_cut = 0

    @property
    def url(self) -> str:
        return self._httpd.url

    def env(self) -> dict[str, str]:
        """Environment variables that point a worker process's judge at this server."""
        return {
            "SCORING_LLM_MODEL": "openai/fake-judge",
            "SCORING_LLM_API_BASE": f"{self.url}/v1",
            "SCORING_LLM_API_KEY": "test-key",
            "SCORING_LLM_TIMEOUT_S": "2",
            "SCORING_LLM_BACKOFF_S": "0.05",
        }

    def start(self) -> FakeLLMServer:
        self._thread = self._httpd.serve_in_thread("fake-llm")
        return self

    def stop(self) -> None:
        self._release.set()
        self._httpd.stop()

    def push(self, *steps: Step) -> None:
        with self._lock:
            self._steps.extend(steps)

    def set_default(self, default: Step | Callable[[dict | None], Step]) -> None:
        """What to do once the script is empty: a step, or a function of the request body."""
        with self._lock:
            self._default = default

    def set_tokenizer(self, tokenizer: ModelTokenizer | None) -> None:
        """Count as ``tokenizer``'s model: its /tokenize and replies' prompt_tokens (None: no
        /tokenize, as OpenAI's API, and prompt tokens of 4 characters)."""
        with self._lock:
            self.tokenizer = tokenizer

    @property
    def requests(self) -> list[ChatRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def pending_steps(self) -> int:
        with self._lock:
            return len(self._steps)

    def reset(self, default: Step | Callable = Reply()) -> None:
        with self._lock:
            self._steps.clear()
            self._requests.clear()
            self._default = default
            self._release.set()
            self._release = threading.Event()
            self.tokenizer = None
            self.streams_cut = 0
        self.prompt_cache.clear()

    def _answer(self, request: ChatRequest, handler: ChatHandler) -> None:
        if request.path.split("?")[0] == TOKENIZE_PATH:  # not a judge call: not in ``requests``
            self._tokenize(request, handler)
            return
        with self._lock:
            self._requests.append(request)
            step = self._steps.popleft() if self._steps else self._default
            release = self._release
        if callable(step):
            step = step(request.body)
        anthropic = request.path.startswith(ANTHROPIC_MESSAGES_PATH)
        if anthropic and isinstance(step, Reply | Error):
            step = replace(step, headers=_anthropic_headers(step.headers))
        if not isinstance(step, Reply):
            _perform(step, request.body, release, handler)
            return
        if step.delay:
            release.wait(step.delay)
        if anthropic:
            message = self._anthropic_message(step, request.body or {})
            if wants_stream(request.body):
                self._stream(handler, step, release, _anthropic_events(message))
            else:
                handler.send_json(200, message, step.headers)
        else:
            completion = self._completion(step, request.body)
            if wants_stream(request.body):
                chunks = completion_chunks(completion, request.body, STREAM_PIECES)
                self._stream(handler, step, release, [(None, chunk) for chunk in chunks] + [(None, "[DONE]")])
            else:
                handler.send_json(200, completion, step.headers)

    def _stream(self, handler: ChatHandler, reply: Reply, release: threading.Event, events: list) -> None:
        try:
            _stream(handler, reply, release, events)
        except (BrokenPipeError, ConnectionResetError):
            with self._lock:
                self.streams_cut += 1
            raise

    def _tokenize(self, request: ChatRequest, handler: ChatHandler) -> None:
        tokenizer = self.tokenizer
        if tokenizer is None:
            handler.send_json(404, error_body(f"unknown path {request.path}", code="not_found"))
            return
        handler.send_json(*tokenizer.answer(request.body))

    def _prompt_tokens(self, reply: Reply, messages: list[dict]) -> int:
        if reply.prompt_tokens is not None:
            return reply.prompt_tokens
        tokenizer = self.tokenizer
        return tokenizer.count_messages(messages) if tokenizer is not None else prompt_tokens(messages)

    def _completion(self, reply: Reply, body: dict | None) -> dict:
        """OpenAI's chat.completion, with the cached part of the prompt in ``prompt_tokens_details``."""
        messages = (body or {}).get("messages", [])
        prompt = self._prompt_tokens(reply, messages)
        cached = reply.cached_tokens
        if cached is None:
            cached = min(self.prompt_cache.openai_cached_tokens(messages), prompt)
        completion = chat_completion(reply.content, body, prompt, reply.completion_tokens)
        completion["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
        return completion

    def _anthropic_message(self, reply: Reply, body: dict) -> dict:
        """Anthropic's Messages API reply; its ``input_tokens`` are those neither read from nor
        written to the cache."""
        messages = body.get("messages", [])
        prompt = self._prompt_tokens(reply, messages)
        read, written = self.prompt_cache.anthropic_cache_tokens(messages)
        if reply.cached_tokens is not None:
            read, written = reply.cached_tokens, 0
        return {
            "id": f"msg_{uuid.uuid4().hex}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "unknown"),
            "content": [{"type": "text", "text": reply.content}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": max(0, prompt - read - written),
                "output_tokens": len(reply.content) // CHARS_PER_TOKEN
                if reply.completion_tokens is None
                else reply.completion_tokens,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written,
            },
        }


# OpenAI's rate-limit headers, as Anthropic names them: its token limits are its input and
# output ones apart, and "tokens", the smaller of them (the fake's one limit is of prompt tokens).
ANTHROPIC_LIMIT_HEADERS = {
    "x-ratelimit-limit-requests": ["anthropic-ratelimit-requests-limit"],
    "x-ratelimit-limit-tokens": [
        "anthropic-ratelimit-input-tokens-limit",
        "anthropic-ratelimit-tokens-limit",
    ],
}


def _anthropic_headers(headers: dict[str, str]) -> dict[str, str]:
    return {
        renamed: value
        for name, value in headers.items()
        for renamed in ANTHROPIC_LIMIT_HEADERS.get(name.lower(), [name])
    }


def _stream(
    handler: ChatHandler, reply: Reply, release: threading.Event, events: list[tuple[str | None, dict | str]]
) -> None:
    """Send ``events`` ((event name, data) each) as server-sent events, ``reply.chunk_delay``
    apart; after ``reply.drop_after`` of them drop the connection instead of ending the stream,
    after ``reply.stall_after`` send nothing more (until the test ends)."""
    handler.start_event_stream(reply.headers)
    for sent, (event, data) in enumerate(events):
        if sent == reply.stall_after:
            release.wait(Hang.seconds)
        if sent in (reply.drop_after, reply.stall_after):
            handler.close_connection = True
            return
        if sent and reply.chunk_delay:
            release.wait(reply.chunk_delay)
        handler.send_event(data, event)
    handler.end_event_stream()


def _anthropic_events(message: dict) -> list[tuple[str, dict]]:
    """Anthropic's Messages API stream of ``message`` (an ``_anthropic_message``): the message
    with its input usage, the text block in pieces, then the stop reason and output usage."""
    text = message["content"][0]["text"]
    size = max(1, -(-len(text) // STREAM_PIECES))
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
    ]
    events += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[at : at + size]}},
        )
        for at in range(0, len(text), size)
    ]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


def _perform(step: Step, body: dict | None, release: threading.Event, handler: ChatHandler) -> None:
    """Every step but a Reply, which the server answers with its prompt cache."""
    match step:
        case Error():
            handler.send_json(step.status, error_body(step.message, step.type, step.code), step.headers)
        case Hang():
            release.wait(step.seconds)
            handler.close_connection = True
        case CloseConnection():
            handler.close_connection = True
        case Malformed() if wants_stream(body):
            text = json.dumps(completion_chunks(chat_completion(DEFAULT_REPLY_TEXT, body), body)[0])
            handler.start_event_stream()
            handler.send_event(text[: len(text) // 2])
            handler.end_event_stream()
        case Malformed():
            text = json.dumps(chat_completion(DEFAULT_REPLY_TEXT, body))
            handler.send_bytes(200, text[: len(text) // 2].encode(), "application/json")
        case Unstreamed():
            handler.send_json(200, chat_completion(step.content, body))
        case Garbage():
            handler.send_bytes(200, b"<html>502 Bad Gateway from a proxy</html>", "application/json")
        case _:
            raise TypeError(f"not a fake LLM step: {step!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible fake judge LLM on loopback.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8999)
    parser.add_argument("--reply", default=DEFAULT_REPLY_TEXT, help="content of every reply")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--rps", type=float, help="account-wide quota: requests per second (429 beyond)")
    parser.add_argument("--tpm", type=int, help="account-wide quota: prompt tokens per minute (429 beyond)")
    parser.add_argument(
        "--tokenizer",
        choices=("llama.cpp", "vllm"),
        help="count as a model litellm has no tokenizer for, answering POST /tokenize as this server does",
    )
    parser.add_argument(
        "--announce-limits",
        action="store_true",
        help="send the quota in OpenAI's x-ratelimit-limit-* headers with every answer, as OpenAI does",
    )
    args = parser.parse_args()
    if args.announce_limits and not (args.rps or args.tpm):
        parser.error("--announce-limits needs a quota: --rps or --tpm")
    reply = Reply(args.reply, delay=args.delay)
    default = (
        AccountQuota(reply, requests_per_s=args.rps, tokens_per_min=args.tpm, announce=args.announce_limits)
        if args.rps or args.tpm
        else reply
    )
    server = FakeLLMServer(args.host, args.port, default=default)
    if args.tokenizer:
        server.set_tokenizer(ModelTokenizer(args.tokenizer))
    server.start()
    print(f"fake LLM listening on {server.url}/v1 (model: openai/<anything>)", flush=True)
    try:
        server._thread.join()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
