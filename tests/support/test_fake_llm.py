"""The fake OpenAI-compatible server itself, spoken to with plain HTTP."""

import http.client
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.fake_llm import AccountQuota, ContextWindow, Error, Reply, Together
from tests.support.servers import REPO_DIR
from tests.support.throwaway_servers import free_port


def post(url: str, body: dict, path: str = "/v1/chat/completions") -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


CHAT = {"model": "fake-judge", "messages": [{"role": "user", "content": "abcdefgh" * 10}]}


def test_reply_is_an_openai_chat_completion(fake_llm):
    fake_llm.push(Reply("hello"))

    status, _, body = post(fake_llm.url, CHAT)

    assert status == 200
    assert body["object"] == "chat.completion"
    assert body["model"] == "fake-judge"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hello"}
    assert body["usage"] == {
        "prompt_tokens": 20,
        "completion_tokens": 1,
        "total_tokens": 21,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


LONG_PROMPT = {"role": "user", "content": "x" * 4 * 1500}  # 1,500 tokens: past the 1,024 cached at least


def test_a_repeated_prefix_is_reported_cached_as_openai_does(fake_llm):
    turn1 = {"model": "fake-judge", "messages": [LONG_PROMPT]}
    turn2 = {"model": "fake-judge", "messages": [LONG_PROMPT, {"role": "assistant", "content": "70"}]}
    changed = {"model": "fake-judge", "messages": [{"role": "user", "content": "y" + "x" * (4 * 1500 - 1)}]}

    usages = [post(fake_llm.url, body)[2]["usage"] for body in (turn1, turn2, changed)]
    cached = [usage["prompt_tokens_details"]["cached_tokens"] for usage in usages]

    assert cached == [0, 1408, 0]  # 1,500 in steps of 128; a prefix that differs by a byte is not cached


def test_a_short_prefix_is_not_cached(fake_llm):
    short = {"model": "fake-judge", "messages": [{"role": "user", "content": "x" * 4 * 1000}]}

    post(fake_llm.url, short)

    assert post(fake_llm.url, short)[2]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def marked(text: str) -> dict:
    block = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
    return {"role": "user", "content": [block]}


def test_the_messages_api_caches_only_up_to_a_cache_control_block(fake_llm):
    reply = {"role": "assistant", "content": [{"type": "text", "text": "70"}]}
    followup = {"role": "user", "content": [{"type": "text", "text": "and the tools?"}]}
    unmarked = {"model": "claude", "messages": [LONG_PROMPT, reply]}
    turn1 = {"model": "claude", "messages": [marked(LONG_PROMPT["content"])]}
    turn2 = {"model": "claude", "messages": [marked(LONG_PROMPT["content"]), reply, followup]}

    answers = [post(fake_llm.url, body, path="/v1/messages") for body in (unmarked, unmarked, turn1, turn2)]

    assert all(status == 200 for status, _, _ in answers)
    assert answers[0][2]["content"] == [{"type": "text", "text": "This is the fake judge's reply."}]
    usages = [answer[2]["usage"] for answer in answers]
    usage = [
        (u["input_tokens"], u["cache_creation_input_tokens"], u["cache_read_input_tokens"]) for u in usages
    ]
    assert usage == [(1500, 0, 0), (1500, 0, 0), (0, 1500, 0), (4, 0, 1500)]  # nothing marked, nothing cached


def test_steps_run_in_order_then_the_default(fake_llm):
    fake_llm.push(Error(429, "slow down", headers={"Retry-After": "7"}), Reply("second"))
    fake_llm.set_default(lambda body: Reply(f"echo {len(body['messages'])} message(s)"))

    first = post(fake_llm.url, CHAT)
    second = post(fake_llm.url, CHAT, path="/chat/completions")
    third = post(fake_llm.url, CHAT)

    assert (first[0], first[1]["Retry-After"], first[2]["error"]["message"]) == (429, "7", "slow down")
    assert second[2]["choices"][0]["message"]["content"] == "second"
    assert third[2]["choices"][0]["message"]["content"] == "echo 1 message(s)"
    assert [request.path for request in fake_llm.requests] == [
        "/v1/chat/completions",
        "/chat/completions",
        "/v1/chat/completions",
    ]
    assert fake_llm.requests[0].messages == CHAT["messages"]


def test_together_answers_only_requests_that_are_in_the_server_at_once(fake_llm):
    fake_llm.set_default(Together([Reply("a"), Reply("b")], timeout=5))
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda _: post(fake_llm.url, CHAT), range(2)))
    assert sorted(body["choices"][0]["message"]["content"] for _, _, body in together) == ["a", "b"]

    fake_llm.set_default(Together([Reply("a"), Reply("b")], timeout=0.2))
    alone = [post(fake_llm.url, CHAT), post(fake_llm.url, CHAT)]
    assert [(status, body["error"]["message"]) for status, _, body in alone] == [
        (500, "fewer than 2 requests were in the server at once")
    ] * 2


