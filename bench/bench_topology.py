"""The whole topology scoring a batch: issue 6's end-to-end check, with its figures.

``bin/topology.py`` starts on loopback a throwaway PostgreSQL, Redis, --web uvicorn
processes, --workers worker clusters and the fake judge answering each turn after
--latency-s (L). --sessions copies of the TARSy example session are imported
(``manage.py import_sessions``). One WebSocket client per web process (trusted proxy
header from loopback) subscribes to ``session:<id>`` of every session; the ``sessions``
channel carries no progress events, and a connection holds at most 100 subscriptions, so
a client of 200 sessions is two connections. The scorings are requested with
``POST /api/v1/scoring/sessions/{id}/score``, alternately through each web process,
--post-concurrency at a time, and the script waits (--timeout-s) until every scoring's end
reached every client, then 3 s more for late duplicates.

It prints the machine, whether every score completed, what each client received (every
scoring seen as started, progress, progress, completed, without duplicates, and in that
order), the wall time and throughput against the ideal C/(2L), C =
min(SCORING_MAX_IN_FLIGHT, clusters x SCORING_WORKERS x SCORING_CONCURRENCY_PER_WORKER) as
the environment sets them (defaults 2, 20, 200: C = 80), the CPU used by each kind of
process, and the event delay (client receive time - event timestamp) per web process.

With --rps R the fake judge also has a quota for all the workers together: R requests a
second, 429 with ``Retry-After`` beyond it (``bin/topology --fake-llm-rps``), so the ideal is
at most R / 2 scorings a second; the report adds the 429s the workers met and the circuit
breaker's state at the end, and each client may see a scoring's attempts that waited for the
quota (started, progress, ``waiting_for_quota``) before its four events. --announce-limits
has the fake send the quota in its answers' headers, which the workers pace to.
Exits 1 if anything is missing (a scoring not completed, an event not received or received
twice); events that came out of order are listed without changing that. Everything it
started is stopped and its folder removed on exit, Ctrl-C and SIGTERM included
(--keep-logs keeps the processes' logs).

    .venv/bin/python bench/bench_topology.py
    .venv/bin/python bench/bench_topology.py --sessions 40 --latency-s 0.5   # quick
    .venv/bin/python bench/bench_topology.py --sessions 500 --latency-s 0 --rps 4
    .venv/bin/python bench/bench_topology.py --sessions 500 --latency-s 0 --rps 4 --announce-limits
"""

import argparse
import asyncio
import math
import shutil
import statistics
import sys
from pathlib import Path

import psutil
from common import machine_description, percentile, setup_django, tree_cpu_s, work_folder

from tests.support.topology import (
    BATCH_ENV,
    Batch,
    batch_problems,
    delivery,
    import_sample_sessions,
    order_problems,
    run_batch,
    running_topology,
    score_rows,
)
from tests.support.workers import rate_limits_met


def log(message: str) -> None:
    print(f"--> {message}", file=sys.stderr, flush=True)


# A child of bin/topology is named after what its command line contains.
ROLES = {"tarsy_scoring.server": "web", "scoring_worker": "workers", "fake_llm": "fake judge", "redis-server": "Redis"}


def cpu_by_role(topology_pid: int, postgres_pid: int) -> dict[str, float]:
    """CPU seconds used so far by each kind of process of the topology, and by this script."""
    used = dict.fromkeys([*ROLES.values(), "PostgreSQL", "other"], 0.0)
    used["PostgreSQL"] = tree_cpu_s(psutil.Process(postgres_pid))
    for child in psutil.Process(topology_pid).children():
        command = " ".join(child.cmdline())
        role = next((name for key, name in ROLES.items() if key in command), "other")
        used[role] += tree_cpu_s(child)
    used["this script (clients)"] = sum(psutil.Process().cpu_times()[:2])
    return used


def cpu_snapshot(pids: tuple[int, int]) -> dict:
    """CPU seconds so far: by role, and of the whole machine (busy, and in all)."""
    machine = psutil.cpu_times()
    total = sum(machine)
    return {"roles": cpu_by_role(*pids), "busy": total - machine.idle - machine.iowait, "total": total}


def cpu_between(before: dict, after: dict) -> dict:
    cores = psutil.cpu_count()
    return {
        "roles": {role: seconds - before["roles"][role] for role, seconds in after["roles"].items()},
        "cores": cores,
        "wall_s": (after["total"] - before["total"]) / cores,
        "busy": (after["busy"] - before["busy"]) / (after["total"] - before["total"]),
    }


def most_in_flight(rows: list[dict]) -> int:
    """The most scorings between their claim and their end at once, from the stored times."""
    changes = sorted(
        [(row["started_at_us"], 1) for row in rows if row["started_at_us"] and row["completed_at_us"]]
        + [(row["completed_at_us"], -1) for row in rows if row["started_at_us"] and row["completed_at_us"]]
    )
    in_flight = peak = 0
    for _, change in changes:
        in_flight += change
        peak = max(peak, in_flight)
    return peak


