"""django-q2 entry points for judge jobs. Thin: each calls one service."""

from django_q.models import Schedule
from django_q.tasks import async_task

from scoring import events, runtime, services

CLEANUP_SCHEDULE_NAME = "cleanup-orphaned-scorings"
# The judge job bounds itself (SCORING_JOB_TIMEOUT_S); django-q2's hard stop
# would kill the whole worker process and every other job it runs.
NO_TIME_LIMIT = -1


def enqueue_scoring(score_id) -> None:
    async_task(
        "scoring.tasks.run_scoring",
        str(score_id),
        task_name=f"score-{score_id}",
        group="scoring",
        timeout=NO_TIME_LIMIT,
    )


def run_scoring(score_id: str) -> None:
    """Hand the job to this worker process's judge runtime (waits for a free slot)."""
    runtime.get_runtime().submit(score_id)


def cleanup_orphans() -> int:
    """The minutely cleanup: fail orphaned scorings, and prune expired events (so
    they are pruned even where no WebSocket client ever starts a web process's relay)."""
    events.prune()
    return services.expire_stale_scorings()


def ensure_cleanup_schedule() -> None:
    """Have the cluster's scheduler fail orphaned scorings every minute."""
    Schedule.objects.update_or_create(
        name=CLEANUP_SCHEDULE_NAME,
        defaults={"func": "scoring.tasks.cleanup_orphans", "schedule_type": Schedule.MINUTES, "minutes": 1},
    )
