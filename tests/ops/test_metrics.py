"""/metrics: the Prometheus exposition, its numbers checked against the database."""

import ipaddress
import re
import socket
import subprocess
import sys
import time
from decimal import Decimal

import pytest
from django.db import OperationalError
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from scoring import services
from scoring.jobs import queue
from scoring.judge import rendering
from scoring.models import JudgeCircuit, ScoringStatus, WorkerHeartbeat
from scoring.ops import health, metrics
from tests.support.factories import make_score, make_session, run_next_scoring
from tests.support.fake_llm import Error, Hang, Reply, context_length_exceeded, rate_limited, unauthorized
from tests.support.servers import REPO_DIR, child_env
from tests.support.judge_replies import evaluated

pytestmark = pytest.mark.django_db(transaction=True)

Status = ScoringStatus


def scrape(client: Client | None = None, **headers) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} of one GET /metrics."""
    response = (client or Client()).get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


def finished(status: str, duration_s: float, **fields):
    score = make_score(make_session(), status, **fields)
    score.completed_at_us = score.started_at_us + int(duration_s * 1e6)
    score.save()
    return score


def test_scoring_numbers_are_those_of_the_database():
    finished(
        Status.COMPLETED,
        40,
        total_score=35,
        judge_model="openai/a",
        input_tokens=1000,
        output_tokens=100,
        cost_usd=Decimal("0.25"),
    )
    finished(
        Status.COMPLETED,
        200,
        total_score=80,
        judge_model="openai/a",
        input_tokens=3000,
        output_tokens=300,
        cached_input_tokens=2048,
        cost_usd=Decimal("0.5"),
    )
    finished(Status.COMPLETED, 20, total_score=100, judge_model="openai/b", input_tokens=10, output_tokens=1)
    finished(Status.FAILED, 3, error_message=services.WORKER_SHUT_DOWN)
    make_score(make_session(), Status.PENDING)
    make_score(make_session(), Status.IN_PROGRESS)

    samples = scrape()

    assert value(samples, "tarsy_scoring_scorings_started_total") == 6
    assert value(samples, "tarsy_scoring_scorings_completed_total") == 3
    assert value(samples, "tarsy_scoring_scorings_failed_total", reason="worker_shutdown") == 1
    assert value(samples, "tarsy_scoring_scorings_active", status="pending") == 1
    assert value(samples, "tarsy_scoring_scorings_active", status="in_progress") == 1

    assert value(samples, "tarsy_scoring_score_count") == 3
    assert value(samples, "tarsy_scoring_score_sum") == 215
    assert value(samples, "tarsy_scoring_score_bucket", le="30.0") == 0
    assert value(samples, "tarsy_scoring_score_bucket", le="40.0") == 1
    assert value(samples, "tarsy_scoring_score_bucket", le="90.0") == 2
    assert value(samples, "tarsy_scoring_score_bucket", le="100.0") == 3

    assert value(samples, "tarsy_scoring_scoring_duration_seconds_count", status="completed") == 3
    assert value(samples, "tarsy_scoring_scoring_duration_seconds_sum", status="completed") == 260
    assert value(samples, "tarsy_scoring_scoring_duration_seconds_bucket", status="completed", le="30.0") == 1
    assert value(samples, "tarsy_scoring_scoring_duration_seconds_bucket", status="completed", le="60.0") == 2
    assert value(samples, "tarsy_scoring_scoring_duration_seconds_bucket", status="completed", le="+Inf") == 3
    assert value(samples, "tarsy_scoring_scoring_duration_seconds_count", status="failed") == 1

    assert value(samples, "tarsy_scoring_llm_tokens_total", model="openai/a", direction="input") == 4000
    assert value(samples, "tarsy_scoring_llm_tokens_total", model="openai/a", direction="output") == 400
    assert value(samples, "tarsy_scoring_llm_tokens_total", model="openai/b", direction="input") == 10
    assert value(samples, "tarsy_scoring_llm_cached_input_tokens_total", model="openai/a") == 2048
    assert value(samples, "tarsy_scoring_llm_cost_usd_total", model="openai/a") == 0.75
    assert value(samples, "tarsy_scoring_llm_cost_usd_total", model="openai/b") == 0


def fail_with(judge_llm, settings, *steps, **overrides):
    """Run a real judge job against the fake LLM answering ``steps``."""
    settings.SCORING_LLM_MAX_RETRIES = 0
    for name, setting in overrides.items():
        setattr(settings, name, setting)
    judge_llm.push(*steps)
    score = make_score(make_session(), Status.PENDING)
    run_next_scoring()
    score.refresh_from_db()
    return score


def open_the_circuit(judge_llm, settings):
    settings.SCORING_CIRCUIT_FAILURE_THRESHOLD = 1
    first = fail_with(judge_llm, settings, Error(503))
    assert first.status == Status.FAILED
    return fail_with(judge_llm, settings)


def orphan(judge_llm, settings):
    score = make_score(make_session(), Status.PENDING)
    services.expire_stale_scorings(include_all=True)
    score.refresh_from_db()
    return score


def fail_held_score(message: str):
    """Fail a running score with ``message``, as the runtime does when its worker stops."""
    score = make_score(make_session(), Status.IN_PROGRESS)
    return services.fail_scoring(score.score_id, message)


def lose_the_database(judge_llm, settings, monkeypatch):
    """The job's database connection breaks mid-job (after the claim, before the judge)."""

    def broken(session):
        raise OperationalError("server closed the connection unexpectedly")

    make_score(make_session(), Status.PENDING)
    monkeypatch.setattr(rendering, "investigation_digest", broken)
    return run_next_scoring()


