"""django-q2's entry points (scoring/tasks.py). The wake-up, and the judge jobs (scorings
and reports) it has a worker claim, are tested in tests/jobs."""

import time

import pytest

from scoring import tasks
from scoring.models import InsightReport


@pytest.mark.django_db
def test_cleanup_orphans_fails_stale_reports_too(settings):
    now_us = time.time_ns() // 1000
    stuck = InsightReport.objects.create(
        status="in_progress", requested_by="a", requested_at_us=now_us - 10_000_000, started_at_us=now_us - 10_000_000
    )
    settings.SCORING_REPORT_TIMEOUT_S = 5

    tasks.cleanup_orphans()

    stuck.refresh_from_db()
    assert stuck.status == "failed" and stuck.error_message.startswith("orphaned: in progress for over 5 s")
