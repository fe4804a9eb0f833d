"""Current and obsolete per criteria scope, on a fleet of sessions: the session list's criteria
filter (a count and its first page, as the dashboard and the admin run it) and the API's read
of one score, with 0, 5 and 40 scopes that have a current version of their own, beside the
rule before scopes existed (one hash equality) on the same rows in the same run.

The fleet is bench_insights.py's (--sessions sessions over 8 alert types and 4 chains, 15%
re-scored under older criteria). Scoped versions are made current through the services: a
few alert types and chains, then 40 (the extra ones name alert types and chains no session
has, as an operator's unused scopes would). Each case runs --runs times after a warm-up; the
p50 and p95 are printed, with the number of SQL statements.

    .venv/bin/python bench/bench_criteria.py                        # SQLite, 100,000 sessions
    .venv/bin/python bench/bench_criteria.py --postgres             # a throwaway PostgreSQL
    .venv/bin/python bench/bench_criteria.py --sessions 10000 --runs 10     # quick
"""

import argparse
import statistics

from bench_insights import ALERT_TYPES, CHAINS, make_fleet
from common import database_url, machine_description, percentile, run_times_ms, setup_django, work_folder

PAGE = 50


def timed(run, runs: int) -> tuple[list[float], int]:
    """Milliseconds of each of ``runs`` runs (after a warm-up), and the statements of one."""
    from django.db import connection

    run()  # warm-up: the API's first request also signs its user in

    # Counted as they run (a request through the test client resets Django's query log).
    statements = []
    with connection.execute_wrapper(lambda execute, *call: statements.append(1) or execute(*call)):
        run()
    return run_times_ms(run, runs), len(statements)


def cases(score_session_id):
    """(label, run): the list filter as the pages run it, the same through the rule before
    scopes, and the API's read of one score."""
    from django.db.models import Q
    from django.test import Client

    from scoring import selectors
    from scoring.judge.prompts import PROMPT_HASH
    from scoring.models import AlertSession

    def listed(sessions) -> None:
        sessions.count()
        list(sessions[:PAGE])

    def before_scopes(obsolete: bool):
        # dashboard_sessions as it was before scopes: one equality with the one current hash.
        current = Q(latest_prompt_hash=PROMPT_HASH)
        wanted = Q(latest_prompt_hash__isnull=False) & ~current if obsolete else current
        sessions = AlertSession.objects.defer(*AlertSession.HEAVY_FIELDS).filter(wanted)
        sessions = selectors.with_latest_error(selectors.with_scoring_estimate(sessions))
        return sessions.order_by(*selectors.SESSION_SORTS["-started"], "-session_id")

    client = Client(HTTP_HOST="localhost", headers={"X-Forwarded-User": "bench"})
    score_url = f"/api/v1/scoring/sessions/{score_session_id}/score"

    def read_score() -> None:
        response = client.get(score_url)
        assert response.status_code == 200, (response.status_code, response.content[:300])

    return [
        ("list, criteria=obsolete", lambda: listed(selectors.dashboard_sessions(obsolete=True))),
        ("  before scopes: one hash equality", lambda: listed(before_scopes(True))),
        ("list, criteria=current", lambda: listed(selectors.dashboard_sessions(obsolete=False))),
        ("  before scopes: one hash equality", lambda: listed(before_scopes(False))),
        ("GET one score (API)", read_score),
    ]


# The scopes made current, in order: a few of the fleet's alert types and chains, then unused ones.
SCOPES = [("alert_type", name) for name in ALERT_TYPES[:3]] + [("chain", name) for name in CHAINS[:2]]
SCOPES += [("chain", f"unused-chain-{n}") for n in range(35)]


def promote_scopes(start: int, stop: int) -> None:
    """Make ``SCOPES[start:stop]`` current, each with criteria of its own, through the services."""
    from scoring.criteria import services
    from scoring.judge.prompts import Criteria

    for number, (scope, value) in enumerate(SCOPES[start:stop], start=start):
        criteria = Criteria(
            f"Criteria {number}.\n{{{{SESSION_CONVERSATION}}}}\n{{{{OUTPUT_SCHEMA}}}}", "Tools?"
        )
        version = services.create_draft(criteria, scope=scope, scope_value=value, created_by="bench")
        services.make_candidate(version.pk, changed_by="bench")
        services.promote(version.pk, changed_by="bench", reason="bench")


def run(db_url: str, args) -> None:
    setup_django(db_url)
    from django.core.management import call_command
    from django.db import connection

    from scoring.models import AlertSession, CriteriaState, CriteriaVersion

    call_command("migrate", verbosity=0)
    fleet = make_fleet(args.sessions)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    score_session = (
        AlertSession.objects.order_by("-started_at_us").values_list("session_id", flat=True).first()
    )
    print(machine_description(db_url if connection.vendor == "postgresql" else None))
    print(
        f"\n{connection.vendor}, {fleet['sessions']:,} sessions, {fleet['scores']:,} scores, {args.runs} runs\n"
    )
    print("| case | scoped current versions | p50 ms | p95 ms | statements |")
    print("|---|---|---|---|---|")
    done = 0
    for scopes in (0, 5, 40):
        promote_scopes(done, scopes)
        done = CriteriaVersion.objects.filter(state=CriteriaState.CURRENT).exclude(scope="global").count()
        for label, case in cases(score_session):
            times, statements = timed(case, args.runs)
            print(
                f"| {label} | {done} | {statistics.median(times):.1f} | {percentile(times, 0.95):.1f} | {statements} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL instead of SQLite")
    args = parser.parse_args()
    with work_folder() as folder, database_url(folder, args.postgres) as url:
        run(url, args)


if __name__ == "__main__":
    main()
