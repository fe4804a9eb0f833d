"""The judge pipeline with a judge that answers after a fixed delay L per turn.

A real worker cluster (``manage.py scoring_worker``, SCORING_WORKERS processes) on a
throwaway PostgreSQL (max_connections = 300) and Redis scores sessions against the
fake judge (``python -m tests.support.fake_llm --delay L``). For each C in
--concurrency, with SCORING_CONCURRENCY_PER_WORKER x SCORING_WORKERS >= C and
SCORING_MAX_IN_FLIGHT = C:

* overhead: C scorings requested at once; per scoring, completed_at_us - scored_at_us
  - 2L (a scoring is two judge turns), p50 and p95;
* throughput: --waves x C scorings requested at once (from --enqueue-threads threads);
  scorings per second from the first claim to the last completion, against the ideal
  C / (2L);
* memory: RSS of all the cluster's processes with C scorings in progress, minus the
  same when idle (after a warm-up), divided by C;
* CPU per scoring: CPU seconds (user + system) used during the throughput run by the
  cluster's processes, and apart by PostgreSQL and Redis, divided by the scorings; and
  how busy the whole machine was meanwhile.

Reference, side by side: the same two-turn conversation held by bare litellm from C
threads of one process (no Django, no queue, no database), on the same fake judge; its
CPU per scoring is that process's during its throughput run.

    .venv/bin/python bench/bench_pipeline.py
    .venv/bin/python bench/bench_pipeline.py --concurrency 10 --latency-s 1   # quick
"""

import argparse
import concurrent.futures
import contextlib
import math
import statistics
import subprocess
import time
import uuid

import psutil
from common import (
    PYTHON,
    REPO,
    machine_description,
    percentile,
    postgres_pid,
    service_env,
    setup_django,
    throwaway_postgres,
    tree_cpu_s,
    work_folder,
)

from tests.support.throwaway_servers import Redis, free_port

# An evaluation, as the score prompt asks (a bare score line would be asked for one).
FAKE_REPLY = (
    "The investigation followed the evidence: the agent listed the pods, read the events and checked "
    "the logs before concluding. However, it never verified the node's memory pressure, and its high "
    "confidence rests on one log line; a rigorous investigation would have compared the previous "
    "container's output too.\n\n70"
)
SAMPLE = REPO / "scoring" / "samples" / "00_tarsy_example.json"
POLL_S = 0.1


# --- Setting up --------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_judge(latency_s: float, log, *options: str):
    from tests.support.servers import wait_for_log

    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                PYTHON,
                "-u",
                "-m",
                "tests.support.fake_llm",
                "--port",
                str(port),
                "--reply",
                FAKE_REPLY,
                "--delay",
                str(latency_s),
                *options,
            ],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_log(log, "fake LLM listening", process)
        yield {
            "SCORING_LLM_MODEL": "openai/fake-judge",
            "SCORING_LLM_API_BASE": f"http://127.0.0.1:{port}/v1",
            "SCORING_LLM_API_KEY": "unused",
        }
    finally:
        process.terminate()
        process.wait()


def make_sessions(count: int) -> list[uuid.UUID]:
    """``count`` finished sessions, copies of the TARSy example (14 KB), stored at once with
    what storing one through the API keeps beside it (its digest and prompt length)."""
    import json

    from scoring.judge.conversation import build_score_prompt
    from scoring.judge.rendering import investigation_digest
    from scoring.models import AlertSession
    from scoring.tarsy import ingest

    fields = ingest.parse_document(json.loads(SAMPLE.read_text()))
    sessions = []
    for _ in range(count):
        session = AlertSession(**{**fields, "session_id": uuid.uuid4()})
        session.investigation_digest = investigation_digest(session)
        sessions.append(session)
    prompt_chars = len(build_score_prompt(sessions[0]))  # the copies differ only in their ids
    for session in sessions:
        session.judge_prompt_chars = prompt_chars
    AlertSession.objects.bulk_create(sessions, batch_size=200)
    return [session.session_id for session in sessions]


