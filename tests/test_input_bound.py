"""SCORING_MAX_INPUT_TOKENS: a session too large to send fails before any judge call,
and score_sessions --dry-run names it beforehand with the same estimate."""

import io
import re

import pytest
from django.core.management import call_command

from scoring import services
from scoring.models import AlertSession, ScoringStatus
from tests.support.api import session_document
from tests.support.factories import run_next_scoring

pytestmark = pytest.mark.django_db
LIMIT = 6_000


def stored_session(tool_output_chars: int) -> str:
    document = session_document()
    document["stages"][0]["mcp_communications"][0]["details"]["tool_result"] = {
        "result": "pod/web-1 Running\n" * (tool_output_chars // 18)
    }
    session, _ = services.ingest_session(document, written_by="tarsy")
    return str(session.session_id)


def test_a_scoring_over_the_bound_fails_at_once_without_calling_the_judge(judge_llm, settings):
    settings.SCORING_MAX_INPUT_TOKENS = LIMIT
    session_id = stored_session(40_000)
    services.score_request(session_id=session_id, triggered_by="bob")

    score = run_next_scoring()

    assert score.status == ScoringStatus.FAILED
    assert re.fullmatch(
        r"the judge prompt of this session is about [\d,]+ tokens \(estimated at 4 characters a token\), "
        r"over SCORING_MAX_INPUT_TOKENS=6,000: nothing was sent to the judge",
        score.error_message,
    ), score.error_message
    assert judge_llm.requests == []
    assert score.investigation_digest is None  # refused before the session was even read


def test_the_prompt_itself_is_checked_when_its_length_was_not_kept(judge_llm, settings):
    settings.SCORING_MAX_INPUT_TOKENS = LIMIT
    session_id = stored_session(40_000)
    AlertSession.objects.filter(pk=session_id).update(judge_prompt_chars=None)  # stored before it was kept
    services.score_request(session_id=session_id, triggered_by="bob")

    score = run_next_scoring()

    assert "over SCORING_MAX_INPUT_TOKENS=6,000" in score.error_message
    assert judge_llm.requests == []


def test_a_scoring_within_the_bound_is_sent(judge_llm, settings):
    settings.SCORING_MAX_INPUT_TOKENS = 50_000
    session_id = stored_session(40_000)
    services.score_request(session_id=session_id, triggered_by="bob")

    score = run_next_scoring()

    assert score.error_message is None or "SCORING_MAX_INPUT_TOKENS" not in score.error_message
    assert judge_llm.requests


def test_the_dry_run_names_the_sessions_over_the_bound_with_the_scorings_estimate(judge_llm, settings):
    settings.SCORING_MAX_INPUT_TOKENS = LIMIT
    large, small = stored_session(40_000), stored_session(100)
    out = io.StringIO()

    call_command("score_sessions", "--unscored", "--dry-run", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0].startswith("would score 2 sessions with openai/fake-judge")
    row = rf"{large}\s+-  would fail: the judge prompt of this session is about ([\d,]+) .*"
    [listed] = [re.fullmatch(row, line) for line in lines if line.startswith(str(large))]
    assert listed and "SCORING_MAX_INPUT_TOKENS=6,000" in listed.group(0)
    [small_row] = [line for line in lines if line.startswith(str(small))]
    assert "would fail" not in small_row
    # The scoring refuses it with the same estimate.
    services.score_request(session_id=large, triggered_by="bob")
    assert f"about {listed.group(1)} tokens" in run_next_scoring().error_message
