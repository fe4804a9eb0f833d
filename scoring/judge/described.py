"""What a judge worker will use, in a few lines: the model and the sampling settings it is sent,
its context window and where that figure came from, how its tokens are counted, the timeouts,
and how many judge calls it sends at once. ``bin/run`` shows
them when the service is ready (``manage.py describe_judge``); each worker process logs them
as it starts (docs/llm.md, "Settings")."""

from django.conf import settings

from scoring.judge import fitting, pacing, sampling, tokens


def judge_lines() -> list[str]:
    """The lines, for a person; a model not configured says so in the first."""
    model = settings.SCORING_LLM_MODEL
    if not model:
        return ["judge model: none (SCORING_LLM_MODEL is not set: every scoring fails until it is)"]
    where = f" at {settings.SCORING_LLM_API_BASE}" if settings.SCORING_LLM_API_BASE else ""
    window, source = fitting.context_window_and_source()
    sent = sampling.judge_sampling()
    return [
        f"judge model: {sampling.judge_label(model, sent.temperature, sent.seed)}{where}",
        f"context window: {window:,} tokens ({source}); tokens counted by {tokens.method()}",
        f"timeouts: {settings.SCORING_LLM_TIMEOUT_S:g} s of silence before or within a reply "
        f"(SCORING_LLM_TIMEOUT_S); {settings.SCORING_JOB_TIMEOUT_S:g} s a scoring (SCORING_JOB_TIMEOUT_S), "
        f"{settings.SCORING_REPORT_TIMEOUT_S:g} s a report (SCORING_REPORT_TIMEOUT_S)",
        f"at once: {_at_once()}",
    ]


def _at_once() -> str:
    workers, per_worker = settings.SCORING_WORKERS, settings.SCORING_CONCURRENCY_PER_WORKER
    samples = settings.SCORING_JUDGE_SAMPLES
    jobs = min(workers * per_worker, pacing.jobs_in_flight_limit())
    calls = jobs * samples
    concurrency = settings.SCORING_JUDGE_CONCURRENCY
    if concurrency:
        calls = min(calls, concurrency)
    limit = f"SCORING_JUDGE_CONCURRENCY={concurrency}" if concurrency else "SCORING_JUDGE_CONCURRENCY not set"
    return (
        f"up to {_count(calls, 'judge call')} ({limit}): {_count(jobs, 'job')} of {workers} worker "
        f"process{'es' if workers != 1 else ''} x {_count(per_worker, 'slot')}, "
        f"{_count(samples, 'call')} each (SCORING_JUDGE_SAMPLES)"
    )


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'s' if number != 1 else ''}"
