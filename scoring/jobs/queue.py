"""Putting work on django-q2's queue. Knows django-q2 and the dotted paths of the
task entry points (``scoring.tasks``), nothing of the workers, so that the services
can enqueue without importing what runs the jobs."""

import threading

from django_q.brokers import get_broker
from django_q.models import Schedule
from django_q.tasks import async_task

CLEANUP_SCHEDULE_NAME = "cleanup-orphaned-scorings"

_broker = None
_broker_lock = threading.Lock()


def _process_broker():
    """This process's django-q2 broker, made on first use. ``async_task`` would make
    a new one per task (for Redis, a new connection pool); both brokers (Redis, the
    ORM) are safe to share between threads."""
    global _broker
    with _broker_lock:
        if _broker is None:
            _broker = get_broker()
        return _broker


def enqueue_wake_up() -> None:
    async_task(
        "scoring.tasks.wake_judge_runtime",
        task_name="wake-judge-runtime",
        group="scoring",
        # Its result says nothing (the score row records the job), and storing a success
        # costs the monitor a read of every stored success (save_limit pruning): more CPU
        # than the judge call itself. A failed wake-up is still stored.
        save=False,
        broker=_process_broker(),
    )


def ensure_cleanup_schedule() -> None:
    """Have the cluster's scheduler fail orphaned scorings every minute."""
    Schedule.objects.update_or_create(
        name=CLEANUP_SCHEDULE_NAME,
        defaults={"func": "scoring.tasks.cleanup_orphans", "schedule_type": Schedule.MINUTES, "minutes": 1},
    )

