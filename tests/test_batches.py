"""scoring/batches.py: scoring requests for many sessions at once, by the rules of a single
request (``services.decide_scorings``), a batch of sessions a few statements in all."""

import time
import uuid

import pytest

from scoring import batches, selectors, services
from scoring.judge.prompts import PROMPT_HASH
from scoring.models import ScoringStatus
from tests.support.factories import copy_on_session, make_score, make_session, newest_score
from tests.support.status_table import (
    NEWEST_SCORES,
    assert_orphan_rule,
    expected_decision,
    make_session_with_newest,
)

pytestmark = pytest.mark.django_db


def test_a_batch_copies_its_new_scores_and_leaves_the_others():
    unscored, finished, failed = make_session(), make_session(), make_session()
    kept = make_score(finished, total_score=77)
    make_score(failed, ScoringStatus.FAILED)

    outcome = batches.score_sessions(
        [unscored.session_id, finished.session_id, failed.session_id], triggered_by="cli", force_rescore=False
    )

    assert outcome == {"queued": 1, "already_scored": 2, "in_progress": 0, "not_scorable": 0}
    assert copy_on_session(unscored) == newest_score(unscored)
    assert copy_on_session(unscored)[1:] == ("pending", None, PROMPT_HASH)
    assert copy_on_session(finished) == (kept.score_id, "completed", 77, PROMPT_HASH)


def test_a_forced_batch_copies_every_new_score():
    sessions = [make_score(make_session(), total_score=20 + index).session for index in range(3)]

    outcome = batches.score_sessions([s.session_id for s in sessions], triggered_by="cli", force_rescore=True)

    assert outcome["queued"] == 3
    for session in sessions:
        assert copy_on_session(session) == newest_score(session)
        assert copy_on_session(session)[1] == "pending"


def test_a_batch_session_that_gained_an_active_score_since_it_was_read_keeps_that_one():
    session = make_session()
    # Created behind the services' back, so the session row does not know of it yet:
    # what a batch sees when another request creates one between its read and its insert.
    racing = services.pending_score(session.session_id, PROMPT_HASH, "alice", time.time_ns() // 1000)
    racing.save()

    outcome = batches.score_sessions([session.session_id], triggered_by="cli", force_rescore=False)

    assert outcome == {"queued": 0, "already_scored": 0, "in_progress": 1, "not_scorable": 0}
    assert list(session.scores.values_list("score_id", flat=True)) == [racing.score_id]


def test_a_batch_counts_unknown_and_unfinished_sessions_as_not_scorable():
    running = make_session(status="in_progress")

    outcome = batches.score_sessions(
        [uuid.uuid4(), running.session_id], triggered_by="cli", force_rescore=True
    )

    assert outcome == {"queued": 0, "already_scored": 0, "in_progress": 0, "not_scorable": 2}



# Where the batch counts each decision of the status table.
COUNTED_AS = {
    services.ScoringDecision.NOT_SCORABLE: "not_scorable",
    services.ScoringDecision.IN_PROGRESS: "in_progress",
    services.ScoringDecision.ALREADY_SCORED: "already_scored",
    services.ScoringDecision.NEW_SCORE: "queued",
}


@pytest.mark.parametrize("force_rescore", [False, True])
def test_a_batch_follows_the_status_table(orphan_limits, force_rescore):
    cases = [
        (*make_session_with_newest(newest, status=session_status), newest)
        for session_status in ("completed", "in_progress")
        for newest in NEWEST_SCORES
    ]
    expected = {"queued": 0, "already_scored": 0, "in_progress": 0, "not_scorable": 1}  # 1: the unknown id
    for session, _, newest in cases:
        expected[COUNTED_AS[expected_decision(session, newest, force_rescore)]] += 1

    outcome = batches.score_sessions(
        [session.session_id for session, _, _ in cases] + [uuid.uuid4()],
        triggered_by="cli",
        force_rescore=force_rescore,
    )

    assert outcome == expected
    for session, before, newest in cases:
        now_newest = selectors.latest_score(session.session_id)
        if expected_decision(session, newest, force_rescore) is services.ScoringDecision.NEW_SCORE:
            assert now_newest.status == "pending" and (before is None or now_newest.score_id != before.score_id)
        else:
            assert (now_newest and now_newest.score_id) == (before and before.score_id), newest
        assert_orphan_rule(session, before, newest)
