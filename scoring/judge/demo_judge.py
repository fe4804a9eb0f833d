"""A stand-in judge to try the service without a provider key: ``bin/run --demo-judge``.

An OpenAI-compatible chat-completions server on loopback. It answers the judge's two
turns with text derived from the session it is sent, without any LLM: a Markdown critical
analysis with a score breakdown, ending in the total score line, then a numbered list of
the available tools the investigation never called. The model name it runs under
(``MODEL``) says it is a demo, and is what every score it makes shows as its judge model.

The serving part (``ChatCompletionsServer``, ``chat_completion``) is also what the tests'
scripted fake judge (tests/support/fake_llm.py) is built on. Standard library only, so it
runs on the runtime lock.

    python -m scoring.judge.demo_judge --port 8999        # serves until Ctrl-C
    python -m scoring.judge.demo_judge --env --port 8999  # prints the settings pointing a worker at it
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from scoring.judge.prompts import EVALUATION_FOLLOWUP_PROMPT, RESTATE_SCORE_PROMPT

# A litellm model id (provider/model) that reads, wherever a score shows it, as no real model.
MODEL = "openai/DEMO-canned-judge-not-an-LLM"
# Seconds before each reply, so that a person watching sees the scoring's phases go by.
DEFAULT_DELAY_S = 1.0
COMPLETION_PATHS = ("/v1/chat/completions", "/chat/completions")


def environment(url: str) -> dict[str, str]:
    """The settings that point a worker's judge at the demo judge serving at ``url``."""
    return {
        "SCORING_LLM_MODEL": MODEL,
        "SCORING_LLM_API_BASE": f"{url}/v1",
        "SCORING_LLM_API_KEY": "the-demo-judge-needs-no-key",
    }


# --- OpenAI-compatible serving -------------------------------------------------------------


@dataclass(frozen=True)
class ChatRequest:
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


