"""manage.py local_model: start, status, env, stop, as a person runs them (the ``real_model``
group: it starts the installed 0.5B model)."""

import shlex

import pytest
from django.core.management import CommandError, call_command

from scoring.judge import local_model
from tests.support.local_model import MODEL, link_installed_model
from tests.support.throwaway_servers import free_port

pytestmark = pytest.mark.real_model


@pytest.fixture
def var_dir(settings, tmp_path):
    """A data folder of its own (no server a person started is in it), with the installed model."""
    link_installed_model(tmp_path)
    settings.VAR_DIR = tmp_path
    return tmp_path


def run(capsys, *arguments: str) -> str:
    call_command("local_model", *arguments)
    return capsys.readouterr().out


def test_a_started_server_is_shown_pointed_at_and_stopped(var_dir, capsys):
    port = free_port()
    started = run(capsys, "start", "--model", MODEL.name, "--port", str(port), "--context-tokens", "4096")
    try:
        assert f"{MODEL.name} serves at http://127.0.0.1:{port}" in started
        assert local_model.served_context_tokens(f"http://127.0.0.1:{port}") == 4096

        assert f"server: {MODEL.name} at http://127.0.0.1:{port}, pid " in run(capsys, "status")
        assert "a window of 4,096 tokens" in run(capsys, "status")
        exports = dict(line.removeprefix("export ").split("=", 1) for line in run(capsys, "env").splitlines())
        assert {name: shlex.split(value)[0] for name, value in exports.items()} == {
            "SCORING_LLM_MODEL": f"openai/{MODEL.name}",
            "SCORING_LLM_API_BASE": f"http://127.0.0.1:{port}/v1",
            "SCORING_LLM_API_KEY": local_model.API_KEY,
            "SCORING_LLM_CONTEXT_TOKENS": "4096",
            "SCORING_WORKERS": "1",
            "SCORING_JUDGE_CONCURRENCY": "1",
            "SCORING_LLM_TIMEOUT_S": "1800",
            "SCORING_JOB_TIMEOUT_S": "3600",
            "SCORING_PENDING_TIMEOUT_S": "86400",
        }
        with pytest.raises(CommandError, match=f"already runs .*http://127.0.0.1:{port}.*local_model stop"):
            call_command("local_model", "start", "--model", MODEL.name, "--port", str(free_port()))
    finally:
        stopped = run(capsys, "stop")

    assert stopped.startswith(f"stopped {MODEL.name} (pid ")
    assert not local_model.answers(f"http://127.0.0.1:{port}/health")
    assert "server: not running" in run(capsys, "status")
    assert run(capsys, "stop") == "no local model server runs\n"
    with pytest.raises(CommandError, match="no local model server runs"):
        call_command("local_model", "env")


def test_status_says_what_is_installed(var_dir, capsys):
    shown = run(capsys, "status").splitlines()

    assert shown == [
        f"qwen2.5-coder-0.5b: installed, {MODEL.path(local_model.home_in(var_dir))}",
        "qwen2.5-coder-1.5b: not installed",
        "server: not running",
    ]
