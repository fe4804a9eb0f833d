"""bin/run, as a user (or a script) runs it: a quiet first start, and SIGTERM stops it all."""

import signal
import subprocess

import psutil
import pytest

from scoring.judge import local_model
from tests.support.local_model import MODEL, link_installed_model
from tests.support.samples import SAMPLES, TARSY_BOT_SAMPLES, TARSY_GO_SAMPLES
from tests.support.servers import REPO_DIR, child_env, wait_for_log
from tests.support.throwaway_servers import free_port

pytestmark = pytest.mark.processes

READY = "Press Ctrl-C to stop."


# A local server's model, as the README's example points a worker at it.
LOCAL_JUDGE = {
    "SCORING_LLM_MODEL": "openai/local-judge",
    "SCORING_LLM_API_BASE": "http://127.0.0.1:8080/v1",
    "SCORING_LLM_CONTEXT_TOKENS": "32768",
    "SCORING_LLM_TIMEOUT_S": "900",
    "SCORING_JUDGE_CONCURRENCY": "1",
}


def run_until_ready(
    tmp_path, env: dict, *args: str, ready_too: str | None = None
) -> tuple[int, str, list[psutil.Process], list[list[str]]]:
    """Run ``bin/run *args`` until it is ready (and ``ready_too`` is on the screen), then stop it
    with SIGTERM: its exit code, what it showed, the processes it had started, and their
    command lines when it was ready."""
    screen = tmp_path / "screen.txt"
    with screen.open("wb") as output:
        run = subprocess.Popen(
            [str(REPO_DIR / "bin" / "run"), *args], stdout=output, stderr=subprocess.STDOUT, env=env, cwd=tmp_path
        )
    try:
        wait_for_log(screen, READY, run, timeout_s=180)
        if ready_too is not None:
            wait_for_log(screen, ready_too, run)
        started = psutil.Process(run.pid).children(recursive=True)
        commands = [process.cmdline() for process in started]
        run.send_signal(signal.SIGTERM)
        exit_code = run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    return exit_code, screen.read_text(), started, commands


def test_a_first_start_keeps_migrations_off_the_screen_and_sigterm_stops_web_and_worker(tmp_path):
    var_dir = tmp_path / "var"
    env = child_env(
        db_url=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        PORT=str(free_port()),
        TARSY_SCORING_VAR_DIR=str(var_dir),
        **LOCAL_JUDGE,
    )
    exit_code, shown, started, commands = run_until_ready(
        tmp_path, env, ready_too=r"Q Cluster \S+ \[tarsy-scoring\] running"
    )

    names = " ".join(" ".join(command) for command in commands)
    assert "tarsy_scoring.server" in names and "scoring_worker" in names
    assert exit_code == 128 + signal.SIGTERM
    assert "Applying " not in shown and "static files copied" not in shown
    # Both sources' samples, so that a new user sees both.
    loaded = (
        f"created: {len(SAMPLES)}, updated: 0, rejected: 0; "
        f"tarsy-bot: {len(TARSY_BOT_SAMPLES)}, tarsy-go: {len(TARSY_GO_SAMPLES)}"
    )
    assert loaded in shown.split(READY)[0]
    # What the worker judges with: the model and its sampling settings, its window and where
    # that figure comes from, how tokens are counted, the timeouts and the calls at once.
    banner = shown.split("tarsy-scoring is ready at")[1].split(READY)[0]
    assert "  Worker:    judge model: openai/local-judge (temperature 0, seed 0) at http://127.0.0.1:8080/v1\n" in banner
    assert (
        "             context window: 32,768 tokens (SCORING_LLM_CONTEXT_TOKENS; litellm does not list the model); "
        "tokens counted by litellm's default tokenizer times the ratio learned from the provider's answers (1.000)\n"
    ) in banner
    assert "             timeouts: 900 s of silence before or within a reply (SCORING_LLM_TIMEOUT_S); 900 s a scoring" in banner
    assert "             at once: up to 1 judge call (SCORING_JUDGE_CONCURRENCY=1): 1 job of 2 worker processes" in banner
    stopping = shown.split(READY)[1]
    assert "==> stopping" in stopping and "worker cluster stopped" in stopping
    assert "did not stop" not in stopping
    setup_log = (var_dir / "setup.log").read_text()
    assert "Applying scoring.0001_initial... OK" in setup_log and "static files copied" in setup_log
    # Each stopped on its own within the grace time: none was killed, none is left.
    _, alive = psutil.wait_procs(started, timeout=5)
    assert alive == []


def test_a_failing_set_up_step_shows_the_end_of_its_output(tmp_path):
    var_dir = tmp_path / "var"
    env = child_env(
        db_url=f"sqlite:///{tmp_path / 'no-such-folder' / 'db.sqlite3'}",
        PORT=str(free_port()),
        TARSY_SCORING_VAR_DIR=str(var_dir),
    )

    run = subprocess.run(
        [str(REPO_DIR / "bin" / "run")], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )

    assert run.returncode == 1
    assert "unable to open database file" in run.stderr
    assert f"error: 'manage migrate --noinput' failed (its whole output: {var_dir / 'setup.log'})" in run.stderr


@pytest.mark.real_model
def test_a_local_judge_is_installed_started_pointed_at_and_stopped_with_the_rest(tmp_path):
    var_dir = tmp_path / "var"
    link_installed_model(var_dir)
    env = child_env(
        db_url=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        PORT=str(free_port()),
        TARSY_SCORING_VAR_DIR=str(var_dir),
        LOCAL_JUDGE_MODEL=MODEL.name,
    )
    exit_code, shown, started, commands = run_until_ready(tmp_path, env, "--local-judge")

    servers = [command for command in commands if "serve" in command]
    assert [command[1] for command in servers] == [local_model.__file__]
    assert exit_code == 128 + signal.SIGTERM
    before_ready = shown.split(READY)[0]
    assert f"checking the SHA256 of {MODEL.path(var_dir).name}" in before_ready
    assert (
        f"the judge is a real LLM on this machine's CPU: openai/{MODEL.name} (llama.cpp), a window of "
        f"{local_model.DEFAULT_CONTEXT_TOKENS} tokens, one scoring at a time" in before_ready
    )
    # The banner says what the worker judges with: the local model, counted by its own tokenizer,
    # one call at a time.
    banner = shown.split("tarsy-scoring is ready at")[1].split(READY)[0]
    assert f"  Worker:    judge model: openai/{MODEL.name} (temperature 0, seed 0) at http://127.0.0.1:" in banner
    assert "tokens counted by the provider's own tokenizer (llama.cpp POST http://127.0.0.1:" in banner
    assert "at once: up to 1 judge call (SCORING_JUDGE_CONCURRENCY=1): 1 job of 1 worker process x " in banner
    assert "did not stop" not in shown.split(READY)[1]
    _, alive = psutil.wait_procs(started, timeout=5)
    assert alive == []
