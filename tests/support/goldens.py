"""Golden files of renders: a render compared with its file, or written to it with
``UPDATE_GOLDENS=1`` (then review the diff)."""

import difflib
import os
from pathlib import Path

import pytest


def assert_matches_golden(rendered: str, golden: Path, name: str) -> None:
    if os.environ.get("UPDATE_GOLDENS"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered, encoding="utf-8")
    assert golden.exists(), f"no golden file for {name}: run with UPDATE_GOLDENS=1"
    expected = golden.read_text(encoding="utf-8")
    if rendered != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), rendered.splitlines(), "golden", "rendered", lineterm="", n=2
        )
        pytest.fail(f"render of {name} differs from {golden.name}:\n" + "\n".join(list(diff)[:120]))