def request_scorings(session_ids: list[uuid.UUID], threads: int = 1) -> None:
    """Request a scoring of each session, from ``threads`` threads at once (as concurrent
    API requests would), through the service the API uses."""
    from django.db import connection

    from scoring import services

    def request(chunk: list[uuid.UUID]) -> None:
        try:
            for session_id in chunk:
                services.score_request(session_id=session_id, triggered_by="bench")
        finally:
            connection.close()  # this thread's

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(request, [session_ids[index::threads] for index in range(threads)]))


def scores_of(session_ids: list[uuid.UUID]):
    from scoring.models import SessionScore

    return SessionScore.objects.filter(session_id__in=session_ids)


def wait_finished(session_ids: list[uuid.UUID], timeout_s: float, on_poll=None) -> None:
    from scoring.models import ScoringStatus

    deadline = time.monotonic() + timeout_s
    while scores_of(session_ids).filter(status__in=ScoringStatus.active_values()).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"scorings not finished within {timeout_s:.0f} s")
        if on_poll:
            on_poll()
        time.sleep(POLL_S)


def cluster_rss_mib(cluster) -> float:
    root = psutil.Process(cluster.process.pid)
    processes = [root, *root.children(recursive=True)]
    return sum(process.memory_info().rss for process in processes) / 2**20


class CPUMeter:
    """CPU seconds used by groups of processes (each with its descendants) and by the whole
    machine, between ``start`` and ``stop``."""

    def __init__(self, groups: dict[str, list[int]]):
        self.groups = groups

    def _now(self) -> dict[str, float]:
        machine = psutil.cpu_times()
        used = {name: sum(tree_cpu_s(psutil.Process(pid)) for pid in pids) for name, pids in self.groups.items()}
        return {**used, "machine_busy": sum(machine) - machine.idle - machine.iowait, "machine_all": sum(machine)}

    def start(self) -> None:
        self.before = self._now()

    def stop(self) -> dict[str, float]:
        """Seconds used by each group since ``start``, and ``busy``: the machine's busy share."""
        used = {name: value - self.before[name] for name, value in self._now().items()}
        return {**{name: used[name] for name in self.groups}, "busy": used["machine_busy"] / used["machine_all"]}


# --- The measurements ---------------------------------------------------------------------------


