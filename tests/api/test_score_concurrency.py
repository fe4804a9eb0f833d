"""Concurrent POSTs for one session never create two active scorings.

Real HTTP requests, sent at once from threads to a live server, each handled
on its own database connection: on PostgreSQL they race for real and the
partial unique index decides; on SQLite the write lock orders them.
"""

import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from scoring.models import ScoringStatus, SessionScore
from tests.support.factories import make_score, make_session

pytestmark = pytest.mark.processes
CLIENTS = 12


def post_all_at_once(live_server, session_id, body: dict) -> list[tuple[int, dict]]:
    barrier = threading.Barrier(CLIENTS)

    def post(_):
        request = urllib.request.Request(
            f"{live_server.url}/api/v1/scoring/sessions/{session_id}/score",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "X-Forwarded-User": "racer"},
            method="POST",
        )
        barrier.wait()
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(post, range(CLIENTS)))


def test_concurrent_first_requests_share_one_scoring(live_server, transactional_db):
    session = make_session()
    results = post_all_at_once(live_server, session.session_id, {})
    assert {status for status, _ in results} == {202}
    assert len({body["score_id"] for _, body in results}) == 1
    assert SessionScore.objects.filter(session=session).count() == 1


def test_concurrent_forced_rescores_start_exactly_one(live_server, transactional_db):
    session = make_session()
    make_score(session, ScoringStatus.COMPLETED)
    results = post_all_at_once(live_server, session.session_id, {"force_rescore": True})
    statuses = sorted(status for status, _ in results)
    assert statuses == [202] + [409] * (CLIENTS - 1)
    winner = next(body["score_id"] for status, body in results if status == 202)
    assert {body["score_id"] for status, body in results if status == 409} == {winner}
    assert SessionScore.objects.filter(session=session, status__in=ScoringStatus.active_values()).count() == 1
