"""Syncing Go TARSy sessions: wall time against the concurrency limit's ideal, requests in
flight, the syncing process's peak RSS, and what a second run fetches.

The stand-in Go TARSy (``tests/support/fake_tarsy_go.py``) on loopback serves --sessions
copies of the e2e golden "pipeline" session (22 LLM and 21 MCP interactions, 187 KB of
JSON; real content from Go TARSy's e2e suite), each with ids of its own and created a
minute after the one before, and answers every request after --latency-ms.
``manage.py sync_sessions URL`` runs twice, each time in a process of its own on one new
SQLite database: its wall time, its peak RSS (VmHWM in ``/proc/<pid>/status``, read every
20 ms while it runs) and CPU seconds; the stand-in counts the requests, the most in flight
at once and the seconds they were in flight, added up (their mean in flight is that over
the wall time).

The ideal is what the concurrency limit allows: every session request at
TARSY_SYNC_CONCURRENCY at a time, plus what cannot overlap (the list's pages and
``/sessions/active``, read one at a time before the sessions of a page are fetched):

    ideal = session requests x latency / TARSY_SYNC_CONCURRENCY + list requests x latency

The second run must fetch nothing (no session request at all); the script exits non-zero
otherwise, or when a run fails or does not store every session.

    .venv/bin/python bench/bench_go_sync.py                                   # 1,000 sessions, 50 ms
    .venv/bin/python bench/bench_go_sync.py --sessions 40 --latency-ms 20     # quick
"""

import argparse
import contextlib
import datetime as dt
import random
import re
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path

from common import PYTHON, REPO, machine_description, service_env, sqlite_url, work_folder

from tests.support.fake_tarsy_go import StandInGoTarsy
from tests.support.tarsy_go import golden_document

SCENARIO = "pipeline"
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
SESSION_PATH_RE = re.compile(r"/api/v1/sessions/(?!active$)([^/]+)(/.*)?")
COUNTS_RE = re.compile(r"listed: (\d+), unchanged: (\d+), created: (\d+), updated: (\d+), rejected: (\d+)")
MIB = 1024 * 1024


def _renamed(value, new_id):
    """``value`` with every UUID in it replaced by ``new_id(old)``; other strings are the same
    objects, so that the copies share their texts."""
    if isinstance(value, dict):
        return {_renamed(key, new_id): _renamed(item, new_id) for key, item in value.items()}
    if isinstance(value, list):
        return [_renamed(item, new_id) for item in value]
    if isinstance(value, str) and UUID_RE.search(value):
        return UUID_RE.sub(lambda match: new_id(match.group(0)), value)
    return value


def go_time(moment: dt.datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def session_copies(count: int, seed: int = 7) -> list[dict]:
    """``count`` copies of the golden session, newest last, one a minute until an hour ago."""
    template = golden_document(SCENARIO)
    rng = random.Random(seed)
    first = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1, minutes=count)
    template_created = dt.datetime.fromisoformat(template["session"]["created_at"])
    copies = []
    for index in range(count):
        ids: dict[str, str] = {}

        def new_id(old: str) -> str:
            if old not in ids:
                ids[old] = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            return ids[old]

        document = _renamed(template, new_id)
        shift = first + dt.timedelta(minutes=index) - template_created
        session = document["session"]
        for key in ("created_at", "started_at", "completed_at"):
            if session.get(key):
                session[key] = go_time(dt.datetime.fromisoformat(session[key]) + shift)
        copies.append(document)
    return copies


def requests_per_session(document: dict) -> int:
    # detail, timeline, trace, score, review activity, then each interaction.
    return 5 + len(document["llm_interactions"]) + len(document["mcp_interactions"])


