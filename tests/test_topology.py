"""bin/topology: two web processes and two worker clusters on PostgreSQL and Redis, end to end."""

import asyncio
import signal
import time
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.api import session_document
from tests.support.servers import REPO_DIR, EventClient
from tests.support.topology import (
    BATCH_ENV,
    EXPECTED_EVENTS,
    WAITED_FOR_QUOTA,
    as_expected,
    batch_problems,
    http,
    import_sample_sessions,
    run_batch,
    running_topology,
    score_rows,
)
from tests.support.workers import rate_limits_met, wait_for

pytestmark = pytest.mark.processes

BATCH_SIZE = 200
# The quota's batch: 40 scorings, 80 requests at 8 a second for all workers, so that
# calls meet 429s; each turn-1 call waits at most 1 s in place, so that scorings go back to
# the queue. No known limit (one set in the caller's environment would pace the calls), and
# the workers log each 429 they meet.
QUOTA_BATCH_SIZE = 40
QUOTA_RPS = 8
QUOTA_ENV = {
    **BATCH_ENV,
    "SCORING_LLM_MAX_RETRY_AFTER_S": "1",
    "SCORING_WORKER_POLL_S": "0.2",
    "SCORING_LLM_RPM": "",
    "SCORING_LLM_TPM": "",
    "LOG_LEVEL": "INFO",
}
# Generous, so that a broken run fails with what it saw before pytest's own timeout (300 s).
BATCH_TIMEOUT_S = 150


def is_ready(web_url: str) -> bool:
    try:
        return http("GET", f"{web_url}/readyz")[0] == 200
    except OSError:
        return False


@pytest.fixture
def topology(tmp_path):
    """A running ``bin/topology --web 2 --workers 2 --fake-llm``: (process, its env file's values)."""
    args = ["--web", "2", "--workers", "2", "--fake-llm", "--fake-llm-delay", "0.2"]
    with running_topology(
        tmp_path, *args, program=[str(REPO_DIR / "bin" / "topology")], env=BATCH_ENV
    ) as run:
        yield run


