"""The real local model for the ``real_model`` tests: Qwen2.5-Coder-0.5B-Instruct on llama.cpp's
server (scoring.judge.local_model), installed where ``manage.py local_model`` installs it, and
a recording proxy in front of it, so that a test reads every request the judge sent and what
the model answered, as they crossed the wire.

    @pytest.mark.real_model
    def test_x(real_judge):                 # settings point the judge at the proxy
        ...
        for call in real_judge.calls():     # each chat completion: messages sent, usage answered
            ...

The server's own defaults are a fixed seed and temperature 0 (the service sends its
SCORING_LLM_TEMPERATURE and SCORING_LLM_SEED with every call, which the tests check), and
replies are capped at REPLY_CAP_TOKENS, so that a small model that repeats itself costs a
bounded time. The proxy relays a streamed answer once it has ended.
"""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from scoring.judge import fitting, local_model
from tests.support.servers import StandInHTTPServer
from tests.support.throwaway_servers import free_port

MODEL = local_model.MODELS["qwen2.5-coder-0.5b"]
REPLY_CAP_TOKENS = 1_024
SEED = 20_260_101
# Hop-by-hop headers, and those the proxy sets itself for the body it relays.
NOT_RELAYED = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass(frozen=True)
class Exchange:
    """One request through the proxy and the server's answer to it."""

    method: str
    path: str
    request: dict | None
    status: int
    response: bytes

    @property
    def answer(self) -> dict:
        """The answer as one chat completion: a streamed answer's chunks joined (the judge asks
        for its replies streamed, the token counts in the last chunk)."""
        events = [line[5:].strip() for line in self.response.decode().splitlines() if line.startswith("data:")]
        if not events:
            return json.loads(self.response)
        content, usage, finish_reason = [], None, None
        for event in events:  # server-sent events; llama.cpp's server opens with a comment line
            if event == "[DONE]":
                continue
            chunk = json.loads(event)
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                content.append((choice.get("delta") or {}).get("content") or "")
                finish_reason = choice.get("finish_reason") or finish_reason
        message = {"role": "assistant", "content": "".join(content)}
        return {"choices": [{"message": message, "finish_reason": finish_reason}], "usage": usage}

    @property
    def messages(self) -> list[dict]:
        return (self.request or {}).get("messages", [])


class RecordingProxy(StandInHTTPServer):
    """Relays every request to ``upstream`` as it came and records it with the answer."""

    def __init__(self, upstream: str):
        super().__init__(("127.0.0.1", 0), _RelayHandler)
        self.upstream = urlsplit(upstream)
        self.exchanges: list[Exchange] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> RecordingProxy:
        threading.Thread(target=self.serve_forever, name="local-model-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def record(self, exchange: Exchange) -> None:
        with self.lock:
            self.exchanges.append(exchange)

    def chat_calls(self) -> list[Exchange]:
        with self.lock:
            return [e for e in self.exchanges if e.path.rstrip("/").endswith("/chat/completions")]

    def forget(self) -> None:
        with self.lock:
            self.exchanges.clear()


class _RelayHandler(BaseHTTPRequestHandler):
    server: RecordingProxy
    protocol_version = "HTTP/1.1"

    def _relay(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        upstream = self.server.upstream
        connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=None)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in NOT_RELAYED}
            connection.request(self.command, self.path, body=body or None, headers=headers)
            answer = connection.getresponse()
            payload = answer.read()
        finally:
            connection.close()
        try:
            request = json.loads(body) if body else None
        except ValueError:
            request = None
        self.server.record(Exchange(self.command, self.path, request, answer.status, payload))
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in NOT_RELAYED:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _relay

    def log_message(self, format, *args):
        pass


@dataclass
class RealJudge:
    server: local_model.RunningServer
    proxy: RecordingProxy

    @property
    def window(self) -> int:
        """The server's window, as the server says."""
        return local_model.served_context_tokens(self.server.url)

    def calls(self) -> list[Exchange]:
        return self.proxy.chat_calls()

    def model_count(self, messages: list[dict]) -> int:
        """The tokens the model reads for ``messages``, by the model's own template and tokenizer."""
        return local_model.chat_prompt_tokens(self.server.url, messages)


def installed_model_home():
    """The local model's folder, with the 0.5B model installed (installed now if it is not)."""
    home = local_model.home_in(settings.VAR_DIR)
    if local_model.installed_model(MODEL, home) is None:
        local_model.install(MODEL, home)
    return home


def link_installed_model(var_dir) -> None:
    """Give the data folder ``var_dir`` (a test's own) the installed 0.5B model and its
    server's virtualenv, as links: no server started from elsewhere is recorded in it."""
    installed = installed_model_home()
    home = local_model.home_in(var_dir)
    home.mkdir(parents=True)
    (home / "venv").symlink_to(installed / "venv")
    MODEL.path(home).symlink_to(MODEL.path(installed))


@pytest.fixture(scope="session")
def real_model_server(tmp_path_factory):
    server = local_model.launch(
        MODEL,
        installed_model_home(),
        port=free_port(),
        log_dir=tmp_path_factory.mktemp("local-model"),
        max_reply_tokens=REPLY_CAP_TOKENS,
        temperature=0,
        seed=SEED,
    )
    proxy = RecordingProxy(server.url).start()
    yield server, proxy
    proxy.stop()
    server.stop()


@pytest.fixture
def real_judge(settings, real_model_server) -> RealJudge:
    """Settings that send judge calls to the local model through the recording proxy."""
    server, proxy = real_model_server
    proxy.forget()
    environment = server.judge_environment()
    settings.SCORING_LLM_MODEL = environment["SCORING_LLM_MODEL"]
    settings.SCORING_LLM_API_BASE = f"{proxy.url}/v1"
    settings.SCORING_LLM_API_KEY = environment["SCORING_LLM_API_KEY"]
    settings.SCORING_LLM_CONTEXT_TOKENS = int(environment["SCORING_LLM_CONTEXT_TOKENS"])
    settings.SCORING_LLM_TIMEOUT_S = 600
    settings.SCORING_JOB_TIMEOUT_S = 900
    fitting.forget_learned_windows()
    yield RealJudge(server, proxy)
    fitting.forget_learned_windows()