def unexpected_error(judge_llm, settings):
    make_score(make_session(stages="not a list of stages"), Status.PENDING)
    return run_next_scoring()


# A real failure for each row of docs/observability.md's table, by the message it begins with.
FAILURES = {
    "judge LLM rate-limited": lambda llm, s, _: fail_with(
        llm, s, rate_limited("5"), SCORING_LLM_MAX_RETRY_AFTER_S=0, SCORING_RATE_LIMIT_PATIENCE_S=1
    ),
    "judge LLM request timed out": lambda llm, s, _: fail_with(llm, s, Hang(5), SCORING_LLM_TIMEOUT_S=0.3),
    "scoring deadline reached before the judge LLM answered": lambda llm, s, _: fail_with(
        llm, s, Error(503), SCORING_LLM_MAX_RETRIES=1, SCORING_LLM_BACKOFF_S=30, SCORING_JOB_TIMEOUT_S=5
    ),
    "judge LLM circuit breaker is open": lambda llm, s, _: open_the_circuit(llm, s),
    "session too large for the judge model": lambda llm, s, _: fail_with(
        llm, s, context_length_exceeded(), context_length_exceeded()  # and on the one try fitted smaller
    ),
    "judge reply has no 0-100 score": lambda llm, s, _: fail_with(
        llm, s, Reply("No number here."), Reply("Still none.")
    ),
    "judge LLM": lambda llm, s, _: fail_with(llm, s, unauthorized()),
    "could not connect to the judge LLM": lambda llm, s, _: fail_with(
        llm, s, SCORING_LLM_API_BASE=f"http://127.0.0.1:{closed_port()}/v1"
    ),
    "the judge prompt of this session is about": lambda llm, s, _: fail_with(
        llm, s, SCORING_MAX_INPUT_TOKENS=1
    ),
    "no judge model configured": lambda llm, s, _: fail_with(llm, s, SCORING_LLM_MODEL=""),
    "worker shut down": lambda llm, s, _: fail_held_score(services.WORKER_SHUT_DOWN),
    "orphaned:": lambda llm, s, _: orphan(llm, s),
    "database error": lose_the_database,
    "unexpected error": lambda llm, s, _: unexpected_error(llm, s),
    "": lambda llm, s, _: fail_held_score("a message no class names"),
}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def documented_failure_classes() -> list[tuple[str, str]]:
    """(``error_message`` beginning, reason) rows of docs/observability.md's table, in order."""
    doc = (REPO_DIR / "docs" / "observability.md").read_text()
    table = doc.split("Failure reason classes", 1)[1].split("\n\n")[1]
    return re.findall(r"^\| `(\w+)` \| (?:`([^`]+)` )?\|", table, re.M)


DOCUMENTED = [(prefix, reason) for reason, prefix in documented_failure_classes()]


def test_the_documented_failure_classes_are_those_computed():
    assert DOCUMENTED == [*metrics.FAILURE_REASONS, ("", metrics.OTHER_REASON)]


