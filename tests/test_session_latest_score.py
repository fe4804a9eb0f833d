"""Each session row keeps a copy of its newest score (``AlertSession.latest_*``), written
with every change to a score; the session lists filter and sort on it."""

import time
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scoring import batches, selectors, services
from scoring.judge.prompts import PROMPT_HASH
from scoring.models import AlertSession, ScoringCriteria, ScoringStatus, SessionScore
from tests.support.factories import T0_US, make_score, make_session, proxy_client
from tests.support.fake_llm import Reply

pytestmark = pytest.mark.django_db

LATEST_FIELDS = ("latest_score_id", "latest_status", "latest_total_score", "latest_prompt_hash")


def copy_on_session(session: AlertSession) -> tuple:
    session.refresh_from_db(fields=LATEST_FIELDS)
    return tuple(getattr(session, field) for field in LATEST_FIELDS)


def newest_score(session: AlertSession) -> tuple:
    score = selectors.latest_score(session.session_id)
    return (score.score_id, score.status, score.total_score, score.prompt_hash)


def request(session: AlertSession, force_rescore: bool = False) -> SessionScore:
    score, _ = services.score_request(
        session_id=session.session_id, triggered_by="bob", force_rescore=force_rescore
    )
    return score


def test_a_session_never_scored_has_no_copy():
    assert copy_on_session(make_session()) == (None, None, None, None)


def test_a_requested_scoring_is_copied_as_pending():
    session = make_session()

    score = request(session)

    assert copy_on_session(session) == (score.score_id, "pending", None, PROMPT_HASH)


def test_claim_and_completion_are_copied(judge_llm):
    judge_llm.push(Reply("Logical Flow: 20/25\n\n81"), Reply("1. **kubectl-logs**"))
    session = make_session()
    score = request(session)

    (claimed,) = services.claim_pending_scores(1)
    assert copy_on_session(session) == (score.score_id, "in_progress", None, PROMPT_HASH)
    services.run_claimed_score(claimed)

    assert copy_on_session(session) == (score.score_id, "completed", 81, PROMPT_HASH)
    assert copy_on_session(session) == newest_score(session)


def test_a_failure_is_copied():
    session = make_session()
    score = request(session)

    services.fail_scoring(score.score_id, "judge LLM timed out")

    assert copy_on_session(session) == (score.score_id, "failed", None, PROMPT_HASH)


def test_an_orphan_failed_by_the_cleanup_is_copied(settings):
    settings.SCORING_JOB_TIMEOUT_S = 60
    session = make_session()
    orphan = make_score(session, ScoringStatus.IN_PROGRESS, started_at_us=time.time_ns() // 1000 - 61_000_000)

    assert services.expire_stale_scorings() == 1

    assert copy_on_session(session) == (orphan.score_id, "failed", None, PROMPT_HASH)


def test_a_request_fails_a_stale_active_score_and_returns_it(settings):
    settings.SCORING_PENDING_TIMEOUT_S = 600
    session = make_session()
    lost = make_score(session, ScoringStatus.PENDING, scored_at_us=time.time_ns() // 1000 - 601_000_000)

    score = request(session)

    assert score.score_id == lost.score_id and score.status == "failed"
    assert score.error_message.startswith("orphaned: queued for over 600 s")
    assert copy_on_session(session) == (lost.score_id, "failed", None, PROMPT_HASH)


def test_a_forced_rescore_fails_a_stale_active_score_and_starts_a_new_one(settings):
    settings.SCORING_PENDING_TIMEOUT_S = 600
    session = make_session()
    lost = make_score(session, ScoringStatus.PENDING, scored_at_us=time.time_ns() // 1000 - 601_000_000)

    score = request(session, force_rescore=True)

    assert score.score_id != lost.score_id and score.status == "pending"
    lost.refresh_from_db()
    assert lost.status == "failed" and lost.error_message.startswith("orphaned: queued for over 600 s")
    assert copy_on_session(session) == (score.score_id, "pending", None, PROMPT_HASH)


def test_a_request_returns_an_active_score_within_its_time_limit_as_it_is():
    session = make_session()
    active = make_score(session, ScoringStatus.IN_PROGRESS)

    assert request(session).score_id == active.score_id
    active.refresh_from_db()
    assert active.status == "in_progress"


def test_a_forced_rescore_replaces_the_copy_of_the_finished_score():
    session = make_session()
    make_score(session, total_score=90, prompt_hash="0" * 64)

    score = request(session, force_rescore=True)

    assert copy_on_session(session) == (score.score_id, "pending", None, PROMPT_HASH)


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
    racing = services.pending_score(session.session_id, "alice", time.time_ns() // 1000)
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


@pytest.mark.parametrize("path", ["request", "batch"])
def test_scoring_records_the_criteria_it_used(path):
    session = make_session()

    if path == "request":
        request(session)
    else:
        batches.score_sessions([session.session_id], triggered_by="cli", force_rescore=False)

    criteria = ScoringCriteria.objects.get()
    assert criteria.prompt_hash == PROMPT_HASH and criteria.score_prompt and criteria.followup_prompt


def test_reading_a_score_takes_one_query_once_the_caller_is_known():
    session = make_session()
    make_score(session)
    client = proxy_client()
    client.get(f"/api/v1/scoring/sessions/{session.session_id}/score")

    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/api/v1/scoring/sessions/{session.session_id}/score")

    assert response.status_code == 200
    assert len(queries) == 1, [query["sql"] for query in queries]


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
