"""scoring/selectors.py: the reads behind the API and the pages."""

import json
import time
import uuid
from pathlib import Path

import pytest

from scoring import selectors, services
from scoring.insights import reports
from scoring.insights.filters import InsightFilters
from scoring.models import AlertSession, InsightReport
from tests.support.factories import T0_US, make_score, make_session

pytestmark = pytest.mark.django_db


def test_the_dashboard_list_filters_and_sorts_by_each_sessions_newest_score():
    now_us = time.time_ns() // 1000
    histories = [
        [("completed", 90)], [("completed", 75)], [("completed", 40), ("completed", 80)],
        [("completed", 80), ("failed", None)], [("completed", 60)], [("completed", 75)],
        [("completed", 95), ("pending", None)], [], [("failed", None)],
    ]  # fmt: skip
    sessions = []
    for index, history in enumerate(histories):
        session = make_session(started_at_us=T0_US + (index % 3) * 1_000_000)
        for age, (status, total) in enumerate(reversed(history)):
            make_score(session, status, total_score=total, scored_at_us=now_us - age * 1_000_000)
        sessions.append((session, history[-1] if history else None))

    def expected(keep, sort_key) -> list:
        kept = [(session, newest) for session, newest in sessions if keep(newest)]
        return [session.session_id for session, _ in sorted(kept, key=sort_key)]

    def by_score_desc(pair) -> tuple:
        session, (_, total) = pair
        return (-total, -session.started_at_us, -session.session_id.int)

    def good(newest) -> bool:
        return newest is not None and newest[1] is not None and 75 <= newest[1] <= 100

    def listed(**filters) -> list:
        return list(selectors.dashboard_sessions(**filters).values_list("session_id", flat=True))

    assert listed(band="good", sort="-score") == expected(good, by_score_desc)
    assert listed(state="scoring") == [sessions[6][0].session_id]
    assert set(listed(state="failed")) == {sessions[3][0].session_id, sessions[8][0].session_id}
    assert listed(state="not_scored") == [sessions[7][0].session_id]
    scored = listed(sort="-score")
    assert scored[:5] == expected(good, by_score_desc) + [sessions[4][0].session_id]



def test_the_pending_scores_due_first_come_first_and_one_still_waiting_not_at_all():
    now_us = time.time_ns() // 1000
    first, second, waiting = (
        make_score(make_session(), "pending", started_at_us=now_us + offset_s * 1_000_000)
        for offset_s in (-2, -1, 60)
    )
    make_score(make_session(), "in_progress", started_at_us=now_us - 3_000_000)

    assert selectors.oldest_pending_score_ids(5, now_us=now_us) == [first.pk, second.pk]
    assert selectors.oldest_pending_score_ids(1, now_us=now_us) == [first.pk]
    assert selectors.oldest_pending_score_ids(5, now_us=now_us + 61_000_000) == [
        first.pk,
        second.pk,
        waiting.pk,
    ]


def test_jobs_in_progress_are_scorings_and_reports_in_progress():
    for status in ("in_progress", "in_progress", "pending", "completed"):
        make_score(make_session(), status)
    assert selectors.in_progress_count() == 2
    assert not selectors.any_pending_report()

    report = reports.request_report(InsightFilters(), "alice")
    assert selectors.any_pending_report()
    assert selectors.in_progress_count() == 2
    InsightReport.objects.filter(pk=report.pk).update(status="in_progress")
    assert not selectors.any_pending_report()
    assert selectors.in_progress_count() == 3


def test_a_judge_job_loads_its_session_as_stored_unless_its_prompt_is_over_the_bound():
    """The precompiled read gives what the ORM gives, field by field (JSON, timestamps, the
    kept prompt length), on either database."""
    sample = Path(services.__file__).parent / "samples" / "00_tarsy_example.json"
    session, _ = services.ingest_session(json.loads(sample.read_text()), written_by="test")
    stored = AlertSession.objects.get(pk=session.pk)
    prompt_chars = stored.judge_prompt_chars
    assert prompt_chars > 0 and stored.stages

    loaded = selectors.session_within_prompt_bound(session.pk, prompt_chars)
    assert [getattr(loaded, f.attname) for f in AlertSession._meta.concrete_fields] == [
        getattr(stored, f.attname) for f in AlertSession._meta.concrete_fields
    ]
    assert selectors.session_within_prompt_bound(session.pk, prompt_chars - 1) is None
    assert selectors.session_within_prompt_bound(uuid.uuid4(), prompt_chars) is None
    # A session stored before prompt lengths were kept is loaded: its prompt is checked when built.
    AlertSession.objects.filter(pk=session.pk).update(judge_prompt_chars=None)
    assert selectors.session_within_prompt_bound(session.pk, 1).pk == session.pk
