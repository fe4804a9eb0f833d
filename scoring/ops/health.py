"""Readiness checks and the worker clusters' heartbeats.

``readiness()`` runs every check at once, each in its own thread and bounded
by ``READINESS_CHECK_TIMEOUT_S``, and returns whether all passed plus a detail
per check. The details say what failed, never where: /readyz answers anyone, so
no host, address, process id, URL or exception text (which often holds an
address) goes into a detail; the process log has the full error.

Each worker cluster calls ``record_worker_heartbeat`` from its main loop;
the ``worker`` check passes when some cluster did so within
``WORKER_HEARTBEAT_MAX_AGE_S``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, connections

from scoring.models import TarsySync, WorkerHeartbeat

logger = logging.getLogger(__name__)

# Heartbeats of clusters not seen for this long are deleted.
HEARTBEAT_RETENTION_S = 3600


class CheckFailed(Exception):
    """A check that ran and found its dependency unusable; str() says why."""


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    detail: str

    def as_json(self) -> dict:
        return {"status": "ok" if self.ok else "failed", "detail": self.detail}


def _now_us() -> int:
    return time.time_ns() // 1000


# --- The checks: each returns a detail string or raises -------------------------------------


def check_database() -> str:
    pool = getattr(connection, "pool", None)  # PostgreSQL's, unless DB_POOL_MAX_SIZE=0
    if pool is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return f"{connection.vendor} answers"
    # A query would wait DB_POOL_TIMEOUT_S for a connection while the pool retries in
    # the background (logging each failure); the check waits no longer than it may take.
    from psycopg_pool import PoolTimeout

    timeout_s = 0.8 * settings.READINESS_CHECK_TIMEOUT_S  # to answer before readiness gives up
    pool.open()
    try:
        with pool.connection(timeout=timeout_s) as pooled:
            pooled.execute("SELECT 1")
    except PoolTimeout:
        raise CheckFailed(
            f"no database connection within {timeout_s:g} s (the process log names the connection errors)"
        ) from None
    return f"{connection.vendor} answers"


def _ping_redis(url: str) -> None:
    import redis

    timeout = settings.READINESS_CHECK_TIMEOUT_S
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        client.ping()
    except redis.RedisError as exc:
        logger.warning("readiness: Redis does not answer: %s", exc)
        raise CheckFailed(f"Redis does not answer ({type(exc).__name__})") from exc
    finally:
        client.close()


def check_broker() -> str:
    """The django-q2 broker: Redis when configured, else its table in the database."""
    redis_url = settings.Q_CLUSTER.get("redis")
    if redis_url:
        _ping_redis(redis_url)
        return "Redis answers"
    from django_q.models import OrmQ

    OrmQ.objects.exists()
    return "database queue table answers"


def check_channel_layer() -> str:
    layer = settings.CHANNEL_LAYERS["default"]
    if layer["BACKEND"] == "scoring.realtime.layers.InMemoryChannelLayer":
        return "in-memory (this process only)"
    host = layer["CONFIG"]["hosts"][0]  # a URL, or channels-redis's dict form with "address"
    _ping_redis(host["address"] if isinstance(host, dict) else host)
    return "Redis answers"


def check_worker() -> str:
    max_age_s = settings.WORKER_HEARTBEAT_MAX_AGE_S
    if max_age_s <= 0:
        return "not checked (WORKER_HEARTBEAT_MAX_AGE_S=0)"
    now_us = _now_us()
    alive = WorkerHeartbeat.objects.filter(last_seen_us__gte=now_us - int(max_age_s * 1_000_000)).count()
    if alive:
        return f"{alive} worker cluster{'s' if alive != 1 else ''} reported within {max_age_s:g} s"
    latest = WorkerHeartbeat.objects.order_by("-last_seen_us").first()
    if latest is None:
        raise CheckFailed("no worker cluster has ever reported: start one with `manage.py scoring_worker`")
    age_s = (now_us - latest.last_seen_us) / 1_000_000
    raise CheckFailed(
        f"no worker cluster reported within {max_age_s:g} s; the last report was {age_s:.0f} s ago"
    )


def check_tarsy_sync() -> str:
    """The periodic sync from TARSY_URL: when it last went through TARSy's whole list.

    Fails only past TARSY_SYNC_MAX_LAG_S (0: never); TARSy being away stops new
    sessions from arriving, not the scoring of those already here.
    """
    row = TarsySync.objects.filter(source=settings.TARSY_URL).first()
    now_us = _now_us()
    # The error names TARSy's URL: the worker's log has it, not this answer.
    failed = row is not None and row.last_error
    last_error = "; the latest sync failed (the worker log says why)" if failed else ""
    if row is None or row.last_success_at_us is None:
        detail = f"no successful sync yet{last_error}"
        lag_s = None
    else:
        lag_s = (now_us - row.last_success_at_us) / 1_000_000
        detail = f"last successful sync started {lag_s:.0f} s ago{last_error}"
    max_lag_s = settings.TARSY_SYNC_MAX_LAG_S
    if max_lag_s > 0 and (lag_s is None or lag_s > max_lag_s):
        raise CheckFailed(f"{detail} (TARSY_SYNC_MAX_LAG_S={max_lag_s:g})")
    return detail


CHECKS: dict[str, Callable[[], str]] = {
    "database": check_database,
    "broker": check_broker,
    "channel_layer": check_channel_layer,
    "worker": check_worker,
}


def configured_checks() -> dict[str, Callable[[], str]]:
    """CHECKS, plus the TARSy sync's when TARSY_URL is set."""
    return {**CHECKS, "tarsy_sync": check_tarsy_sync} if settings.TARSY_URL else CHECKS