def chat_completion(
    content: str,
    request_body: dict | None,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
) -> dict:
    """A ``chat.completion`` answering ``request_body`` with ``content``; token counts
    default to a rough count of characters (4 a token), as ``usage`` must have them."""
    body = request_body or {}
    if prompt_tokens is None:
        prompt_chars = sum(len(str(message.get("content") or "")) for message in body.get("messages", []))
        prompt_tokens = max(1, prompt_chars // 4)
    if completion_tokens is None:
        completion_tokens = len(content) // 4
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "unknown"),
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def completion_chunks(completion: dict, request_body: dict | None, pieces: int = 8) -> list[dict]:
    """The ``chat.completion.chunk`` events that stream ``completion`` (a ``chat_completion``)
    as OpenAI sends them: the role, the content in ``pieces`` deltas, the finish reason, and,
    when the request asked for it (``stream_options.include_usage``), a last chunk with no
    choices and the usage (every chunk before it then has ``"usage": null``)."""
    content = completion["choices"][0]["message"]["content"]
    include_usage = bool(((request_body or {}).get("stream_options") or {}).get("include_usage"))
    size = max(1, -(-len(content) // max(1, pieces)))
    deltas = [{"role": "assistant", "content": ""}]
    deltas += [{"content": content[start : start + size]} for start in range(0, len(content), size)]
    frame = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"]}
    frame["model"] = completion["model"]
    chunks = [{**frame, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    chunks.append({**frame, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if include_usage:
        chunks = [{**chunk, "usage": None} for chunk in chunks]
        chunks.append({**frame, "choices": [], "usage": completion["usage"]})
    return chunks


def wants_stream(request_body: dict | None) -> bool:
    return bool((request_body or {}).get("stream"))


def error_body(message: str, type: str = "server_error", code: str | None = None) -> dict:
    """OpenAI's JSON error body."""
    return {"error": {"message": message, "type": type, "code": code}}


class ChatHandler(BaseHTTPRequestHandler):
    """Reads one POST; a chat-completions path goes to the server's ``answer``, others get a 404."""

    protocol_version = "HTTP/1.1"
    server_version = "ChatCompletionsStandIn/1.0"

    def log_message(self, format, *args):
        """Quiet: one line per judge call would bury the service's own log."""

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        request = ChatRequest(self.path, dict(self.headers.items()), body, time.monotonic())
        try:
            if self.path.split("?")[0] in self.server.paths:
                self.server.answer(request, self)
            else:
                self.send_json(404, error_body(f"unknown path {self.path}", code="not_found"))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout); nothing to answer

    def send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        self.send_bytes(status, json.dumps(payload).encode(), "application/json", headers)

    def send_bytes(self, status: int, data: bytes, content_type: str, headers=None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    # Server-sent events, as the providers stream a reply: chunked transfer encoding, one
    # ``data:`` event (with an ``event:`` name, in Anthropic's streams) per chunk.

    def start_event_stream(self, headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()

    def send_event(self, data: dict | str, event: str | None = None) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        payload = (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
        encoded = payload.encode()
        self.wfile.write(f"{len(encoded):x}\r\n".encode() + encoded + b"\r\n")
        self.wfile.flush()

    def end_event_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def stream_completion(self, chunks: list[dict], headers: dict[str, str] | None = None) -> None:
        """An OpenAI chat-completions stream of ``chunks`` (``completion_chunks``), ending in ``[DONE]``."""
        self.start_event_stream(headers)
        for chunk in chunks:
            self.send_event(chunk)
        self.send_event("[DONE]")
        self.end_event_stream()


class ChatCompletionsServer(ThreadingHTTPServer):
    """``POST /v1/chat/completions`` on ``address``; ``answer(request, handler)`` replies
    through the handler (``send_json``, ``send_bytes``)."""

    # http.server's listen backlog of 5 drops connection attempts when hundreds of
    # judge calls start at once, and each retry costs the client 1 s.
    request_queue_size = 1024
    daemon_threads = True
    paths = COMPLETION_PATHS  # the POST paths given to ``answer``; others get a 404

    def __init__(self, address: tuple[str, int], answer: Callable[[ChatRequest, ChatHandler], None]):
        super().__init__(address, ChatHandler)
        self.answer = answer

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def serve_in_thread(self, name: str) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name=name, daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


# --- What the demo judge says --------------------------------------------------------------

_TOOLS_SECTION = re.compile(r"^## AVAILABLE TOOLS PER AGENT$(.*?)^## INVESTIGATION TIMELINE$", re.M | re.S)
_TOOL_LINE = re.compile(r"^- ([\w.-]+?)\.([\w-]+)\([^)\n]*\) - (.*)$", re.M)
_TOOL_CALL = re.compile(r"^\*\*Tool Call:\*\* ([\w.-]+?)\.([\w-]+)\(", re.M)
# A failed call: tarsy-bot's renders say its error, Go TARSy's label the result it returned.
_FAILED_CALL = re.compile(r"^\*\*(?:Error:\*\* |Result \(error\):\*\*$)", re.M)
_FIELD = r"^\*\*{}:\*\* (.+)$"
# A calibrated version's worked examples (scoring.judge.calibration: each a heading, then its
# fenced data): other sessions' excerpts, which the demo judge does not read as the session's.
_WORKED_EXAMPLE = re.compile(
    r"^### Example \d+: the judge scored .*?<<<END_SESSION_DATA_[0-9a-f]+>>>$", re.S | re.M
)
_HIGH_CONFIDENCE = re.compile(r"\bhigh confidence\b|\bconfidence\W{1,3}high\b", re.I)
# Unused tools that most often hold direct evidence come first, with why they matter.
_EVIDENCE_KINDS = [
    (
        ("log",),
        "it returns what the workload itself recorded: direct evidence of what actually ran, "
        "where the investigation inferred it from status fields and metrics",
    ),
    (
        ("event", "history"),
        "it holds the cluster's own record of what happened and when, which would have "
        "confirmed or ruled out the timeline the agent assumed",
    ),
    (
        ("read", "file", "grep"),
        "reading the content would have verified what the agent only knew by name",
    ),
    (
        ("get", "describe", "resources"),
        "it shows the current state of the object the conclusion is about, instead of assuming it",
    ),
    (
        ("query", "range", "top", "metric"),
        "it places the alert in its time window, which tells a lasting problem from a short spike",
    ),
]
MAX_MISSING_TOOLS = 3


@dataclass
class _Session:
    """What the demo judge reads from the score prompt."""

    session_id: str
    alert_type: str
    status: str
    available: dict[str, str]  # "server.tool" -> its description
    called: list[str]  # "server.tool" in call order, repeated calls included
    failed_calls: int
    has_final_analysis: bool
    claims_high_confidence: bool

    @property
    def unused(self) -> list[str]:
        called = set(self.called)
        return [tool for tool in self.available if tool not in called]


def _read_session(prompt: str) -> _Session:
    prompt = _WORKED_EXAMPLE.sub("", prompt)

    def field(name: str, default: str = "unknown") -> str:
        match = re.search(_FIELD.format(re.escape(name)), prompt, re.M)
        return match.group(1).strip() if match else default

    section = _TOOLS_SECTION.search(prompt)
    available = {}
    for server, tool, description in _TOOL_LINE.findall(section.group(1) if section else ""):
        available.setdefault(f"{server}.{tool}", description.strip())
    _, _, final = prompt.rpartition("## FINAL ANALYSIS")
    has_final = bool(final.strip()) and "(No final analysis" not in final[:200]
    return _Session(
        session_id=field("Session ID"),
        alert_type=field("Alert Type"),
        status=field("Status"),
        available=available,
        called=[f"{server}.{tool}" for server, tool in _TOOL_CALL.findall(prompt)],
        failed_calls=len(_FAILED_CALL.findall(prompt)),
        has_final_analysis=has_final,
        claims_high_confidence=bool(_HIGH_CONFIDENCE.search(final)),
    )


def _clamp(points: int) -> int:
    return max(0, min(25, points))


def _score(session: _Session) -> dict[str, int]:
    """Points per category, from what the session shows; deterministic."""
    used = set(session.called) & set(session.available)
    if session.available:
        tool_relevance = 10 + round(12 * len(used) / len(session.available))
    else:
        tool_relevance = 14 if session.called else 6
    return {
        "Logical Flow": _clamp(
            19
            - min(6, 2 * session.failed_calls)
            - (5 if session.status != "completed" else 0)
            - (4 if not session.called else 0)
        ),
        "Consistency": _clamp(
            20
            - (5 if session.claims_high_confidence and len(session.unused) >= 3 else 0)
            - (6 if not session.has_final_analysis else 0)
        ),
        "Tool Relevance": _clamp(tool_relevance),
        "Synthesis Quality": _clamp(
            17 - (9 if not session.has_final_analysis else 0) - min(3, session.failed_calls)
        ),
    }


def _names(tools: list[str], limit: int = 4) -> str:
    shown = [f"`{tool}`" for tool in tools[:limit]]
    if len(tools) > limit:
        shown.append(f"{len(tools) - limit} more")
    return ", ".join(shown) if shown else "none"


def _analysis(session: _Session) -> str:
    points = _score(session)
    distinct_calls = list(dict.fromkeys(session.called))
    used = set(session.called) & set(session.available)
    unused = session.unused
    flow = (
        f"The investigation made {len(session.called)} tool call(s) over {len(distinct_calls)} distinct "
        f"tool(s) ({_names(distinct_calls)}) and ended with status **{session.status}**. "
    )
    if session.failed_calls:
        flow += (
            f"However, {session.failed_calls} call(s) failed, and the agent should have analysed each "
            "failure before moving on, instead of leaving the gap open. "
        )
    if not session.called:
        flow += "The agent never attempted to gather evidence with a tool: it concluded from the alert. "
    if session.status != "completed":
        flow += "The investigation did not complete, so its reasoning never reached a verified conclusion. "
    if session.claims_high_confidence and len(unused) >= 3:
        consistency = (
            "There is a significant inconsistency: the agent reports high confidence, but several "
            "available tools were never used to verify it, so the confidence level does not match the "
            "evidence gathered. "
        )
    else:
        consistency = (
            "The stated conclusions broadly follow from the observations collected, although the report "
            "does not always separate verified facts from inference. "
        )
    if not session.has_final_analysis:
        consistency += "There is no final analysis to check against the evidence. "
    if unused:
        tools = (
            f"Of the {len(session.available)} tools available, the agent used {len(used)}. It failed to use "
            f"available tools such as {_names(unused)}, which would have provided direct evidence instead of "
            "circumstantial inference. "
        )
    elif session.available:
        tools = (
            "Every available tool was used at least once, which is thorough; a more logical approach would "
            "still have sequenced the calls so that each built on the previous result. "
        )
    else:
        tools = "No tool list was recorded, so whether better tools were available cannot be verified. "
    if session.has_final_analysis:
        synthesis = (
            "The final analysis integrates the gathered data into a recommendation; however, it does not "
            "acknowledge the investigation gaps listed above, and a rigorous report would have stated "
            "which conclusions remain unverified. "
        )
    else:
        synthesis = "The session produced no final analysis, so there is no synthesis to credit. "
    return "\n".join(
        [
            "*Demo judge: this evaluation is generated from the session's recorded tool calls by a "
            "stand-in, not written by an LLM. Point SCORING_LLM_MODEL at a real model for real scores.*",
            "",
            f"## Critical evaluation of session {session.session_id}",
            "",
            f"This {session.alert_type} investigation is judged on its method, not only on its outcome. "
            "Reaching a plausible conclusion is not enough: the question is whether all available "
            "evidence was gathered and whether the confidence matches it.",
            "",
            "### 1. Logical Flow",
            flow + f"Score: {points['Logical Flow']}/25.",
            "",
            "### 2. Consistency",
            consistency + f"Score: {points['Consistency']}/25.",
            "",
            "### 3. Tool Relevance",
            tools + f"Score: {points['Tool Relevance']}/25.",
            "",
            "### 4. Synthesis Quality",
            synthesis + f"Score: {points['Synthesis Quality']}/25.",
            "",
            "**Score breakdown:**",
            *(f"* {category}: {value}/25" for category, value in points.items()),
            "",
            str(sum(points.values())),
        ]
    )


def _why_missing(tool: str) -> tuple[int, str]:
    """(rank, rationale) of an unused tool: lower ranks hold more direct evidence."""
    name = tool.rpartition(".")[2].lower()
    for rank, (keywords, why) in enumerate(_EVIDENCE_KINDS):
        if any(keyword in name for keyword in keywords):
            return rank, why
    return len(_EVIDENCE_KINDS), "its result would have filled a gap the analysis left open"


def _missing_tools(session: _Session) -> str:
    note = "*(Demo judge: generated from the session, not written by an LLM.)*"
    if not session.available:
        return f"No tool lists were recorded for this session, so no missing tools can be named.\n\n{note}"
    ranked = sorted(session.unused, key=lambda tool: _why_missing(tool)[0])
    if not ranked:
        return f"No critical missing tools identified.\n\n{note}"
    items = []
    for number, tool in enumerate(ranked[:MAX_MISSING_TOOLS], start=1):
        _, why = _why_missing(tool)
        description = session.available[tool].rstrip(".")
        items.append(f"{number}. **{tool}** ({description})\n   *Rationale:* Never called; {why}.")
    return "\n\n".join([*items, note])


def demo_reply(messages: list[dict]) -> str:
    """The demo judge's answer to the judge conversation so far."""
    # The first prompt holds the session (a system prompt, where the criteria have one, comes
    # before it); any later one but the service's own requests is the criteria's follow-up.
    prompts = [str(message.get("content") or "") for message in messages if message.get("role") == "user"]
    session = _read_session(prompts[0] if prompts else "")
    last = prompts[-1] if prompts else ""
    if last == RESTATE_SCORE_PROMPT:
        return str(sum(_score(session).values()))
    if len(prompts) > 1 and last != EVALUATION_FOLLOWUP_PROMPT:
        return _missing_tools(session)
    return _analysis(session)


def serve(host: str = "127.0.0.1", port: int = 0, delay_s: float = DEFAULT_DELAY_S) -> ChatCompletionsServer:
    """The demo judge, serving in a background thread."""

    def answer(request: ChatRequest, handler: ChatHandler) -> None:
        time.sleep(delay_s)
        reply = demo_reply(request.messages)
        if wants_stream(request.body):
            handler.stream_completion(completion_chunks(chat_completion(reply, request.body), request.body))
        else:
            handler.send_json(200, chat_completion(reply, request.body))

    server = ChatCompletionsServer((host, port), answer)
    server.serve_in_thread("demo-judge")
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Demo judge: an OpenAI-compatible stand-in, no LLM.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8999)
    parser.add_argument("--delay", type=float, default=DEFAULT_DELAY_S, help="seconds before each reply")
    parser.add_argument(
        "--env", action="store_true", help="print the settings that point a worker at it (shell), and exit"
    )
    args = parser.parse_args(argv)
    if args.env:
        for name, value in environment(f"http://{args.host}:{args.port}").items():
            print(f"export {name}={shlex.quote(value)}")
        return
    server = serve(args.host, args.port, args.delay)
    print(f"demo judge listening on {server.url}/v1 as {MODEL}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
