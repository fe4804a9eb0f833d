"""django-q2 entry points for judge jobs. Thin: each calls one service."""

import logging
import signal
import threading
from contextlib import contextmanager

from django_q.models import Schedule
from django_q.tasks import async_task

from scoring import services

logger = logging.getLogger(__name__)

CLEANUP_SCHEDULE_NAME = "cleanup-orphaned-scorings"


def enqueue_scoring(score_id) -> None:
    async_task("scoring.tasks.run_scoring", str(score_id), task_name=f"score-{score_id}", group="scoring")


def run_scoring(score_id: str) -> None:
    try:
        with _sigterm_raises_worker_shutdown():
            services.score_run(score_id)
    except services.WorkerShutdown:
        # The score already says "worker shut down"; leave without a traceback.
        logger.info("judge job for score %s stopped: worker shut down", score_id)
        raise SystemExit(0) from None


def cleanup_orphans() -> int:
    return services.expire_stale_scorings()


def ensure_cleanup_schedule() -> None:
    """Have the cluster's scheduler fail orphaned scorings every minute."""
    Schedule.objects.update_or_create(
        name=CLEANUP_SCHEDULE_NAME,
        defaults={"func": "scoring.tasks.cleanup_orphans", "schedule_type": Schedule.MINUTES, "minutes": 1},
    )


@contextmanager
def _sigterm_raises_worker_shutdown():
    """Turn SIGTERM into WorkerShutdown while a job runs, so the job can mark
    its score failed ("worker shut down") and send the event before exiting.
    django-q2 leaves SIGTERM at its default (instant death) in worker processes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def handler(signum, frame):
        raise services.WorkerShutdown(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
