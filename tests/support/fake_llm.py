"""An OpenAI-compatible chat-completions server on loopback, to fake the judge LLM.

The judge is faked only at the network edge: litellm talks real HTTP to this
server, from the test process or from worker processes the tests start. Tests
script what the server does, one step per request, and read back every request
it received.

    fake_llm.push(Error(429, headers={"Retry-After": "1"}), Reply("Total score: 70"))

Run it alone for manual runs and benchmarks:

    python -m tests.support.fake_llm --port 8999 --reply "Total score: 70" --delay 2
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

DEFAULT_REPLY_TEXT = "This is the fake judge's reply."
COMPLETION_PATHS = ("/v1/chat/completions", "/chat/completions")


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


# --- Requests as received -------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict | None  # the parsed JSON body, None if it was not JSON
    arrived: float  # time.monotonic() when the request was read

    @property
    def messages(self) -> list[dict]:
        return (self.body or {}).get("messages", [])

    @property
    def model(self) -> str | None:
        return (self.body or {}).get("model")


# --- The server -------------------------------------------------------------------------------


class _BackloggedHTTPServer(ThreadingHTTPServer):
    # http.server's listen backlog of 5 drops connection attempts when hundreds
    # of judge calls start at once, and each retry costs the client 1 s.
    request_queue_size = 1024


class FakeLLMServer:
    """A thread-safe scripted server; ``steps`` run first-in first-out, then ``default``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, default: Step | Callable = Reply()):
        self._lock = threading.Lock()
        self._steps: deque[Step] = deque()
        self._requests: list[RecordedRequest] = []
        self._default = default
        # Set to release requests that are hanging, so they do not outlive a test.
        self._release = threading.Event()
        self._httpd = _BackloggedHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.fake = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

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
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def push(self, *steps: Step) -> None:
        with self._lock:
            self._steps.extend(steps)

    def set_default(self, default: Step | Callable[[dict | None], Step]) -> None:
        """What to do once the script is empty: a step, or a function of the request body."""
        with self._lock:
            self._default = default

    @property
    def requests(self) -> list[RecordedRequest]:
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

    def _next_step(self, request: RecordedRequest) -> tuple[Step, threading.Event]:
        with self._lock:
            self._requests.append(request)
            step = self._steps.popleft() if self._steps else self._default
            release = self._release
        if callable(step):
            step = step(request.body)
        return step, release


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeLLM/1.0"

    def log_message(self, format, *args):
        """Quiet: tests read requests from the recorder, not from stderr."""

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        request = RecordedRequest(self.path, dict(self.headers.items()), body, time.monotonic())
        fake: FakeLLMServer = self.server.fake
        if self.path.split("?")[0] in COMPLETION_PATHS:
            step, release = fake._next_step(request)
        else:
            step, release = Error(404, f"unknown path {self.path}", "not_found"), threading.Event()
        try:
            self._perform(step, body, release)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout); nothing to answer

    def _perform(self, step: Step, body: dict | None, release: threading.Event) -> None:
        match step:
            case Reply():
                if step.delay:
                    release.wait(step.delay)
                self._send_json(200, _completion(step, body))
            case Error():
                error = {"error": {"message": step.message, "type": step.type, "code": step.code}}
                self._send_json(step.status, error, step.headers)
            case Hang():
                release.wait(step.seconds)
                self.close_connection = True
            case CloseConnection():
                self.close_connection = True
            case Malformed():
                text = json.dumps(_completion(Reply(), body))
                self._send_bytes(200, text[: len(text) // 2].encode(), "application/json")
            case Garbage():
                self._send_bytes(200, b"<html>502 Bad Gateway from a proxy</html>", "application/json")
            case _:
                raise TypeError(f"not a fake LLM step: {step!r}")

    def _send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_bytes(self, status: int, data: bytes, content_type: str, headers=None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _completion(reply: Reply, body: dict | None) -> dict:
    body = body or {}
    prompt_chars = sum(len(str(message.get("content") or "")) for message in body.get("messages", []))
    prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else max(1, prompt_chars // 4)
    completion_tokens = (
        reply.completion_tokens if reply.completion_tokens is not None else len(reply.content) // 4
    )
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-judge"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


# --- pytest fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fake_llm_server():
    server = FakeLLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def fake_llm(fake_llm_server):
    """The shared fake server, with an empty script and no recorded requests."""
    fake_llm_server.reset()
    yield fake_llm_server
    fake_llm_server.reset()


@pytest.fixture
def judge_llm(settings, fake_llm):
    """Settings that send judge calls to the fake server, with short timeouts and backoff."""
    env = fake_llm.env()
    settings.SCORING_LLM_MODEL = env["SCORING_LLM_MODEL"]
    settings.SCORING_LLM_API_BASE = env["SCORING_LLM_API_BASE"]
    settings.SCORING_LLM_API_KEY = env["SCORING_LLM_API_KEY"]
    settings.SCORING_LLM_TIMEOUT_S = float(env["SCORING_LLM_TIMEOUT_S"])
    settings.SCORING_LLM_BACKOFF_S = float(env["SCORING_LLM_BACKOFF_S"])
    return fake_llm


def main() -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible fake judge LLM on loopback.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8999)
    parser.add_argument("--reply", default=DEFAULT_REPLY_TEXT, help="content of every reply")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each reply")
    args = parser.parse_args()
    server = FakeLLMServer(args.host, args.port, default=Reply(args.reply, delay=args.delay))
    server.start()
    print(f"fake LLM listening on {server.url}/v1 (model: openai/<anything>)", flush=True)
    try:
        server._thread.join()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
