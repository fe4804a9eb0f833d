"""manage.py parse_judge_replies: the dimensions and missing tools of scores stored before
they were read at completion (services.read_stored_replies)."""

from io import StringIO

import pytest
from django.core.management import call_command

from scoring import services
from scoring.models import MissingTool, ScoringStatus, SessionScore
from tests.support.factories import make_score, make_session

pytestmark = pytest.mark.django_db

BREAKDOWN = "Logical Flow: 15/25\nConsistency: 18/25\nTool Relevance: 14/25\nSynthesis Quality: 13/25"


def parse(*args) -> str:
    out = StringIO()
    call_command("parse_judge_replies", *args, stdout=out)
    return out.getvalue().strip()


def stored_score(**fields) -> SessionScore:
    """A completed score as stored before its text was read: no dimensions, no tool rows."""
    defaults = {"total_score": 60, "score_analysis": BREAKDOWN, "missing_tools_analysis": "1. **read-file** - why"}
    return make_score(make_session(), ScoringStatus.COMPLETED, **{**defaults, **fields})


def test_completed_scores_get_their_dimensions_and_tools_and_the_counts_are_reported():
    complete = stored_score()
    mismatched = stored_score(total_score=70, missing_tools_analysis="No critical missing tools identified.")
    stored_score(score_analysis="No breakdown here.", missing_tools_analysis="1. `pods_log`\n2. `events_list`")
    failed = make_score(make_session(), ScoringStatus.FAILED)

    output = parse()

    assert output == (
        "read 3 completed score(s): 2 with a criteria breakdown (1 not adding up to the total), "
        "2 naming 3 missing tool(s)"
    )
    complete.refresh_from_db()
    assert complete.dimensions == {"logical_flow": 15, "consistency": 18, "tool_relevance": 14, "synthesis_quality": 13}
    assert list(complete.missing_tools.values_list("name", "key", "position")) == [("read-file", "read-file", 0)]
    mismatched.refresh_from_db()
    assert mismatched.warnings == ["score breakdown: the four criteria add up to 60, not to the total score 70"]
    failed.refresh_from_db()
    assert failed.dimensions is None and not failed.missing_tools.exists()


def test_a_second_run_reads_only_scores_never_read_and_all_reads_every_one_again():
    stored_score()
    nothing_to_read = stored_score(score_analysis="Prose only.", missing_tools_analysis="No critical missing tools identified.")
    parse()
    before = list(MissingTool.objects.values_list("pk", "key"))

    # A score with neither is read again (it has nothing to show it was read): no change.
    assert parse() == "read 1 completed score(s): 0 with a criteria breakdown (0 not adding up to the total), 0 naming 0 missing tool(s)"
    assert list(MissingTool.objects.values_list("pk", "key")) == before

    assert parse("--all").startswith("read 2 completed score(s): 1 with a criteria breakdown")
    assert [key for _, key in MissingTool.objects.values_list("pk", "key")] == ["read-file"]
    nothing_to_read.refresh_from_db()
    assert nothing_to_read.dimensions is None


def test_reading_again_replaces_what_was_read_and_keeps_other_warnings():
    score = stored_score(
        total_score=70, warnings=["instruction override in alert_data.note: 'Ignore all previous instructions'"]
    )
    parse()
    SessionScore.objects.filter(pk=score.pk).update(
        total_score=60, missing_tools_analysis="1. **pods_log**\n2. **events_list**"
    )

    parse("--all")

    score.refresh_from_db()
    assert score.warnings == ["instruction override in alert_data.note: 'Ignore all previous instructions'"]
    assert list(score.missing_tools.values_list("key", flat=True)) == ["pods-log", "events-list"]


def test_scores_are_read_in_batches(monkeypatch):
    monkeypatch.setattr(services, "READ_REPLIES_BATCH", 2)
    scores = [stored_score() for _ in range(5)]

    assert parse().startswith("read 5 completed score(s): 5 with a criteria breakdown")
    assert MissingTool.objects.filter(score__in=scores).count() == 5
