"""Runs the production topology on this machine, on loopback, for tests and benchmarks.

Started by ``bin/topology`` (which sets up .venv and the server binaries first):
a throwaway PostgreSQL, a Redis, N web processes (uvicorn) on consecutive ports
(or each on a free port the system picks) and M judge worker clusters, all
sharing DATABASE_URL and REDIS_URL as separate hosts would; optionally a fake
judge LLM. It migrates, waits until
every process answers, prints the URLs and the environment (and writes them to
``--env-file``), then stays in the foreground. Ctrl-C or SIGTERM stops
everything it started. Logs are kept in ``<run dir>/logs``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.throwaway_servers import (  # noqa: E402  (needs the repository on sys.path)
    SCALE_OUT_MAX_CONNECTIONS,
    Postgres,
    Redis,
    ServerError,
    free_port,
    port_is_free,
    remove_folder,
)

START_TIMEOUT_S = 60
WEB_STOP_TIMEOUT_S = 15
# A worker cluster gives its jobs 20 s to record "worker shut down" (scoring/jobs/cluster.py).
WORKER_STOP_TIMEOUT_S = 40
# An evaluation, as the score prompt asks (a bare score line would be asked for one).
DEFAULT_FAKE_REPLY = (
    "The investigation followed the evidence: the agent listed the pods, read the events and checked "
    "the logs before concluding. However, it never verified the node's memory pressure, and its high "
    "confidence rests on one log line; a rigorous investigation would have compared the previous "
    "container's output too.\n\n70"
)


class Stop(Exception):
    """SIGINT or SIGTERM arrived."""


def log(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def web_ports(first: int, count: int) -> list[int]:
    """``count`` consecutive free ports from ``first``; with ``first`` 0, 0 for each: a web
    process then binds a port the system picks. (A port found free now could be taken,
    by any outgoing connection, before the web process binds it, seconds later.)"""
    if not first:
        return [0] * count
    ports = list(range(first, first + count))
    busy = [port for port in ports if not port_is_free(port)]
    if busy:
        raise SystemExit(f"error: ports {busy} are in use; choose another --port (0 picks free ones)")
    return ports


def wait_until(
    predicate, what: str, process: subprocess.Popen | None = None, log_file: Path | None = None
) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not predicate():
        if process is not None and process.poll() is not None:
            raise SystemExit(f"error: {what}: the process exited ({process.returncode}); see {log_file}")
        if time.monotonic() > deadline:
            raise SystemExit(f"error: {what}: not within {START_TIMEOUT_S} s; see {log_file}")
        time.sleep(0.1)


def accepts_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def answers_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


# --- The topology -------------------------------------------------------------------------------


class Topology:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.run_dir = Path(args.run_dir).resolve()
        self.logs = self.run_dir / "logs"
        self.env_file = Path(args.env_file).resolve() if args.env_file else None
        self.postgres: Postgres | None = None
        self.redis: Redis | None = None
        # (name, process, stop timeout, whole process group?) in start order.
        self.children: list[tuple[str, subprocess.Popen, float, bool]] = []
        self.service_env: dict[str, str] = {}

    def prepare_run_dir(self) -> None:
        pid_file = self.run_dir / "topology.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text())
            if pid != os.getpid() and Path(f"/proc/{pid}").exists():
                raise SystemExit(f"error: another bin/topology (pid {pid}) uses {self.run_dir}")
        for server in ("pg", "redis"):  # those of a bin/topology that was killed
            remove_folder(self.run_dir / server)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.logs.mkdir(parents=True)
        (self.run_dir / "metrics").mkdir()
        pid_file.write_text(str(os.getpid()))

    def spawn(
        self, name: str, command: list[str], env: dict[str, str], stop_timeout_s: float, group: bool = False
    ) -> tuple[subprocess.Popen, Path]:
        log_file = self.logs / f"{name}.log"
        with log_file.open("wb") as out:
            # Each child in its own session: Ctrl-C in the terminal reaches only this
            # script, which stops the children in order.
            process = subprocess.Popen(
                command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.children.append((name, process, stop_timeout_s, group))
        return process, log_file

    def start(self) -> None:
        self.prepare_run_dir()
        ports = web_ports(self.args.port, self.args.web)
        env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
        self.postgres = Postgres(
            self.run_dir / "pg", max_connections=SCALE_OUT_MAX_CONNECTIONS, durable=True
        )
        log(f"starting PostgreSQL on 127.0.0.1:{self.postgres.port}")
        self.postgres.create()
        self.service_env["DATABASE_URL"] = self.postgres.url
        if not self.args.no_redis:
            self.redis = Redis(self.run_dir / "redis")
            log(f"starting Redis on 127.0.0.1:{self.redis.port}")
            self.redis.start()
            self.service_env["REDIS_URL"] = self.redis.url
        if self.args.fake_llm:
            self.start_fake_llm(env)
        self.service_env["PROMETHEUS_MULTIPROC_DIR"] = str(self.run_dir / "metrics")
        env.update(self.service_env, PYTHONUNBUFFERED="1")
        self.migrate(env)
        for index in range(1, self.args.workers + 1):
            self.start_worker(index, env)
        self.web_urls = [self.start_web(index, port, env) for index, port in enumerate(ports, start=1)]

    def start_fake_llm(self, env: dict[str, str]) -> None:
        port = free_port()
        quota = f", quota {self.args.fake_llm_rps:g} requests/s" if self.args.fake_llm_rps else ""
        quota += ", announced in its answers' headers" if self.args.fake_llm_announce_limits else ""
        log(f"starting the fake judge LLM on 127.0.0.1:{port} (delay {self.args.fake_llm_delay:g} s{quota})")
        command = [sys.executable, "-m", "tests.support.fake_llm", "--port", str(port)]
        command += ["--reply", self.args.fake_llm_reply, "--delay", str(self.args.fake_llm_delay)]
        if self.args.fake_llm_rps:
            command += ["--rps", str(self.args.fake_llm_rps)]
        if self.args.fake_llm_announce_limits:
            command += ["--announce-limits"]
        fake, log_file = self.spawn("fake-llm", command, env, 5)
        wait_until(lambda: accepts_connections(port), "the fake judge LLM", fake, log_file)
        self.service_env.update(
            SCORING_LLM_MODEL="openai/fake-judge",
            SCORING_LLM_API_BASE=f"http://127.0.0.1:{port}/v1",
            SCORING_LLM_API_KEY="unused",
        )

    def migrate(self, env: dict[str, str]) -> None:
        log("migrating the database")
        log_file = self.logs / "migrate.log"
        with log_file.open("wb") as out:
            command = [sys.executable, "manage.py", "migrate", "--noinput"]
            done = subprocess.run(
                command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
            )
        if done.returncode != 0:
            raise SystemExit(f"error: migrate failed; see {log_file}")

    def start_worker(self, index: int, env: dict[str, str]) -> None:
        log(f"starting worker cluster {index}")
        command = [sys.executable, "manage.py", "scoring_worker"]
        worker, log_file = self.spawn(f"worker-{index}", command, env, WORKER_STOP_TIMEOUT_S, group=True)

        def is_ready() -> bool:
            return "ready for work at" in log_file.read_text(errors="replace")

        wait_until(is_ready, f"worker cluster {index}", worker, log_file)

    def start_web(self, index: int, port: int, env: dict[str, str]) -> str:
        log(f"starting web {index} on 127.0.0.1:{port or '(a free port)'}")
        command = [sys.executable, "-m", "tarsy_scoring.server", "--port", str(port)]
        web, log_file = self.spawn(f"web-{index}", command, env, WEB_STOP_TIMEOUT_S)
        if not port:

            def listening() -> re.Match | None:
                return re.search(
                    r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log_file.read_text(errors="replace")
                )

            wait_until(listening, f"web {index}", web, log_file)
            port = int(listening().group(1))
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers_ok(f"{url}/healthz"), f"web {index}", web, log_file)
        return url

    def announce(self) -> None:
        facts = {
            "TOPOLOGY_WEB_URLS": " ".join(self.web_urls),
            **self.service_env,
            "TOPOLOGY_RUN_DIR": str(self.run_dir),
            "TOPOLOGY_PID": str(os.getpid()),
            "TOPOLOGY_POSTGRES_PID": str(self.postgres.pid),
        }
        lines = [f"{key}={shlex.quote(value)}" for key, value in facts.items()]
        if self.env_file:
            partial = self.env_file.with_name(self.env_file.name + ".partial")
            partial.write_text("\n".join(lines) + "\n")
            partial.replace(self.env_file)  # appears whole: a script may wait for the file
        print("\ntarsy-scoring topology is up:")
        for index, url in enumerate(self.web_urls, start=1):
            print(f"  web {index}:  {url}/   ({url}/readyz, {url}/metrics)")
        print(f"  workers: {self.args.workers} clusters; logs in {self.logs}")
        print("Environment (to run manage.py or another process against it):")
        for line in lines:
            print(f"  {line}")
        print("Press Ctrl-C to stop.\n", flush=True)

    def watch(self) -> int:
        """Wait for a signal (exit 0) or a child that dies (exit 1)."""
        watched = [(name, process) for name, process, _, _ in self.children]
        if self.redis is not None:
            watched.append(("Redis", self.redis.process))
        while True:
            for name, process in watched:
                if process.poll() is not None:
                    log(f"{name} exited ({process.returncode}); stopping everything")
                    return 1
            time.sleep(0.5)

    def stop(self) -> None:
        if self.env_file:
            self.env_file.unlink(missing_ok=True)
        # Reverse start order: web first (no new requests), then the workers (their jobs
        # end failed, cleanly), then the servers they used.
        for name, process, timeout_s, group in reversed(self.children):
            self._stop_child(name, process, timeout_s, group)
        if self.redis is not None:
            self.redis.remove(keep_log=self.logs / "redis.log")
        if self.postgres is not None:
            self.postgres.remove(keep_log=self.logs / "postgres.log")
        (self.run_dir / "topology.pid").unlink(missing_ok=True)

    @staticmethod
    def _stop_child(name: str, process: subprocess.Popen, timeout_s: float, group: bool) -> None:
        def send(signum: int) -> None:
            try:
                os.killpg(process.pid, signum) if group else process.send_signal(signum)
            except ProcessLookupError:
                pass

        if process.poll() is None:
            send(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log(f"{name} did not stop within {timeout_s:g} s; killing it")
        # Whatever is left of the child's session (a worker's pool, a stuck process).
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bin/topology", description=__doc__.split("\n\n")[0])
    parser.add_argument("--web", type=int, default=2, help="web processes, default 2")
    parser.add_argument("--workers", type=int, default=2, help="judge worker clusters, default 2")
    parser.add_argument(
        "--port",
        type=int,
        default=8000,
        help="port of web 1; the others follow (default 8000; 0 picks free ones)",
    )
    parser.add_argument(
        "--no-redis",
        action="store_true",
        help="no Redis: the job queue in PostgreSQL, an in-memory channel layer per web process",
    )
    parser.add_argument(
        "--fake-llm", action="store_true", help="run the fake judge LLM and point the workers at it"
    )
    parser.add_argument(
        "--fake-llm-reply",
        default=DEFAULT_FAKE_REPLY,
        help="the fake judge's every reply (its last line is the score)",
    )
    parser.add_argument(
        "--fake-llm-delay", type=float, default=0.0, help="seconds the fake judge takes per reply"
    )
    parser.add_argument(
        "--fake-llm-rps",
        type=int,
        help="the fake judge's quota for all workers together, requests per second (429 beyond it)",
    )
    parser.add_argument(
        "--fake-llm-announce-limits",
        action="store_true",
        help="the fake judge announces its quota in OpenAI's x-ratelimit-limit-* headers",
    )
    parser.add_argument(
        "--run-dir",
        default=str(REPO / "var" / "topology"),
        help="folder for data and logs, emptied at start (default var/topology)",
    )
    parser.add_argument("--env-file", help="write the URLs and environment here once everything answers")
    args = parser.parse_args(argv)
    if args.web < 1 or args.workers < 0:
        parser.error("--web must be at least 1 and --workers at least 0")
    if args.fake_llm_rps is not None and (args.fake_llm_rps < 1 or not args.fake_llm):
        parser.error("--fake-llm-rps takes --fake-llm, and at least 1")
    if args.fake_llm_announce_limits and not args.fake_llm_rps:
        parser.error("--fake-llm-announce-limits takes --fake-llm-rps")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    topology = Topology(args)

    def on_signal(signum, frame):
        raise Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    code = 1
    try:
        topology.start()
        topology.announce()
        code = topology.watch()
    except Stop as stop:
        log(f"{stop}: stopping")
        code = 0
    except ServerError as error:
        print(f"error: {error}", file=sys.stderr)
    finally:
        # A second signal must not cut the clean-up short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        topology.stop()
        log("stopped")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
