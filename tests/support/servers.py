"""Real server processes for tests: the web server, a Redis, and helpers around them
(throwaway_servers.py starts PostgreSQL and Redis).

Child processes share the test database, so with SQLite the test database is a
file here (``django_db_modify_db_settings``), not in memory. Tests that start
processes use ``transactional_db``: what they store is committed, and visible
to the children.

    def test_x(start_web):
        server = start_web()                     # in-memory channel layer
        async with EventClient.connect(server.ws_url) as client: ...
        run_in_process(server.env, "print(1)")   # manage.py shell with the same env
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import textwrap
import time
from contextlib import asynccontextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from tests.support.throwaway_servers import Redis, ServerError, stop_process

REPO_DIR = Path(__file__).resolve().parents[2]
WS_PATH = "/api/v1/ws"
START_TIMEOUT_S = 30
# Generous bound on waiting for a message, only so that a broken run fails
# instead of hanging.
RECEIVE_TIMEOUT_S = 20


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    """An SQLite test database in a file, so that child processes can open it."""
    db_settings = settings.DATABASES["default"]
    if db_settings["ENGINE"] == "django.db.backends.sqlite3":
        db_settings.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


def database_url() -> str:
    """A DATABASE_URL naming the test database this process uses."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    credentials = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        credentials += ":" + quote(db["PASSWORD"], safe="")
    host = f"{credentials}@" if credentials else ""
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{host}{db['HOST'] or 'localhost'}{port}/{quote(db['NAME'], safe='')}"


# The test users that store sessions (SESSION_WRITERS: they stand for TARSy's service
# account), so that the tests of other rules can; tests/test_session_writers.py tests
# this one with users outside the list.
TEST_SESSION_WRITERS = ["tarsy", "alice", "operator", "dave", "fuzzer", "fault-suite"]


def child_env(redis_url: str | None = None, db_url: str | None = None, **overrides: str) -> dict[str, str]:
    """Environment for a child process on ``db_url`` (default: the test database).

    Without ``redis_url`` the child uses the single-machine defaults (in-memory
    channel layer, ORM broker), whatever the test process itself runs with.
    """
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env.update(
        DATABASE_URL=db_url or database_url(),
        DJANGO_SETTINGS_MODULE="tarsy_scoring.settings",
        PYTHONUNBUFFERED="1",
    )
    env.setdefault("SESSION_WRITERS", ",".join(TEST_SESSION_WRITERS))
    if redis_url:
        env["REDIS_URL"] = redis_url
    env.update(overrides)
    return env


def wait_for_log(
    log: Path, pattern: str, process: subprocess.Popen, timeout_s: float = START_TIMEOUT_S
) -> re.Match:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = re.search(pattern, log.read_text(errors="replace"))
        if match:
            return match
        if process.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(
        f"{process.args[:3]} did not log {pattern!r}; its log:\n{log.read_text(errors='replace')}"
    )


# The line the web server writes once it listens, with its port (tarsy_scoring/server.py).
LISTENING_PATTERN = r"Uvicorn running on http://127\.0\.0\.1:(\d+)"


def web_command(port: int = 0, app: str = "tarsy_scoring.asgi:application") -> list[str]:
    """The command that starts the web server on loopback, as bin/run does (0: a free port)."""
    return [sys.executable, "-m", "tarsy_scoring.server", "--port", str(port), app]


class WebServer:
    """A web server process serving ``tarsy_scoring.asgi:application`` on loopback
    (on ``port``; 0: a free one)."""

    def __init__(self, env: dict[str, str], log: Path, port: int = 0):
        self.env = env
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                web_command(port), cwd=REPO_DIR, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.port = int(wait_for_log(log, LISTENING_PATTERN, self.process).group(1))
        self.ws_url = f"ws://127.0.0.1:{self.port}{WS_PATH}"
        self.http_url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_process(self.process)


@pytest.fixture
def start_web(transactional_db, tmp_path):
    """Factory: ``start_web(redis_url=None, port=0, **env)`` starts a web server process.

    Every process started is stopped at the end of the test (before the
    database is flushed).
    """
    servers: list[WebServer] = []

    def start(redis_url: str | None = None, port: int = 0, **env: str) -> WebServer:
        log = tmp_path / f"web-{len(servers)}.log"
        server = WebServer(child_env(redis_url, **env), log, port)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def redis_server_url(tmp_path_factory) -> str:
    """A real Redis: ``TEST_REDIS_URL`` if set, else a redis-server started here.

    Fails (never skips) when neither is available: the cross-process tests are
    the point of the Redis mode.
    """
    if os.environ.get("TEST_REDIS_URL"):
        yield os.environ["TEST_REDIS_URL"]
        return
    try:
        redis = Redis(tmp_path_factory.mktemp("redis")).start()
    except ServerError as exc:
        pytest.fail(f"Redis mode tests need a Redis (or TEST_REDIS_URL): {exc}")
    yield redis.url
    redis.remove()


