"""Real judge worker processes (``manage.py scoring_worker``) for tests.

    def test_x(start_worker, judge_llm):
        worker = start_worker(**judge_llm.env())
        ...
        worker.signal_all(signal.SIGKILL)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.servers import REPO_DIR, child_env, wait_for_log

WORKER_READY_PATTERN = r"ready for work at"


def rate_limits_met(logs: list[Path]) -> int:
    """The 429s the workers writing ``logs`` met: each is one INFO line of its worker's log."""
    return sum(log.read_text(errors="replace").count("rate-limited (429): every call") for log in logs)


class WorkerCluster:
    """One django-q2 cluster in its own process group, as a service manager runs it."""

    def __init__(self, env: dict[str, str], log: Path):
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "scoring_worker"],
                cwd=REPO_DIR,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for_log(log, WORKER_READY_PATTERN, self.process)

    def signal_all(self, signum: int) -> None:
        """Send ``signum`` to every process of the cluster (like `systemctl stop` or the OOM killer)."""
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass

    def wait_stopped(self, timeout_s: float = 30) -> int:
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.signal_all(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        self.signal_all(signal.SIGKILL)
        self.process.wait()


@pytest.fixture
def start_worker(transactional_db, tmp_path):
    """Factory: ``start_worker(**env)`` starts a worker cluster on the test database."""
    clusters: list[WorkerCluster] = []

    def start(**env: str) -> WorkerCluster:
        cluster = WorkerCluster(
            child_env(**{"SCORING_WORKERS": "2", **env}), tmp_path / f"worker-{len(clusters)}.log"
        )
        clusters.append(cluster)
        return cluster

    yield start
    for cluster in clusters:
        cluster.stop()


def wait_for(predicate, timeout_s: float = 60, interval_s: float = 0.1, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail after a generous bound."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
