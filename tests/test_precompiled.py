"""scoring/precompiled.py: a query compiled once runs with the values of each run."""

import pytest
from django.db.models.sql import UpdateQuery

from scoring.models import AlertSession, ScoringStatus, SessionScore
from scoring.precompiled import precompile
from tests.support.factories import make_score, make_session

pytestmark = pytest.mark.django_db


def test_each_run_puts_its_values_where_the_markers_were():
    session = make_session()
    make_score(session, ScoringStatus.FAILED, started_at_us=1_000)
    make_score(session, ScoringStatus.FAILED, started_at_us=2_000)
    marker = -1
    started = SessionScore.objects.filter(started_at_us__lte=marker).order_by("started_at_us")
    started_by = precompile(started.values("started_at_us").query, until=marker)

    assert started_by.rows(until=999) == []
    assert started_by.rows(until=1_500) == [(1_000,)]
    assert started_by.rows(until=2_000) == [(1_000,), (2_000,)]


def test_an_update_changes_its_rows_and_returns_none():
    session = make_session(alert_type="before")
    marker = "a marker"
    update = AlertSession.objects.filter(pk=session.pk).query.chain(UpdateQuery)
    update.add_update_values({"alert_type": marker})

    assert precompile(update, alert_type=marker).rows(alert_type="after") == []
    session.refresh_from_db()
    assert session.alert_type == "after"


def test_wrapped_sql_surrounds_the_query():
    for status in (ScoringStatus.FAILED, ScoringStatus.FAILED, ScoringStatus.COMPLETED):
        make_score(make_session(), status)
    failed = SessionScore.objects.filter(status=ScoringStatus.FAILED).values("pk").query

    assert precompile(failed, wrap="SELECT COUNT(*) FROM ({}) AS failed").rows() == [(2,)]
