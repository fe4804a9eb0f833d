"""Everything one fault run talks to: the web process, worker clusters, the fake
judge and the dashboard client recording events."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.harness import EventRecorder, ScriptedJudge
from tests.faults.processes import WebProcess
from tests.support.fake_llm import FakeLLMServer
from tests.support.throwaway_servers import Postgres, Redis
from tests.support.workers import WorkerCluster

# Judge settings for fault runs: few retries, short timeouts, a breaker that does
# not open unless a scenario asks for it.
FAULT_JUDGE_ENV = {
    "SCORING_LLM_MAX_RETRIES": "1",
    "SCORING_LLM_TIMEOUT_S": "2",
    "SCORING_LLM_BACKOFF_S": "0.05",
    "SCORING_LLM_MAX_RETRY_AFTER_S": "2",
    "SCORING_CIRCUIT_FAILURE_THRESHOLD": "100000",
    "SCORING_JOB_TIMEOUT_S": "40",
    "SCORING_POST_RATE": "",
    "SCORING_EVENT_RELAY_POLL_S": "0.1",
}


@dataclass
class Stack:
    """Everything one fault run talks to. ``env`` is the children's base environment."""

    env: dict[str, str]
    fake_llm: FakeLLMServer
    log_dir: Path
    judge: ScriptedJudge = field(default_factory=ScriptedJudge)
    redis: Redis | None = None
    postgres: Postgres | None = None
    web: WebProcess | None = None
    workers: list[WorkerCluster] = field(default_factory=list)
    recorder: EventRecorder | None = None

    def __post_init__(self):
        self.fake_llm.set_default(self.judge)
        self.env = {**self.env, **self.fake_llm.env(), **FAULT_JUDGE_ENV}

    def start_web(self) -> WebProcess:
        self.web = WebProcess(self.env, self.log_dir).start()
        self.recorder = EventRecorder(self.web.ws_url).start()
        return self.web

    def start_worker(self, **overrides: str) -> WorkerCluster:
        log = self.log_dir / f"worker-{len(self.workers)}.log"
        cluster = WorkerCluster({**self.env, **overrides}, log)
        self.workers.append(cluster)
        return cluster

    def kill_workers(self, signum: int) -> None:
        for cluster in self.workers:
            cluster.signal_all(signum)
        for cluster in self.workers:
            cluster.wait_stopped(timeout_s=60)
        self.workers.clear()

    def stop(self) -> None:
        if self.recorder:
            self.recorder.stop()
        for cluster in self.workers:
            cluster.stop()
        self.workers.clear()
        if self.web:
            self.web.stop()
        self.judge.fault = None
        self.judge.rate_per_s = None

