"""Hostile clients against a real daphne process: oversized and chunked bodies,
invented methods, malformed WebSocket messages; and LOG_FORMAT=json holding for
every line the web and worker processes write."""

import http.client
import json
import socket
import urllib.request

import pytest
from asgiref.sync import async_to_sync

from tests.support.servers import RECEIVE_TIMEOUT_S, EventClient
from tests.support.workers import WORKER_READY_PATTERN

LIMIT = 64 * 1024


def http_exchange(port: int, head: bytes, body_chunks=(), chunked: bool = False) -> tuple[int, bytes]:
    """Send a raw HTTP/1.1 request; return the answer's status and body.

    Stops sending (and reads the answer) as soon as the server answers or
    closes: an early 413 ends the upload."""
    with socket.create_connection(("127.0.0.1", port), timeout=RECEIVE_TIMEOUT_S) as sock:
        sock.sendall(head)
        try:
            for chunk in body_chunks:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed before the whole body was sent
            pass
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        return answer.status, answer.read()


def post_head(path: str, extra: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-User: alice\r\n"
        f"Content-Type: application/json\r\nConnection: close\r\n{extra}\r\n"
    ).encode()


def session_chunks(total: int) -> list[bytes]:
    """A JSON body of about ``total`` bytes, in 16 KiB chunks."""
    body = json.dumps({"session_id": "x", "padding": "x" * total}).encode()
    return [body[index : index + 16384] for index in range(0, len(body), 16384)]


def test_a_chunked_body_over_the_limit_gets_413_from_daphne(start_daphne):
    server = start_daphne(MAX_REQUEST_BODY_BYTES=str(LIMIT))

    status, body = http_exchange(
        server.port,
        post_head("/api/v1/sessions/", "Transfer-Encoding: chunked\r\n"),
        session_chunks(4 * LIMIT),
        chunked=True,
    )

    assert status == 413
    assert json.loads(body)["detail"] == (
        f"request body is larger than the limit of {LIMIT} bytes (MAX_REQUEST_BODY_BYTES)"
    )


def test_a_declared_length_over_the_limit_gets_413(start_daphne):
    """daphne reads a whole body before it calls the application (docs/deploy.md):
    the body is sent, and refused unread."""
    server = start_daphne(MAX_REQUEST_BODY_BYTES=str(LIMIT))

    status, body = http_exchange(
        server.port, post_head("/api/v1/sessions/", f"Content-Length: {LIMIT + 1}\r\n"), [b" " * (LIMIT + 1)]
    )

    assert status == 413
    assert json.loads(body)["detail"].startswith(f"request body of {LIMIT + 1} bytes is larger than ")


def test_a_chunked_body_within_the_limit_reaches_the_api(start_daphne):
    server = start_daphne(MAX_REQUEST_BODY_BYTES=str(LIMIT))

    status, body = http_exchange(
        server.port,
        post_head("/api/v1/sessions/", "Transfer-Encoding: chunked\r\n"),
        session_chunks(LIMIT // 2),
        chunked=True,
    )

    assert status == 400  # read and validated: not a session document
    assert "session_id" in json.loads(body)  # the validation error names the field


def test_invented_method_tokens_do_not_reach_the_metrics(start_daphne):
    server = start_daphne()
    invented = [f"M{index}" + "X" * 8000 for index in range(5)]
    for method in invented:
        http_exchange(
            server.port,
            f"{method} /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode(),
        )

    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=RECEIVE_TIMEOUT_S) as response:
        exposition = response.read().decode()

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
    start_daphne, message, error_says
):
    server = start_daphne()

    async def scenario():
        async with EventClient.connect(server.ws_url) as client:
            await client.websocket.send(message)
            error = await client.receive()
            pong = await client.request({"action": "ping"})
            return error, pong

    error, pong = async_to_sync(scenario)()

    assert error["type"] == "error" and error_says in error["message"]
    assert pong == {"type": "pong"}


def test_with_log_format_json_every_line_of_the_web_and_worker_processes_is_json(start_daphne, start_worker):
    server = start_daphne(LOG_FORMAT="json", MAX_REQUEST_BODY_BYTES=str(LIMIT))
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
    access = [entry for entry in entries["web"] if entry["logger"] == "daphne.access"]
    assert {entry["request"] for entry in access} >= {"GET /healthz", "GET /metrics", "WSCONNECT /api/v1/ws"}
    assert any(entry["status"] == 413 for entry in access)
    assert any("orphaned scorings marked failed: " in entry["message"] for entry in entries["worker"])
    assert any(WORKER_READY_PATTERN in entry["message"] for entry in entries["worker"])
