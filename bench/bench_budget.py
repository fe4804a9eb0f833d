"""What a spend budget costs a worker's claim: the claim of one pending scoring with no budget
set, beside the same claim with a budget set (not used up), which sums the day's and the
month's cost first (``budget.current_spend``, from the (completed_at_us, cost_usd) index).

The month holds ``--month-scorings`` completed scorings with a cost (the sum reads them all);
each round claims ``--claims`` scorings on each side, alternately, putting each claimed one
back to pending. Printed per round: the median ms per claim and this process's CPU ms per claim
on each side, and their ratios; then the medians. On SQLite by default, on a throwaway PostgreSQL with ``--postgres``.

    .venv/bin/python bench/bench_budget.py
    .venv/bin/python bench/bench_budget.py --month-scorings 100000 --postgres
"""

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal

from bench_pipeline import make_sessions
from common import database_url, machine_description, setup_django, work_folder


def fill_month(count: int) -> None:
    """``count`` completed scorings of one session, spread over the current month so far."""
    from scoring import services
    from scoring.judge.prompts import PROMPT_HASH
    from scoring.models import SessionScore

    (session_id,) = make_sessions(1)
    now = services.now_us()
    today = datetime.fromtimestamp(now / 1e6, UTC)
    month_start = int(today.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()) * 1_000_000
    step = max(1, (now - month_start) // max(count, 1))
    SessionScore.objects.bulk_create(
        [
            SessionScore(
                score_id=uuid.uuid4(),
                session_id=session_id,
                prompt_hash=PROMPT_HASH,
                score_triggered_by="bench",
                scored_at_us=month_start + index * step,
                started_at_us=month_start + index * step,
                completed_at_us=month_start + index * step,
                status="completed",
                total_score=60,
                cost_usd=Decimal("0.0123456789"),
            )
            for index in range(count)
        ],
        batch_size=1000,
    )


def claim_ms(claims: int, score_id) -> tuple[float, float]:
    """The median ms of ``claims`` claims of the one pending scoring (put back after each), and
    this process's CPU ms per claim (the claim's own work, without the database server's)."""
    from scoring import services
    from scoring.models import SessionScore

    times, cpu_s = [], 0.0
    for _ in range(claims):
        started, started_cpu = time.perf_counter(), time.process_time()
        (claimed,) = services.claim_pending_scores(1)
        times.append((time.perf_counter() - started) * 1000)
        cpu_s += time.process_time() - started_cpu
        SessionScore.objects.filter(pk=claimed.pk).update(status="pending", started_at_us=0)
    assert claimed.score_id == score_id
    return statistics.median(times), cpu_s * 1000 / claims


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--month-scorings", type=int, default=20_000)
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", action="store_true")
    options = parser.parse_args()
    with work_folder() as folder, database_url(folder, options.postgres) as url:
        run(url, options)


def run(db_url: str, options) -> None:
    setup_django(db_url)
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from scoring.models import SessionScore

    call_command("migrate", verbosity=0)
    fill_month(options.month_scorings)
    (session_id,) = make_sessions(1)
    pending = SessionScore.objects.create(
        session_id=session_id, prompt_hash="x" * 64, score_triggered_by="bench", scored_at_us=0,
        started_at_us=0, status="pending",
    )  # fmt: skip
    with connection.cursor() as cursor:  # the planner's statistics, as autovacuum keeps them
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
    print(machine_description(db_url if options.postgres else None))
    print(
        f"\n{'PostgreSQL' if options.postgres else 'SQLite'}, {options.month_scorings:,} completed scorings "
        f"this month, {options.claims} claims a side a round\n"
    )
    print("| round | no budget: ms / CPU ms a claim | budget set: ms / CPU ms a claim | ratio: ms / CPU |")
    print("|---|---|---|---|")
    for budget_usd in (None, 1e9):  # each side's statements compiled before the first round
        settings.SCORING_BUDGET_USD_PER_DAY = settings.SCORING_BUDGET_USD_PER_MONTH = budget_usd
        claim_ms(5, pending.score_id)
    without, with_budget = [], []
    for round_number in range(1, options.rounds + 1):
        settings.SCORING_BUDGET_USD_PER_DAY = settings.SCORING_BUDGET_USD_PER_MONTH = None
        bare = claim_ms(options.claims, pending.score_id)
        settings.SCORING_BUDGET_USD_PER_DAY, settings.SCORING_BUDGET_USD_PER_MONTH = 1e9, 1e9
        budgeted = claim_ms(options.claims, pending.score_id)
        without.append(bare)
        with_budget.append(budgeted)
        print(row(str(round_number), bare, budgeted))
    print(row("median", *(tuple(map(statistics.median, zip(*side))) for side in (without, with_budget))))


def row(label: str, bare: tuple[float, float], budgeted: tuple[float, float]) -> str:
    return (
        f"| {label} | {bare[0]:.3f} / {bare[1]:.3f} | {budgeted[0]:.3f} / {budgeted[1]:.3f} "
        f"| {budgeted[0] / bare[0]:.2f} / {budgeted[1] / bare[1]:.2f} |"
    )

if __name__ == "__main__":
    main()
