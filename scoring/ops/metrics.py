"""Prometheus metrics, correct with any number of web and worker processes.

Two kinds (docs/observability.md explains the choice):

* What describes scorings, the queue, the circuit breaker and the workers is
  read from the database (and the broker) when ``/metrics`` is scraped, by
  ``DatabaseCollector``: every web process reports the same global numbers.
* What only a process sees (its HTTP requests, a worker's judge LLM calls) is
  counted with prometheus_client in that process. With
  ``PROMETHEUS_MULTIPROC_DIR`` set (a folder shared by the processes of one
  host, emptied when the service starts), the values are kept there and any
  process's ``/metrics`` adds up all of them; without it, each process reports
  its own.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.db.models import Case, CharField, Count, F, Q, Sum, Value, When
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.utils import floatToGoString

from scoring import budget, failures, selectors
from scoring.judge import circuit
from scoring.models import (
    JudgeCircuit,
    ScoringStatus,
    SessionScore,
    TarsySync,
    TarsySyncedSession,
    WorkerHeartbeat,
)

logger = logging.getLogger(__name__)

PREFIX = "tarsy_scoring"

# --- Counted in each process -----------------------------------------------------------------

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # The files in the folder are named after their process. Containers sharing
    # the folder have their own pid numbering, so the host name is part of it.
    values.ValueClass = values.MultiProcessValue(lambda: f"{socket.gethostname()}-{os.getpid()}")

HTTP_REQUESTS = Counter(
    f"{PREFIX}_http_requests",
    "HTTP requests answered by this service, by route name, method and status class.",
    ["route", "method", "status_class"],
)
HTTP_REQUEST_DURATION = Histogram(
    f"{PREFIX}_http_request_duration_seconds",
    "Time to answer an HTTP request, by route name and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
LLM_CALL_DURATION = Histogram(
    f"{PREFIX}_llm_call_duration_seconds",
    "Duration of one request to the judge LLM, by outcome (ok, or the failure kind).",
    ["outcome"],
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
)


def observe_llm_call(seconds: float, outcome: str) -> None:
    """Record one request to the judge LLM (called by the worker after each attempt)."""
    LLM_CALL_DURATION.labels(outcome).observe(seconds)


# Every label value comes from a fixed set, never from what a client sends: a
# label value is a time series kept for the life of the process, so a client
# choosing them could grow /metrics and the process without bound. An ASGI
# server may pass method tokens it does not know (daphne passed any, up to ~16 KB;
# uvicorn passes WebDAV's and others it parses): all count as "other".
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})
OTHER_METHOD = "other"


def _method(request) -> str:
    return request.method if request.method in KNOWN_METHODS else OTHER_METHOD


def _route(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "unmatched"  # 404s for unknown paths: one label, not one per path
    return match.view_name or match.route


class RequestMetricsMiddleware:
    """Counts and times every HTTP request (first in MIDDLEWARE, so it sees every answer)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        started = time.perf_counter()
        response = self.get_response(request)
        self._observe(request, response, started)
        return response

    async def _acall(self, request):
        started = time.perf_counter()
        response = await self.get_response(request)
        self._observe(request, response, started)
        return response

    @staticmethod
    def _observe(request, response, started: float) -> None:
        # The route is a URL pattern's name (or "unmatched"), the status class one of 1xx-5xx.
        route, method = _route(request), _method(request)
        HTTP_REQUESTS.labels(route, method, f"{response.status_code // 100}xx").inc()
        HTTP_REQUEST_DURATION.labels(route, method).observe(time.perf_counter() - started)


# --- Read from the database at scrape time ------------------------------------------------------

# error_message prefix -> reason class, first match wins (scoring/failures.py, where the
# pages' reasons are too). docs/observability.md has this table; tests/ops/test_metrics.py
# checks it against this one and produces each message for real.
FAILURE_REASONS = tuple((prefix, reason) for prefix, reason, _ in failures.SCORING_CLASSES)
OTHER_REASON = failures.OTHER_CLASS
SCORING_DURATION_BUCKETS_S = (1, 5, 10, 30, 60, 120, 300, 600, 900, 1800)
SCORE_BUCKETS = tuple(range(10, 101, 10))
CIRCUIT_STATES = ("closed", "open", "half_open")


def failure_reason_expression() -> Case:
    return Case(
        *(When(error_message__startswith=prefix, then=Value(reason)) for prefix, reason in FAILURE_REASONS),
        default=Value(OTHER_REASON),
        output_field=CharField(),
    )


def _histogram(
    name: str, documentation: str, labels: list[str], rows, bounds, scale: float = 1
) -> HistogramMetricFamily:
    """A histogram family from rows holding ``count``, ``total`` and ``le_<i>`` counts (``bounds`` order)."""
    family = HistogramMetricFamily(name, documentation, labels=labels)
    for row in rows:
        buckets = [(floatToGoString(bound), row[f"le_{index}"]) for index, bound in enumerate(bounds)]
        buckets.append(("+Inf", row["count"]))
        family.add_metric([row[label] for label in labels], buckets, (row["total"] or 0) / scale)
    return family


