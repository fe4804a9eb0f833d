"""Helpers shared by the benchmarks: the machine, throwaway servers, load, statistics.

The benchmarks run from the repository root with the project's virtualenv
(``.venv/bin/python bench/<script>.py``). Servers are real processes on loopback:
a throwaway PostgreSQL and Redis (``tests/support/throwaway_servers.py``, PostgreSQL as
``bin/topology`` runs it) and the web server (uvicorn), so a benchmark measures what production runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PYTHON = sys.executable

from tests.support.throwaway_servers import (  # noqa: E402  (needs the repository on sys.path)
    SCALE_OUT_MAX_CONNECTIONS,
    Postgres,
    stop_process,
)

# --- Statistics -----------------------------------------------------------------------------


def run_times_ms(run: Callable[[], object], runs: int) -> list[float]:
    """Milliseconds of each of ``runs`` calls of ``run``, after one to warm up."""
    run()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return times


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` 0.99 is p99)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def spread(values: list[float], digits: int = 1) -> str:
    """``median (min-max)`` of repeated measurements."""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


# --- The machine ------------------------------------------------------------------------------


def machine_description(postgres_url: str | None = None) -> str:
    """Cores, CPU model, memory, Python, PostgreSQL, load and date: the header of every result."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    memory_kib = int(
        next(
            line.split()[1]
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    )
    parts = [
        f"{os.cpu_count()} cores ({cpu})",
        f"{memory_kib / 1024 / 1024:.0f} GiB RAM",
        f"Python {platform.python_version()}",
    ]
    if postgres_url:
        parts.append(f"PostgreSQL {postgres_version(postgres_url)}")
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    parts.append(f"load average {load} at start")
    parts.append(datetime.date.today().isoformat())
    return "Machine: " + ", ".join(parts)


def postgres_version(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SHOW server_version").fetchone()[0]


# --- Throwaway servers -------------------------------------------------------------------------


@contextlib.contextmanager
def throwaway_postgres(workdir: Path) -> Iterator[str]:
    """A PostgreSQL cluster of its own, as bin/topology runs it (durable, max_connections =
    300); yields its URL."""
    with Postgres(workdir / "postgres", max_connections=SCALE_OUT_MAX_CONNECTIONS, durable=True) as postgres:
        yield postgres.url


@contextlib.contextmanager
def database_url(workdir: Path, postgres: bool) -> Iterator[str]:
    """A throwaway PostgreSQL's URL with ``postgres``, else a SQLite file's in ``workdir``."""
    if postgres:
        with throwaway_postgres(workdir) as url:
            yield url
    else:
        yield sqlite_url(workdir)


def sqlite_url(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'bench.sqlite3'}"


def service_env(db_url: str, redis_url: str | None = None, **overrides: str) -> dict[str, str]:
    """Environment of a web or worker process of the service on ``db_url``."""
    from tests.support.servers import child_env

    return child_env(redis_url, db_url=db_url, **overrides)


def manage(env: dict[str, str], *args: str) -> str:
    """Run ``manage.py`` with ``args`` in a new process; return its standard output."""
    done = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def setup_django(db_url: str, redis_url: str | None = None) -> None:
    """Set Django up in this process on ``db_url`` (and ``redis_url``: broker, channel
    layer), once per process. Its own logs stay quiet below warnings."""
    os.environ["DATABASE_URL"] = db_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "tarsy_scoring.settings"
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
    import django

    django.setup()
    logging.getLogger().setLevel(logging.WARNING)


def interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def work_folder() -> Iterator[Path]:
    """A temporary folder for a benchmark's servers and logs. SIGTERM then ends the
    benchmark as Ctrl-C does, so that what it started is stopped either way."""
    signal.signal(signal.SIGTERM, interrupt)
    with tempfile.TemporaryDirectory(prefix="tarsy-bench-") as folder:
        yield Path(folder)


# --- HTTP load -----------------------------------------------------------------------------------


async def closed_loop(
    urls: list[str], headers: dict[str, str], clients: int, duration_s: float, method: str = "GET"
) -> tuple[list[float], float, Counter]:
    """``clients`` keep-alive clients, each sending its next request as soon as the last
    is answered, for ``duration_s``; client ``i`` uses ``urls[i % len(urls)]`` (one per
    web process, as a load balancer spreads connections).

    Returns the latencies in ms of the 2xx answers, the elapsed seconds and the other
    answers counted by status.
    """
    import aiohttp

    latencies: list[float] = []
    failures: Counter = Counter()
    deadline = time.perf_counter() + duration_s

    async def client(index: int, session) -> None:
        url = urls[index % len(urls)]
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            async with session.request(method, url, headers=headers) as response:
                await response.read()
                if 200 <= response.status < 300:
                    latencies.append((time.perf_counter() - start) * 1000)
                else:
                    failures[response.status] += 1

    connector = aiohttp.TCPConnector(limit=clients, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        await asyncio.gather(*(client(index, session) for index in range(clients)))
        elapsed = time.perf_counter() - start
    return latencies, elapsed, failures


# --- Service processes ---------------------------------------------------------------------------


class WebProcess:
    """A web server process serving ``app`` (the service's ASGI application by default) on loopback."""

    def __init__(self, env: dict[str, str], log: Path, app: str = "tarsy_scoring.asgi:application"):
        from tests.support.servers import LISTENING_PATTERN, wait_for_log, web_command

        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                web_command(0, app), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            port = wait_for_log(log, LISTENING_PATTERN, self.process).group(1)
        except RuntimeError:
            self.stop()
            raise
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        stop_process(self.process)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time used so far by these processes (children not included)."""
    import psutil

    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


def tree_cpu_s(process) -> float:
    """CPU seconds of a ``psutil.Process`` and all its descendants, the exited ones included
    (a parent's children_* times count the children it has reaped)."""
    import psutil

    try:
        times = process.cpu_times()
        children = process.children()
    except psutil.NoSuchProcess:
        return 0.0
    return sum(times[:4]) + sum(tree_cpu_s(child) for child in children)


def postgres_pid(url: str) -> int:
    """The pid of the postmaster serving ``url`` (a server on this machine)."""
    import psycopg

    with psycopg.connect(url) as conn:
        data_directory = conn.execute("SHOW data_directory").fetchone()[0]
    return int((Path(data_directory) / "postmaster.pid").read_text().split()[0])
