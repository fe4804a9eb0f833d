"""The web process's CPU while many dashboards sit idle on the WebSocket, and the delay of
the events that then reach all of them.

For each channel-layer mode (memory: the in-memory layer and the web process's relay;
redis: channels-redis on a throwaway redis-server) this starts a real web server process
on a new SQLite database with one session and score, and:

1. opens one socket subscribed to ``sessions`` (the anchor: a process serving one
   dashboard, its relay and periodic checks running) and reads the web process's CPU
   (utime + stime from /proc/<pid>/stat) over ``--windows`` idle windows of ``--window-s``;
2. opens ``--sockets`` more, each subscribed to ``sessions``, waits ``--settle-s`` and reads
   the CPU over as many idle windows again;
3. records ``--events`` scoring events from another process (one transaction each,
   ``--event-interval-s`` apart), as a worker does, and times each event's arrival at every
   socket from its ``timestamp_us`` (taken just before its commit).

``--compare DIR`` runs the same measurements on another checkout of the service (such as
a worktree of the main branch), its web process started from that folder, the two
alternating within each mode. The numbers are medians over the windows; the ``cores``
are CPU seconds per second of wall time. The client (this process) answers the server's
keepalive pings and sends the protocol's ``ping`` action every ``--client-ping-s`` (20 s,
as Go TARSy's dashboard does; 0: never); its own CPU is not counted. Sockets the server
refused or closed, and events that did not arrive within a minute, are counted as such.

    nice .venv/bin/python bench/bench_idle_sockets.py --compare ../tarsy-main
    quick: --sockets 500 --windows 2 --window-s 3 --events 2 --modes memory
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import resource
import statistics
import struct
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from common import PYTHON, REPO, machine_description, percentile, service_env, work_folder

from tests.support.servers import LISTENING_PATTERN, WS_PATH, wait_for_log
from tests.support.throwaway_servers import Redis, stop_process

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Handshakes in flight at once: well below the server's listen backlog (uvicorn's default 2048)
# and the 100 connections of a redis-py pool (channels-redis's per process).
CONNECTING_AT_ONCE = 50
RECEIVE_TIMEOUT_S = 60
# A socket's file descriptor, and some for the rest of this process.
SPARE_FILES = 200


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def raise_open_files_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            sys.exit(f"{needed} open files needed; the hard limit is {hard} (ulimit -Hn)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def run_python(checkout: Path, env: dict[str, str], code: str) -> str:
    """Run ``code`` in a Django shell of ``checkout``; return its standard output."""
    done = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", code], cwd=checkout, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"shell in {checkout} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def prepare_database(checkout: Path, env: dict[str, str]) -> str:
    """Migrate ``env``'s database with ``checkout``'s code and store a session and a score
    being scored; return the score's id."""
    subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=checkout, env=env, check=True)
    code = (
        "from tests.support.factories import make_score, make_session\n"
        "print(make_score(make_session(), status='in_progress').score_id)"
    )
    return run_python(checkout, env, code).split()[-1]


def record_events(checkout: Path, env: dict[str, str], score_id: str, count: int, interval_s: float) -> None:
    """Record ``count`` events of the ``sessions`` channel (started and completed, in turn)
    from a process of their own."""
    code = f"""
import time
from django.db import transaction
from scoring.models import SessionScore
from scoring.realtime import events
score = SessionScore.objects.get(score_id={score_id!r})
for index in range({count}):
    time.sleep({interval_s!r})
    with transaction.atomic():
        if index % 2:
            events.record(events.COMPLETED, score, total_score=70)
        else:
            events.record(events.STARTED, score)
"""
    run_python(checkout, env, code)


class WebServer:
    """The web server of ``checkout``, started as everywhere (``python -m tarsy_scoring.server``)."""

    def __init__(self, checkout: Path, env: dict[str, str], log: Path):
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [PYTHON, "-m", "tarsy_scoring.server", "--port", "0"],
                cwd=checkout,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            port = wait_for_log(log, LISTENING_PATTERN, self.process).group(1)
        except RuntimeError:
            self.stop()
            raise
        self.port = int(port)

    def stop(self) -> None:
        stop_process(self.process)