def test_a_quota_that_announces_itself_sends_openais_headers_and_anthropics_on_the_messages_api(fake_llm):
    fake_llm.set_default(AccountQuota(Reply("ok"), requests_per_s=2, tokens_per_min=6000, announce=True))
    claude = {"model": "claude", "messages": CHAT["messages"]}

    ok, openai, _ = post(fake_llm.url, CHAT)
    ok_too, anthropic, _ = post(fake_llm.url, claude, path="/v1/messages")
    refused, refusal, _ = post(fake_llm.url, CHAT)

    assert ok == ok_too == 200 and refused == 429  # two requests a second, the third refused
    assert (openai["x-ratelimit-limit-requests"], openai["x-ratelimit-limit-tokens"]) == ("120", "6000")
    assert "x-ratelimit-limit-requests" not in anthropic
    assert anthropic["anthropic-ratelimit-requests-limit"] == "120"
    assert anthropic["anthropic-ratelimit-input-tokens-limit"] == "6000"
    assert anthropic["anthropic-ratelimit-tokens-limit"] == "6000"
    assert refusal["Retry-After"] == "1" and refusal["x-ratelimit-limit-requests"] == "120"


def test_a_context_window_refuses_what_is_over_it_in_openais_words(fake_llm):
    window = ContextWindow(30, Reply("ok"))
    fake_llm.set_default(window)
    short = {**CHAT, "messages": [{"role": "user", "content": "hello"}]}
    long = {**CHAT, "messages": [{"role": "user", "content": "hello there " * 20}]}

    status, _, body = post(fake_llm.url, short)
    assert status == 200 and body["usage"]["prompt_tokens"] == window.received[0] <= 30

    status, _, body = post(fake_llm.url, long)
    assert status == 400 and window.received[1] > 30
    assert body["error"] == {
        "message": f"This model's maximum context length is 30 tokens. However, your messages resulted in "
        f"{window.received[1]} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }


def test_unknown_path_is_a_404_that_leaves_the_script_alone(fake_llm):
    fake_llm.push(Reply("kept"))

    status, _, _ = post(fake_llm.url, CHAT, path="/v1/embeddings")

    assert status == 404
    assert fake_llm.pending_steps == 1


def test_env_points_a_worker_at_the_server(fake_llm):
    env = fake_llm.env()

    assert env["SCORING_LLM_API_BASE"] == f"{fake_llm.url}/v1"
    assert env["SCORING_LLM_MODEL"] == "openai/fake-judge"


@pytest.fixture
def standalone_server():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_llm", "--port", str(port), "--reply", "Total score: 55"],
        cwd=REPO_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    process.stdout.readline()  # printed once it listens
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=10)


def test_runs_standalone(standalone_server):
    status, _, body = post(standalone_server, CHAT)

    assert status == 200
    assert body["choices"][0]["message"]["content"] == "Total score: 55"


@pytest.mark.parametrize("module", ["tests.support.fake_llm", "scoring.judge.demo_judge"])
def test_runs_without_pytest_or_django(module):
    # The demo judge runs on the runtime lock, which has no pytest; neither needs Django set up.
    code = f"import sys; sys.modules['pytest'] = sys.modules['django'] = None; import {module}"
    repo = REPO_DIR
    done = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)

    assert done.returncode == 0, done.stderr


def stream(url: str, body: dict, path: str = "/v1/chat/completions") -> tuple[str, list[tuple[str | None, str]]]:
    """POST ``body`` asking for a stream; the Content-Type and the (event, data) of each event."""
    request = urllib.request.Request(
        url + path, data=json.dumps({**body, "stream": True}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        events = []
        for block in response.read().decode().split("\n\n"):
            lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "data" in lines:
                events.append((lines.get("event"), lines["data"]))
        return response.headers["Content-Type"], events


def test_a_streamed_reply_is_openais_chunks_with_the_usage_last_when_asked(fake_llm):
    fake_llm.push(Reply("hello world", completion_tokens=2), Reply("hello world"))

    content_type, events = stream(fake_llm.url, {**CHAT, "stream_options": {"include_usage": True}})
    _, without_usage = stream(fake_llm.url, CHAT)

    assert content_type.startswith("text/event-stream")
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks[:-1]) == "hello world"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2
    assert all(chunk["usage"] is None for chunk in chunks[:-1])
    assert all("usage" not in json.loads(data) for _, data in without_usage[:-1])


def test_a_streamed_reply_is_anthropics_events_on_its_messages_api(fake_llm):
    fake_llm.push(Reply("hello world", prompt_tokens=30, completion_tokens=2))

    _, events = stream(fake_llm.url, {**CHAT, "max_tokens": 100}, path="/v1/messages")

    assert [event for event, _ in events][:3] == ["message_start", "content_block_start", "ping"]
    assert [event for event, _ in events][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    data = [json.loads(data) for _, data in events]
    assert data[0]["message"]["usage"]["input_tokens"] == 30
    assert "".join(item["delta"]["text"] for item in data if item["type"] == "content_block_delta") == "hello world"
    assert data[-2]["usage"] == {"output_tokens": 2}


def test_a_slow_stream_spaces_its_events_and_a_dropped_one_ends_without_its_end(fake_llm):
    fake_llm.push(Reply("hello world", chunk_delay=0.1), Reply("hello world", drop_after=2))

    started = time.monotonic()
    _, events = stream(fake_llm.url, CHAT)
    assert time.monotonic() - started >= 0.1 * (len(events) - 1)

    with pytest.raises(http.client.IncompleteRead):
        stream(fake_llm.url, CHAT)
