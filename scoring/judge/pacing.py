"""When a judge call may start: pacing per model, shared by every worker process and host,
and how many calls may be in flight at once (``jobs_in_flight_limit``, ``call_slots``).

Two pacing rules, kept in the ``judge_pacing`` table (one row per model; docs/llm.md, "Pacing"):

- When the provider tells one call to wait (a 429 with ``Retry-After``), every call to that
  model waits as long (``hold``): the fleet stops together instead of each call finding
  the limit by its own 429.
- With known limits, SCORING_LLM_RPM (requests a minute) and SCORING_LLM_TPM (prompt tokens a
  minute, estimated from the request's characters), each call takes the next turn of both
  buckets (``take_turn``): calls start evenly spaced at the limit, across every process.
  A limit not set is known from the provider's answers where they announce it
  (``learn_limits``), at ANNOUNCED_LIMIT_SHARE of it.

A turn is taken in a transaction that holds the row (PostgreSQL: SELECT ... FOR UPDATE;
SQLite: its IMMEDIATE transactions take turns), so two calls never take the same turn.
The database, not Redis, so that it holds on the default install too; one short
transaction per judge call is nothing beside the call. Without known limits a call
reads the row at most every NOT_BEFORE_READ_S per process.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from functools import cache

from django.conf import settings
from django.db import transaction
from django.db.models import BigIntegerField, Case, F, Value, When

from scoring.models import JudgePacing
from scoring.precompiled import PrecompiledQuery, precompile

logger = logging.getLogger(__name__)

US_PER_MINUTE = 60_000_000
# Without known limits, how often a process reads a model's hold that other processes set.
NOT_BEFORE_READ_S = 0.2
# model -> (time.monotonic() when read, not_before_us); a dict's get and set are atomic.
_not_before_seen: dict[str, tuple[float, int]] = {}
# The share of a limit the provider announces that calls are paced at: a request's arrival at
# the provider varies by some milliseconds, and one that arrives early meets a 429.
ANNOUNCED_LIMIT_SHARE = 0.95
# model -> (requests, tokens) a minute, the provider's last announcement of each seen by this
# process (0: none). Every process learns them from its own first answer or 429.
_announced: dict[str, tuple[int, int]] = {}


def jobs_in_flight_limit() -> int:
    """Judge jobs (scorings, reports) that may be in progress at once across every worker:
    SCORING_MAX_IN_FLIGHT, and with SCORING_JUDGE_CONCURRENCY set no more than the judge serves
    at once, each scoring sending SCORING_JUDGE_SAMPLES calls at once (one job at least).
    Jobs beyond it wait in the queue, where no deadline or timeout of theirs runs."""
    limit = settings.SCORING_MAX_IN_FLIGHT
    if settings.SCORING_JUDGE_CONCURRENCY:
        limit = min(limit, max(1, settings.SCORING_JUDGE_CONCURRENCY // settings.SCORING_JUDGE_SAMPLES))
    return limit


def call_slots() -> threading.BoundedSemaphore | None:
    """The slots a judge call of this process takes while it is sent (None: no limit). With
    jobs bounded by ``jobs_in_flight_limit``, only a scoring whose samples outnumber
    SCORING_JUDGE_CONCURRENCY has calls that wait here: the one scoring in flight anywhere."""
    return _slots(settings.SCORING_JUDGE_CONCURRENCY) if settings.SCORING_JUDGE_CONCURRENCY else None


@cache
def _slots(concurrency: int) -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(concurrency)


def learn_limits(model: str, requests_per_min: int | None, tokens_per_min: int | None) -> None:
    """The provider's answer to a call to ``model`` announced these limits (None: not announced)."""
    known = _announced.get(model, (0, 0))
    announced = (requests_per_min or known[0], tokens_per_min or known[1])
    if announced != known:
        _announced[model] = announced
        logger.info(
            "%s announces %s requests and %s prompt tokens a minute (0: not announced); calls are paced at "
            "%.0f%% of them where SCORING_LLM_RPM / SCORING_LLM_TPM is not set",
            model,
            *announced,
            ANNOUNCED_LIMIT_SHARE * 100,
        )


