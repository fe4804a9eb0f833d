"""Scorings against a judge with an account-wide quota (issue 15, "Quotas").

The fake judge (``python -m tests.support.fake_llm --rps R`` or ``--tpm T``) answers within a
quota for all its clients together and answers 429 with ``Retry-After`` beyond it, as OpenAI,
Anthropic and Gemini do. N scorings (copies of the TARSy example session) are requested at
once from real worker clusters (``manage.py scoring_worker``) on a throwaway PostgreSQL and
Redis: one cluster, then two clusters on the same database and Redis (two hosts' worth).

For each: completed and failed scorings, the fake's answered and 429 counts, the wall time
from the first claim to the last completion against the ideal (the requests, N x 2, at the
quota's rate; for the token quota, the prompt tokens the scores report at the quota's rate,
which a batch under one minute's quota beats: the whole of it fits in the first minute),
and the circuit breaker's state at the end. Each run has a fake judge of its own, so it
starts with the whole quota. --pace also sets SCORING_LLM_RPM / SCORING_LLM_TPM
to that share of the quota (the known limit; docs/llm.md, "Pacing"); --announce-limits has the
fake send the quota in OpenAI's x-ratelimit-limit-* headers, as OpenAI does.

    .venv/bin/python bench/bench_quota.py --scorings 60
    .venv/bin/python bench/bench_quota.py --scorings 60,500 --pace 0.95
    .venv/bin/python bench/bench_quota.py --scorings 60,500 --announce-limits
"""

import argparse
import contextlib

from bench_pipeline import fake_judge, make_sessions, request_scorings, scores_of, wait_finished
from common import machine_description, service_env, setup_django, throwaway_postgres, work_folder

from tests.support.throwaway_servers import Redis
from tests.support.workers import rate_limits_met


def run(args, env: dict[str, str], work, count: int, clusters: int, quota: str) -> dict:
    from django.db.models import Sum

    from scoring.judge import circuit
    from scoring.models import JudgeCircuit, JudgePacing, ScoringStatus
    from tests.support.workers import WorkerCluster

    JudgeCircuit.objects.all().delete()
    JudgePacing.objects.all().delete()
    started = [WorkerCluster(env, work / f"worker-{quota}-{count}-{clusters}-{n}.log") for n in range(clusters)]
    try:
        batch = make_sessions(count)
        request_scorings(batch)
        wait_finished(batch, 60 + 20 * count / args.rps)
        done = list(scores_of(batch).values("status", "started_at_us", "completed_at_us", "input_tokens"))
        state = circuit.state(env["SCORING_LLM_MODEL"])["state"]
    finally:
        for cluster in started:
            cluster.stop()
    first_claim = min(score["started_at_us"] for score in done)
    wall_s = (max(score["completed_at_us"] for score in done) - first_claim) / 1e6
    if quota == "rpm":
        ideal_s = 2 * count / args.rps
    else:
        tokens = scores_of(batch).aggregate(total=Sum("input_tokens"))["total"] or 0
        ideal_s = tokens / (args.tpm / 60)
    return {
        "completed": sum(score["status"] == ScoringStatus.COMPLETED for score in done),
        "failed": sum(score["status"] == ScoringStatus.FAILED for score in done),
        "wall_s": wall_s,
        "ideal_s": ideal_s,
        "breaker": state,
        "rejected": rate_limits_met([cluster.log for cluster in started]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scorings", default="60,500", help="comma-separated values of N")
    parser.add_argument("--rps", type=float, default=4.0, help="the request quota, per second (an RPM quota / 60)")
    parser.add_argument("--tpm", type=int, default=800_000, help="the token quota, prompt tokens per minute")
    parser.add_argument("--workers", type=int, default=2, help="SCORING_WORKERS of each cluster")
    parser.add_argument(
        "--pace", type=float, default=0, help="also set SCORING_LLM_RPM / SCORING_LLM_TPM to this share of the quota"
    )
    parser.add_argument("--quotas", default="rpm,tpm", help="which quotas to run")
    parser.add_argument(
        "--announce-limits", action="store_true", help="the fake sends the quota in headers with every answer"
    )
    args = parser.parse_args()

    with work_folder() as work, contextlib.ExitStack() as stack:
        db_url = stack.enter_context(throwaway_postgres(work))
        redis_url = stack.enter_context(Redis(work / "redis")).url
        setup_django(db_url, redis_url)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        print(machine_description(db_url))
        print(
            f"\nrequest quota {args.rps:g}/s ({args.rps * 60:g} RPM), token quota {args.tpm:,} TPM; "
            f"{args.workers} worker processes a cluster; known limit set: "
            f"{f'{args.pace:.0%} of the quota' if args.pace else 'no'}; "
            f"announced in the answers' headers: {'yes' if args.announce_limits else 'no'}.\n"
        )
        print("| quota | N | clusters | completed | failed | 429s | wall, s | ideal, s | of ideal | breaker |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for quota in args.quotas.split(","):
            option = ["--rps", str(args.rps)] if quota == "rpm" else ["--tpm", str(args.tpm)]
            option += ["--announce-limits"] if args.announce_limits else []
            pace = {}
            if args.pace:
                pace = (
                    {"SCORING_LLM_RPM": str(int(args.pace * args.rps * 60))}
                    if quota == "rpm"
                    else {"SCORING_LLM_TPM": str(int(args.pace * args.tpm))}
                )
            for count in (int(value) for value in args.scorings.split(",")):
                for clusters in (1, 2):
                    # A fake of its own for each run: what one run used of the quota's
                    # minute must not count against the next.
                    log = work / f"fake-llm-{quota}-{count}-{clusters}.log"
                    with fake_judge(0.0, log, *option) as llm_env:
                        env = service_env(
                            db_url,
                            redis_url,
                            **llm_env,
                            **pace,
                            SCORING_WORKERS=str(args.workers),
                            SCORING_WORKER_POLL_S="0.2",
                        )
                        r = run(args, env, work, count, clusters, quota)
                    print(
                        f"| {quota.upper()} | {count} | {clusters} | {r['completed']} | {r['failed']} | {r['rejected']} "
                        f"| {r['wall_s']:.1f} | {r['ideal_s']:.1f} | {r['ideal_s'] / r['wall_s']:.0%} | {r['breaker']} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
