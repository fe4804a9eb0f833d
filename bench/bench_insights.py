"""The insight answers on 100,000 sessions: fleet statistics (each group_by) and the
missing-tools backlog through their endpoints, beside the bare SQL they run.

A throwaway PostgreSQL (unless --database-url) gets --sessions sessions over 26 weeks
with scores as a fleet has them: 15% re-scored (an older completed score), 8% with a
failed attempt after their completed one, 3% never completed (only failed attempts),
criteria dimensions on 90% of the scores, 0-4 missing tools per completed score (Zipf-like
over 60 tools, some written two ways), tokens and cost.
Then, after VACUUM ANALYZE (what autovacuum gives a settled table), each case runs
--runs times (after a warm-up) three ways:

* endpoint: the request through Django's test client in this process (URL routing,
  middleware, authentication as oauth2-proxy does it, the view, JSON rendering);
* bare queries: the SQL statements that request ran (captured once), executed and fetched
  with a cursor: the database's share;

and the p50 and p95 of each are printed, with the number of statements. A case is a row
of CASES (label, path, query): a page, such as the insights page, is measured the same
way by adding its row.

    .venv/bin/python bench/bench_insights.py
    .venv/bin/python bench/bench_insights.py --sessions 10000 --runs 10     # quick
"""

import argparse
import contextlib
import hashlib
import random
import statistics
import time
import uuid
from decimal import Decimal

from common import machine_description, percentile, setup_django, throwaway_postgres, work_folder

HEADERS = {"X-Forwarded-User": "bench"}
WEEK_US = 7 * 86_400_000_000
WEEKS = 26
END_US = 1_767_225_600_000_000  # 2026-01-01, the newest sessions' start
START_US = END_US - WEEKS * WEEK_US
ALERT_TYPES = [
    "kubernetes",
    "NamespaceTerminating",
    "PodCrashLooping",
    "HighMemory",
    "DiskPressure",
    "CertificateExpiry",
    "NodeNotReady",
    "DatabaseReplicationLag",
]
CHAINS = ["kubernetes-agent-chain", "node-agent-chain", "database-agent-chain", "generic-agent-chain"]
JUDGE_MODELS = ["openai/gpt-5", "gemini/gemini-2.5-pro"]
TOOL_NAMES = [f"{verb} {noun}" for verb in ("kubectl", "prometheus", "loki", "argocd", "pg") for noun in (
    "logs", "events", "top", "describe", "query range", "rollout history",
    "alerts", "config diff", "network policy", "node pressure", "slow queries", "replication status",
)]  # fmt: skip


def analysis_text(seed: int) -> str:
    """About 3 KB of judge analysis (stored compressed, out of line, as real ones are)."""
    rng = random.Random(seed)
    words = ["The agent", "checked", "the pods", "but", "missed", "the events", "logs", "restarts", "."]
    return " ".join(rng.choice(words) for _ in range(400))


ANALYSES = [analysis_text(seed) for seed in range(20)]
# group_by values, then the cases: label, path, query.
GROUP_BYS = ["alert_type", "chain_id", "agent_type", "judge_model", "prompt_hash", "week", "day"]
RECENT = {"since": "2025-12-04", "alert_type": "kubernetes"}  # the last four weeks of one alert type
CASES = [
    *((f"stats, group_by={group_by}", "/api/v1/scoring/stats/", {"group_by": group_by}) for group_by in GROUP_BYS),
    ("stats, group_by=week, as CSV", "/api/v1/scoring/stats/", {"group_by": "week", "format": "csv"}),
    ("stats, group_by=day, 4 weeks of one alert type", "/api/v1/scoring/stats/", {"group_by": "day", **RECENT}),
    ("missing tools, all", "/api/v1/scoring/missing-tools/", {}),
    ("missing tools, limit=20", "/api/v1/scoring/missing-tools/", {"limit": "20"}),
    ("missing tools, 4 weeks of one alert type", "/api/v1/scoring/missing-tools/", RECENT),
    ("insights page", "/insights/", {}),
]


