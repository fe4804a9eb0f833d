"""The fault scenarios. Each takes a running ``Stack`` (web process started,
workers as the scenario needs) and returns its ``Figures``."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field

from scoring.models import JudgeCircuit, SessionScore
from tests.faults.harness import (
    Figures,
    call_api,
    collect,
    request_scorings,
    reset_circuit,
    store_sessions,
    wait_until_settled,
)
from tests.faults.stack import Stack
from tests.support.fake_llm import CloseConnection, Error, Garbage, Hang, Malformed, Reply, Step, rate_limited
from tests.support.throwaway_servers import free_port
from tests.support.workers import wait_for

# Seconds a judge reply takes when a fault must land mid-scoring (below SCORING_LLM_TIMEOUT_S).
SLOW_REPLY_S = 1.0
OUTAGE_S = 4.0


@dataclass(frozen=True)
class LLMFault:
    name: str
    step: Step | None  # what the fake judge answers; None: nothing listens at the API base
    reason: str  # the start of the error_message every scoring must end with
    worker_env: dict[str, str] = field(default_factory=dict)


LLM_FAULTS = [
    # A quota is waited out (docs/llm.md): with no patience, the scorings fail saying so at the first 429.
    LLMFault(
        "LLM answers 429",
        rate_limited(),
        "judge LLM rate-limited (429): the provider's quota",
        {"SCORING_LLM_MAX_RETRY_AFTER_S": "0", "SCORING_RATE_LIMIT_PATIENCE_S": "0"},
    ),
    LLMFault("LLM answers 503", Error(503, "overloaded"), "judge LLM provider error"),
    LLMFault("LLM times out", Hang(30), "judge LLM request timed out"),
    LLMFault("LLM drops connections", CloseConnection(), "could not connect to the judge LLM"),
    LLMFault("LLM refuses connections", None, "could not connect to the judge LLM"),
    LLMFault("LLM returns truncated JSON", Malformed(), "judge LLM returned an unreadable response"),
    LLMFault("LLM returns garbage", Garbage(), "judge LLM returned an unreadable response"),
    LLMFault("LLM returns an empty reply", Reply(""), "judge reply has no 0-100 score"),
]


def llm_fault(stack: Stack, fault: LLMFault, count: int = 3) -> Figures:
    """Scorings against a failing judge fail with its reason; once it recovers, a re-score completes."""
    reset_circuit()
    if fault.step is None:
        stack.start_worker(SCORING_LLM_API_BASE=f"http://127.0.0.1:{free_port()}/v1")
    else:
        stack.start_worker(**fault.worker_env)
        stack.judge.fault = fault.step
    sessions = store_sessions(stack.web.http_url, count)
    score_ids = request_scorings(stack.web.http_url, sessions)
    wait_until_settled(score_ids)
    stack.judge.fault = None
    if fault.step is None:  # the judge is reachable again: a worker that points at it
        stack.kill_workers(signal.SIGTERM)
        stack.start_worker()
    score_ids += request_scorings(stack.web.http_url, sessions[:1], force=True)
    wait_until_settled(score_ids)
    figures = collect(fault.name, score_ids, stack.recorder, stack.judge)
    figures.notes.append("re-score after recovery: " + _status(score_ids[-1]))
    stack.kill_workers(signal.SIGTERM)
    return figures


def worker_sigkill(stack: Stack) -> Figures:
    """A worker killed mid-scoring: the orphan fails within the job timeout and a re-score completes."""
    reset_circuit()
    stack.judge.fault = Reply("", delay=60)  # keeps the judge busy until the kill
    stack.start_worker()
    asked_before = len(stack.fake_llm.requests)
    sessions = store_sessions(stack.web.http_url, 2)
    score_ids = request_scorings(stack.web.http_url, sessions)
    _wait_for_judge_calls(stack, 2, since=asked_before)
    stack.kill_workers(signal.SIGKILL)
    killed_at = time.monotonic()
    stack.judge.fault = None
    job_timeout_s = float(stack.env["SCORING_JOB_TIMEOUT_S"])
    # A re-score fails its session's orphan first, once the orphan is older than the job timeout.
    rescored = []
    for session in sessions:
        deadline = time.monotonic() + job_timeout_s + 30
        while True:
            status, body = call_api(
                stack.web.http_url, "POST", f"/api/v1/scoring/sessions/{session}/score", {"force_rescore": True}
            )
            if status == 202 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert status == 202, (status, body)
        rescored.append(body["score_id"])
    orphan_failed_after_s = time.monotonic() - killed_at
    stack.start_worker()
    wait_until_settled(score_ids + rescored)
    figures = collect("worker SIGKILLed mid-scoring", score_ids + rescored, stack.recorder, stack.judge)
    figures.notes += [
        f"orphans failed {orphan_failed_after_s:.0f} s after the kill (job timeout {job_timeout_s:.0f} s)",
        "re-scores: " + ", ".join(_status(score_id) for score_id in rescored),
    ]
    stack.kill_workers(signal.SIGTERM)
    return figures


def worker_sigterm(stack: Stack) -> Figures:
    """A worker told to stop mid-scoring: its scorings fail "worker shut down", with their events."""
    reset_circuit()
    stack.judge.fault = Reply("", delay=60)
    stack.start_worker()
    asked_before = len(stack.fake_llm.requests)
    sessions = store_sessions(stack.web.http_url, 2)
    score_ids = request_scorings(stack.web.http_url, sessions)
    _wait_for_judge_calls(stack, 2, since=asked_before)
    stack.kill_workers(signal.SIGTERM)
    stack.judge.fault = None
    wait_until_settled(score_ids, timeout_s=5)
    return collect("worker SIGTERMed mid-scoring", score_ids, stack.recorder, stack.judge)


def web_restart(stack: Stack, count: int = 6) -> Figures:
    """The web process restarts while scorings run: WebSocket clients reconnect and catch up."""
    reset_circuit()
    stack.judge.fault = None
    stack.fake_llm.set_default(_slowed(stack, SLOW_REPLY_S))
    stack.start_worker()
    sessions = store_sessions(stack.web.http_url, count)
    score_ids = request_scorings(stack.web.http_url, sessions)
    reconnects_before = stack.recorder.reconnects
    stack.web.stop()
    time.sleep(2)  # scorings go on, their events are stored and not delivered
    stack.web.start()
    wait_until_settled(score_ids)
    figures = collect("web process restarted", score_ids, stack.recorder, stack.judge)
    figures.notes.append(f"client reconnects: {stack.recorder.reconnects - reconnects_before}")
    stack.fake_llm.set_default(stack.judge)
    stack.kill_workers(signal.SIGTERM)
    return figures


def redis_outage(stack: Stack, count: int = 4) -> Figures:
    """Redis stops and comes back mid-run: the API keeps answering, events are caught up afterwards."""
    reset_circuit()
    stack.fake_llm.set_default(_slowed(stack, SLOW_REPLY_S))
    stack.start_worker()
    asked_before = len(stack.fake_llm.requests)
    sessions = store_sessions(stack.web.http_url, count + 1)
    score_ids = request_scorings(stack.web.http_url, sessions[:count])
    _wait_for_judge_calls(stack, 1, since=asked_before)
    stack.redis.stop()
    reads = [call_api(stack.web.http_url, "GET", "/api/v1/sessions/")[0] for _ in range(3)]
    status, body = call_api(stack.web.http_url, "POST", f"/api/v1/scoring/sessions/{sessions[-1]}/score", {})
    during = f"during the outage: reads {sorted(set(reads))}, a new scoring {status}"
    if "score_id" in body:
        score_ids.append(body["score_id"])
    time.sleep(OUTAGE_S)
    stack.redis.start()
    stack.recorder.resync()
    wait_until_settled(score_ids)
    figures = collect("Redis stopped and restarted", score_ids, stack.recorder, stack.judge)
    figures.notes.append(during)
    stack.fake_llm.set_default(stack.judge)
    stack.kill_workers(signal.SIGTERM)
    return figures


def postgres_restart(stack: Stack, count: int = 4) -> Figures:
    """PostgreSQL restarts while judges are answering: the write is retried or fails cleanly."""
    reset_circuit()
    stack.fake_llm.set_default(_slowed(stack, SLOW_REPLY_S))
    stack.start_worker()
    asked_before = len(stack.fake_llm.requests)
    sessions = store_sessions(stack.web.http_url, count)
    score_ids = request_scorings(stack.web.http_url, sessions)
    _wait_for_judge_calls(stack, 1, since=asked_before)
    stack.postgres.stop()
    time.sleep(1)
    stack.postgres.start()
    wait_until_settled(score_ids)
    figures = collect("PostgreSQL restarted mid-scoring", score_ids, stack.recorder, stack.judge)
    stack.fake_llm.set_default(stack.judge)
    stack.kill_workers(signal.SIGTERM)
    return figures


def load_with_rate_limits(stack: Stack, count: int = 200, workers: int = 4, probe_count: int = 5) -> Figures:
    """``count`` scorings queued at once against a rate-limiting judge that then fails
    outright: all end, none is judged twice; the breaker opens (a batch requested while
    it is open fails fast) and, after its cool-down, closes (a later batch completes)."""
    reset_circuit()
    stack.judge.rate_per_s = 20
    cooldown_s = 5
    stack.start_worker(
        SCORING_WORKERS=str(workers),
        SCORING_CIRCUIT_FAILURE_THRESHOLD="5",
        SCORING_CIRCUIT_COOLDOWN_S=str(cooldown_s),
        SCORING_LLM_MAX_RETRIES="3",
    )
    sessions = store_sessions(stack.web.http_url, count)
    score_ids = request_scorings(stack.web.http_url, sessions)
    wait_for(
        lambda: SessionScore.objects.filter(pk__in=score_ids, status="completed").count() >= count // 4,
        timeout_s=180,
        what="a quarter of the scorings to complete",
    )
    # An outage longer than the retries (backoff 0.05 s doubling, 3 retries): the
    # scorings in flight fail, and five failed calls in a row open the breaker.
    stack.judge.fault = Error(503, "outage")
    wait_until_settled(score_ids, timeout_s=600)
    wait_for(lambda: JudgeCircuit.objects.filter(opened_until_us__gt=time.time_ns() // 1000).exists(),
             timeout_s=30, what="the circuit breaker to open")
    while_open = request_scorings(stack.web.http_url, store_sessions(stack.web.http_url, probe_count))
    wait_until_settled(while_open, timeout_s=60)
    stack.judge.fault = None
    time.sleep(cooldown_s + 0.5)
    after_cooldown = request_scorings(stack.web.http_url, store_sessions(stack.web.http_url, probe_count))
    wait_until_settled(after_cooldown, timeout_s=180)
    score_ids += while_open + after_cooldown
    figures = collect(f"{count} scorings, rate-limited judge with an outage", score_ids, stack.recorder, stack.judge)
    figures.notes.append(
        f"breaker fail-fast: {figures.failed_with('judge LLM circuit breaker is open')}, "
        f"requested while open and failed fast: "
        f"{SessionScore.objects.filter(pk__in=while_open, error_message__startswith='judge LLM circuit breaker is open').count()}/{probe_count}, "
        f"requested after the cool-down and completed: "
        f"{SessionScore.objects.filter(pk__in=after_cooldown, status='completed').count()}/{probe_count}"
    )
    stack.judge.rate_per_s = None
    stack.kill_workers(signal.SIGTERM)
    return figures


def _completed_after_circuit_opened(score_ids: list[str]) -> int:
    opened = (
        SessionScore.objects.filter(pk__in=score_ids, error_message__startswith="judge LLM circuit breaker is open")
        .order_by("completed_at_us")
        .values_list("completed_at_us", flat=True)
        .first()
    )
    if opened is None:
        return 0
    return SessionScore.objects.filter(pk__in=score_ids, status="completed", completed_at_us__gt=opened).count()


def _slowed(stack: Stack, delay_s: float):
    """The scripted judge, each answer ``delay_s`` late (so faults land mid-scoring)."""

    def answer(body):
        step = stack.judge(body)
        return Reply(step.content, delay=delay_s) if isinstance(step, Reply) else step

    return answer


def _wait_for_judge_calls(stack: Stack, count: int, since: int) -> None:
    """Wait until ``count`` judge requests arrived after the first ``since`` ones."""
    wait_for(lambda: len(stack.fake_llm.requests) >= since + count, what=f"{count} judge call(s) to start")


def _status(score_id: str) -> str:
    return SessionScore.objects.values_list("status", flat=True).get(pk=score_id)
