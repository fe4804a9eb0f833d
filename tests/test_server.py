"""The web server's WebSocket keepalive (tarsy_scoring.server.WebSocketProtocol), on a uvicorn
server configured as the service's, in this process, with short intervals."""

import asyncio
import base64
import contextlib
import os
import struct
import time

import pytest
import uvicorn

from scoring.realtime.extensions import ANSWER_AT_ONCE_EXTENSION, WRITE_TEXT_EXTENSION
from tarsy_scoring import server

PING_INTERVAL_S = 0.4
PING_TIMEOUT_S = 0.4
TICK_S = 0.2
PING, PONG, CLOSE, TEXT = 0x9, 0xA, 0x8, 0x1


async def accepting_app(scope, receive, send):
    """Accepts a WebSocket and reads it until it is closed."""
    assert scope["type"] == "websocket"
    await receive()
    await send({"type": "websocket.accept"})
    while (await receive())["type"] != "websocket.disconnect":
        pass


async def writing_app(scope, receive, send):
    """Accepts a WebSocket; each text it receives it writes back twice through
    WRITE_TEXT_EXTENSION, and says (by ASGI) whether that write was accepted. After the
    client's "close", it closes and then tries to write once more."""
    write_text = scope["extensions"][WRITE_TEXT_EXTENSION]["write_text"]
    await receive()
    await send({"type": "websocket.accept"})
    while (message := await receive())["type"] != "websocket.disconnect":
        if message["text"] == "close":
            await send({"type": "websocket.close", "code": 1000})
            written.append(write_text("after close"))
            continue
        written.append(write_text(message["text"]))
        written.append(write_text(message["text"]))


written: list[bool] = []


async def answering_app(scope, receive, send):
    """Accepts a WebSocket; answers "ping" with "pong" as the server reads it
    (ANSWER_AT_ONCE_EXTENSION), and every text it receives by ASGI with "got:" and the text."""
    write_text = scope["extensions"][WRITE_TEXT_EXTENSION]["write_text"]
    scope["extensions"][ANSWER_AT_ONCE_EXTENSION]["answer_with"](
        lambda text: text == "ping" and write_text("pong")
    )
    await receive()
    await send({"type": "websocket.accept"})
    while (message := await receive())["type"] != "websocket.disconnect":
        write_text("got:" + message["text"])


@contextlib.asynccontextmanager
async def web_server(monkeypatch, app=accepting_app):
    monkeypatch.setattr(server, "KEEPALIVE_TICK_S", TICK_S)
    config = server.config(app, port=0)
    config.ws_ping_interval, config.ws_ping_timeout = PING_INTERVAL_S, PING_TIMEOUT_S
    running = uvicorn.Server(config)
    serving = asyncio.create_task(running.serve())
    while not running.started:
        await asyncio.sleep(0.01)
    try:
        yield running.servers[0].sockets[0].getsockname()[1]
    finally:
        running.should_exit = True
        await serving


def masked_frame(opcode: int, payload: bytes) -> bytes:
    """A whole frame as a client sends it (masked), of a payload under 126 bytes."""
    mask = os.urandom(4)
    masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked


class RawClient:
    """A WebSocket client that answers nothing by itself: frames are read and sent by hand."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int, extra_headers: str = "") -> "RawClient":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra_headers}\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        client = cls(reader, writer)
        client.head = head
        return client

    async def frame(self, timeout_s: float) -> tuple[int, bytes]:
        """The next frame: (opcode, payload)."""
        first, second = await asyncio.wait_for(self.reader.readexactly(2), timeout_s)
        length = second & 0x7F
        if length == 126:
            length = struct.unpack("!H", await self.reader.readexactly(2))[0]
        return first & 0x0F, await self.reader.readexactly(length)

    async def send(self, opcode: int, payload: bytes) -> None:
        self.writer.write(masked_frame(opcode, payload))
        await self.writer.drain()

    def close(self) -> None:
        self.writer.close()


def run(scenario):
    return asyncio.run(scenario())


def test_a_silent_connection_is_pinged_and_closed_without_a_pong(monkeypatch):
    async def scenario():
        async with web_server(monkeypatch) as port:
            client = await RawClient.connect(port)
            opened = time.monotonic()
            ping = await client.frame(timeout_s=5)
            pinged_after = time.monotonic() - opened
            closing = await client.frame(timeout_s=5)  # no pong sent
            client.close()
            return ping[0], pinged_after, closing

    opcode, pinged_after, (closing_opcode, reason) = run(scenario)
    assert opcode == PING
    assert PING_INTERVAL_S <= pinged_after < PING_INTERVAL_S + TICK_S + 0.3
    assert closing_opcode == CLOSE
    assert struct.unpack("!H", reason[:2])[0] == 1011


def test_a_connection_answering_pings_stays_open_and_is_pinged_each_interval(monkeypatch):
    async def scenario():
        async with web_server(monkeypatch) as port:
            client = await RawClient.connect(port)
            pings = []
            deadline = time.monotonic() + 4 * PING_INTERVAL_S
            while time.monotonic() < deadline:
                opcode, payload = await client.frame(timeout_s=5)
                assert opcode == PING
                pings.append(time.monotonic())
                await client.send(PONG, payload)
            client.close()
            return pings

    pings = run(scenario)
    assert len(pings) >= 3
    assert all(PING_INTERVAL_S - 0.05 <= later - earlier for earlier, later in zip(pings, pings[1:]))


def test_a_connection_that_sends_messages_is_not_pinged_until_it_falls_silent(monkeypatch):
    """Its messages show it alive (Go TARSy's dashboard pings with a message every 20 s)."""

    async def scenario():
        async with web_server(monkeypatch) as port:
            client = await RawClient.connect(port)
            talking_until = time.monotonic() + 4 * PING_INTERVAL_S
            while time.monotonic() < talking_until:
                await client.send(TEXT, b'{"action": "ping"}')
                with contextlib.suppress(TimeoutError):
                    frame = await client.frame(timeout_s=PING_INTERVAL_S / 4)
                    pytest.fail(f"a frame while talking: {frame}")
            silent_since = time.monotonic()
            opcode, _ = await client.frame(timeout_s=5)
            client.close()
            return opcode, time.monotonic() - silent_since

    opcode, silent_s = run(scenario)
    assert opcode == PING
    assert silent_s < PING_INTERVAL_S + TICK_S + 0.3


def test_connections_opened_apart_are_pinged_on_the_same_tick(monkeypatch):
    async def scenario():
        async with web_server(monkeypatch) as port:
            loop = asyncio.get_running_loop()
            await asyncio.sleep(TICK_S - loop.time() % TICK_S + 0.01)  # just after a tick
            first = await RawClient.connect(port)
            await asyncio.sleep(TICK_S / 4)
            second = await RawClient.connect(port)
            times = []
            for client in (first, second):
                opcode, _ = await client.frame(timeout_s=5)
                assert opcode == PING
                times.append(time.monotonic())
            first.close()
            second.close()
            return times

    first_at, second_at = run(scenario)
    assert abs(second_at - first_at) < TICK_S / 4


def test_the_application_writes_a_text_at_once_and_nothing_once_it_closed(monkeypatch):
    """WRITE_TEXT_EXTENSION: the text arrives as one frame, not compressed although the client
    offered permessage-deflate (not negotiated: docs/websocket.md, "Compression"); once the
    application closed the connection, a write is refused."""
    written.clear()
    text = '{"type": "scoring.completed", "note": "' + "é" * 40 + '"}'

    async def scenario():
        async with web_server(monkeypatch, writing_app) as port:
            client = await RawClient.connect(
                port, "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
            )
            await client.send(TEXT, text.encode())
            frames = [await client.frame(timeout_s=5) for _ in range(2)]
            await client.send(TEXT, b"close")
            closing = await client.frame(timeout_s=5)
            await client.send(CLOSE, closing[1])
            client.close()
            return client.head, frames, closing

    head, frames, closing = run(scenario)
    assert b"permessage-deflate" not in head.lower()
    assert frames == [(TEXT, text.encode())] * 2
    assert closing[0] == CLOSE
    assert written == [True, True, False]


def test_the_application_answers_a_text_as_it_is_read_unless_an_earlier_one_waits(monkeypatch):
    """ANSWER_AT_ONCE_EXTENSION: a "ping" alone is answered without reaching the application's
    ASGI receive; one that arrives behind another message, still waiting in that receive's
    queue, goes the ASGI way after it, so that answers keep the messages' order."""

    async def scenario():
        async with web_server(monkeypatch, answering_app) as port:
            client = await RawClient.connect(port)
            await client.send(TEXT, b"ping")
            alone = await client.frame(timeout_s=5)
            await client.send(TEXT, b"hello")
            hello = await client.frame(timeout_s=5)
            client.writer.write(masked_frame(TEXT, b"first") + masked_frame(TEXT, b"ping"))
            behind = [await client.frame(timeout_s=5) for _ in range(2)]
            client.close()
            return alone, hello, behind

    alone, hello, behind = run(scenario)
    assert alone == (TEXT, b"pong")
    assert hello == (TEXT, b"got:hello")
    assert behind == [(TEXT, b"got:first"), (TEXT, b"got:ping")]