@pytest.fixture
def silent_redis_url():
    """A loopback port that accepts connections and never answers: a hung Redis."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"


def redis_channel_layer(url: str, prefix: str = "asgi") -> dict:
    """CHANNEL_LAYERS for a channels-redis layer on ``url``, its keys named ``prefix:...``
    (channels-redis's default: "asgi")."""
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [url], "prefix": prefix},
        }
    }


def run_in_process(env: dict[str, str], code: str) -> str:
    """Run Python ``code`` in a new Django process (``manage.py shell -c``); return its stdout."""
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", textwrap.dedent(code)],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"child process failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


def record_in_process(
    env: dict[str, str], score_id, events: list[tuple[str, dict]], interval_s: float = 0.0
) -> list[int]:
    """Record ``events`` ([(type, fields)], one transaction each, ``interval_s``
    apart) for a stored score from a separate process, as a worker does; return
    their ids."""
    code = f"""
        import json, time
        from django.db import transaction
        from scoring.realtime import events
        from scoring.models import SessionScore
        score = SessionScore.objects.get(score_id={str(score_id)!r})
        ids = []
        for event_type, fields in json.loads({json.dumps(events)!r}):
            with transaction.atomic():
                ids.append(events.record(event_type, score, **fields).id)
            time.sleep({interval_s!r})
        print(json.dumps(ids))
    """
    return json.loads(run_in_process(env, code).strip().splitlines()[-1])


async def handshake_status(ws_url: str, headers: dict, origin: str | None = None) -> int:
    """The HTTP status answering a WebSocket handshake: 101 when accepted."""
    try:
        async with ws_connect(
            ws_url, additional_headers=headers, origin=origin, open_timeout=RECEIVE_TIMEOUT_S
        ):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


class EventClient:
    """A ``websockets`` client speaking the /api/v1/ws protocol."""

    def __init__(self, websocket):
        self.websocket = websocket
        self.connection_id: str | None = None

    @classmethod
    @asynccontextmanager
    async def connect(cls, ws_url: str, user: str | None = "alice", origin: str | None = None, **kwargs):
        """Connect (as ``user`` through the trusted proxy headers) and read the greeting."""
        headers = {"X-Forwarded-User": user} if user else {}
        async with ws_connect(ws_url, additional_headers=headers, origin=origin, **kwargs) as websocket:
            client = cls(websocket)
            greeting = await client.receive()
            assert greeting["type"] == "connection.established", greeting
            client.connection_id = greeting["connection_id"]
            yield client

    async def send(self, message: dict) -> None:
        await self.websocket.send(json.dumps(message))

    async def receive(self, timeout_s: float = RECEIVE_TIMEOUT_S) -> dict:
        return json.loads(await asyncio.wait_for(self.websocket.recv(), timeout_s))

    async def request(self, message: dict) -> dict:
        """Send an action and return the next message (its reply)."""
        await self.send(message)
        return await self.receive()

    async def subscribe(self, channel: str) -> None:
        reply = await self.request({"action": "subscribe", "channel": channel})
        assert reply == {"type": "subscription.confirmed", "channel": channel}, reply

    async def subscribe_with_replay(self, channel: str) -> list[dict]:
        """Subscribe; return what the server sent after the confirmation (the
        channel's replayed events, and ``catchup.overflow`` if it was cut).
        A ping marks the end: the server answers messages in order."""
        await self.subscribe(channel)
        await self.send({"action": "ping"})
        replayed = []
        while (message := await self.receive())["type"] != "pong":
            replayed.append(message)
        return replayed

    async def wait_for_events(self, count: int, timeout_s: float = RECEIVE_TIMEOUT_S) -> list[dict]:
        """The next ``count`` scoring events, in arrival order."""
        received = []
        while len(received) < count:
            message = await self.receive(timeout_s)
            if message["type"].startswith("scoring."):
                received.append(message)
        return received

    async def catchup(self, channel: str, last_event_id: int) -> tuple[list[dict], dict]:
        """Every stored event of ``channel`` after ``last_event_id`` (paging
        through has_more), and the last ``catchup.complete``."""
        replayed = []
        while True:
            await self.send({"action": "catchup", "channel": channel, "last_event_id": last_event_id})
            while (message := await self.receive())["type"] != "catchup.complete":
                replayed.append(message)
            last_event_id = message["last_event_id"]
            if not message["has_more"]:
                return replayed, message


class StandInHTTPServer(ThreadingHTTPServer):
    """A stand-in's server: a client that hangs up mid-answer (a test's deadline, a refused
    certificate) is what the tests make happen, not an error worth a traceback."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError | ssl.SSLError):
            super().handle_error(request, client_address)


class StandInControls:
    """What the tests tell a stand-in server (``self._server``, ``self._lock``,
    ``self._failures``) to do: fail its next requests, and stop."""

    def fail_next(self, answer: int | str, times: int = 1, after: int = 0) -> None:
        """Answer ``times`` requests with status ``answer`` (or "drop" the connection),
        after answering the next ``after`` as usual."""
        with self._lock:
            self._failures = [None] * after + [answer] * times

    def next_failure(self) -> int | str | None:
        """How to fail the request arriving now (None: answer it); call holding ``_lock``."""
        return self._failures.pop(0) if self._failures else None

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
