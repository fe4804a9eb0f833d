"""Delay from an event's commit in a worker-like process to a WebSocket client.

Starts a real web server process on a fresh SQLite database (or --database-url),
connects a ``websockets`` client subscribed to one session, records --events
progress events from a separate process (one transaction each, --interval-s
apart) and reports the delay from each event's timestamp (taken just before
its commit) to its arrival at the client, in both modes:

* memory: in-memory channel layer, the web process's relay polls the table;
* redis:  Redis channel layer, the recording process publishes on commit
          (a throwaway redis-server, or --redis-url).

    .venv/bin/python bench/bench_event_delay.py --events 200
"""

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_DIR))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_scoring.settings")
import django  # noqa: E402

django.setup()  # for the event names, from scoring.realtime.events

from scoring.realtime import events  # noqa: E402
from tests.support.servers import (  # noqa: E402
    EventClient,
    WebServer,
    child_env,
    record_in_process,
    run_in_process,
)
from tests.support.throwaway_servers import Redis  # noqa: E402


def prepare_database(env: dict[str, str]) -> tuple[str, str]:
    """Migrate the database and store one session and score; return their ids."""
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO_DIR, env=env, check=True)
    code = """
        from tests.support.factories import make_score, make_session
        score = make_score(make_session(), status="in_progress")
        print(score.score_id, score.session_id)
    """
    score_id, session_id = run_in_process(env, code).split()[-2:]
    return score_id, session_id


async def measure(
    server: WebServer, score_id: str, session_id: str, count: int, interval_s: float
) -> list[float]:
    """Delays in milliseconds, one per event."""
    run = [(events.PROGRESS, {"phase": events.PHASES[i % 2]}) for i in range(count)]
    async with EventClient.connect(server.ws_url) as client:
        # The subscribe replays the session's stored events (the previous mode's): they
        # are read up to the end of the replay and left out of the delays.
        await client.subscribe_with_replay(f"session:{session_id}")
        recording = asyncio.create_task(
            asyncio.to_thread(record_in_process, server.env, score_id, run, interval_s)
        )
        delays = []
        for _ in range(count):
            [event] = await client.wait_for_events(1)
            delays.append((time.time_ns() // 1000 - event["timestamp_us"]) / 1000)
        await recording
    return delays


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--interval-s", type=float, default=0.05)
    parser.add_argument("--modes", default="memory,redis")
    parser.add_argument("--database-url", help="default: a new SQLite file")
    parser.add_argument("--redis-url", help="default: start a throwaway redis-server")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as workdir, contextlib.ExitStack() as stack:
        work = Path(workdir)
        db_url = args.database_url or f"sqlite:///{work / 'bench.sqlite3'}"
        score_id, session_id = prepare_database(child_env(db_url=db_url))
        for mode in args.modes.split(","):
            redis_url = None
            if mode == "redis":
                redis_url = args.redis_url or stack.enter_context(Redis(work / "redis")).url
            server = WebServer(child_env(redis_url, db_url=db_url), work / f"web-{mode}.log")
            try:
                delays = asyncio.run(measure(server, score_id, session_id, args.events, args.interval_s))
            finally:
                server.stop()
            print(
                f"{mode:6} events={len(delays)} p50={statistics.median(delays):.1f} ms "
                f"p99={percentile(delays, 0.99):.1f} ms max={max(delays):.1f} ms "
                f"(relay poll {os.environ.get('SCORING_EVENT_RELAY_POLL_S', '0.2')} s)"
            )


if __name__ == "__main__":
    main()
