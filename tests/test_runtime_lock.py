"""The production install: requirements/base.txt alone runs the scale-out topology.

The suite itself runs on the dev lock, which would hide a package the runtime needs but
only dev.txt pins. So this test installs base.txt into a fresh virtualenv, as the
Dockerfile does, and with that virtualenv's programs runs the Procfile's commands as it
writes them (release, then web and worker) on PostgreSQL and Redis: a scoring requested
over REST completes, and a WebSocket client of that web process receives it.
"""

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import uuid
from contextlib import ExitStack
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.support.fake_llm import Reply
from tests.support.servers import REPO_DIR, EventClient
from tests.support.throwaway_servers import Redis, free_port
from tests.support.topology import SAMPLE_SESSION, http
from tests.support.workers import WORKER_READY_PATTERN, wait_for
from tests.support.judge_replies import evaluated

pytestmark = pytest.mark.processes

LOCK_FILE = REPO_DIR / "requirements" / "base.txt"
TURN1 = evaluated("Logical Flow: 15/25\nConsistency: 18/25\nTool Relevance: 14/25\nSynthesis Quality: 16/25\n\n63")
TURN2 = "1. **kubernetes-server.events_list** - the namespace's events were never read."
START_TIMEOUT_S = 90
LOG_TAIL_LINES = 40


def procfile() -> dict[str, str]:
    """The Procfile's process types and their commands."""
    entries = (line.partition(":") for line in (REPO_DIR / "Procfile").read_text().splitlines())
    return {
        name.strip(): command.strip()
        for name, _, command in entries
        if name.strip() and not name.startswith("#")
    }


def skip_unless_postgresql() -> None:
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("the scale-out topology runs on PostgreSQL: this test runs on bin/test's PostgreSQL run")


@pytest.fixture(scope="session")
def runtime_venv(tmp_path_factory) -> Path:
    """A new virtualenv with requirements/base.txt, and nothing else, installed."""
    skip_unless_postgresql()  # before the install: session fixtures are set up first
    venv = tmp_path_factory.mktemp("runtime-venv")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    # --no-compile: byte-compiling every package's modules up front would double the install time.
    command = [str(venv / "bin" / "pip"), "install", "--quiet", "--no-compile", "-r", str(LOCK_FILE)]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, f"pip install -r requirements/base.txt failed:\n{done.stdout}{done.stderr}"
    return venv


@pytest.fixture
def postgres_database():
    """A new, empty database on the test PostgreSQL server, as a DATABASE_URL; dropped afterwards."""
    skip_unless_postgresql()
    db = settings.DATABASES["default"]
    server = {"host": db["HOST"] or "localhost", "port": db["PORT"] or 5432, "user": db["USER"]}
    name = f"runtime_lock_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(
        dbname="postgres", password=db["PASSWORD"] or None, autocommit=True, **server
    ) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    yield f"postgres://{credentials}@{server['host']}:{server['port']}/{name}"
    with psycopg.connect(
        dbname="postgres", password=db["PASSWORD"] or None, autocommit=True, **server
    ) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def redis_url(tmp_path):
    """A Redis of this test's own: the worker's queue must hold only this test's jobs."""
    with Redis(tmp_path / "redis") as redis:
        yield redis.url


