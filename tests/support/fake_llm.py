"""An OpenAI-compatible chat-completions server on loopback, to fake the judge LLM.

The judge is faked only at the network edge: litellm talks real HTTP to this
server, from the test process or from worker processes the tests start. Tests
script what the server does, one step per request, and read back every request
it received.

    fake_llm.push(Error(429, headers={"Retry-After": "1"}), Reply("Total score: 70"))

Run it alone for benchmarks and ``bin/topology --fake-llm`` (to try the service, see
``bin/run --demo-judge`` instead):

    python -m tests.support.fake_llm --port 8999 --reply "Looks thorough.\n\n70" --delay 2

The HTTP serving is the demo judge's (``scoring.judge.demo_judge``); the pytest fixtures are in
``tests/support/fake_llm_fixtures.py``, so that this module imports without pytest.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scoring.judge.demo_judge import (
    ChatCompletionsServer,
    ChatHandler,
    ChatRequest,
    chat_completion,
    error_body,
)

DEFAULT_REPLY_TEXT = "This is the fake judge's reply."


# --- Steps: what the server does with one request ------------------------------------------


@dataclass(frozen=True)
class Reply:
    """A chat.completion with ``content`` ("" for an empty reply), after ``delay`` seconds."""

    content: str = DEFAULT_REPLY_TEXT
    delay: float = 0.0
    prompt_tokens: int | None = None  # default: a rough count of the request's characters
    completion_tokens: int | None = None


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
    """A 200 response whose JSON body is cut off half-way."""


@dataclass(frozen=True)
class Garbage:
    """A 200 response whose body is not JSON at all."""


Step = Reply | Error | Hang | CloseConnection | Malformed | Garbage


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


def context_length_exceeded() -> Error:
    return Error(
        400,
        "This model's maximum context length is 128000 tokens. However, your messages resulted in "
        "250000 tokens. Please reduce the length of the messages.",
        "context_length_exceeded",
        "invalid_request_error",
    )


def unauthorized() -> Error:
    return Error(401, "Incorrect API key provided: test-key.", "invalid_api_key", "invalid_request_error")


class AccountQuota:
    """A default (``set_default``) that answers as ``reply`` within an account-wide quota, as
    OpenAI, Anthropic and Gemini do: at most ``requests_per_s`` requests in any second and
    ``tokens_per_min`` prompt tokens (4 characters a token, as ``chat_completion`` counts) in any
    minute, over every client of the server; beyond it a 429 with OpenAI's body and a
    ``Retry-After`` of whole seconds (as the providers send it). ``answered`` and
    ``rate_limited`` count the requests of each kind."""

    def __init__(self, reply: Reply = Reply(), *, requests_per_s: float | None = None, tokens_per_min: int | None = None):
        self.reply = reply
        self.requests_per_s = requests_per_s
        self.tokens_per_min = tokens_per_min
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
            {"Retry-After": str(max(1, math.ceil(wait)))},
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
        self._thread: threading.Thread | None = None

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

    def _answer(self, request: ChatRequest, handler: ChatHandler) -> None:
        with self._lock:
            self._requests.append(request)
            step = self._steps.popleft() if self._steps else self._default
            release = self._release
        if callable(step):
            step = step(request.body)
        _perform(step, request.body, release, handler)


def _perform(step: Step, body: dict | None, release: threading.Event, handler: ChatHandler) -> None:
    match step:
        case Reply():
            if step.delay:
                release.wait(step.delay)
            handler.send_json(200, _completion(step, body))
        case Error():
            handler.send_json(step.status, error_body(step.message, step.type, step.code), step.headers)
        case Hang():
            release.wait(step.seconds)
            handler.close_connection = True
        case CloseConnection():
            handler.close_connection = True
        case Malformed():
            text = json.dumps(_completion(Reply(), body))
            handler.send_bytes(200, text[: len(text) // 2].encode(), "application/json")
        case Garbage():
            handler.send_bytes(200, b"<html>502 Bad Gateway from a proxy</html>", "application/json")
        case _:
            raise TypeError(f"not a fake LLM step: {step!r}")


def _completion(reply: Reply, body: dict | None) -> dict:
    return chat_completion(reply.content, body, reply.prompt_tokens, reply.completion_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible fake judge LLM on loopback.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8999)
    parser.add_argument("--reply", default=DEFAULT_REPLY_TEXT, help="content of every reply")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--rps", type=float, help="account-wide quota: requests per second (429 beyond)")
    parser.add_argument("--tpm", type=int, help="account-wide quota: prompt tokens per minute (429 beyond)")
    args = parser.parse_args()
    reply = Reply(args.reply, delay=args.delay)
    default = AccountQuota(reply, requests_per_s=args.rps, tokens_per_min=args.tpm) if args.rps or args.tpm else reply
    server = FakeLLMServer(args.host, args.port, default=default)
    server.start()
    print(f"fake LLM listening on {server.url}/v1 (model: openai/<anything>)", flush=True)
    try:
        server._thread.join()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