def ideal_rate(args, concurrency: int) -> tuple[float, str]:
    """Scorings a second at best, and what bounds it: C at once, 2L each, or the quota's
    requests, two a scoring."""
    bounds = {}
    if args.latency_s > 0:
        bounds["C/(2L)"] = concurrency / (2 * args.latency_s)
    if args.rps:
        bounds["the quota's R/2"] = args.rps / 2
    name = min(bounds, key=bounds.get)
    return bounds[name], name


def print_report(
    args, batch: Batch, rows: list[dict], concurrency: int, settings, cpu: dict, quota: dict
) -> None:
    count = len(batch.session_ids)
    ideal, ideal_name = ideal_rate(args, concurrency)
    limit = f", a quota of R = {args.rps:g} requests/s for all workers" if args.rps else ""
    print(
        f"\n{args.web} web processes, {args.workers} worker clusters x SCORING_WORKERS="
        f"{settings.SCORING_WORKERS} x SCORING_CONCURRENCY_PER_WORKER={settings.SCORING_CONCURRENCY_PER_WORKER}"
        f", SCORING_MAX_IN_FLIGHT={settings.SCORING_MAX_IN_FLIGHT}: C = {concurrency}. Fake judge: "
        f"L = {args.latency_s:g} s per turn{limit}, 2 turns per scoring. {count} scorings requested with "
        f"POST .../score, alternately through each web process, {args.post_concurrency} at a time.\n"
    )
    statuses = {status: sum(row["status"] == status for row in rows) for status in ("completed", "failed")}
    active = len(rows) - sum(statuses.values())
    print("| figure | value |\n|---|---|")
    print(
        f"| scores completed | {statuses['completed']} of {count} "
        f"(failed {statuses['failed']}, still pending or in progress {active}) |"
    )
    requesting_s = (batch.last_answer_us - batch.first_request_us) / 1e6
    print(
        f"| requests answered 202 | {len(batch.accepted)} of {count}, all answered after {requesting_s:.1f} s |"
    )
    if batch.finished_us is not None:
        wall_s = (batch.finished_us - batch.first_request_us) / 1e6
        print(f"| wall time: first request to the last scoring's end at every client | {wall_s:.1f} s |")
        print(
            f"| throughput | {count / wall_s:.2f} scorings/s = {count / wall_s / ideal:.0%} of "
            f"{ideal_name} = {ideal:.2f}/s |"
        )
    else:
        print(f"| wall time | not finished within {args.timeout_s:g} s |")
    finished = [row for row in rows if row["started_at_us"] and row["completed_at_us"]]
    if finished:
        drain_s = (
            max(r["completed_at_us"] for r in finished) - min(r["started_at_us"] for r in finished)
        ) / 1e6
        print(
            f"| drain: first claim to last completion (stored times) | {drain_s:.1f} s, "
            f"{len(finished) / drain_s:.2f} scorings/s = {len(finished) / drain_s / ideal:.0%} of ideal |"
        )
        print(f"| most scorings in flight at once | {most_in_flight(finished)} of C = {concurrency} |")
        claim_waits = [(r["started_at_us"] - r["scored_at_us"]) / 1e6 for r in finished]
        job_times = [(r["completed_at_us"] - r["started_at_us"]) / 1e6 for r in finished]
        # A scoring sent back to the queue for the quota counts from its last claim.
        job_name = f"claim to completion (2L = {2 * args.latency_s:g} s)"
        for name, values in (("wait for a claim", claim_waits), (job_name, job_times)):
            print(
                f"| {name}, p50 / p95 / max | {statistics.median(values):.1f} / "
                f"{percentile(values, 0.95):.1f} / {max(values):.1f} s |"
            )
    if args.latency_s > 0:
        rounds = math.ceil(count / concurrency)
        print(f"| ideal wall: rounds of up to C scorings x 2L | {rounds} x {2 * args.latency_s:g} s |")
    if args.rps:
        print(f"| ideal wall at the quota: 2 requests a scoring / R | {2 * count / args.rps:.1f} s |")
        print(f"| the quota announced in the answers' headers | {'yes' if args.announce_limits else 'no'} |")
        met = f"{quota['rate_limits']}; {quota['breaker']}"
        print(f"| 429s the workers met; the circuit breaker at the end | {met} |")
    roles = ", ".join(f"{role} {seconds:.1f}" for role, seconds in cpu["roles"].items() if seconds)
    print(
        f"| CPU seconds during the batch | {roles}; total {sum(cpu['roles'].values()):.0f} "
        f"of {cpu['cores']} cores x {cpu['wall_s']:.0f} s; the machine was {cpu['busy']:.0%} busy |"
    )

    print(
        "\n| client on | events received | duplicates | scorings seen started, progress, progress, completed "
        "(after their waits for the quota), in order "
        "| of the others, complete but out of order | event delay p50, ms | p99, ms | max, ms |"
        "\n|---|---|---|---|---|---|---|---|"
    )
    for url in batch.web_urls:
        seen = delivery(batch, url)
        delays = [(a.received_us - a.event["timestamp_us"]) / 1000 for a in batch.arrivals[url]] or [math.nan]
        print(
            f"| {url} | {seen['events']} ({', '.join(f'{t}: {n}' for t, n in seen['types'].items())}) "
            f"| {seen['duplicates']} | {seen['as_expected']} of {len(batch.accepted)} "
            f"| {len(seen['out_of_order'])} | {statistics.median(delays):.0f} | {percentile(delays, 0.99):.0f} | {max(delays):.0f} |"
        )