# --- Running them ------------------------------------------------------------------------------


def _run_check(check: Callable[[], str]) -> CheckResult:
    try:
        return CheckResult(True, check())
    except CheckFailed as exc:
        return CheckResult(False, str(exc))
    except Exception as exc:  # any failure of a dependency is the answer, not an error
        # Its text may name a host or an address: only the exception's class is answered.
        logger.warning("readiness check %s failed", check.__name__, exc_info=True)
        return CheckResult(False, f"{type(exc).__name__} (the process log has the details)")
    finally:
        # The check ran in a pool thread: its database connection goes with it.
        connections.close_all()


def readiness(checks: dict[str, Callable[[], str]] | None = None) -> tuple[bool, dict[str, dict]]:
    """Run ``checks`` (default: ``configured_checks()``) concurrently; return
    (all passed, {name: {"status", "detail"}})."""
    checks = configured_checks() if checks is None else checks
    timeout_s = settings.READINESS_CHECK_TIMEOUT_S
    # Not a context manager: its exit would wait for a check that hangs.
    pool = ThreadPoolExecutor(max_workers=len(checks), thread_name_prefix="readiness")
    futures = {name: pool.submit(_run_check, check) for name, check in checks.items()}
    wait(futures.values(), timeout=timeout_s)
    pool.shutdown(wait=False)
    results = {
        name: future.result() if future.done() else CheckResult(False, f"no answer within {timeout_s:g} s")
        for name, future in futures.items()
    }
    return all(result.ok for result in results.values()), {name: r.as_json() for name, r in results.items()}


# --- Worker heartbeats ---------------------------------------------------------------------


def record_worker_heartbeat(cluster_name: str, in_flight: int | None = None) -> bool:
    """Say that this process's worker cluster is alive, holding ``in_flight`` judge
    jobs (None: not known); prune clusters long gone.

    Called by the cluster's main loop every few seconds. One row per
    (host, pid), so every cluster process has its own whatever name it gives.
    Returns False (and logs) when the database cannot be written: a missed
    heartbeat must not stop the cluster.
    """
    # Like a request: drop a connection that broke (database restart, or a
    # forked child that closed the socket it inherited) and reconnect.
    close_old_connections()
    now_us = _now_us()
    try:
        WorkerHeartbeat.objects.update_or_create(
            host=socket.gethostname(),
            pid=os.getpid(),
            defaults={"cluster_name": cluster_name, "last_seen_us": now_us, "in_flight": in_flight},
        )
        WorkerHeartbeat.objects.filter(last_seen_us__lt=now_us - HEARTBEAT_RETENTION_S * 1_000_000).delete()
    except DatabaseError as exc:
        logger.warning("could not record the worker heartbeat: %s", exc)
        return False
    return True