def make_fleet(count: int, seed: int = 16) -> dict:
    """``count`` sessions and their scores and missing tools, bulk-inserted; returns counts."""
    from scoring.judge.prompts import PROMPT_HASH
    from scoring.judge.replies import DIMENSIONS, tool_key
    from scoring.models import AlertSession, MissingTool, ScoringStatus, SessionScore

    rng = random.Random(seed)
    old_hashes = [hashlib.sha256(f"criteria {n}".encode()).hexdigest() for n in range(2)]
    tool_weights = [1 / (rank + 1) for rank in range(len(TOOL_NAMES))]
    sessions, scores, tools = [], [], []

    def score(session_id, alert_type: str, chain: str, at_us: int, status: str, prompt_hash: str) -> SessionScore:
        row = SessionScore(
            score_id=uuid.uuid4(),
            session_id=session_id,
            prompt_hash=prompt_hash,
            score_triggered_by="bench",
            scored_at_us=at_us,
            started_at_us=at_us,
            completed_at_us=at_us + 90_000_000,
            status=status,
            judge_model=rng.choice(JUDGE_MODELS),
            input_tokens=rng.randint(20_000, 200_000),
            output_tokens=rng.randint(800, 4_000),
        )
        row.cost_usd = round(row.input_tokens * 1.25e-6 + row.output_tokens * 1e-5, 6)
        if status == ScoringStatus.FAILED:
            row.error_message = "judge LLM timed out"
            row.output_tokens = 0
        else:
            mean = 45 + 5 * (ALERT_TYPES.index(alert_type) % 5)
            row.total_score = max(0, min(100, int(rng.gauss(mean, 18))))
            row.score_analysis = rng.choice(ANALYSES)
            row.missing_tools_analysis = "1. **kubectl logs**: ..."
            if rng.random() < 0.9:
                row.dimensions = {
                    name: max(0, min(25, round(row.total_score / 4 + rng.gauss(0, 3))))
                    for name in DIMENSIONS
                }
            # Each tool once per score, as the parser keeps it (one key once).
            names = list(dict.fromkeys(rng.choices(TOOL_NAMES, tool_weights, k=rng.randint(0, 4))))
            for position, name in enumerate(names):
                written = name if rng.random() < 0.7 else name.replace(" ", "_")
                tools.append(MissingTool(
                    score=row, name=written, key=tool_key(written), position=position,
                    total_score=row.total_score, alert_type=alert_type, chain_id=chain,
                ))  # fmt: skip
        scores.append(row)
        return row

    def completed_copy(completed: SessionScore | None) -> dict:
        """The session's latest_completed_* columns, as selectors.latest_completed_columns reads them."""
        if completed is None:
            return {}
        dimensions = completed.dimensions or {}
        return {
            "latest_completed_score_id": completed.score_id,
            "latest_completed_total_score": completed.total_score,
            "latest_completed_prompt_hash": completed.prompt_hash,
            "latest_completed_judge_model": completed.judge_model,
            **{f"latest_completed_{name}": dimensions.get(name) for name in DIMENSIONS},
        }

    for index in range(count):
        session_id = uuid.uuid4()
        first_score = len(scores)
        alert_type = ALERT_TYPES[index % len(ALERT_TYPES)]
        chain = CHAINS[index % len(CHAINS)]
        started_at_us = START_US + index * (WEEKS * WEEK_US // count)
        at_us = started_at_us + 60_000_000
        newest = newest_completed = None
        roll = rng.random()
        if roll < 0.03:
            newest = score(session_id, alert_type, chain, at_us, ScoringStatus.FAILED, PROMPT_HASH)
        else:
            if roll < 0.18:
                score(session_id, alert_type, chain, at_us, ScoringStatus.COMPLETED, rng.choice(old_hashes))
                at_us += 3_600_000_000
            newest = newest_completed = score(session_id, alert_type, chain, at_us, ScoringStatus.COMPLETED, PROMPT_HASH)
            if rng.random() < 0.08:
                newest = score(session_id, alert_type, chain, at_us + 60_000_000, ScoringStatus.FAILED, PROMPT_HASH)
        attempts = scores[first_score:]
        sessions.append(
            AlertSession(
                session_id=session_id,
                alert_type=alert_type,
                agent_type=f"chain:{chain}",
                chain_id=chain,
                status="completed",
                author="bench",
                started_at_us=started_at_us,
                completed_at_us=started_at_us + 40_000_000,
                alert_data={"alert": alert_type, "namespace": f"ns-{index % 300}"},
                final_analysis="Root cause: ...",
                latest_score_id=newest.score_id,
                latest_status=newest.status,
                latest_total_score=newest.total_score,
                latest_prompt_hash=newest.prompt_hash,
                **completed_copy(newest_completed),
                scorings_failed=sum(row.status == ScoringStatus.FAILED for row in attempts),
                scorings_input_tokens=sum(row.input_tokens for row in attempts),
                scorings_output_tokens=sum(row.output_tokens for row in attempts),
                scorings_cost_usd=sum(Decimal(str(row.cost_usd)) for row in attempts),
            )
        )
    AlertSession.objects.bulk_create(sessions, batch_size=2000)
    SessionScore.objects.bulk_create(scores, batch_size=2000)
    MissingTool.objects.bulk_create(tools, batch_size=5000)
    return {"sessions": len(sessions), "scores": len(scores), "missing tools": len(tools)}


def check_copies_match_the_services() -> None:
    """The generated sessions' latest_* columns are what services.copy_latest_scores writes,
    and their missing tools' copies what services.missing_tool_rows writes (checked on a
    sample, so that the benchmark measures the shape the services keep)."""
    from scoring import selectors, services
    from scoring.models import AlertSession, MissingTool

    fields = ("latest_score_id", "latest_status", *selectors.latest_completed_columns(), *selectors.scorings_columns())
    sample = list(AlertSession.objects.order_by("?").values_list("session_id", *fields)[:500])
    services.copy_latest_scores([row[0] for row in sample])
    after = dict((row[0], row[1:]) for row in AlertSession.objects.filter(
        session_id__in=[row[0] for row in sample]).values_list("session_id", *fields))  # fmt: skip
    assert all(after[row[0]] == row[1:] for row in sample), "the generator's latest_* copies are wrong"
    copies = ("total_score", "alert_type", "chain_id")
    tools = MissingTool.objects.filter(score__session_id__in=[row[0] for row in sample]).values_list(
        *copies, "score__total_score", "score__session__alert_type", "score__session__chain_id"
    )
    assert all(row[:3] == row[3:] for row in tools), "the generator's missing-tool copies are wrong"


def measure(case, runs: int) -> dict:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    label, path, query = case
    client = Client(HTTP_HOST="localhost", headers=HEADERS)

    def request() -> None:
        response = client.get(path, query)
        assert response.status_code == 200, (label, response.status_code, response.content[:300])

    request()  # warm-up: the proxy user, caches, plans
    with CaptureQueriesContext(connection) as captured:
        request()
    statements = [query["sql"] for query in captured]

    def bare() -> None:
        with connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)
                cursor.fetchall()

    bare()
    result = {"statements": len(statements)}
    for side, fn in (("endpoint", request), ("bare", bare)):
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1000)
        result[side] = {"p50": statistics.median(times), "p95": percentile(times, 0.95)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--database-url", help="an empty PostgreSQL database to use instead of a throwaway one")
    args = parser.parse_args()

    with work_folder() as work, contextlib.ExitStack() as stack:
        db_url = args.database_url or stack.enter_context(throwaway_postgres(work))
        setup_django(db_url)
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", verbosity=0)
        start = time.perf_counter()
        counts = make_fleet(args.sessions)
        check_copies_match_the_services()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        generated_s = time.perf_counter() - start
        results = {case[0]: measure(case, args.runs) for case in CASES}

        print(machine_description(db_url))
        shape = ", ".join(f"{count:,} {name}" for name, count in counts.items())
        print(f"\n{shape} (generated and analysed in {generated_s:.0f} s). {args.runs} runs per case, ms.\n")
        print("| case | endpoint p50 | endpoint p95 | bare queries p50 | bare queries p95 | statements |")
        print("|---|---|---|---|---|---|")
        for label, r in results.items():
            print(
                f"| {label} | {r['endpoint']['p50']:.1f} | {r['endpoint']['p95']:.1f} "
                f"| {r['bare']['p50']:.1f} | {r['bare']['p95']:.1f} | {r['statements']} |"
            )


if __name__ == "__main__":
    main()
