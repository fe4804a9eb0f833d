"""CPU of a scoring in one process, beside bare litellm's two calls in the same process.

The pipeline benchmark reads each worker process's CPU in 10 ms steps over a few dozen
scorings, on a machine whose noise is larger than a change of a millisecond. Here one process
claims and runs N scorings one after another (``services.claim_pending_scores``, then
``services.run_claimed_score``, as a worker's dispatcher and judge thread do) against the fake
judge answering at once, on a throwaway PostgreSQL and Redis, logging at the service's level;
then it holds N bare litellm two-turn conversations with the same prompts. The rounds
alternate the two sides. Printed per round: CPU ms per scoring (user + system, every thread:
the event publisher's and litellm's logging threads included) on each side, and their ratio;
then the medians. With --steps, one more round of the service with the main thread's CPU in
each step of a scoring (inclusive: a step's time counts in the steps around it too).

    .venv/bin/python bench/bench_scoring_cpu.py
    .venv/bin/python bench/bench_scoring_cpu.py --scorings 100 --rounds 3 --steps
"""

import argparse
import contextlib
import functools
import logging
import os
import resource
import statistics
import threading
import time
from collections import Counter

from bench_pipeline import fake_judge, make_sessions, request_scorings
from common import machine_description, setup_django, throwaway_postgres, work_folder

from tests.support.throwaway_servers import Redis

# Waited at the end of each round, so that litellm's logging threads finish the last calls' work.
SETTLE_S = 0.3


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def request_pending(count: int) -> None:
    """``count`` new sessions, each with a pending scoring."""
    from django.db import connection

    request_scorings(make_sessions(count))
    connection.close()


def run_pending(count: int) -> float:
    """CPU ms per scoring of ``count`` pending scorings claimed and run one after another."""
    from django.db import connection

    from scoring import services
    from scoring.realtime import events

    started = process_cpu_s()
    for _ in range(count):
        (score,) = services.claim_pending_scores(1)
        connection.close()  # as the dispatcher does after a claim
        services.run_claimed_score(score)
        connection.close()  # as the judge thread does after a job
    events.flush_published()
    time.sleep(SETTLE_S)
    return (process_cpu_s() - started) / count * 1000


def service_round(count: int) -> float:
    request_pending(count)
    return run_pending(count)


def bare_round(count: int, prompt: str, call: dict) -> float:
    """CPU ms per conversation of ``count`` bare litellm two-turn conversations."""
    import litellm

    from scoring.judge.prompts import JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS

    started = process_cpu_s()
    for _ in range(count):
        messages = [{"role": "user", "content": prompt}]
        reply = litellm.completion(messages=messages, **call).choices[0].message.content
        messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS},
        ]
        litellm.completion(messages=messages, **call)
    time.sleep(SETTLE_S)
    return (process_cpu_s() - started) / count * 1000


def timed_steps() -> list[tuple[object, str, str]]:
    """The steps --steps times: (the module or class, the function's name, what it is)."""
    import litellm
    from django.db.backends.base.base import BaseDatabaseWrapper

    from scoring import services
    from scoring.judge import circuit, injection, pacing, rendering

    return [
        (services, "claim_pending_scores", "the claim"),
        (services, "run_claimed_score", "the judge job, all of it"),
        (services, "session_to_judge", "  loading the session"),
        (injection, "find_injection_attempts", "  the injection scan"),
        (rendering, "investigation_digest", "  the session's digest"),
        (litellm, "completion", "  litellm's calls"),
        (circuit, "check", "  the breaker's check"),
        (circuit, "record_success", "  the breaker's reset"),
        (pacing, "take_turn", "  the pacing's turn"),
        (services, "_record_progress", "  progress events"),
        (services, "_complete", "  the completion"),
        (services, "_update_returning", "every move's UPDATE (claim, scan's warnings, completion)"),
        (BaseDatabaseWrapper, "connect", "taking a database connection from the pool"),
    ]


def steps_round(count: int) -> list[tuple[str, float, float]]:
    """One service round with the main thread's CPU in each step: (what, calls, ms) per scoring."""
    spent, calls = Counter(), Counter()
    main = threading.main_thread()

    def timed(function, label):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if threading.current_thread() is not main:
                return function(*args, **kwargs)
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] += time.thread_time() - started
                calls[label] += 1

        return wrapper

    request_pending(count)
    steps = timed_steps()
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in steps]
    for owner, name, label in steps:
        setattr(owner, name, timed(getattr(owner, name), label))
    try:
        main_started = time.thread_time()
        total = run_pending(count)
        main_ms = (time.thread_time() - main_started) / count * 1000
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    rows = [(label, calls[label] / count, spent[label] / count * 1000) for _, _, label in steps]
    return [("all threads", 1, total), ("the main thread", 1, main_ms), *rows]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scorings", type=int, default=200, help="scorings (and bare conversations) per round"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each side, alternating")
    parser.add_argument("--steps", action="store_true", help="one more service round, timed step by step")
    args = parser.parse_args()

    with work_folder() as work, contextlib.ExitStack() as stack:
        db_url = stack.enter_context(throwaway_postgres(work))
        redis = stack.enter_context(Redis(work / "redis"))
        llm_env = stack.enter_context(fake_judge(0.0, work / "fake-llm.log"))
        os.environ.update(llm_env)
        setup_django(db_url, redis.url)
        from django.conf import settings

        # The service's own log lines, as a worker writes them, to a file.
        logging.getLogger().setLevel(settings.LOG_LEVEL)
        log_file = stack.enter_context((work / "service.log").open("w"))
        for handler in logging.getLogger().handlers:
            handler.setStream(log_file)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from scoring.judge import llm
        from scoring.judge.conversation import build_score_prompt
        from scoring.models import AlertSession

        llm.preload()  # as a worker process does when it starts
        prompt = build_score_prompt(AlertSession.objects.get(pk=make_sessions(1)[0]))
        call = {
            "model": llm_env["SCORING_LLM_MODEL"],
            "api_base": llm_env["SCORING_LLM_API_BASE"],
            "api_key": llm_env["SCORING_LLM_API_KEY"],
            "timeout": 30,  # as the service calls it: a timeout, no SDK or litellm retries
            "max_retries": 0,
            "num_retries": 0,
        }
        print(machine_description(db_url))
        print(f"\n{args.scorings} scorings a round, one after another, the fake judge answering at once.\n")
        service_round(20)  # warm-up: connections, first-call imports
        bare_round(20, prompt, call)
        print("| round | service, CPU ms per scoring | bare litellm, CPU ms per conversation | ratio |")
        print("|---|---|---|---|")
        services, bares = [], []
        for number in range(1, args.rounds + 1):
            services.append(service_round(args.scorings))
            bares.append(bare_round(args.scorings, prompt, call))
            ratio = services[-1] / bares[-1]
            print(f"| {number} | {services[-1]:.2f} | {bares[-1]:.2f} | {ratio:.2f} |", flush=True)
        service, bare = statistics.median(services), statistics.median(bares)
        print(f"| median | {service:.2f} | {bare:.2f} | {service / bare:.2f} |")
        if args.steps:
            print("\n| step of a scoring | calls per scoring | CPU ms per scoring |")
            print("|---|---|---|")
            for label, calls, ms in steps_round(args.scorings):
                print(f"| {label} | {calls:.1f} | {ms:.2f} |")


if __name__ == "__main__":
    main()
