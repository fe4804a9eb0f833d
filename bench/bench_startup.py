"""Start-up time of a web process and of a worker cluster, hyperfine-style.

Each is started --runs times on a fresh, migrated SQLite database (or --database-url):

* web:     the web server (uvicorn), from spawning it until ``GET /healthz`` answers 200;
* worker:  ``manage.py scoring_worker``, until it logs "ready for work at".

Reference, in the same run: ``python -c pass`` and ``python -c "import django;
django.setup()"`` (the interpreter, and Django with the project's settings and apps).
Also checks that loading the web application does not import litellm (the judge's
client is imported by worker processes only, when they first call the judge), and
lists the slowest imports of the web application (``python -X importtime``).

    .venv/bin/python bench/bench_startup.py --runs 5
"""

import argparse
import re
import statistics
import subprocess
import time
import urllib.request

from common import PYTHON, REPO, machine_description, manage, service_env, spread, sqlite_url, work_folder

from tests.support.servers import web_command
from tests.support.throwaway_servers import free_port

WEB_MODULES = "import django; django.setup(); import tarsy_scoring.asgi, scoring.api.urls, scoring.views"
POLL_S = 0.01


def timed_command(env: dict[str, str], code: str) -> float:
    start = time.perf_counter()
    subprocess.run([PYTHON, "-c", code], cwd=REPO, env=env, check=True)
    return time.perf_counter() - start


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def web_start_s(env: dict[str, str], log) -> float:
    port = free_port()
    start = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(
            web_command(port), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        while not answers(f"http://127.0.0.1:{port}/healthz"):
            if process.poll() is not None or time.perf_counter() - start > 60:
                raise RuntimeError(f"the web server did not answer /healthz; see {log}")
            time.sleep(POLL_S)
        return time.perf_counter() - start
    finally:
        process.terminate()
        process.wait()


def worker_start_s(env: dict[str, str], log) -> float:
    from tests.support.workers import WorkerCluster

    start = time.perf_counter()
    cluster = WorkerCluster(env, log)  # returns once the log says "ready for work at"
    elapsed = time.perf_counter() - start
    cluster.stop()
    return elapsed


def slowest_imports(env: dict[str, str], count: int) -> list[tuple[float, str]]:
    """The top-level packages whose import took longest (cumulative ms), loading the web application."""
    done = subprocess.run(
        [PYTHON, "-X", "importtime", "-c", WEB_MODULES],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    totals: dict[str, float] = {}
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\s*)(\S+)", line)
        if match and not match.group(2):  # imported at top level, not by another module
            package = match.group(3).split(".")[0]
            totals[package] = totals.get(package, 0.0) + int(match.group(1)) / 1000
    return sorted(((ms, name) for name, ms in totals.items()), reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    args = parser.parse_args()

    with work_folder() as work:
        env = service_env(args.database_url or sqlite_url(work), SCORING_WORKERS="2")
        manage(env, "migrate", "--noinput")
        print(machine_description())
        results: dict[str, list[float]] = {
            "python -c pass": [],
            "django.setup() (reference)": [],
            "web: uvicorn until /healthz answers": [],
            "worker: scoring_worker until ready for work": [],
        }
        for run in range(args.runs):
            results["python -c pass"].append(timed_command(env, "pass"))
            results["django.setup() (reference)"].append(timed_command(env, "import django; django.setup()"))
            results["web: uvicorn until /healthz answers"].append(web_start_s(env, work / f"web-{run}.log"))
            results["worker: scoring_worker until ready for work"].append(
                worker_start_s(env, work / f"worker-{run}.log")
            )

        print(f"\n{args.runs} runs each, interleaved. Seconds, median (min-max).\n")
        print("| process | start-up, s |")
        print("|---|---|")
        for name, times in results.items():
            print(f"| {name} | {spread(times, 2)} |")

        check = subprocess.run(
            [PYTHON, "-c", f"{WEB_MODULES}; import sys; print('litellm' in sys.modules)"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        print(f"\nlitellm loaded by the web application's modules: {check.stdout.strip()}")
        print("\nSlowest top-level imports of the web application (ms, cumulative):\n")
        print("| package | ms |")
        print("|---|---|")
        for ms, name in slowest_imports(env, 8):
            print(f"| {name} | {ms:.0f} |")
        web = statistics.median(results["web: uvicorn until /healthz answers"])
        setup = statistics.median(results["django.setup() (reference)"])
        print(f"\nmedian web / django.setup(): {web / setup:.1f}x")


if __name__ == "__main__":
    main()
