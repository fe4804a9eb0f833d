"""Tasks put on django-q2's queue (scoring/jobs/queue.py), as django-q2's monitor
stores their outcome once a worker has run them."""

import pytest
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import Failure, OrmQ, Success
from django_q.monitor import save_task

from scoring.jobs import queue

pytestmark = pytest.mark.django_db


def ran(success: bool) -> dict:
    """The queued task's package as a worker hands it to the monitor after running it."""
    (queued,) = OrmQ.objects.all()
    now = timezone.now()
    return {
        **queued.task,
        "success": success,
        "result": None if success else "Traceback: boom",
        "started": now,
        "stopped": now,
        "sync": True,  # the monitor then keeps the test's database connection
    }


def test_a_wake_up_that_ran_is_not_stored():
    queue.enqueue_wake_up()
    save_task(ran(success=True), get_broker())
    assert not Success.objects.exists()


def test_a_wake_up_that_failed_is_stored():
    queue.enqueue_wake_up()
    save_task(ran(success=False), get_broker())
    assert list(Failure.objects.values_list("func", flat=True)) == ["scoring.tasks.wake_judge_runtime"]
