"""Hostile clients against a real web server process: oversized and chunked bodies,
invented methods, malformed WebSocket messages; and LOG_FORMAT=json holding for
every line the web and worker processes write."""

import http.client
import json
import socket
import urllib.request
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync

from tests.support.servers import RECEIVE_TIMEOUT_S, EventClient
from tests.support.workers import WORKER_READY_PATTERN

LIMIT = 64 * 1024


def http_exchange(port: int, head: bytes, body_chunks=(), chunked: bool = False) -> tuple[int, bytes, int]:
    """Send a raw HTTP/1.1 request; return the answer's status and body, and how many
    bytes of the body had been sent before it.

    Stops sending (and reads the answer) as soon as the server answers and closes:
    an early 413 ends the upload."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=RECEIVE_TIMEOUT_S) as sock:
        sock.sendall(head)
        try:
            for chunk in body_chunks:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                sent += len(chunk)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed before the whole body was sent
            pass
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        return answer.status, answer.read(), sent


def post_head(path: str, extra: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-User: alice\r\n"
        f"Content-Type: application/json\r\nConnection: close\r\n{extra}\r\n"
    ).encode()


def session_chunks(total: int) -> list[bytes]:
    """A JSON body of about ``total`` bytes, in 16 KiB chunks."""
    body = json.dumps({"session_id": "x", "padding": "x" * total}).encode()
    return [body[index : index + 16384] for index in range(0, len(body), 16384)]


MIB = 1024 * 1024


def peak_rss(pid: int) -> int:
    """The most resident memory the process has had so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


@pytest.mark.parametrize(
    ("framing", "refusal"),
    [
        ("Transfer-Encoding: chunked", "request body is larger than "),
        (f"Content-Length: {64 * MIB}", f"request body of {64 * MIB} bytes is larger than "),
    ],
)
def test_a_body_over_the_limit_gets_413_before_the_server_holds_it(start_web, framing, refusal):
    """Anonymous, so before authentication. The server hands the body over as it comes
    (daphne read it whole first: its memory grew by the body's size, docs/deploy.md)."""
    server = start_web(MAX_REQUEST_BODY_BYTES=str(LIMIT))
    head = (
        f"POST /api/v1/sessions/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\n{framing}\r\n\r\n"
    ).encode()
    urllib.request.urlopen(f"{server.http_url}/healthz", timeout=RECEIVE_TIMEOUT_S).close()  # warmed up
    peak_before = peak_rss(server.process.pid)

    status, body, sent = http_exchange(server.port, head, [b" " * MIB] * 64, chunked="chunked" in framing)

    assert status == 413
    assert json.loads(body)["detail"].startswith(refusal)
    assert sent < 16 * MIB  # the upload was cut short: the rest of the 64 MiB never went out
    assert peak_rss(server.process.pid) - peak_before < 16 * MIB


def test_a_chunked_body_within_the_limit_reaches_the_api(start_web):
    server = start_web(MAX_REQUEST_BODY_BYTES=str(LIMIT))

    status, body, _ = http_exchange(
        server.port,
        post_head("/api/v1/sessions/", "Transfer-Encoding: chunked\r\n"),
        session_chunks(LIMIT // 2),
        chunked=True,
    )

    assert status == 400  # read and validated: not a session document
    assert "session_id" in json.loads(body)  # the validation error names the field


def test_invented_method_tokens_do_not_reach_the_metrics(start_web):
    server = start_web()
    invented = [f"M{index}" + "X" * 8000 for index in range(5)]
    # uvicorn's parser refuses methods it does not know; one it knows beyond the nine of
    # HTTP (WebDAV's) reaches the application, which counts it as "other".
    statuses = [
        http_exchange(
            server.port,
            f"{method} /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode(),
        )[0]
        for method in [*invented, "PROPFIND"]
    ]

    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=RECEIVE_TIMEOUT_S) as response:
        exposition = response.read().decode()

    assert statuses[:-1] == [400] * len(invented)
    assert 'method="other"' in exposition
    assert not any(method in exposition for method in invented)


@pytest.mark.parametrize(
    ("message", "error_says"),
    [
        ('{"action": ["subscribe"]}', "unknown action of type list"),
        ('{"action": "ping", "deep": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
    ],
)
def test_a_malformed_websocket_message_gets_an_error_and_the_connection_stays(
    start_web, message, error_says
):
    server = start_web()

    async def scenario():
        async with EventClient.connect(server.ws_url) as client:
            await client.websocket.send(message)
            error = await client.receive()
            pong = await client.request({"action": "ping"})
            return error, pong

    error, pong = async_to_sync(scenario)()

    assert error["type"] == "error" and error_says in error["message"]
    assert pong == {"type": "pong"}


def test_with_log_format_json_every_line_of_the_web_and_worker_processes_is_json(start_web, start_worker):
    server = start_web(LOG_FORMAT="json", MAX_REQUEST_BODY_BYTES=str(LIMIT))
    worker = start_worker(LOG_FORMAT="json")
    for path in ("/healthz", "/no/such%0Apage", "/metrics"):
        try:
            urllib.request.urlopen(f"{server.http_url}{path}", timeout=RECEIVE_TIMEOUT_S).close()
        except urllib.error.HTTPError:
            pass
    http_exchange(
        server.port,
        post_head("/api/v1/sessions/", "Transfer-Encoding: chunked\r\n"),
        session_chunks(2 * LIMIT),
        True,
    )

    async def websocket_visit():
        async with EventClient.connect(server.ws_url) as client:
            await client.websocket.send("{not json")
            await client.receive()

    async_to_sync(websocket_visit)()
    server.stop()
    worker.stop()

    lines = {
        "web": server.log.read_text().splitlines(),
        "worker": worker.log.read_text().splitlines(),
    }
    entries = {name: [json.loads(line) for line in log] for name, log in lines.items()}
    access = [entry for entry in entries["web"] if entry["logger"] == "uvicorn.access"]
    requests = {entry["request"] for entry in access}
    assert requests >= {"GET /healthz", "GET /metrics", "POST /api/v1/sessions/"}
    assert any(entry["status"] == 413 for entry in access)
    assert any('"WebSocket /api/v1/ws" [accepted]' in entry["message"] for entry in entries["web"])
    assert any("orphaned scorings marked failed: " in entry["message"] for entry in entries["worker"])
    assert any(WORKER_READY_PATTERN in entry["message"] for entry in entries["worker"])