def test_scoring_through_one_web_process_is_seen_through_the_other_then_all_stops(topology):
    process, env = topology
    started = psutil.Process(process.pid).children(recursive=True)
    started.append(psutil.Process(int(env["TOPOLOGY_POSTGRES_PID"])))
    assert {"redis-server", "postgres"} <= {child.name() for child in started}
    web1, web2 = env["TOPOLOGY_WEB_URLS"].split()
    for url in (web1, web2):
        try:
            wait_for(lambda url=url: is_ready(url), 60, interval_s=0.5, what=f"{url}/readyz")
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}; it answers {http('GET', f'{url}/readyz')}") from None
    session_id = str(uuid.uuid4())
    assert http("POST", f"{web1}/api/v1/sessions/", session_document(session_id))[0] == 201

    async def score_and_follow() -> tuple[dict, list[dict]]:
        ws_url = web2.replace("http://", "ws://") + "/api/v1/ws"
        async with EventClient.connect(ws_url) as client:
            await client.subscribe(f"session:{session_id}")
            status, created = await asyncio.to_thread(
                http, "POST", f"{web1}/api/v1/scoring/sessions/{session_id}/score", {}
            )
            assert status == 202, created
            return created, await client.wait_for_events(4, timeout_s=60)

    created, received = asyncio.run(score_and_follow())

    assert [event["type"] for event in received] == [
        "scoring.started",
        "scoring.progress",
        "scoring.progress",
        "scoring.completed",
    ]
    assert {event["score_id"] for event in received} == {created["score_id"]}
    assert received[-1]["total_score"] == 70
    status, score = http("GET", f"{web2}/api/v1/scoring/sessions/{session_id}/score")
    assert status == 200
    assert (score["score_id"], score["status"], score["total_score"]) == (
        created["score_id"],
        "completed",
        70,
    )
    assert score["score_triggered_by"] == "alice"

    # Web 2 reports the scoring from the database, and web 1's request from the shared metrics folder.
    with urllib.request.urlopen(f"{web2}/metrics", timeout=30) as response:
        samples = {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.read().decode())
            for sample in family.samples
        }
    assert samples[("tarsy_scoring_scorings_completed_total", frozenset())] == 1
    post = frozenset({"route": "session-score", "method": "POST", "status_class": "2xx"}.items())
    assert samples[("tarsy_scoring_http_requests_total", post)] == 1
    assert samples[("tarsy_scoring_worker_clusters_alive", frozenset())] == 2

    # Ctrl-C or SIGTERM stops every process it started, and the database with them.
    process.send_signal(signal.SIGTERM)

    assert process.wait(timeout=120) == 0
    deadline = time.monotonic() + 10  # reaping the last zombies is asynchronous
    while (alive := [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert alive == []
    assert not Path(env["TOPOLOGY_RUN_DIR"], "pg").exists()


def test_a_batch_of_200_scorings_completes_and_clients_of_both_web_processes_see_every_one(
    topology, tmp_path
):
    _, env = topology
    web_urls = env["TOPOLOGY_WEB_URLS"].split()
    session_ids = import_sample_sessions(env, BATCH_SIZE, tmp_path)

    batch = asyncio.run(run_batch(web_urls, session_ids, BATCH_TIMEOUT_S))

    rows = score_rows(env, session_ids)
    assert batch_problems(batch, rows) == []
    assert sorted(row["session_id"] for row in rows) == sorted(session_ids)
    assert {row["status"] for row in rows} == {"completed"}
    for url in web_urls:
        arrivals = batch.arrivals[url]
        completed = {a.event["score_id"] for a in arrivals if a.event["type"] == "scoring.completed"}
        assert completed == set(batch.accepted.values()), url
        assert len(arrivals) == 4 * BATCH_SIZE, url  # started, 2 x progress, completed; none twice


def test_a_batch_against_the_judge_s_quota_completes_and_clients_see_each_scoring_s_waits_then_its_end(
    tmp_path,
):
    args = ["--web", "2", "--workers", "2", "--fake-llm", "--fake-llm-delay", "0.2"]
    args += ["--fake-llm-rps", str(QUOTA_RPS)]
    with running_topology(tmp_path, *args, env=QUOTA_ENV) as (_, env):
        session_ids = import_sample_sessions(env, QUOTA_BATCH_SIZE, tmp_path)
        batch = asyncio.run(run_batch(env["TOPOLOGY_WEB_URLS"].split(), session_ids, BATCH_TIMEOUT_S))
        rows = score_rows(env, session_ids)
    logs = list((tmp_path / "run" / "logs").glob("worker-*.log"))

    assert batch_problems(batch, rows) == []
    assert {row["status"] for row in rows} == {"completed"}
    assert rate_limits_met(logs) > 0
    for url, arrivals in batch.arrivals.items():
        waits = [a.event for a in arrivals if a.event.get("phase") == WAITED_FOR_QUOTA[1]]
        assert waits, f"no scoring seen through {url} went back to the queue for the quota"
        assert all(event["waiting_reason"].startswith("judge LLM rate-limited") for event in waits)


def test_a_scoring_s_events_are_its_four_after_any_attempts_the_quota_sent_back_to_the_queue():
    started, analyzing, identifying, completed = EXPECTED_EVENTS

    assert as_expected(EXPECTED_EVENTS)
    assert as_expected([started, analyzing, WAITED_FOR_QUOTA, *EXPECTED_EVENTS])
    after_turn_2 = [started, analyzing, identifying, WAITED_FOR_QUOTA]
    after_turn_1 = [started, analyzing, WAITED_FOR_QUOTA]
    assert as_expected([*after_turn_2, *after_turn_1, *EXPECTED_EVENTS])
    assert not as_expected([started, analyzing, WAITED_FOR_QUOTA])  # never ended
    assert not as_expected([started, WAITED_FOR_QUOTA, *EXPECTED_EVENTS])  # no phase before the call
    assert not as_expected([analyzing, WAITED_FOR_QUOTA, *EXPECTED_EVENTS])  # no start
    assert not as_expected([*EXPECTED_EVENTS, WAITED_FOR_QUOTA, *EXPECTED_EVENTS])  # judged twice
    assert not as_expected([started, analyzing, identifying, identifying, completed])
