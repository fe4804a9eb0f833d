"""The score endpoints under concurrent load, beside bare Django views doing the least work.

GET  /api/v1/scoring/sessions/{id}/score: --clients keep-alive clients in a closed
     loop for --duration-s, --rounds times, alternating with the same load on the
     reference view (bench/reference_app.py: one query, JsonResponse) served by the
     same web server processes. Reports p50, p99, requests/s and the ratio of the two.
POST the same path: --post-requests requests at once over --post-sessions finished,
     unscored sessions, --rounds times, beside the reference (insert a pending row
     unless one is active); then checks that every session has exactly one active
     scoring. No worker runs: the jobs stay queued.

Both authenticate as oauth2-proxy does (X-Forwarded-User from loopback). Runs on a
throwaway PostgreSQL unless --database-url is given; the POST rate limit is off
(SCORING_POST_RATE="") since one user sends every request.

    .venv/bin/python bench/bench_api.py
    .venv/bin/python bench/bench_api.py --duration-s 2 --rounds 1     # quick
"""

import argparse
import asyncio
import contextlib
import random
import statistics
import time
import uuid
from collections import Counter

from common import (
    WebProcess,
    closed_loop,
    cpu_seconds,
    machine_description,
    percentile,
    service_env,
    setup_django,
    spread,
    throwaway_postgres,
    work_folder,
)

HEADERS = {"X-Forwarded-User": "bench"}
API_PATH = "/api/v1/scoring/sessions/{}/score"
REFERENCE_PATH = "/bench/reference/score/{}"
SIDES = {"API": API_PATH, "reference": REFERENCE_PATH}
# GET also measures the server's floor: an async view with no database (the same middleware).
GET_SIDES = {**SIDES, "/healthz (floor)": "/healthz"}
IN_PROCESS_RUNS = 300
WARM_UP_S = 2.0


def make_sessions(count: int) -> list[uuid.UUID]:
    from tests.support.factories import make_session

    return [make_session().session_id for _ in range(count)]


def active_scorings(session_ids: list[uuid.UUID]) -> list[int]:
    from django.db.models import Count, Q

    from scoring.models import AlertSession, ScoringStatus

    counts = AlertSession.objects.filter(pk__in=session_ids).annotate(
        active=Count("scores", filter=Q(scores__status__in=ScoringStatus.active_values()))
    )
    return [session.active for session in counts]


def bench_get(web_urls: list[str], web_pids: list[int], session_id, args) -> dict[str, list[dict]]:
    """Per side, one result per round: p50, p99 (ms), requests/s, web CPU ms per request, failures."""
    for path in GET_SIDES.values():
        urls = [base + path.format(session_id) for base in web_urls]
        asyncio.run(closed_loop(urls, HEADERS, args.clients, WARM_UP_S))
    results: dict[str, list[dict]] = {side: [] for side in GET_SIDES}
    for _ in range(args.rounds):
        for side, path in GET_SIDES.items():
            urls = [base + path.format(session_id) for base in web_urls]
            cpu_before = cpu_seconds(web_pids)
            latencies, elapsed, failures = asyncio.run(
                closed_loop(urls, HEADERS, args.clients, args.duration_s)
            )
            cpu = cpu_seconds(web_pids) - cpu_before
            results[side].append(
                {
                    "p50": statistics.median(latencies),
                    "p99": percentile(latencies, 0.99),
                    "rps": len(latencies) / elapsed,
                    "cpu_ms": cpu * 1000 / (len(latencies) + sum(failures.values())),
                    "failures": failures,
                }
            )
    return results


async def post_burst(
    web_urls: list[str], path: str, session_ids: list, requests: int
) -> tuple[list[float], list[int]]:
    """``requests`` POSTs sent at once, spread evenly over the sessions in random order."""
    import aiohttp

    targets = [session_ids[index % len(session_ids)] for index in range(requests)]
    random.shuffle(targets)
    latencies, statuses = [], []

    async def one(index: int, session_id, client) -> None:
        url = web_urls[index % len(web_urls)] + path.format(session_id)
        start = time.perf_counter()
        async with client.post(url, headers=HEADERS, json={}) as response:
            await response.read()
            statuses.append(response.status)
        latencies.append((time.perf_counter() - start) * 1000)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=requests)) as client:
        await asyncio.gather(*(one(index, session_id, client) for index, session_id in enumerate(targets)))
    return latencies, statuses


def bench_post(web_urls: list[str], web_pids: list[int], args) -> dict[str, dict]:
    """Per side: every latency, the answers' statuses, the web CPU per request and the
    active scorings per session."""
    results = {
        side: {"latencies": [], "p99s": [], "statuses": [], "cpu_ms": [], "active": []} for side in SIDES
    }
    # Warm-up: a first burst on each side, not counted.
    for path in SIDES.values():
        asyncio.run(post_burst(web_urls, path, make_sessions(args.post_sessions), args.post_requests))
    for _ in range(args.rounds):
        for side, path in SIDES.items():
            session_ids = make_sessions(args.post_sessions)
            cpu_before = cpu_seconds(web_pids)
            latencies, statuses = asyncio.run(post_burst(web_urls, path, session_ids, args.post_requests))
            result = results[side]
            result["cpu_ms"].append((cpu_seconds(web_pids) - cpu_before) * 1000 / args.post_requests)
            result["latencies"] += latencies
            result["p99s"].append(percentile(latencies, 0.99))
            result["statuses"] += statuses
            result["active"] += active_scorings(session_ids)
    return results


