"""Circuit breaker for the judge LLM, shared by every worker process.

State lives in the ``judge_circuit`` table, one row per model, so that it holds
across processes and hosts. Each change is one UPDATE computed by the database
from the row's current values, so concurrent workers never lose a count.

Closed: calls go through. After SCORING_CIRCUIT_FAILURE_THRESHOLD consecutive
failed calls it opens: calls fail fast for SCORING_CIRCUIT_COOLDOWN_S. Then it
is half-open: calls go through again; a success closes it, a failure opens it
for another cool-down.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection
from django.db.models import BigIntegerField, Case, F, Q, Value, When

from scoring.judge.errors import CircuitOpen
from scoring.models import JudgeCircuit

logger = logging.getLogger("scoring.judge.llm")

LAST_ERROR_LIMIT = 2000
MESSAGE_ERROR_LIMIT = 300

# The two statements every judge call runs (check before, record_success after), in SQL:
# built by the ORM they cost the worker about 0.5 ms of CPU each, most of a scoring's
# breaker cost, for statements the database runs in microseconds.
_TABLE = JudgeCircuit._meta.db_table
_OPEN_ROW_SQL = (
    f"SELECT consecutive_failures, opened_until_us, last_error FROM {_TABLE} "
    "WHERE model = %s AND opened_until_us > %s"
)
_RESET_SQL = (
    f"UPDATE {_TABLE} SET consecutive_failures = 0, opened_until_us = 0, last_error = '' "
    "WHERE model = %s AND (consecutive_failures > 0 OR opened_until_us > 0)"
)


def check(model: str) -> None:
    """Raise ``CircuitOpen`` while the breaker for ``model`` is open."""
    with connection.cursor() as cursor:
        cursor.execute(_OPEN_ROW_SQL, [model, _now_us()])
        row = cursor.fetchone()
    if row is None:
        return
    consecutive_failures, opened_until_us, last = row
    if len(last) > MESSAGE_ERROR_LIMIT:
        last = last[:MESSAGE_ERROR_LIMIT] + "…"
    raise CircuitOpen(
        f"judge LLM circuit breaker is open after {consecutive_failures} consecutive failed calls "
        f"(last: {last}); new scorings fail fast until {iso_time(opened_until_us)}"
    )


def record_success(model: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_RESET_SQL, [model])
        closed = cursor.rowcount
    if closed:
        logger.info("judge LLM circuit breaker for %s reset: a call succeeded", model)


def record_failure(model: str, error_message: str) -> None:
    """Count a failed call; open the breaker when the count reaches the threshold.

    A failure while half-open (count already at or past the threshold) opens it
    again for a full cool-down.
    """
    JudgeCircuit.objects.get_or_create(model=model)
    opens_until_us = _now_us() + int(settings.SCORING_CIRCUIT_COOLDOWN_S * 1_000_000)
    reaches_threshold = Q(consecutive_failures__gte=settings.SCORING_CIRCUIT_FAILURE_THRESHOLD - 1)
    JudgeCircuit.objects.filter(model=model).update(
        consecutive_failures=F("consecutive_failures") + 1,
        last_error=error_message[:LAST_ERROR_LIMIT],
        opened_until_us=Case(
            When(reaches_threshold, then=Value(opens_until_us)),
            default=F("opened_until_us"),
            output_field=BigIntegerField(),
        ),
    )
    row = JudgeCircuit.objects.filter(model=model).values("consecutive_failures", "opened_until_us").first()
    if row and row["opened_until_us"] == opens_until_us:
        logger.warning(
            "judge LLM circuit breaker for %s opened after %d consecutive failed calls, until %s",
            model,
            row["consecutive_failures"],
            iso_time(opens_until_us),
        )


def state(model: str) -> dict:
    """The breaker's state for health checks and metrics."""
    row = JudgeCircuit.objects.filter(model=model).first() or JudgeCircuit(model=model)
    if row.opened_until_us > _now_us():
        name = "open"
    elif row.consecutive_failures >= settings.SCORING_CIRCUIT_FAILURE_THRESHOLD:
        name = "half_open"
    else:
        name = "closed"
    return {
        "model": model,
        "state": name,
        "consecutive_failures": row.consecutive_failures,
        "failure_threshold": settings.SCORING_CIRCUIT_FAILURE_THRESHOLD,
        "open_until": iso_time(row.opened_until_us) if name == "open" else None,
        "last_error": row.last_error or None,
    }


def _now_us() -> int:
    return int(time.time() * 1_000_000)


def iso_time(timestamp_us: int) -> str:
    """A microsecond timestamp as UTC ISO 8601 to the second, for messages."""
    moment = datetime.fromtimestamp(timestamp_us / 1_000_000, tz=UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")
