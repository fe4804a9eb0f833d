"""django-q2's entry points (scoring/tasks.py): each does its one job whatever the broker
delivers, a task delivered twice included."""

import time

import pytest

from scoring import tasks
from scoring.insights import reports
from scoring.insights.filters import InsightFilters
from scoring.models import InsightReport
from tests.support.factories import make_score, make_session
from tests.support.fake_llm import Reply
from tests.support.workers import wait_for


@pytest.mark.django_db(transaction=True)
def test_run_insight_report_writes_the_report_and_a_second_delivery_does_nothing(judge_llm):
    make_score(make_session(), missing_tools_analysis="1. kubectl-logs")
    judge_llm.push(Reply("## Build first", delay=0.5))
    report = reports.request_report(InsightFilters(), "alice")

    tasks.run_insight_report(str(report.report_id))
    tasks.run_insight_report(str(report.report_id))  # the broker hands it out again

    done = wait_for(
        lambda: InsightReport.objects.filter(pk=report.pk, status="completed").first(), what="the report"
    )
    assert done.report == "## Build first"
    assert len(judge_llm.requests) == 1


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
