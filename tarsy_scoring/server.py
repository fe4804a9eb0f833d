"""The web server: uvicorn serving the ASGI application, configured here once for every
place that starts it (Procfile, Dockerfile, bin/run, bin/topology, the tests, the benchmarks).

    python -m tarsy_scoring.server --host 0.0.0.0 --port 8000

uvicorn hands a request body to the application as it arrives, with flow control, so the
body limit (``tarsy_scoring.request_limits``) refuses an over-limit body before the process
holds it (docs/deploy.md#request-body-size). What is fixed here, and why:

* ``proxy_headers=False``: uvicorn would otherwise take the client address from
  ``X-Forwarded-For`` sent from loopback (``FORWARDED_ALLOW_IPS``); the trusted-proxy rule
  (``TRUSTED_PROXY_IPS``, scoring/auth.py) must see the peer's own address.
* ``log_config=None``: uvicorn's loggers (``uvicorn.error``, ``uvicorn.access``) keep no
  handlers of their own, so Django's LOGGING writes their lines like every other
  (``LOG_FORMAT``, control characters escaped).
* the application is loaded before the event loop starts, as Django's start-up (settings
  checks, the database pool) expects to run outside one.
* ``ws=WebSocketProtocol``: uvicorn's WebSocket protocol with a keepalive that stays cheap
  for thousands of idle dashboards, and a way to send one encoded event to each of them
  (below).
* ``ws_per_message_deflate=False``: messages are not compressed. They are small JSON
  objects, and a compressed one is compressed again for each connection (its own
  compression context): at an event to 5,000 dashboards, 5,000 compressions, and about
  40 KB of zlib state held per connection (docs/websocket.md, "Compression").
"""

from __future__ import annotations

import argparse
import functools
import math

import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State

from scoring.realtime.extensions import ANSWER_AT_ONCE_EXTENSION, WRITE_TEXT_EXTENSION

APPLICATION = "tarsy_scoring.asgi:application"
# On SIGTERM: stop accepting, close WebSockets (code 1012, clients reconnect elsewhere), and
# let requests in progress finish for this long before they are cancelled; below the 10 s
# a container platform waits before SIGKILL.
GRACEFUL_SHUTDOWN_S = 8
# An idle keep-alive connection stays open this long (uvicorn's default is 5 s): longer than
# the 60 s a load balancer or nginx keeps an idle upstream connection, so that the server
# never closes one just as the balancer sends a request on it (a 502 for that request).
KEEP_ALIVE_S = 75
# WebSocket keepalive pings fall on whole multiples of this many seconds of the event loop's clock.
KEEPALIVE_TICK_S = 1.0


@functools.lru_cache(maxsize=16)
def text_frame(text: str) -> bytes:
    """The unmasked, uncompressed frame of a text message, as a server sends it: made once
    for the many connections an event goes to (the cache holds the last few)."""
    return Frame(Opcode.TEXT, text.encode()).serialize(mask=False)


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol (websockets-sansio), its keepalive made cheap for thousands
    of idle connections (docs/websocket.md, "Keepalive"; bench/bench_idle_sockets.py).

    uvicorn pings every connection every ``ws_ping_interval`` (20 s) and closes it if the pong
    does not come within ``ws_ping_timeout`` (20 s), each on a timer of its own. Here:

    * a connection that sent a message within the interval is alive: it is not pinged (Go
      TARSy's dashboard sends a ``ping`` action every 20 s). One silent for the interval is
      pinged and closed without a pong in time, as before;
    * the timers fall on whole KEEPALIVE_TICK_S, so the event loop wakes once a tick for every
      connection due, not once a connection.

    And it offers the application WRITE_TEXT_EXTENSION: a text message written at once, its
    frame made once for every connection it goes to; and ANSWER_AT_ONCE_EXTENSION: a text
    message answered as it is read (Go TARSy's dashboard's ``ping`` every 20 s, 250 a second
    at 5,000 dashboards), without the ASGI receive's queue, task and paused reading.
    """

    last_message_at = -math.inf
    # The application's ``answer(text) -> bool`` (ANSWER_AT_ONCE_EXTENSION), once it gave one.
    answer_at_once = None

    def handle_connect(self, event) -> None:
        super().handle_connect(event)
        if not self.handshake_complete:  # not refused: the application gets the scope
            self.scope["extensions"][WRITE_TEXT_EXTENSION] = {"write_text": self.write_text}
            self.scope["extensions"][ANSWER_AT_ONCE_EXTENSION] = {"answer_with": self.answer_with}

    def answer_with(self, answer) -> None:
        self.answer_at_once = answer

    def write_text(self, text: str) -> bool:
        """Send a text message now; False if the connection is not open (not accepted yet,
        closing or closed). Unlike the ASGI send it does not wait while the client reads
        slowly: the transport buffers the message (the keepalive closes a client that stopped
        reading)."""
        if (
            not self.handshake_complete
            or self.close_sent
            or self.conn.state is not State.OPEN
            or self.transport.is_closing()
        ):
            return False
        if self.conn.extensions:  # negotiated: the frame is this connection's own
            self.conn.send_text(text.encode())
            self.transport.write(b"".join(self.conn.data_to_send()))
        else:
            self.transport.write(text_frame(text))
        return True

    def handle_text(self, event) -> None:
        self.last_message_at = self.loop.time()
        if event.fin and self.answered_at_once(event.data):
            return
        super().handle_text(event)

    def answered_at_once(self, data: bytes) -> bool:
        """Whether the application answered this whole text message as it was read: only
        when no earlier message waits for it in the ASGI receive's queue, so that answers
        keep the order of the messages."""
        if self.answer_at_once is None or self.close_sent or not self.queue.empty():
            return False
        try:
            text = data.decode()
        except UnicodeDecodeError:  # refused as uvicorn refuses it
            return False
        return self.answer_at_once(text)

    def handle_bytes(self, event) -> None:
        self.last_message_at = self.loop.time()
        super().handle_bytes(event)

    def schedule_ping(self) -> None:
        self.ping_on_tick(self.loop.time() + max(0.0, self.ping_interval - self.last_ping_rtt))

    def send_keepalive_ping(self) -> None:
        heard_until = self.last_message_at + self.ping_interval
        if heard_until > self.loop.time():
            self.ping_on_tick(heard_until)
            return
        super().send_keepalive_ping()

    def ping_on_tick(self, due: float) -> None:
        """Ping at the first tick at or after ``due`` (loop time)."""
        tick = math.ceil(due / KEEPALIVE_TICK_S) * KEEPALIVE_TICK_S
        self.ping_timer = self.loop.call_at(tick, self.send_keepalive_ping)



def config(app: str = APPLICATION, host: str = "127.0.0.1", port: int = 8000) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http="httptools",
        ws=WebSocketProtocol,
        ws_per_message_deflate=False,
        lifespan="off",  # the application has no start-up or shutdown hooks of ASGI's
        proxy_headers=False,
        server_header=False,
        log_config=None,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        timeout_keep_alive=KEEP_ALIVE_S,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tarsy_scoring.server", description="The web server.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port; 0: a free one (default 8000)")
    parser.add_argument("app", nargs="?", default=APPLICATION, help=f"ASGI application ({APPLICATION})")
    args = parser.parse_args(argv)
    server_config = config(args.app, args.host, args.port)
    server_config.load()
    uvicorn.Server(server_config).run()


if __name__ == "__main__":
    main()
