"""10,000 sessions: importing them, queueing their scorings, and listing them by score.

On SQLite (a new file) and on a throwaway PostgreSQL, each in a process of its own:

* import: ``manage.py import_sessions`` of a generated JSONL file of --sessions
  copies of the TARSy example session (14 KB each), beside where its time could go:
  reading and ``json.loads`` of every line; that plus ``ingest.parse_document``
  (validation); a bare ``bulk_create`` of the same parsed rows;
* enqueue: ``manage.py score_sessions --unscored`` with no worker running (database
  broker), beside a bare ``bulk_create`` of as many pending scores; cleaned up after;
* list: with one completed score per session (a fifth also have an older failed
  one), the dashboard's list filtered to the "good" band and sorted by score (the
  page, and its query alone: count + first page of 50), beside a bare query of the
  50 best completed scores on the scores table. --list-runs runs each, p50 and p99.

    .venv/bin/python bench/bench_scale.py
    .venv/bin/python bench/bench_scale.py --sessions 1000 --databases sqlite   # quick
"""

import argparse
import contextlib
import io
import json
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from common import (
    PYTHON,
    REPO,
    machine_description,
    percentile,
    setup_django,
    sqlite_url,
    throwaway_postgres,
    work_folder,
)

SAMPLE = REPO / "scoring" / "samples" / "00_tarsy_example.json"
ALERT_TYPES = ["kubernetes", "NamespaceTerminating", "PodCrashLooping", "HighMemory", "DiskPressure"]
T0_US = 1_767_225_600_000_000


def write_sessions_file(path, count: int) -> None:
    base = json.loads(SAMPLE.read_text())
    with path.open("w") as out:
        for index in range(count):
            base.update(
                session_id=str(uuid.uuid4()),
                alert_type=ALERT_TYPES[index % len(ALERT_TYPES)],
                started_at_us=T0_US + index * 60_000_000,
                completed_at_us=T0_US + index * 60_000_000 + 40_000_000,
            )
            out.write(json.dumps(base) + "\n")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def delete_all() -> None:
    from django_q.models import OrmQ

    from scoring.models import AlertSession, ScoringEvent, SessionScore

    for model in (ScoringEvent, SessionScore, AlertSession, OrmQ):
        model.objects.all()._raw_delete(model.objects.db)


def measure_import(path) -> dict:
    from django.core.management import call_command

    from scoring.models import AlertSession
    from scoring.tarsy import ingest

    lines = path.read_bytes().splitlines()
    docs = []
    parse_s = timed(lambda: docs.extend(json.loads(line) for line in lines))
    rows = []
    validate_s = timed(lambda: rows.extend(ingest.parse_document(doc) for doc in docs))
    bulk_s = timed(
        lambda: AlertSession.objects.bulk_create([AlertSession(**row) for row in rows], batch_size=500)
    )
    delete_all()
    import_s = timed(lambda: call_command("import_sessions", str(path), stdout=io.StringIO()))
    return {
        "json": parse_s,
        "json+validate": parse_s + validate_s,
        "bulk_create": bulk_s,
        "import_sessions": import_s,
    }


def measure_enqueue() -> dict:
    from django.core.management import call_command
    from django_q.models import OrmQ

    from scoring.judge.prompts import PROMPT_HASH
    from scoring.models import AlertSession, ScoringStatus, SessionScore

    ids = list(AlertSession.objects.values_list("session_id", flat=True))
    now_us = time.time_ns() // 1000
    pending = [
        SessionScore(
            session_id=session_id,
            prompt_hash=PROMPT_HASH,
            score_triggered_by="bench",
            scored_at_us=now_us,
            started_at_us=now_us,
            status=ScoringStatus.PENDING,
        )
        for session_id in ids
    ]
    bulk_s = timed(lambda: SessionScore.objects.bulk_create(pending, batch_size=500))
    SessionScore.objects.all()._raw_delete(SessionScore.objects.db)
    out = io.StringIO()
    enqueue_s = timed(lambda: call_command("score_sessions", "--unscored", stdout=out))
    pending_count = SessionScore.objects.filter(status=ScoringStatus.PENDING).count()
    assert pending_count == len(ids), f"{pending_count} pending scores for {len(ids)} sessions ({out.getvalue()})"
    queued = OrmQ.objects.count()  # wake-up tasks: one per worker process's worth of new scores
    from scoring.models import ScoringEvent

    for model in (ScoringEvent, SessionScore, OrmQ):
        model.objects.all()._raw_delete(model.objects.db)
    AlertSession.objects.update(
        latest_score_id=None, latest_status=None, latest_total_score=None, latest_prompt_hash=None
    )
    return {"score_sessions": enqueue_s, "bulk_create pending": bulk_s, "queued": queued}