def measure_service(concurrency: int, args, env: dict[str, str], work, server_pids: list[int]) -> dict:
    from scoring.models import ScoringStatus
    from tests.support.workers import WorkerCluster

    per_worker = math.ceil(concurrency / args.workers)
    cluster_env = {
        **env,
        "SCORING_WORKERS": str(args.workers),
        "SCORING_CONCURRENCY_PER_WORKER": str(per_worker),
        "SCORING_MAX_IN_FLIGHT": str(concurrency),
        "SCORING_LLM_TIMEOUT_S": str(llm_timeout_s(args)),
    }
    cluster = WorkerCluster(cluster_env, work / f"worker-{concurrency}.log")
    try:
        # Warm-up: every worker process imports litellm and opens its connections.
        warm = make_sessions(4 * args.workers)
        request_scorings(warm)
        wait_finished(warm, 60 + 4 * args.latency_s)
        idle_rss = cluster_rss_mib(cluster)

        # Overhead: exactly C at once.
        batch = make_sessions(concurrency)
        request_scorings(batch)
        wait_finished(batch, 60 + 10 * args.latency_s)
        two_turns_us = 2 * args.latency_s * 1e6
        done = list(scores_of(batch).values("status", "scored_at_us", "started_at_us", "completed_at_us"))
        overheads = [(s["completed_at_us"] - s["scored_at_us"] - two_turns_us) / 1000 for s in done]
        # Split: from the request to the claim (queue), and from the claim to the end beyond 2L (job).
        queue_waits = [(s["started_at_us"] - s["scored_at_us"]) / 1000 for s in done]
        job_overheads = [(s["completed_at_us"] - s["started_at_us"] - two_turns_us) / 1000 for s in done]
        failed = sum(s["status"] != ScoringStatus.COMPLETED for s in done)

        # Throughput and memory: waves x C at once.
        batch = make_sessions(args.waves * concurrency)
        peak = {"in_flight": 0, "rss": idle_rss}

        def sample() -> None:
            in_flight = scores_of(batch).filter(status=ScoringStatus.IN_PROGRESS).count()
            if in_flight >= peak["in_flight"]:
                peak.update(in_flight=in_flight, rss=cluster_rss_mib(cluster))

        cpu = CPUMeter({"workers": [cluster.process.pid], "servers": server_pids})
        cpu.start()
        enqueue_start = time.perf_counter()
        request_scorings(batch, args.enqueue_threads)
        enqueue_s = time.perf_counter() - enqueue_start
        wait_finished(batch, 60 + (args.waves + 5) * 2 * args.latency_s, sample)
        cpu_used = cpu.stop()
        done = list(scores_of(batch).values("status", "started_at_us", "completed_at_us"))
        makespan_s = (max(s["completed_at_us"] for s in done) - min(s["started_at_us"] for s in done)) / 1e6
        failed += sum(s["status"] != ScoringStatus.COMPLETED for s in done)
    finally:
        cluster.stop()
    throughput = len(done) / makespan_s
    return {
        "overhead_p50": statistics.median(overheads),
        "overhead_p95": percentile(overheads, 0.95),
        "queue_p95": percentile(queue_waits, 0.95),
        "job_p95": percentile(job_overheads, 0.95),
        "throughput": throughput,
        "ideal": concurrency / (2 * args.latency_s),
        "enqueue_s": enqueue_s,
        "peak_in_flight": peak["in_flight"],
        "mib_per_scoring": (peak["rss"] - idle_rss) / max(peak["in_flight"], 1),
        "idle_rss": idle_rss,
        "failed": failed,
        "per_worker": per_worker,
        "cpu_per_scoring": cpu_used["workers"] / len(done),
        "servers_cpu_per_scoring": cpu_used["servers"] / len(done),
        "busy": cpu_used["busy"],
    }


def measure_reference(concurrency: int, args, llm_env: dict[str, str]) -> dict:
    """Bare litellm: C threads, each holding two-turn conversations with the same prompts."""
    import litellm

    from scoring.judge.conversation import build_score_prompt
    from scoring.judge.prompts import JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS
    from scoring.models import AlertSession

    prompt = build_score_prompt(AlertSession.objects.get(pk=make_sessions(1)[0]))
    call = {
        "model": llm_env["SCORING_LLM_MODEL"],
        "api_base": llm_env["SCORING_LLM_API_BASE"],
        "api_key": llm_env["SCORING_LLM_API_KEY"],
        # As the service calls it (scoring.judge.llm): its timeout, no SDK or litellm retries.
        "timeout": llm_timeout_s(args),
        "max_retries": 0,
        "num_retries": 0,
    }

    def conversation(_) -> float | None:
        """The overhead beyond 2L in ms, or None if a call failed."""
        start = time.perf_counter()
        messages = [{"role": "user", "content": prompt}]
        try:
            reply = litellm.completion(messages=messages, **call).choices[0].message.content
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS},
            ]
            litellm.completion(messages=messages, **call)
        except Exception:
            return None
        return (time.perf_counter() - start - 2 * args.latency_s) * 1000

    cpu = CPUMeter({"this process": [psutil.Process().pid]})
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(conversation, range(concurrency)))  # warm-up: connections, first-call imports
        overheads = list(pool.map(conversation, range(concurrency)))
        cpu.start()
        start = time.perf_counter()
        wave = list(pool.map(conversation, range(args.waves * concurrency)))
        makespan_s = time.perf_counter() - start
        cpu_used = cpu.stop()
    succeeded = [overhead for overhead in overheads if overhead is not None]
    return {
        "overhead_p50": statistics.median(succeeded) if succeeded else float("nan"),
        "overhead_p95": percentile(succeeded, 0.95) if succeeded else float("nan"),
        "throughput": sum(overhead is not None for overhead in wave) / makespan_s,
        "failed": sum(overhead is None for overhead in overheads + wave),
        "cpu_per_scoring": cpu_used["this process"] / len(wave),
        "busy": cpu_used["busy"],
    }