class QueryCounter:
    """A database execute wrapper that counts the SQL statements it lets through."""

    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def in_process_costs(session_id) -> dict[str, tuple[float, int]]:
    """Per side, with no server and no concurrency (Django's test client in this process):
    median ms per request and SQL queries per request."""
    from django.db import connection
    from django.test import Client

    client = Client(HTTP_HOST="localhost", headers=HEADERS)
    costs = {}
    for side, path in GET_SIDES.items():
        url = path.format(session_id)
        urlconf = "bench.reference_app" if url.startswith("/bench/") else None
        with override_urlconf(urlconf):
            client.get(url)  # warm-up
            queries = QueryCounter()
            with connection.execute_wrapper(queries):
                assert client.get(url).status_code == 200
            times = []
            for _ in range(IN_PROCESS_RUNS):
                start = time.perf_counter()
                client.get(url)
                times.append((time.perf_counter() - start) * 1000)
        costs[side] = (statistics.median(times), queries.count)
    return costs


@contextlib.contextmanager
def override_urlconf(urlconf: str | None):
    """The reference views' URLconf for this block (as bench/reference_app.py's handler sets it)."""
    if urlconf is None:
        yield
        return
    from django.test import override_settings

    with override_settings(ROOT_URLCONF=urlconf):
        yield


def non_2xx(rounds: list[dict]) -> str:
    counts = sum((r["failures"] for r in rounds), Counter())
    return ", ".join(f"{status}: {count}" for status, count in sorted(counts.items())) or "0"


def print_get(results: dict[str, list[dict]], costs: dict[str, tuple[float, int]], args) -> None:
    print(
        f"\nGET score: {args.clients} clients, {args.duration_s:g} s x {args.rounds} rounds per side, "
        f"{args.web} web server process(es). Median (min-max) over rounds.\n"
    )
    print(
        "| endpoint | p50, ms | p99, ms | requests/s | web CPU per request, ms | non-2xx "
        "| in-process ms per request (queries) |"
    )
    print("|---|---|---|---|---|---|---|")
    for side, rounds in results.items():
        in_process_ms, queries = costs[side]
        print(
            f"| {side} | {spread([r['p50'] for r in rounds])} | {spread([r['p99'] for r in rounds])} "
            f"| {spread([r['rps'] for r in rounds], 0)} | {spread([r['cpu_ms'] for r in rounds], 2)} "
            f"| {non_2xx(rounds)} | {in_process_ms:.2f} ({queries}) |"
        )
    ratios = [api["rps"] / ref["rps"] for api, ref in zip(results["API"], results["reference"])]
    cpu_ratios = [ref["cpu_ms"] / api["cpu_ms"] for api, ref in zip(results["API"], results["reference"])]
    print(
        f"\nthroughput ratio API / reference: {spread(ratios, 2)} (target >= 0.6); "
        f"CPU-cost ratio reference / API: {spread(cpu_ratios, 2)}; "
        f"API p99 median {statistics.median(r['p99'] for r in results['API']):.1f} ms (target <= 25 ms)"
    )


def print_post(results: dict[str, dict], args) -> None:
    print(
        f"\nPOST score: {args.post_requests} requests at once over {args.post_sessions} sessions, "
        f"x {args.rounds} rounds per side.\n"
    )
    print(
        "| endpoint | p50, ms (all) | p99, ms (all) | p99 per round, ms | web CPU per request, ms "
        "| answers | sessions with exactly one active scoring |"
    )
    print("|---|---|---|---|---|---|---|")
    for side, result in results.items():
        answers = ", ".join(
            f"{status}: {result['statuses'].count(status)}" for status in sorted(set(result["statuses"]))
        )
        exactly_one = sum(count == 1 for count in result["active"])
        latencies = result["latencies"]
        print(
            f"| {side} | {statistics.median(latencies):.1f} | {percentile(latencies, 0.99):.1f} "
            f"| {spread(result['p99s'])} | {spread(result['cpu_ms'], 2)} | {answers} "
            f"| {exactly_one} of {len(result['active'])} |"
        )
    api = results["API"]
    assert all(count == 1 for count in api["active"]), f"active scorings per session: {api['active']}"
    print(
        f"\nAPI: every session has exactly one active scoring (checked {len(api['active'])} sessions); "
        f"p99 {percentile(api['latencies'], 0.99):.1f} ms (target <= 60 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", help="default: a throwaway PostgreSQL")
    parser.add_argument("--web", type=int, default=1, help="web server processes (clients spread over them)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--post-sessions", type=int, default=20)
    parser.add_argument("--post-requests", type=int, default=100)
    parser.add_argument("--skip", choices=["get", "post"], help="leave one benchmark out")
    args = parser.parse_args()

    with work_folder() as work, contextlib.ExitStack() as stack:
        db_url = args.database_url or stack.enter_context(throwaway_postgres(work))
        setup_django(db_url)
        from django.core.management import call_command

        from tests.support.factories import make_score, make_session

        call_command("migrate", verbosity=0)
        print(machine_description(db_url if db_url.startswith("postgres") else None))
        env = service_env(db_url, SCORING_POST_RATE="")
        webs = [
            WebProcess(env, work / f"web-{index}.log", "bench.reference_app:application")
            for index in range(args.web)
        ]
        stack.callback(lambda: [web.stop() for web in webs])
        web_urls = [web.url for web in webs]
        web_pids = [web.process.pid for web in webs]
        if args.skip != "get":
            session = make_session()
            make_score(session)
            results = bench_get(web_urls, web_pids, session.session_id, args)
            print_get(results, in_process_costs(session.session_id), args)
        if args.skip != "post":
            print_post(bench_post(web_urls, web_pids, args), args)


if __name__ == "__main__":
    main()