def sync_once(env: dict, url: str, tarsy: StandInGoTarsy, log) -> dict:
    """One ``sync_sessions`` run in a process of its own, and what the stand-in saw."""
    tarsy.reset_counts()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    children_cpu_s = usage.ru_utime + usage.ru_stime
    started = time.perf_counter()
    process = subprocess.Popen(
        [PYTHON, "manage.py", "sync_sessions", url], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    peak_kib = 0
    status_file = Path(f"/proc/{process.pid}/status")
    while process.poll() is None:
        # VmHWM is this process's own peak; wait4's ru_maxrss is not: on Linux it starts from the
        # RSS of the process that forked it (here this one, holding every session).
        with contextlib.suppress(OSError):
            found = re.search(r"^VmHWM:\s+(\d+) kB", status_file.read_text(), re.MULTILINE)
            peak_kib = max(peak_kib, int(found[1])) if found else peak_kib
        time.sleep(0.02)
    wall_s = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = usage.ru_utime + usage.ru_stime - children_cpu_s
    counts = tarsy.request_counts()
    session_paths = {path: n for path, n in counts.items() if SESSION_PATH_RE.fullmatch(path)}
    return {
        "exit": process.returncode,
        "wall_s": wall_s,
        "rss_mib": peak_kib / 1024,
        "cpu_s": cpu_s,
        "list_requests": sum(counts.values()) - sum(session_paths.values()),
        "session_requests": sum(session_paths.values()),
        "detail_fetches": sum(
            n for path, n in session_paths.items() if SESSION_PATH_RE.fullmatch(path)[2] is None
        ),
        "peak_in_flight": tarsy.peak_in_flight,
        "mean_in_flight": tarsy.busy_s / wall_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=1000, help="Go sessions served (default 1,000)")
    parser.add_argument(
        "--latency-ms", type=float, default=50.0, help="the stand-in's answer time (default 50)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        help="TARSY_SYNC_CONCURRENCY of the syncing process (default: the setting's)",
    )
    args = parser.parse_args()
    latency_s = args.latency_ms / 1000

    print(f"making {args.sessions} sessions", file=sys.stderr, flush=True)
    documents = session_copies(args.sessions)
    per_session = requests_per_session(documents[0])
    tarsy = StandInGoTarsy(documents)
    del documents
    tarsy.slow(latency_s)
    try:
        with work_folder() as work:
            overrides = {"TARSY_SYNC_CONCURRENCY": str(args.concurrency)} if args.concurrency else {}
            env = service_env(sqlite_url(work), **overrides)
            concurrency = int(
                subprocess.run(
                    [PYTHON, "manage.py", "shell", "-c",
                     "from django.conf import settings; print(settings.TARSY_SYNC_CONCURRENCY)"],
                    cwd=REPO, env=env, capture_output=True, text=True, check=True,
                ).stdout.split()[-1]
            )  # fmt: skip
            subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=REPO, env=env, check=True)
            machine = machine_description()
            runs = []
            for number in (1, 2):
                print(f"sync run {number}", file=sys.stderr, flush=True)
                log_path = work / f"sync-{number}.log"
                with log_path.open("w") as log:
                    run = sync_once(env, tarsy.url, tarsy, log)
                run["output"] = log_path.read_text(errors="replace")
                found = COUNTS_RE.search(run["output"])
                run["counts"] = tuple(int(n) for n in found.groups()) if found else None
                runs.append(run)
    finally:
        tarsy.stop()

    print(machine)
    print(
        f"\n{args.sessions} Go sessions (copies of the golden '{SCENARIO}' session: {per_session} "
        f"requests each), the stand-in answering after {args.latency_ms:g} ms, "
        f"TARSY_SYNC_CONCURRENCY = {concurrency}, SQLite.\n"
    )
    print(
        "| run | listed / created / unchanged | list requests | session requests (detail fetches) | wall, s "
        "| ideal, s | wall / ideal | peak in flight | mean in flight | peak RSS, MiB | CPU, s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for number, run in enumerate(runs, start=1):
        ideal_s = run["session_requests"] * latency_s / concurrency + run["list_requests"] * latency_s
        listed, unchanged, created = run["counts"][:3] if run["counts"] else ("?", "?", "?")
        print(
            f"| {number} | {listed} / {created} / {unchanged} | {run['list_requests']} "
            f"| {run['session_requests']} ({run['detail_fetches']}) | {run['wall_s']:.1f} | {ideal_s:.1f} "
            f"| {run['wall_s'] / ideal_s:.2f} | {run['peak_in_flight']} | {run['mean_in_flight']:.2f} "
            f"| {run['rss_mib']:.0f} | {run['cpu_s']:.1f} |"
        )
    print(
        f"\nPer session: {per_session} requests = {-(-per_session // concurrency)} rounds of "
        f"{concurrency} at best ({-(-per_session // concurrency) * args.latency_ms:g} ms); "
        f"the concurrency limit's ideal is {per_session * args.latency_ms / concurrency:g} ms."
    )

    problems = []
    first, second = runs
    for number, run in enumerate(runs, start=1):
        if run["exit"] != 0 or run["counts"] is None:
            problems.append(f"run {number} failed (exit {run['exit']}):\n{run['output'][-3000:]}")
    if first["counts"] and first["counts"][2] != args.sessions:
        problems.append(f"run 1 created {first['counts'][2]} sessions of {args.sessions}")
    if second["session_requests"]:
        problems.append(f"run 2 fetched again: {second['session_requests']} session requests")
    for problem in problems:
        print(f"\nPROBLEM: {problem}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
