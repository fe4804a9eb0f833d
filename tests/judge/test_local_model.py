"""The local model (scoring.judge.local_model): its pins, joining and checking its parts, and,
in the ``real_model`` group, the server it starts as litellm and the tests use it."""

import hashlib
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from scoring.judge import local_model
from scoring.judge.local_model import LocalModel, LocalModelError
from tests.support.local_model import MODEL, installed_model_home
from tests.support.servers import REPO_DIR
from tests.support.throwaway_servers import free_port

PIN = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)==(?P<version>\S+) --hash=sha256:(?P<hash>[0-9a-f]{64})$")


def pins(path) -> list[re.Match]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    matches = [PIN.match(line) for line in lines]
    assert all(matches), f"{path.name}: every line pins one version with its SHA256: {lines}"
    return matches


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@pytest.mark.parametrize("model", local_model.MODELS.values(), ids=lambda model: model.name)
def test_each_model_pins_each_of_its_parts_in_order_with_its_hash(model):
    found = pins(model.requirements)

    assert [canonical(pin["name"]) for pin in found] == [
        f"{model.part_package}{number}" for number in range(1, model.parts + 1)
    ]
    assert len({pin["version"] for pin in found}) == 1


def test_the_server_is_pinned_with_its_hash():
    assert [(pin["name"], pin["version"]) for pin in pins(local_model.SERVER_REQUIREMENTS)] == [
        ("xllamacpp", "2026.10.11549")
    ]


def test_the_alias_is_what_the_judge_model_names():
    assert MODEL.name == "qwen2.5-coder-0.5b"
    server = local_model.RunningServer(MODEL, 8765, 16_384, 1, REPO_DIR / "server.log")

    assert server.judge_environment() == {
        "SCORING_LLM_MODEL": "openai/qwen2.5-coder-0.5b",
        "SCORING_LLM_API_BASE": "http://127.0.0.1:8765/v1",
        "SCORING_LLM_API_KEY": local_model.API_KEY,
        "SCORING_LLM_CONTEXT_TOKENS": "16384",
    }


# --- The parts -------------------------------------------------------------------------------


def laid_out_parts(site_packages, package: str, contents: list[bytes]) -> None:
    """Parts as the packages install them: <package><n>/data/part<nn>.bin."""
    for number, content in enumerate(contents, start=1):
        data = site_packages / f"{package}{number}" / "data"
        data.mkdir(parents=True)
        (data / f"part{number:02d}.bin").write_bytes(content)


def model_of(contents: list[bytes], **changes) -> LocalModel:
    joined = b"".join(contents)
    fields = {
        "name": "tiny", "title": "Tiny", "part_package": "tiny_part", "parts": len(contents),
        "size": len(joined), "sha256": hashlib.sha256(joined).hexdigest(), "about": "",
    }  # fmt: skip
    return LocalModel(**(fields | changes))


def test_the_parts_are_joined_in_their_numbers_order(tmp_path):
    # Eleven parts: part10 and part11 sort before part2 as names.
    contents = [f"part {number};".encode() for number in range(1, 12)]
    laid_out_parts(tmp_path / "site", "tiny_part", contents)
    model = model_of(contents)
    target = tmp_path / "tiny.gguf"

    local_model.join_parts(model, local_model.part_files(model, tmp_path / "site"), target)

    assert target.read_bytes() == b"".join(contents)
    assert list(tmp_path.glob("*.partial")) == []


def test_a_joined_file_whose_sha256_is_not_the_pinned_one_is_not_kept(tmp_path):
    contents = [b"first", b"second"]
    laid_out_parts(tmp_path / "site", "tiny_part", contents)
    model = model_of(contents, sha256="0" * 64)
    target = tmp_path / "tiny.gguf"

    with pytest.raises(
        LocalModelError, match=r"tiny.gguf.partial is not Tiny: SHA256 [0-9a-f]{64} and 11 bytes"
    ):
        local_model.join_parts(model, local_model.part_files(model, tmp_path / "site"), target)

    assert list(tmp_path.iterdir()) == [tmp_path / "site"]


def test_a_missing_part_is_named(tmp_path):
    contents = [b"first", b"second", b"third"]
    laid_out_parts(tmp_path / "site", "tiny_part", contents[:2])

    with pytest.raises(
        LocalModelError, match="part 3 of Tiny: expected one data file in .*tiny_part3/data, found 0"
    ):
        local_model.part_files(model_of(contents), tmp_path / "site")