def llm_timeout_s(args) -> float:
    """The judge call timeout of both sides: far above L, so only a stuck call reaches it."""
    return 10 * args.latency_s + 30


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency-s", type=float, default=2.0, help="the fake judge's delay per turn (L)")
    parser.add_argument("--concurrency", default="10,50,200", help="comma-separated values of C")
    parser.add_argument("--waves", type=int, default=3, help="the throughput run requests waves x C scorings")
    parser.add_argument("--workers", type=int, default=2, help="SCORING_WORKERS of the cluster")
    parser.add_argument(
        "--enqueue-threads",
        type=int,
        default=8,
        help="the throughput run requests its scorings from this many threads",
    )
    parser.add_argument("--database-url", help="default: a throwaway PostgreSQL")
    parser.add_argument("--redis-url", help="default: a throwaway Redis; 'none' for the database broker")
    args = parser.parse_args()

    with work_folder() as work, contextlib.ExitStack() as stack:
        db_url = args.database_url or stack.enter_context(throwaway_postgres(work))
        # CPU of the servers this script starts (one given by URL may be elsewhere).
        server_pids = [] if args.database_url else [postgres_pid(db_url)]
        if args.redis_url == "none":
            redis_url = None
        elif args.redis_url:
            redis_url = args.redis_url
        else:
            redis = stack.enter_context(Redis(work / "redis"))
            redis_url = redis.url
            server_pids.append(redis.process.pid)
        setup_django(db_url, redis_url)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        llm_env = stack.enter_context(fake_judge(args.latency_s, work / "fake-llm.log"))
        env = service_env(db_url, redis_url, **llm_env)
        print(machine_description(db_url if db_url.startswith("postgres") else None))
        print(
            f"\nL = {args.latency_s:g} s per turn; {args.workers} worker processes in one cluster; "
            f"broker: {'Redis' if redis_url else 'database'}; throughput over {args.waves} x C scorings.\n"
        )
        print(
            "| C | per worker | side | overhead p50, ms | overhead p95, ms "
            "| of which queue / job, p95 ms | scorings/s | ideal C/(2L) | of ideal | enqueue, s "
            "| MiB per scoring (peak in flight) | CPU-s per scoring (+ PostgreSQL, Redis) "
            "| machine busy | failed |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for concurrency in (int(value) for value in args.concurrency.split(",")):
            service = measure_service(concurrency, args, env, work, server_pids)
            reference = measure_reference(concurrency, args, llm_env)
            for side, r in (("service", service), ("bare litellm", reference)):
                ideal = concurrency / (2 * args.latency_s)
                service_only = (
                    f"| {r['enqueue_s']:.2f} | {r['mib_per_scoring']:.2f} ({r['peak_in_flight']}) "
                    f"| {r['cpu_per_scoring']:.3f} (+ {r['servers_cpu_per_scoring']:.3f}) "
                    if side == "service"
                    else f"| | | {r['cpu_per_scoring']:.3f} "
                ) + f"| {r['busy']:.0%} | {r['failed']} |"
                split = f"{r['queue_p95']:.0f} / {r['job_p95']:.0f}" if side == "service" else ""
                print(
                    f"| {concurrency} | {service['per_worker']} | {side} | {r['overhead_p50']:.0f} "
                    f"| {r['overhead_p95']:.0f} | {split} | {r['throughput']:.2f} | {ideal:.2f} "
                    f"| {r['throughput'] / ideal:.0%} {service_only}",
                    flush=True,
                )
            print(
                f"<!-- C={concurrency}: idle cluster RSS {service['idle_rss']:.0f} MiB; CPU per scoring, "
                f"service workers / bare litellm: {service['cpu_per_scoring'] / reference['cpu_per_scoring']:.2f}; "
                f"throughput, service / bare litellm: {service['throughput'] / reference['throughput']:.0%} -->",
                flush=True,
            )


if __name__ == "__main__":
    main()