def forget_announced_limits() -> None:
    _announced.clear()


def limits(model: str) -> tuple[int, int]:
    """The requests and prompt tokens a minute that calls to ``model`` are paced at (0: none):
    SCORING_LLM_RPM and SCORING_LLM_TPM where set, else a share of what the provider announced."""
    announced_rpm, announced_tpm = _announced.get(model, (0, 0))
    rpm = settings.SCORING_LLM_RPM or _share(announced_rpm)
    return rpm, settings.SCORING_LLM_TPM or _share(announced_tpm)


def _share(announced: int) -> int:
    return max(1, int(announced * ANNOUNCED_LIMIT_SHARE)) if announced else 0


def take_turn(model: str, prompt_tokens: int, *, longest_wait_s: float) -> float:
    """Take this call's turn to ``model``; return the seconds to wait before sending it.

    A turn further away than ``longest_wait_s`` is not taken: the wait is returned all the
    same, and the caller must not send the call (the scoring waits in the queue instead).
    """
    now = _now_us()
    rpm, tpm = limits(model)
    if not rpm and not tpm:
        return max(0, _not_before_us(model) - now) / 1_000_000
    with transaction.atomic():
        row = JudgePacing.objects.select_for_update().filter(model=model).first()
        if row is None:
            JudgePacing.objects.bulk_create([JudgePacing(model=model)], ignore_conflicts=True)
            row = JudgePacing.objects.select_for_update().get(model=model)
        start = max(now, row.not_before_us, row.next_request_us if rpm else 0, row.next_token_us if tpm else 0)
        wait_s = (start - now) / 1_000_000
        if wait_s > longest_wait_s:
            return wait_s
        if rpm:
            row.next_request_us = start + US_PER_MINUTE // rpm
        if tpm:
            row.next_token_us = start + US_PER_MINUTE * prompt_tokens // tpm
        row.save(update_fields=["next_request_us", "next_token_us"])
    return wait_s


def _not_before_us(model: str) -> int:
    """The model's hold. That there is none is read at most every NOT_BEFORE_READ_S in this
    process, so that without known limits most judge calls cost no query; a hold is read
    each time (it is waited out anyway), and one set in this process is read at once (``hold``)."""
    read_at, not_before = _not_before_seen.get(model, (-NOT_BEFORE_READ_S, 0))
    if not_before > _now_us() or time.monotonic() - read_at >= NOT_BEFORE_READ_S:
        stored = _hold_of_model().rows(model=model)
        not_before = stored[0][0] if stored else 0
        _not_before_seen[model] = (time.monotonic(), not_before)
    return not_before


@cache
def _hold_of_model() -> PrecompiledQuery:
    """``_not_before_us``'s read, compiled once per process: at a few judge calls a second a
    process makes it for nearly every call, and compiling it cost more than running it."""
    marker = f"{uuid.uuid4()} (a marker)"
    hold = JudgePacing.objects.filter(model=marker).values_list("not_before_us")[:1]
    return precompile(hold.query, model=marker)


def hold(model: str, wait_s: float) -> None:
    """The provider told a call to ``model`` to wait ``wait_s``: every call to it waits as long."""
    until = _now_us() + int(wait_s * 1_000_000)
    _not_before_seen.pop(model, None)
    JudgePacing.objects.bulk_create([JudgePacing(model=model)], ignore_conflicts=True)
    JudgePacing.objects.filter(model=model).update(
        not_before_us=Case(
            When(not_before_us__lt=until, then=Value(until)),
            default=F("not_before_us"),
            output_field=BigIntegerField(),
        )
    )


def _now_us() -> int:
    return time.time_ns() // 1000