def test_nothing_is_started_for_a_model_not_installed(tmp_path):
    with pytest.raises(LocalModelError, match="is not installed in .*: run `manage.py local_model install`"):
        local_model.launch(MODEL, tmp_path, port=free_port())


# --- The real server (real_model) ------------------------------------------------------------


@pytest.mark.real_model
def test_installing_again_checks_the_joined_file_and_keeps_it():
    home = installed_model_home()
    path = MODEL.path(home)
    modified = path.stat().st_mtime_ns
    said = []

    assert local_model.install(MODEL, home, say=said.append) == path

    assert said == [f"checking the SHA256 of {path.name}"]
    assert path.stat().st_mtime_ns == modified


@pytest.mark.real_model
def test_the_server_serves_the_model_under_its_alias_with_its_window(real_model_server):
    server, _ = real_model_server

    assert local_model.served_context_tokens(server.url) == local_model.DEFAULT_CONTEXT_TOKENS
    models = local_model.get_json(server.url, "/v1/models")["data"]
    assert [(model["id"], model["meta"]["n_ctx_train"]) for model in models] == [(MODEL.name, 32_768)]


@pytest.mark.real_model
def test_litellm_calls_it_as_an_openai_compatible_model_and_it_counts_as_its_tokenizer_does(
    real_model_server,
):
    import litellm

    server, _ = real_model_server
    environment = server.judge_environment()
    messages = [{"role": "user", "content": "Reply with the single word: ready"}]

    response = litellm.completion(
        model=environment["SCORING_LLM_MODEL"],
        api_base=environment["SCORING_LLM_API_BASE"],
        api_key=environment["SCORING_LLM_API_KEY"],
        messages=messages,
        max_tokens=8,
        timeout=120,
    )

    assert response.choices[0].message.content.strip()
    assert response.usage.prompt_tokens == local_model.chat_prompt_tokens(server.url, messages)
    assert 1 <= response.usage.completion_tokens <= 8


@pytest.mark.real_model
def test_tokenize_counts_text_as_the_model_reads_it(real_model_server):
    server, _ = real_model_server
    text = '2025-06-01T00:00:00.000Z level=error pod=web-3 msg="handled GET /api/v1/orders/17 status=503"'

    tokens = local_model.tokenize(server.url, text)

    assert all(isinstance(token, int) for token in tokens)
    # A log line is more tokens for Qwen's tokenizer than characters / 4.
    assert len(tokens) > len(text) / 4
    detokenized = local_model.post_json(server.url, "/detokenize", {"tokens": tokens})["content"]
    assert detokenized == text


@pytest.mark.real_model
def test_a_second_server_on_a_port_in_use_is_refused(real_model_server):
    server, _ = real_model_server

    with pytest.raises(LocalModelError, match=f"something already answers on 127.0.0.1:{server.port}"):
        local_model.launch(MODEL, installed_model_home(), port=server.port)


@pytest.mark.real_model
def test_a_server_stops_with_the_process_that_launched_it(tmp_path):
    home = installed_model_home()
    port = free_port()
    launcher = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time; from pathlib import Path; from scoring.judge import local_model as m; "
            f"m.launch(m.MODELS[{MODEL.name!r}], Path({str(home)!r}), port={port}, context_tokens=2048, "
            f"log_dir=Path({str(tmp_path)!r})); "
            "print('ready', flush=True); time.sleep(600)"
        )],
        cwd=REPO_DIR, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert launcher.stdout.readline().strip() == "ready"
        assert local_model.served_context_tokens(f"http://127.0.0.1:{port}") == 2048
        launcher.send_signal(signal.SIGKILL)  # no chance to stop what it started
        launcher.wait()

        deadline = time.monotonic() + 10
        while local_model.answers(f"http://127.0.0.1:{port}/health") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not local_model.answers(f"http://127.0.0.1:{port}/health")
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


@pytest.mark.real_model
def test_stop_ends_the_server(tmp_path):
    home = installed_model_home()
    server = local_model.launch(MODEL, home, port=free_port(), context_tokens=2048, log_dir=tmp_path)
    assert server.alive()

    server.stop()

    assert not server.alive()
    assert not local_model.answers(f"{server.url}/health")
    with pytest.raises(ProcessLookupError):
        os.kill(server.pid, 0)