@pytest.mark.parametrize(("prefix", "reason"), DOCUMENTED, ids=[reason for _, reason in DOCUMENTED])
def test_failed_scorings_are_counted_by_reason_class(judge_llm, settings, monkeypatch, prefix, reason):
    score = FAILURES[prefix](judge_llm, settings, monkeypatch)

    score.refresh_from_db()
    assert score.status == Status.FAILED
    assert score.error_message.startswith(prefix), score.error_message
    samples = scrape()
    failed = {
        dict(labels)["reason"]: n
        for (name, labels), n in samples.items()
        if name == "tarsy_scoring_scorings_failed_total"
    }
    assert failed[reason] == 1, (score.error_message, failed)


def test_a_completed_judge_job_shows_in_the_metrics(judge_llm):
    judge_llm.push(
        Reply(evaluated("Thorough.\n\n72"), prompt_tokens=500, completion_tokens=50),
        Reply("None missing.", prompt_tokens=600, completion_tokens=20),
    )
    make_score(make_session(), Status.PENDING)

    run_next_scoring()

    samples = scrape()
    assert value(samples, "tarsy_scoring_scorings_completed_total") == 1
    assert value(samples, "tarsy_scoring_score_sum") == 72
    assert (
        value(samples, "tarsy_scoring_llm_tokens_total", model="openai/fake-judge", direction="input") == 1100
    )


def test_circuit_breaker_state_per_model(settings):
    settings.SCORING_LLM_MODEL = "openai/configured"
    JudgeCircuit.objects.create(
        model="openai/broken", consecutive_failures=5, opened_until_us=time.time_ns() // 1000 + 60_000_000
    )

    samples = scrape()

    assert value(samples, "tarsy_scoring_judge_circuit_state", model="openai/broken", state="open") == 1
    assert value(samples, "tarsy_scoring_judge_circuit_state", model="openai/broken", state="closed") == 0
    assert value(samples, "tarsy_scoring_judge_circuit_consecutive_failures", model="openai/broken") == 5
    assert value(samples, "tarsy_scoring_judge_circuit_state", model="openai/configured", state="closed") == 1


def test_worker_clusters_and_their_heartbeats():
    health.record_worker_heartbeat("tarsy-scoring", in_flight=2)
    WorkerHeartbeat.objects.create(
        host="gone-host",
        pid=7,
        cluster_name="tarsy-scoring",
        last_seen_us=time.time_ns() // 1000 - 300_000_000,
    )

    samples = scrape()

    assert value(samples, "tarsy_scoring_worker_clusters_alive") == 1
    stale = value(
        samples,
        "tarsy_scoring_worker_heartbeat_age_seconds",
        cluster="tarsy-scoring",
        host="gone-host",
        pid="7",
    )
    assert stale >= 300
    in_flight = [n for (name, _), n in samples.items() if name == "tarsy_scoring_worker_in_flight"]
    assert in_flight == [2]


def test_the_spend_the_budgets_and_the_scorings_they_hold(settings):
    settings.SCORING_BUDGET_USD_PER_DAY = 1.5
    make_score(make_session(), cost_usd=Decimal("2.25"), completed_at_us=services.now_us())
    make_score(make_session(), Status.PENDING, score_triggered_by="tarsy-sync:worker")
    make_score(make_session(), Status.PENDING, score_triggered_by="alice")
    services.claim_pending_scores(1)  # holds the automatic one, claims the manual one

    samples = scrape()

    assert value(samples, "tarsy_scoring_spend_usd", period="day") == 2.25
    assert value(samples, "tarsy_scoring_spend_usd", period="month") == 2.25
    assert value(samples, "tarsy_scoring_budget_usd", period="day") == 1.5
    assert ("tarsy_scoring_budget_usd", frozenset({("period", "month")})) not in samples
    assert value(samples, "tarsy_scoring_scorings_waiting_for_budget") == 1


def test_queue_depth_counts_jobs_waiting_in_the_broker():
    queue.enqueue_wake_up()
    queue.enqueue_wake_up()

    assert value(scrape(), "tarsy_scoring_queue_depth") == 2