class Dashboard(asyncio.Protocol):
    """One idle dashboard's socket: a WebSocket client small enough that 5,000 of them in
    this process read an event's 5,000 copies in a fraction of the server's time to send
    them (the ``websockets`` client took seconds, which the delays would have counted).

    It offers permessage-deflate, as browsers do, answers the server's pings, subscribes to
    ``sessions`` and notes when each scoring event arrives.
    """

    def __init__(self, port: int, client_ping_s: float):
        self.port = port
        self.client_ping_s = client_ping_s
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.upgraded = False
        self.inflate = None  # a zlib decompressor, when the server compresses
        loop = asyncio.get_running_loop()
        self.subscribed: asyncio.Future = loop.create_future()
        self.arrivals: list[tuple[int, int]] = []  # (event id, delay µs)
        self.closed: str | None = None
        self.pinging: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        transport.write(
            f"GET {WS_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
            "X-Forwarded-User: alice\r\n\r\n".encode()
        )

    def data_received(self, data: bytes) -> None:
        now_us = time.time_ns() // 1000
        self.buffer += data
        if not self.upgraded:
            head, found, rest = bytes(self.buffer).partition(b"\r\n\r\n")
            if not found:
                return
            if not head.startswith(b"HTTP/1.1 101"):
                self.fail(head.split(b"\r\n", 1)[0].decode())
                return
            if b"permessage-deflate" in head.lower():
                self.inflate = zlib.decompressobj(-zlib.MAX_WBITS)
            self.upgraded = True
            self.buffer = bytearray(rest)
        while (frame := self.next_frame()) is not None:
            self.handle(*frame, now_us)

    def next_frame(self) -> tuple[int, bool, bytes] | None:
        """The next whole frame in the buffer: (opcode, compressed, payload)."""
        buffer = self.buffer
        if len(buffer) < 2:
            return None
        length, start = buffer[1] & 0x7F, 2
        if length == 126:
            if len(buffer) < 4:
                return None
            length, start = struct.unpack_from("!H", buffer, 2)[0], 4
        elif length == 127:
            if len(buffer) < 10:
                return None
            length, start = struct.unpack_from("!Q", buffer, 2)[0], 10
        if len(buffer) < start + length:
            return None
        first, payload = buffer[0], bytes(buffer[start : start + length])
        del buffer[: start + length]
        return first & 0x0F, bool(first & 0x40), payload

    def handle(self, opcode: int, compressed: bool, payload: bytes, now_us: int) -> None:
        if opcode == 0x9:  # ping
            self.send(0xA, payload)
        elif opcode == 0x8:
            self.fail(f"closed by the server ({int.from_bytes(payload[:2], 'big') if payload else None})")
        elif opcode == 0x1:
            if compressed:
                payload = self.inflate.decompress(payload + b"\x00\x00\xff\xff")
            message = json.loads(payload)
            if message["type"].startswith("scoring."):
                self.arrivals.append((message["id"], now_us - message["timestamp_us"]))
            elif message["type"] == "connection.established":
                self.send_json({"action": "subscribe", "channel": "sessions"})
            elif not self.subscribed.done():
                if message == {"type": "subscription.confirmed", "channel": "sessions"}:
                    self.subscribed.set_result(True)
                    self.ping_later()
                else:
                    self.fail(f"subscribe answered {message}")

    def send(self, opcode: int, payload: bytes) -> None:
        """A frame, masked as a client's must be."""
        mask = os.urandom(4)
        length = len(payload)
        header = bytes([0x80 | opcode])
        if length < 126:
            header += bytes([0x80 | length])
        else:
            header += bytes([0x80 | 126]) + struct.pack("!H", length)
        masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
        self.transport.write(header + mask + masked)

    def send_json(self, message: dict) -> None:
        self.send(0x1, json.dumps(message).encode())

    def ping_later(self) -> None:
        if self.client_ping_s and self.closed is None:
            # Spread over the interval, as dashboards opened at different times are.
            delay = self.client_ping_s * (1 if self.pinging else random.random())
            self.pinging = asyncio.get_running_loop().call_later(delay, self.ping)

    def ping(self) -> None:
        self.send_json({"action": "ping"})
        self.ping_later()

    def fail(self, reason: str) -> None:
        if self.closed is None:
            self.closed = reason
        if not self.subscribed.done():
            self.subscribed.set_result(False)
        self.transport.close()

    def connection_lost(self, exc) -> None:
        if self.pinging is not None:
            self.pinging.cancel()
        self.fail(f"connection lost: {exc}" if exc else "connection closed")


