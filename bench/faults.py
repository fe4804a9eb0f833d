"""The fault suite: real processes, scripted faults, one table of what happened.

Starts a throwaway PostgreSQL (initdb/pg_ctl; as the ``postgres`` user when run
as root) and a throwaway Redis on free loopback ports, a web server process and
judge worker clusters on them, and the fake judge LLM; then runs each scenario
of tests/faults/scenarios.py and prints, per scenario, how many scorings were
attempted, completed, failed (with their reasons), stuck, how many events a
dashboard client never received, and how many judge conversations were
duplicated. Stuck, lost and duplicated must all be 0. Scenarios that kill
workers run last.

    .venv/bin/python bench/faults.py                      # everything (3-10 minutes)
    .venv/bin/python bench/faults.py --only redis web     # scenarios whose name has a word
    .venv/bin/python bench/faults.py --load-count 50

Exits non-zero if any scenario has stuck, lost or duplicated scorings, or errors.
"""

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_DIR))

from tests.support.throwaway_servers import Postgres, Redis  # noqa: E402  (needs no Django)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=[], help="run scenarios whose name contains one of these words")
    parser.add_argument("--load-count", type=int, default=200, help="scorings queued at once in the load scenario")
    args = parser.parse_args()

    log_dir = Path(tempfile.mkdtemp(prefix="tarsy-faults-"))
    with contextlib.ExitStack() as servers:  # stopped, their logs kept in log_dir
        postgres = Postgres(log_dir / "postgres")
        servers.callback(postgres.remove, keep_log=log_dir / "postgres.log")
        postgres.create()
        redis = Redis(log_dir / "redis")
        servers.callback(redis.remove, keep_log=log_dir / "redis.log")
        redis.start()
        return run(args, log_dir, postgres, redis)


def run(args, log_dir: Path, postgres: Postgres, redis: Redis) -> int:
    os.environ.update(DATABASE_URL=postgres.url, DJANGO_SETTINGS_MODULE="tarsy_scoring.settings")
    os.environ.pop("REDIS_URL", None)  # this process only reads the database
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO_DIR, check=True, env=os.environ)
    import django

    django.setup()
    from django.db import connection

    from tests.faults import scenarios
    from tests.faults.harness import TABLE_HEADER, Figures
    from tests.faults.stack import Stack
    from tests.support.fake_llm import FakeLLMServer
    from tests.support.servers import child_env

    plan = [(fault.name, lambda stack, fault=fault: scenarios.llm_fault(stack, fault)) for fault in scenarios.LLM_FAULTS]
    plan += [
        ("web process restarted", scenarios.web_restart),
        ("Redis stopped and restarted", scenarios.redis_outage),
        ("PostgreSQL restarted mid-scoring", scenarios.postgres_restart),
        ("load with a rate-limiting judge", lambda stack: scenarios.load_with_rate_limits(stack, args.load_count)),
        ("worker SIGTERMed mid-scoring", scenarios.worker_sigterm),
        ("worker SIGKILLed mid-scoring", scenarios.worker_sigkill),
    ]
    if args.only:
        plan = [(name, run) for name, run in plan if any(word.lower() in name.lower() for word in args.only)]

    fake_llm = FakeLLMServer().start()
    stack = Stack(child_env(redis.url, db_url=postgres.url), fake_llm, log_dir, redis=redis, postgres=postgres)
    stack.start_web()
    results, clean = [], True
    try:
        for name, scenario in plan:
            print(f"--> {name}", file=sys.stderr, flush=True)
            try:
                figures = scenario(stack)
            except Exception as exc:  # one broken scenario must not hide the others' figures
                traceback.print_exc()
                figures = Figures(name, notes=[f"scenario error: {type(exc).__name__}: {exc}"])
                connection.close()  # a broken connection must not fail the next scenarios
                stack.kill_workers(15)
                clean = False
            clean &= (figures.stuck, figures.events_lost, figures.duplicated) == (0, 0, 0)
            results.append(figures)
            print(figures.row(), file=sys.stderr, flush=True)
    finally:
        stack.stop()
        fake_llm.stop()
    print(TABLE_HEADER)
    for figures in results:
        print(figures.row())
    print(f"\nlogs: {log_dir}")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