class Procfile:
    """Runs the Procfile's commands with a shell, as a Procfile platform does, and keeps their logs."""

    def __init__(self, env: dict[str, str], logs: Path):
        self.commands = procfile()
        self.env = env
        self.logs = logs
        self.running: dict[str, subprocess.Popen] = {}

    def run(self, name: str, command: str | None = None) -> None:
        """Run a one-off command to its end: the Procfile's ``name`` unless ``command`` is given."""
        with (self.logs / f"{name}.log").open("wb") as out:
            done = subprocess.run(
                ["bash", "-c", command or self.commands[name]],
                cwd=REPO_DIR,
                env=self.env,
                stdout=out,
                stderr=out,
            )
        assert done.returncode == 0, f"{command or 'Procfile ' + name} exited {done.returncode}{self.tails()}"

    def start(self, name: str) -> subprocess.Popen:
        with (self.logs / f"{name}.log").open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-c", self.commands[name]],
                cwd=REPO_DIR,
                env=self.env,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        self.running[name] = process
        return process

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def wait_until(self, name: str, predicate, what: str) -> None:
        def met_or_exited():
            return predicate() or self.running[name].poll() is not None

        try:
            wait_for(met_or_exited, START_TIMEOUT_S, interval_s=0.2, what=what)
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}{self.tails()}") from None
        exited = self.running[name].poll()
        assert exited is None, f"Procfile {name} exited {exited} before {what}{self.tails()}"

    def tails(self) -> str:
        """The end of every command's output: why one did not start or work."""
        return "".join(
            f"\n--- {path.stem} (last {LOG_TAIL_LINES} lines):\n"
            + "\n".join(path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
            for path in sorted(self.logs.glob("*.log"))
        )

    def stop(self) -> None:
        # Web first, then the worker, which gives its jobs 20 s to end (docs/deploy.md).
        for name, process in reversed(self.running.items()):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


@pytest.mark.timeout(600)  # the install, on a slow CI machine
def test_the_runtime_lock_alone_runs_the_procfile_on_postgresql_and_redis(
    runtime_venv, postgres_database, redis_url, fake_llm, tmp_path
):
    fake_llm.push(Reply(TURN1), Reply(TURN2))
    port = free_port()
    env = {
        # The venv's programs (python) first, as its activation would put them;
        # nothing of the test's own environment (its venv, DJANGO_SETTINGS_MODULE, ...).
        "PATH": f"{runtime_venv / 'bin'}:{os.environ['PATH']}",
        "HOME": os.environ.get("HOME", "/"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PORT": str(port),
        "DATABASE_URL": postgres_database,
        "REDIS_URL": redis_url,
        "SECRET_KEY": secrets.token_urlsafe(50),
        "TARSY_SCORING_VAR_DIR": str(tmp_path / "var"),
        # TARSy's service account stores sessions, as a production install is configured.
        "SESSION_WRITERS": "tarsy",
        **fake_llm.env(),
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    procfile_run = Procfile(env, logs)
    assert {"release", "web", "worker"} <= set(procfile_run.commands)

    with ExitStack() as stack:
        stack.callback(procfile_run.stop)
        procfile_run.run("release")
        # The Dockerfile's build step, and Django's production checks, on the runtime lock.
        procfile_run.run("collectstatic", "python manage.py collectstatic --noinput")
        procfile_run.run("check", "python manage.py check --deploy")
        procfile_run.start("worker")
        procfile_run.wait_until(
            "worker", lambda: WORKER_READY_PATTERN in procfile_run.log("worker"), "the worker is ready"
        )
        procfile_run.start("web")
        web_url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return http("GET", f"{web_url}/readyz")[0] == 200
            except OSError:
                return False

        # /readyz: the database, the Redis broker, the channel layer and the worker answer.
        procfile_run.wait_until("web", ready, f"{web_url}/readyz answers 200")

        document = {**json.loads(SAMPLE_SESSION.read_text()), "session_id": str(uuid.uuid4())}
        session_id = document["session_id"]
        stored = http("POST", f"{web_url}/api/v1/sessions/", document, user="tarsy")
        assert stored[0] == 201, f"{stored}{procfile_run.tails()}"

        async def score_and_follow() -> tuple[tuple[int, dict], list[dict]]:
            async with EventClient.connect(f"ws://127.0.0.1:{port}/api/v1/ws") as client:
                await client.subscribe(f"session:{session_id}")
                accepted = await asyncio.to_thread(
                    http, "POST", f"{web_url}/api/v1/scoring/sessions/{session_id}/score", {}
                )
                if accepted[0] != 202:
                    return accepted, []
                return accepted, await client.wait_for_events(4, timeout_s=60)

        try:
            (status, created), received = asyncio.run(score_and_follow())
        except (TimeoutError, OSError) as error:
            raise AssertionError(
                f"no scoring events over the WebSocket: {error!r}{procfile_run.tails()}"
            ) from None
        assert status == 202, f"{created}{procfile_run.tails()}"
        assert [event["type"] for event in received][-1] == "scoring.completed", received
        assert {event["score_id"] for event in received} == {created["score_id"]}
        assert received[-1]["total_score"] == 63

        status, score = http("GET", f"{web_url}/api/v1/scoring/sessions/{session_id}/score")
        assert (status, score["status"], score["total_score"]) == (200, "completed", 63), score
        assert score["missing_tools_analysis"] == TURN2
        assert len(fake_llm.requests) == 2


def test_the_dockerfile_installs_the_runtime_lock_and_collects_static_files():
    dockerfile = (REPO_DIR / "Dockerfile").read_text()

    # What the test above installs and runs, so that it stands for the image.
    assert "pip install -r requirements/base.txt" in dockerfile
    assert "python manage.py collectstatic --noinput" in dockerfile