def give_scores() -> None:
    from scoring import services
    from scoring.judge.prompts import PROMPT_HASH
    from scoring.models import AlertSession, ScoringStatus, SessionScore

    rng = random.Random(7)
    scores = []
    for index, session_id in enumerate(AlertSession.objects.values_list("session_id", flat=True)):
        at_us = T0_US + index * 1000
        common = {
            "session_id": session_id,
            "prompt_hash": PROMPT_HASH,
            "score_triggered_by": "bench",
            "started_at_us": at_us,
            "completed_at_us": at_us + 1,
        }
        if index % 5 == 0:
            scores.append(
                SessionScore(
                    **common,
                    scored_at_us=at_us - 10,
                    status=ScoringStatus.FAILED,
                    error_message="judge LLM timed out",
                )
            )
        scores.append(
            SessionScore(
                **common,
                scored_at_us=at_us,
                status=ScoringStatus.COMPLETED,
                total_score=rng.randint(0, 100),
                score_analysis="analysis " * 200,
                missing_tools_analysis="none",
            )
        )
    SessionScore.objects.bulk_create(scores, batch_size=1000)
    services.copy_latest_scores(AlertSession.objects.values_list("session_id", flat=True))


def measure_list(runs: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.core.paginator import Paginator
    from django.test import Client

    from scoring import selectors, views
    from scoring.models import ScoringStatus, SessionScore

    user = get_user_model().objects.create_superuser("bench", password=None)
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)

    def page() -> None:
        response = client.get("/", {"score": "good", "sort": "-score"})
        assert response.status_code == 200, response.status_code

    def query() -> None:
        result = Paginator(
            selectors.dashboard_sessions(band="good", sort="-score"), views.PAGE_SIZE
        ).get_page(1)
        assert len(list(result)) == min(views.PAGE_SIZE, result.paginator.count)

    def reference() -> None:
        best = SessionScore.objects.filter(status=ScoringStatus.COMPLETED, total_score__gte=75)
        count = best.count()
        first_page = best.order_by("-total_score").values("session_id", "total_score")[: views.PAGE_SIZE]
        assert len(list(first_page)) == min(views.PAGE_SIZE, count)

    results = {}
    for name, fn in (("dashboard page", page), ("dashboard query", query), ("bare scores query", reference)):
        fn()  # warm-up: caches, prepared plans
        times = [timed(fn) * 1000 for _ in range(runs)]
        results[name] = {"p50": statistics.median(times), "p99": percentile(times, 0.99)}
    return results


def run_child(args) -> None:
    """Everything on one database, in this process; prints one JSON line of results."""
    setup_django(args.database_url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    path = args.work / "sessions.jsonl"
    write_sessions_file(path, args.sessions)
    result = {"file_mb": path.stat().st_size / 2**20, "import": measure_import(path)}
    result["enqueue"] = measure_enqueue()
    give_scores()
    result["list"] = measure_list(args.list_runs)
    print(json.dumps(result))


def child_results(args, label: str, db_url: str, work) -> dict:
    folder = work / f"run-{label}"
    folder.mkdir()
    command = [
        PYTHON,
        __file__,
        "--child",
        "--database-url",
        db_url,
        "--work",
        str(folder),
        "--sessions",
        str(args.sessions),
        "--list-runs",
        str(args.list_runs),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{label} run failed:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_results(results: dict[str, dict], sessions: int) -> None:
    first = next(iter(results.values()))
    print(f"\n{sessions} sessions, {first['file_mb']:.0f} MB of JSONL. Seconds.\n")
    print(
        "| database | json.loads only | + parse_session | bare bulk_create | import_sessions "
        "| per session, ms | score_sessions --unscored | per session, ms | wake-up tasks queued "
        "| bare bulk_create pending |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, r in results.items():
        imp, enq = r["import"], r["enqueue"]
        print(
            f"| {label} | {imp['json']:.1f} | {imp['json+validate']:.1f} | {imp['bulk_create']:.1f} "
            f"| {imp['import_sessions']:.1f} | {imp['import_sessions'] * 1000 / sessions:.2f} "
            f"| {enq['score_sessions']:.1f} | {enq['score_sessions'] * 1000 / sessions:.2f} "
            f"| {enq['queued']} | {enq['bulk_create pending']:.2f} |"
        )
    print("\nSession list, 'good' band sorted by score, first page of 50. ms.\n")
    print("| database | what | p50 | p99 |")
    print("|---|---|---|---|")
    for label, r in results.items():
        for name, t in r["list"].items():
            print(f"| {label} | {name} | {t['p50']:.1f} | {t['p99']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--list-runs", type=int, default=100)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args)
        return

    results: dict[str, dict] = {}
    with work_folder() as work, contextlib.ExitStack() as stack:
        postgres_url = None
        for label in args.databases.split(","):
            if label == "postgres":
                postgres_url = stack.enter_context(throwaway_postgres(work))
                db_url = postgres_url
            else:
                db_url = sqlite_url(work)
            results[label] = child_results(args, label, db_url, work)
            print(f"{label}: done", file=sys.stderr, flush=True)
        print(machine_description(postgres_url))
        print_results(results, args.sessions)


if __name__ == "__main__":
    main()