@dataclass
class Dashboards:
    """Idle dashboards subscribed to ``sessions``."""

    port: int
    client_ping_s: float
    opened: list[Dashboard] = field(default_factory=list)

    async def open(self, count: int) -> None:
        gate = asyncio.Semaphore(CONNECTING_AT_ONCE)
        loop = asyncio.get_running_loop()

        async def one() -> None:
            async with gate:
                _, dashboard = await loop.create_connection(
                    lambda: Dashboard(self.port, self.client_ping_s), "127.0.0.1", self.port
                )
                self.opened.append(dashboard)
                await asyncio.wait_for(dashboard.subscribed, RECEIVE_TIMEOUT_S)

        await asyncio.gather(*(one() for _ in range(count)))

    @property
    def subscribed(self) -> list[Dashboard]:
        return [dashboard for dashboard in self.opened if dashboard.subscribed.result()]

    @property
    def errors(self) -> list[str]:
        return [dashboard.closed for dashboard in self.opened if dashboard.closed]

    async def received(self, count: int, timeout_s: float) -> bool:
        """Wait until every subscribed dashboard has ``count`` events; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while any(len(dashboard.arrivals) < count for dashboard in self.subscribed):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def close(self) -> None:
        for dashboard in self.opened:
            dashboard.closed = dashboard.closed or "closed by the benchmark"
            dashboard.transport.close()


async def idle_cores(pid: int, windows: int, window_s: float) -> list[float]:
    """The process's CPU in each window, in cores (CPU seconds per second)."""
    measured = []
    for _ in range(windows):
        cpu, wall = process_cpu_s(pid), time.monotonic()
        await asyncio.sleep(window_s)
        measured.append((process_cpu_s(pid) - cpu) / (time.monotonic() - wall))
    return measured


@dataclass
class Result:
    label: str
    mode: str
    anchor_cores: list[float]
    idle_cores: list[float]
    open_s: float
    anchor_rss_mib: float
    rss_mib: float
    subscribed: int  # of the 1 + --sockets sockets
    delays_ms: list[float]  # per socket and event received
    expected: int  # events, had every socket subscribed and received each