def _bucket_counts(field: str, bounds, scale: float = 1) -> dict:
    return {
        f"le_{index}": Count("pk", filter=Q(**{f"{field}__lte": bound * scale}))
        for index, bound in enumerate(bounds)
    }


def scoring_families():
    """Scorings by status and failure reason, their durations, scores, tokens and cost."""
    by_status = dict(SessionScore.objects.values_list("status").annotate(n=Count("pk")).order_by())
    yield CounterMetricFamily(
        f"{PREFIX}_scorings_started",
        "Scorings requested (each queues one judge job).",
        sum(by_status.values()),
    )
    yield CounterMetricFamily(
        f"{PREFIX}_scorings_completed",
        "Scorings that ended with a score.",
        by_status.get(ScoringStatus.COMPLETED, 0),
    )
    failed = CounterMetricFamily(
        f"{PREFIX}_scorings_failed", "Scorings that failed, by reason class.", labels=["reason"]
    )
    reasons = (
        SessionScore.objects.filter(status=ScoringStatus.FAILED)
        .annotate(reason=failure_reason_expression())
        .values_list("reason")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for reason, count in reasons:
        failed.add_metric([reason], count)
    yield failed
    active = GaugeMetricFamily(
        f"{PREFIX}_scorings_active", "Scorings queued or running now, by status.", labels=["status"]
    )
    for status in ScoringStatus.active_values():
        active.add_metric([status], by_status.get(status, 0))
    yield active

    durations = (
        SessionScore.objects.filter(status__in=ScoringStatus.terminal_values(), completed_at_us__isnull=False)
        .annotate(duration_us=F("completed_at_us") - F("started_at_us"))
        .values("status")
        .annotate(
            count=Count("pk"),
            total=Sum("duration_us"),
            **_bucket_counts("duration_us", SCORING_DURATION_BUCKETS_S, 1e6),
        )
        .order_by()
    )
    yield _histogram(
        f"{PREFIX}_scoring_duration_seconds",
        "Time from a judge job's start to its end (completed or failed).",
        ["status"],
        durations,
        SCORING_DURATION_BUCKETS_S,
        scale=1e6,
    )

    scores = SessionScore.objects.filter(status=ScoringStatus.COMPLETED).aggregate(
        count=Count("pk"), total=Sum("total_score"), **_bucket_counts("total_score", SCORE_BUCKETS)
    )
    yield _histogram(
        f"{PREFIX}_score", "Total scores (0-100) of completed scorings.", [], [scores], SCORE_BUCKETS
    )

    usage = (
        SessionScore.objects.filter(status=ScoringStatus.COMPLETED)
        .values("judge_model")
        .annotate(
            input=Sum("input_tokens"),
            output=Sum("output_tokens"),
            cached=Sum("cached_input_tokens"),
            cost=Sum("cost_usd"),
        )
        .order_by()
    )
    tokens = CounterMetricFamily(
        f"{PREFIX}_llm_tokens",
        "Judge LLM tokens of completed scorings, by model and direction.",
        labels=["model", "direction"],
    )
    cached = CounterMetricFamily(
        f"{PREFIX}_llm_cached_input_tokens",
        "Of the judge input tokens of completed scorings, those read from the provider's prompt cache.",
        labels=["model"],
    )
    cost = CounterMetricFamily(
        f"{PREFIX}_llm_cost_usd",
        "Judge LLM cost of completed scorings (where litellm knows the price).",
        labels=["model"],
    )
    for row in usage:
        tokens.add_metric([row["judge_model"], "input"], row["input"] or 0)
        tokens.add_metric([row["judge_model"], "output"], row["output"] or 0)
        cached.add_metric([row["judge_model"]], row["cached"] or 0)
        cost.add_metric([row["judge_model"]], float(row["cost"] or 0))
    yield tokens
    yield cached
    yield cost


def circuit_families():
    models = set(JudgeCircuit.objects.values_list("model", flat=True))
    if settings.SCORING_LLM_MODEL:
        models.add(settings.SCORING_LLM_MODEL)
    state = GaugeMetricFamily(
        f"{PREFIX}_judge_circuit_state",
        "Circuit breaker of each judge model: 1 for its current state.",
        labels=["model", "state"],
    )
    failures = GaugeMetricFamily(
        f"{PREFIX}_judge_circuit_consecutive_failures",
        "Consecutive failed judge calls, by model.",
        labels=["model"],
    )
    for model in sorted(models):
        current = circuit.state(model)
        for name in CIRCUIT_STATES:
            state.add_metric([model, name], 1 if current["state"] == name else 0)
        failures.add_metric([model], current["consecutive_failures"])
    yield state
    yield failures


def worker_families():
    now_us = time.time_ns() // 1000
    max_age_us = settings.WORKER_HEARTBEAT_MAX_AGE_S * 1_000_000
    labels = ["cluster", "host", "pid"]
    age = GaugeMetricFamily(
        f"{PREFIX}_worker_heartbeat_age_seconds",
        "Time since each worker cluster last reported.",
        labels=labels,
    )
    in_flight = GaugeMetricFamily(
        f"{PREFIX}_worker_in_flight",
        "Judge jobs each worker cluster was running when it last reported.",
        labels=labels,
    )
    alive = 0
    for beat in WorkerHeartbeat.objects.all():
        key = [beat.cluster_name, beat.host, str(beat.pid)]
        age.add_metric(key, (now_us - beat.last_seen_us) / 1e6)
        if beat.in_flight is not None:
            in_flight.add_metric(key, beat.in_flight)
        alive += now_us - beat.last_seen_us <= max_age_us
    yield age
    yield in_flight
    yield GaugeMetricFamily(
        f"{PREFIX}_worker_clusters_alive",
        "Worker clusters that reported within WORKER_HEARTBEAT_MAX_AGE_S.",
        alive,
    )


def queue_families():
    from django_q.brokers import get_broker

    try:
        depth = get_broker().queue_size()
    except Exception:  # a broker outage must not fail the whole scrape; /readyz reports it
        logger.warning("could not read the judge job queue's length", exc_info=True)
        return
    yield GaugeMetricFamily(
        f"{PREFIX}_queue_depth",
        "Tasks waiting in the broker; the scoring backlog is scorings_active{status=pending}.",
        depth,
    )


def tarsy_sync_families():
    """The syncs from running TARSys (``scoring.tarsy.sync``), one ``source`` each."""
    now_us = time.time_ns() // 1000
    last_success = GaugeMetricFamily(
        f"{PREFIX}_tarsy_sync_last_success_timestamp_seconds",
        "Start of the last sync that went through the TARSy's whole session list (Unix time).",
        labels=["source"],
    )
    lag = GaugeMetricFamily(
        f"{PREFIX}_tarsy_sync_lag_seconds",
        "Time since the start of the last successful sync: sessions finished since may be missing.",
        labels=["source"],
    )
    failing = GaugeMetricFamily(
        f"{PREFIX}_tarsy_sync_failing",
        "1 when the latest sync of the TARSy failed, else 0.",
        labels=["source"],
    )
    sessions = GaugeMetricFamily(
        f"{PREFIX}_tarsy_sync_sessions",
        "Sessions fetched from each TARSy, by outcome (stored, or rejected by validation).",
        labels=["source", "outcome"],
    )
    for row in TarsySync.objects.order_by("source"):
        if row.last_success_at_us is not None:
            last_success.add_metric([row.source], row.last_success_at_us / 1e6)
            lag.add_metric([row.source], (now_us - row.last_success_at_us) / 1e6)
        failing.add_metric([row.source], 1 if row.last_error else 0)
    rejected = Case(
        When(rejected_reason="", then=Value("stored")), default=Value("rejected"), output_field=CharField()
    )
    counts = (
        TarsySyncedSession.objects.annotate(outcome=rejected)
        .values_list("source", "outcome")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for source, outcome, count in counts:
        sessions.add_metric([source, outcome], count)
    yield last_success
    yield lag
    yield failing
    yield sessions


def budget_families():
    """The spend against the budgets (``scoring.budget``), and the automatic scorings they hold."""
    spend = budget.current_spend(time.time_ns() // 1000)
    spent = GaugeMetricFamily(
        f"{PREFIX}_spend_usd",
        "Cost of the scorings completed this UTC day and month (litellm's, cache discount included).",
        labels=["period"],
    )
    limits = GaugeMetricFamily(
        f"{PREFIX}_budget_usd", "SCORING_BUDGET_USD_PER_DAY and _PER_MONTH, where set.", labels=["period"]
    )
    for period, usd, limit in (
        ("day", spend.today_usd, settings.SCORING_BUDGET_USD_PER_DAY),
        ("month", spend.month_usd, settings.SCORING_BUDGET_USD_PER_MONTH),
    ):
        spent.add_metric([period], float(usd))
        if limit is not None:
            limits.add_metric([period], limit)
    yield spent
    yield limits
    yield GaugeMetricFamily(
        f"{PREFIX}_scorings_waiting_for_budget",
        "Automatic scorings held until a used-up spend budget's day or month ends.",
        SessionScore.objects.filter(selectors.waiting_for_budget_q()).count(),
    )


class DatabaseCollector:
    """The global metrics, computed from the database and the broker at each scrape."""

    def collect(self):
        yield from scoring_families()
        yield from circuit_families()
        yield from worker_families()
        yield from tarsy_sync_families()
        yield from budget_families()
        yield from queue_families()


class _ProcessCollector:
    """This process's own metrics (the default registry), when no multiprocess folder is shared."""

    def collect(self):
        yield from REGISTRY.collect()


def exposition() -> tuple[bytes, str]:
    """The text exposition for /metrics and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if multiproc_dir:
        MultiProcessCollector(registry, path=multiproc_dir)
    else:
        registry.register(_ProcessCollector())
    registry.register(DatabaseCollector())
    return generate_latest(registry), CONTENT_TYPE_LATEST
