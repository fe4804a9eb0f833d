"""When a judge call may start: pacing per model, shared by every worker process and host.

Two rules, kept in the ``judge_pacing`` table (one row per model; docs/llm.md, "Pacing"):

- When the provider tells one call to wait (a 429 with ``Retry-After``), every call to that
  model waits as long (``hold``): the fleet stops together instead of each call finding
  the limit by its own 429.
- With known limits, SCORING_LLM_RPM (requests a minute) and SCORING_LLM_TPM (prompt tokens a
  minute, estimated from the request's characters), each call takes the next turn of both
  buckets (``take_turn``): calls start evenly spaced at the limit, across every process.

A turn is taken in a transaction that holds the row (PostgreSQL: SELECT ... FOR UPDATE;
SQLite: its IMMEDIATE transactions take turns), so two calls never take the same turn.
The database, not Redis, so that it holds on the default install too; one short
transaction per judge call is nothing beside the call. Without known limits a call
only reads the row.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.db import transaction
from django.db.models import BigIntegerField, Case, F, Value, When

from scoring.models import JudgePacing

US_PER_MINUTE = 60_000_000


def take_turn(model: str, prompt_tokens: int, *, longest_wait_s: float) -> float:
    """Take this call's turn to ``model``; return the seconds to wait before sending it.

    A turn further away than ``longest_wait_s`` is not taken: the wait is returned all the
    same, and the caller must not send the call (the scoring waits in the queue instead).
    """
    now = _now_us()
    rpm, tpm = settings.SCORING_LLM_RPM, settings.SCORING_LLM_TPM
    if not rpm and not tpm:
        not_before = JudgePacing.objects.filter(model=model).values_list("not_before_us", flat=True).first()
        return max(0, (not_before or 0) - now) / 1_000_000
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


def hold(model: str, wait_s: float) -> None:
    """The provider told a call to ``model`` to wait ``wait_s``: every call to it waits as long."""
    until = _now_us() + int(wait_s * 1_000_000)
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