def test_requests_are_counted_by_route_method_and_status_class():
    client = Client(headers={"X-Forwarded-User": "alice"})
    route = {"route": "session-score", "method": "GET", "status_class": "4xx"}
    before = scrape().get(("tarsy_scoring_http_requests_total", frozenset(route.items())), 0)

    assert (
        client.get("/api/v1/scoring/sessions/00000000-0000-0000-0000-000000000000/score").status_code == 404
    )
    client.get("/no/such/page")

    samples = scrape()
    assert value(samples, "tarsy_scoring_http_requests_total", **route) == before + 1
    assert (
        value(
            samples, "tarsy_scoring_http_requests_total", route="unmatched", method="GET", status_class="4xx"
        )
        >= 1
    )
    assert (
        value(
            samples, "tarsy_scoring_http_request_duration_seconds_count", route="session-score", method="GET"
        )
        >= 1
    )


def test_unknown_methods_share_one_label_so_clients_cannot_grow_the_metrics():
    """Each distinct label value is a series kept for the process's life: a client
    sending made-up method tokens must not add one each."""
    client = Client(headers={"X-Forwarded-User": "alice"})
    other = {"route": "unmatched", "method": "other", "status_class": "4xx"}
    before = scrape().get(("tarsy_scoring_http_requests_total", frozenset(other.items())), 0)
    invented = [f"M{index}{'X' * 1000}" for index in range(20)]
    for method in invented:
        client.generic(method, "/no/such/page")

    response = Client().get("/metrics")
    samples = scrape()

    assert value(samples, "tarsy_scoring_http_requests_total", **other) == before + 20
    assert not any(method in response.content.decode() for method in invented)
    methods = {dict(labels)["method"] for name, labels in samples if "method" in dict(labels)}
    known = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
    assert methods <= known | {"other"}


@pytest.mark.parametrize(
    ("remote_addr", "allowed_ips", "status"),
    [
        ("127.0.0.1", "", 200),
        ("::1", "", 200),
        ("10.0.12.7", "", 200),  # TRUSTED_PROXY_IPS below
        ("203.0.113.9", "", 403),
        ("203.0.113.9", "203.0.113.0/24", 200),
        ("198.51.100.1", "203.0.113.0/24", 403),
    ],
)
def test_without_a_token_metrics_answer_only_loopback_proxies_and_scrapers(
    settings, remote_addr, allowed_ips, status
):
    settings.TRUSTED_PROXY_IPS = [ipaddress.ip_network("10.0.12.0/24")]
    settings.METRICS_ALLOWED_IPS = [ipaddress.ip_network(item) for item in allowed_ips.split(",") if item]

    response = Client(REMOTE_ADDR=remote_addr).get("/metrics")

    assert response.status_code == status
    if status == 403:
        assert "METRICS_ALLOWED_IPS" in response.json()["detail"]
        assert b"tarsy_scoring_" not in response.content


def test_with_a_token_metrics_answer_any_address_that_has_it(settings):
    settings.METRICS_TOKEN = "s3cret"

    assert Client(REMOTE_ADDR="203.0.113.9").get("/metrics").status_code == 401
    response = Client(REMOTE_ADDR="203.0.113.9").get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert response.status_code == 200


def test_metrics_token_is_required_when_set(settings):
    settings.METRICS_TOKEN = "s3cret"

    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert "tarsy_scoring_scorings_started_total" in {
        name for name, _ in scrape(Authorization="Bearer s3cret")
    }


def test_multiprocess_mode_adds_up_every_process(tmp_path, monkeypatch):
    """Two worker-like processes record LLM calls; this process's /metrics reports both."""
    env = child_env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    for seconds in (1.5, 4.0):
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"import django; django.setup(); from scoring.ops import metrics; metrics.observe_llm_call({seconds}, 'ok')",
            ],
            cwd=REPO_DIR,
            env=env,
            check=True,
            timeout=60,
        )
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))

    samples = scrape()

    assert value(samples, "tarsy_scoring_llm_call_duration_seconds_count", outcome="ok") == 2
    assert value(samples, "tarsy_scoring_llm_call_duration_seconds_sum", outcome="ok") == 5.5
    assert value(samples, "tarsy_scoring_llm_call_duration_seconds_bucket", outcome="ok", le="2.0") == 1
    # Files are named after host and process: containers sharing the folder repeat pids.
    names = [path.name for path in tmp_path.glob("*.db")]
    assert names and all(
        re.fullmatch(rf"[a-z]+_{re.escape(socket.gethostname())}-\d+\.db", name) for name in names
    )