def quota_figures(env: dict[str, str], work: Path) -> dict:
    from scoring.judge import circuit

    return {
        "rate_limits": rate_limits_met(sorted((work / "run" / "logs").glob("worker-*.log"))),
        "breaker": circuit.state(env["SCORING_LLM_MODEL"])["state"],
    }


def measure(args, env: dict[str, str], work: Path) -> int:
    setup_django(env["DATABASE_URL"], env["REDIS_URL"])
    from django.conf import settings

    concurrency = min(
        settings.SCORING_MAX_IN_FLIGHT,
        args.workers * settings.SCORING_WORKERS * settings.SCORING_CONCURRENCY_PER_WORKER,
    )
    print(machine_description(env["DATABASE_URL"]), flush=True)
    session_ids = import_sample_sessions(env, args.sessions, work)
    log(f"imported {len(session_ids)} sessions; requesting their scorings")
    web_urls = env["TOPOLOGY_WEB_URLS"].split()
    pids = int(env["TOPOLOGY_PID"]), int(env["TOPOLOGY_POSTGRES_PID"])
    before = cpu_snapshot(pids)
    batch = asyncio.run(run_batch(web_urls, session_ids, args.timeout_s, args.post_concurrency))
    cpu = cpu_between(before, cpu_snapshot(pids))
    rows = score_rows(env, session_ids)
    print_report(args, batch, rows, concurrency, settings, cpu, quota_figures(env, work))
    problems = batch_problems(batch, rows)
    print("\nProblems:" if problems else "\nEvery scoring completed and every client saw each one, once.")
    for problem in problems:
        print(f"- {problem}")
    # Nothing is missing then, so the exit status stays 0; but a dashboard would show them wrongly.
    for problem in order_problems(batch):
        print(f"- {problem}")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200, help="scorings in the batch")
    parser.add_argument("--latency-s", type=float, default=2.0, help="the fake judge's delay per turn (L)")
    parser.add_argument("--web", type=int, default=2, help="web processes")
    parser.add_argument("--workers", type=int, default=2, help="worker clusters")
    parser.add_argument(
        "--rps", type=int, help="the fake judge's quota for all workers together, requests per second"
    )
    parser.add_argument(
        "--announce-limits", action="store_true", help="with --rps: the fake announces its quota in headers"
    )
    parser.add_argument("--post-concurrency", type=int, default=10, help="POST requests at once")
    parser.add_argument("--timeout-s", type=float, default=600, help="give up waiting after this")
    parser.add_argument("--keep-logs", type=Path, help="copy the processes' logs into this folder")
    args = parser.parse_args()
    if args.rps is not None and args.rps < 1:
        parser.error("--rps must be at least 1")
    if args.announce_limits and not args.rps:
        parser.error("--announce-limits takes --rps")
    if args.latency_s <= 0 and not args.rps:
        parser.error("with --latency-s 0, give --rps: something has to bound the throughput")
    topology_args = ["--web", str(args.web), "--workers", str(args.workers), "--fake-llm"]
    topology_args += ["--fake-llm-delay", str(args.latency_s)]
    if args.rps:
        topology_args += ["--fake-llm-rps", str(args.rps)]
    if args.announce_limits:
        topology_args += ["--fake-llm-announce-limits"]
    try:
        with work_folder() as work:
            log("starting the topology")
            try:
                with running_topology(work, *topology_args, env=BATCH_ENV) as (_, env):
                    log(f"the topology is up: {env['TOPOLOGY_WEB_URLS']}")
                    return measure(args, env, work)
            finally:
                log("stopped the topology")
                if args.keep_logs:
                    shutil.copytree(work / "run" / "logs", args.keep_logs, dirs_exist_ok=True)
                    log(f"logs kept in {args.keep_logs}")
    except KeyboardInterrupt:
        log("interrupted; everything it started is stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
