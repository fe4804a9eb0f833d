"""Sessions in every state the status table tells apart (``services.scoring_decision``),
for the tests that show that the request and the batch both follow it."""

import time

import pytest

from scoring import services
from scoring.models import AlertSession, ScoringStatus, SessionScore
from tests.support.factories import make_score, make_session

FINISHED_SESSION_STATUSES = {"completed", "failed", "cancelled", "timed_out"}

# What a session's newest score can be, for the status table's tests: its status, and
# whether it is an orphan (an active score past its time limit; the tests set both limits
# to ORPHAN_LIMIT_S).
NEWEST_SCORES = {
    "never scored": (None, False),
    "pending": (ScoringStatus.PENDING, False),
    "in_progress": (ScoringStatus.IN_PROGRESS, False),
    "completed": (ScoringStatus.COMPLETED, False),
    "failed": (ScoringStatus.FAILED, False),
    "orphaned pending": (ScoringStatus.PENDING, True),
    "orphaned in_progress": (ScoringStatus.IN_PROGRESS, True),
}
ORPHAN_LIMIT_S = 600


def make_session_with_newest(newest: str, **session_fields) -> tuple[AlertSession, SessionScore | None]:
    """A session whose newest score is ``newest`` (a key of NEWEST_SCORES), and that score."""
    session = make_session(**session_fields)
    status, orphaned = NEWEST_SCORES[newest]
    if status is None:
        return session, None
    if not orphaned:
        return session, make_score(session, status)
    long_ago_us = time.time_ns() // 1000 - (ORPHAN_LIMIT_S + 1) * 1_000_000
    return session, make_score(session, status, scored_at_us=long_ago_us, started_at_us=long_ago_us)


@pytest.fixture
def orphan_limits(settings):
    settings.SCORING_JOB_TIMEOUT_S = ORPHAN_LIMIT_S
    settings.SCORING_PENDING_TIMEOUT_S = ORPHAN_LIMIT_S


def expected_decision(session: AlertSession, newest: str, force_rescore: bool) -> services.ScoringDecision:
    """The table's decision for a session made by ``make_session_with_newest``: an orphan counts as failed."""
    status, orphaned = NEWEST_SCORES[newest]
    return services.scoring_decision(
        session_status=session.status,
        latest_status=ScoringStatus.FAILED if orphaned else status,
        force_rescore=force_rescore,
    )


def assert_orphan_rule(session: AlertSession, newest_before: SessionScore | None, newest: str) -> None:
    """An orphan is failed exactly where it would otherwise block a scoring: a finished session's."""
    if not NEWEST_SCORES[newest][1]:
        return
    newest_before.refresh_from_db()
    if session.status in FINISHED_SESSION_STATUSES:
        assert newest_before.status == "failed" and newest_before.error_message.startswith("orphaned: ")
    else:
        assert newest_before.status == NEWEST_SCORES[newest][0]