async def measure(label: str, checkout: Path, mode: str, work: Path, args) -> Result:
    folder = work / f"{checkout.name}-{mode}"
    folder.mkdir()
    with contextlib.ExitStack() as stack:
        redis_url = stack.enter_context(Redis(folder / "redis")).url if mode == "redis" else None
        env = service_env(f"sqlite:///{folder / 'db.sqlite3'}", redis_url)
        score_id = prepare_database(checkout, env)
        server = WebServer(checkout, env, folder / "web.log")
        stack.callback(server.stop)
        pid = server.process.pid
        anchor = Dashboards(server.port, args.client_ping_s)
        await anchor.open(1)
        if anchor.errors:
            raise RuntimeError(f"{label} {mode}: the first socket was refused: {anchor.errors[0]}")
        await asyncio.sleep(args.settle_s)
        anchor_cores = await idle_cores(pid, args.windows, args.window_s)
        anchor_rss = rss_mib(pid)
        dashboards = Dashboards(server.port, args.client_ping_s)
        started = time.monotonic()
        await dashboards.open(args.sockets)
        open_s = time.monotonic() - started
        await asyncio.sleep(args.settle_s)
        cores = await idle_cores(pid, args.windows, args.window_s)
        rss = rss_mib(pid)
        await asyncio.to_thread(record_events, checkout, env, score_id, args.events, args.event_interval_s)
        await dashboards.received(args.events, RECEIVE_TIMEOUT_S)
        every = [dashboard.arrivals for dashboard in anchor.subscribed + dashboards.subscribed]
        if dashboards.errors:
            refused = len(dashboards.errors)
            print(f"  {label} {mode}: {refused} sockets refused or closed, e.g. {dashboards.errors[0]}")
        dashboards.close()
        anchor.close()
    return Result(
        label,
        mode,
        anchor_cores,
        cores,
        open_s,
        anchor_rss,
        rss,
        subscribed=len(every),
        delays_ms=[delay / 1000 for arrivals in every for _, delay in arrivals],
        expected=(1 + args.sockets) * args.events,
    )


def checkout_label(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return done.stdout.strip() or checkout.name


def print_results(results: list[Result], sockets: int) -> None:
    print(
        f"\n| code | layer | idle CPU, 1 socket (cores) | idle CPU, 1 + {sockets} sockets (cores) "
        "| per 1,000 sockets | subscribed | events delivered | delay p50 / p99 / max (ms) "
        "| opening (s) | memory (MiB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for result in results:
        anchor, idle = statistics.median(result.anchor_cores), statistics.median(result.idle_cores)
        delays = result.delays_ms or [float("nan")]
        print(
            f"| {result.label} | {result.mode} | {anchor:.3f} | {idle:.3f} "
            f"({min(result.idle_cores):.3f}-{max(result.idle_cores):.3f}) "
            f"| {(idle - anchor) / sockets * 1000:.3f} | {result.subscribed} "
            f"| {len(result.delays_ms)} of {result.expected} "
            f"| {statistics.median(delays):.0f} / {percentile(delays, 0.99):.0f} / {max(delays):.0f} "
            f"| {result.open_s:.1f} | {result.anchor_rss_mib:.0f} → {result.rss_mib:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sockets", type=int, default=5000)
    parser.add_argument("--modes", default="memory,redis", help="channel layers: memory, redis")
    parser.add_argument("--windows", type=int, default=5, help="idle windows measured (default 5)")
    parser.add_argument("--window-s", type=float, default=6.0)
    parser.add_argument("--settle-s", type=float, default=3.0, help="wait before measuring (default 3)")
    parser.add_argument("--events", type=int, default=4)
    parser.add_argument("--event-interval-s", type=float, default=1.0)
    parser.add_argument(
        "--client-ping-s",
        type=float,
        default=20.0,
        help="a socket's protocol pings, as Go TARSy's dashboard sends (default every 20 s; 0: none)",
    )
    parser.add_argument("--compare", type=Path, help="another checkout of the service, measured alongside")
    args = parser.parse_args()

    raise_open_files_limit(args.sockets + SPARE_FILES)
    checkouts = [(checkout_label(REPO) + " (this)", REPO)]
    if args.compare:
        checkouts.insert(0, (checkout_label(args.compare.resolve()), args.compare.resolve()))
    print(machine_description())
    print(
        f"{args.sockets} idle sockets on `sessions`, {args.windows} windows of {args.window_s} s, "
        f"{args.events} events {args.event_interval_s} s apart, "
        + (f"client pings every {args.client_ping_s} s" if args.client_ping_s else "no client pings")
    )
    results = []
    with work_folder() as work:
        for mode in args.modes.split(","):
            for label, checkout in checkouts:
                results.append(asyncio.run(measure(label, checkout, mode, work, args)))
                print_results(results[-1:], args.sockets)
    print_results(results, args.sockets)


if __name__ == "__main__":
    main()
