"""/healthz, /readyz and the worker heartbeats (scoring.ops.health)."""

import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from scoring.models import WorkerHeartbeat
from scoring.ops import health
from tests.support.throwaway_servers import free_port


def now_us() -> int:
    return time.time_ns() // 1000


def beat(seconds_ago: float, host: str = "worker-host", pid: int = 4242) -> WorkerHeartbeat:
    return WorkerHeartbeat.objects.create(
        host=host, pid=pid, cluster_name="tarsy-scoring", last_seen_us=now_us() - int(seconds_ago * 1e6)
    )


def test_healthz_answers_without_any_dependency(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_ok_when_every_check_passes(client, transactional_db):
    health.record_worker_heartbeat("tarsy-scoring", in_flight=0)

    response = client.get("/readyz")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert {name: check["status"] for name, check in body["checks"].items()} == {
        "database": "ok",
        "broker": "ok",
        "channel_layer": "ok",
        "worker": "ok",
    }
    assert body["checks"]["channel_layer"]["detail"] == "in-memory (this process only)"
    assert body["checks"]["worker"]["detail"] == "1 worker cluster reported within 60 s"


def test_readyz_fails_when_the_last_heartbeat_is_stale(client, transactional_db):
    beat(seconds_ago=120)

    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "failed"
    assert body["checks"]["database"]["status"] == "ok"
    worker = body["checks"]["worker"]
    assert worker["status"] == "failed"
    # What failed, not where: /readyz answers anyone.
    assert worker["detail"] == "no worker cluster reported within 60 s; the last report was 120 s ago"


def test_readyz_fails_when_no_worker_ever_reported(client, transactional_db):
    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["checks"]["worker"]["detail"].startswith("no worker cluster has ever reported")


def test_worker_check_can_be_switched_off(client, transactional_db, settings):
    settings.WORKER_HEARTBEAT_MAX_AGE_S = 0

    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json()["checks"]["worker"] == {
        "status": "ok",
        "detail": "not checked (WORKER_HEARTBEAT_MAX_AGE_S=0)",
    }


def redis_mode(settings, url: str) -> None:
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "redis": url}
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [url]}}
    }


def test_redis_checks_ping_a_real_redis(client, transactional_db, settings, redis_server_url):
    redis_mode(settings, redis_server_url)
    health.record_worker_heartbeat("tarsy-scoring")

    response = client.get("/readyz")

    assert response.status_code == 200
    checks = response.json()["checks"]
    assert checks["broker"] == {"status": "ok", "detail": "Redis answers"}
    assert checks["channel_layer"] == {"status": "ok", "detail": "Redis answers"}


def test_redis_checks_fail_when_nothing_listens(client, transactional_db, settings):
    redis_mode(settings, f"redis://127.0.0.1:{free_port()}/0")
    health.record_worker_heartbeat("tarsy-scoring")

    response = client.get("/readyz")

    assert response.status_code == 503
    checks = response.json()["checks"]
    for name in ("broker", "channel_layer"):
        assert checks[name] == {"status": "failed", "detail": "Redis does not answer (ConnectionError)"}
    assert "127.0.0.1" not in response.content.decode()
    assert checks["database"]["status"] == checks["worker"]["status"] == "ok"


def test_a_check_that_hangs_is_reported_after_the_timeout(transactional_db, settings):
    settings.READINESS_CHECK_TIMEOUT_S = 0.5
    hangs = threading.Event()

    def waits_forever() -> str:
        hangs.wait(30)
        return "answered"

    ready, checks = health.readiness({"database": health.check_database, "stuck": waits_forever})
    hangs.set()

    assert not ready
    assert checks["database"]["status"] == "ok"
    assert checks["stuck"] == {"status": "failed", "detail": "no answer within 0.5 s"}


@pytest.mark.parametrize(
    ("pool_max_size", "detail"),
    [
        ("10", "no database connection within 1.6 s"),
        ("0", "OperationalError (the process log has the details)"),
    ],  # pooled, or not
)
def test_database_check_fails_in_a_process_whose_database_is_down(start_web, pool_max_size, detail):
    """A web process pointed at a PostgreSQL that does not run: alive, not ready."""
    server = start_web(
        DATABASE_URL=f"postgres://nobody@127.0.0.1:{free_port()}/none", DB_POOL_MAX_SIZE=pool_max_size
    )

    with urllib.request.urlopen(f"{server.http_url}/healthz", timeout=30) as response:
        assert response.status == 200
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(f"{server.http_url}/readyz", timeout=30)

    assert answer.value.code == 503
    checks = json.loads(answer.value.read())["checks"]
    assert checks["database"]["status"] == "failed"
    assert checks["database"]["detail"].startswith(detail)
    assert checks["channel_layer"]["status"] == "ok"
    # The exception's text names the database's address: the process log has it, the answer not.
    assert "127.0.0.1" not in json.dumps(checks)
    assert "127.0.0.1" in server.log.read_text()


def test_heartbeat_keeps_one_row_per_cluster_process_and_prunes_old_ones(transactional_db):
    gone = beat(seconds_ago=health.HEARTBEAT_RETENTION_S + 60, host="old-host")
    recent = beat(seconds_ago=30, host="other-host")

    health.record_worker_heartbeat("tarsy-scoring", in_flight=3)
    health.record_worker_heartbeat("tarsy-scoring", in_flight=1)

    mine = WorkerHeartbeat.objects.get(host=socket.gethostname(), pid=os.getpid())
    assert mine.in_flight == 1
    assert now_us() - mine.last_seen_us < 60_000_000
    assert set(WorkerHeartbeat.objects.values_list("pk", flat=True)) == {mine.pk, recent.pk}
    assert not WorkerHeartbeat.objects.filter(pk=gone.pk).exists()
