"""manage.py sync_sessions against a stand-in Go TARSy (tests/support/fake_tarsy_go.py) serving
Go TARSy's e2e sessions as its API serves them: which TARSy answers, the watermark and the
re-check lists, a review added later, a token and TLS, slow and failing answers."""

import copy

import pytest

from scoring import services
from scoring.models import AlertSession, SessionSource, TarsySync, TarsySyncedSession
from scoring.tarsy_go import api as go_api
from tests.support.fake_tarsy_go import StandInGoTarsy
from tests.support.tarsy import sync
from tests.support.tarsy_go import SESSION_SCENARIOS, golden_document
from tests.support.tls import private_ca_certificate

LIST = "/api/v1/sessions"


@pytest.fixture(autouse=True)
def quick_retries(settings):
    settings.TARSY_SYNC_BACKOFF_S = 0.01
    settings.TARSY_SYNC_TIMEOUT_S = 10


def documents_by_id() -> dict[str, dict]:
    return {document["session"]["id"]: document for document in map(golden_document, SESSION_SCENARIOS)}


def fetches(tarsy_go) -> dict[str, int]:
    """Detail fetches per session id."""
    counts = tarsy_go.request_counts()
    return {session_id: counts[f"{LIST}/{session_id}"] for session_id in tarsy_go.documents}


def test_a_go_tarsy_is_recognised_and_each_session_stored_as_its_api_gave_it(db, tarsy_go):
    out, err, error = sync(tarsy_go.url)

    assert error is None, err
    assert out.splitlines() == [
        "source: TARSy (Go)", f"listed: {len(SESSION_SCENARIOS)}, unchanged: 0, created: 4, updated: 0, "
        "rejected: 0, gone: 0"
    ]  # fmt: skip
    for session_id, document in documents_by_id().items():
        stored = AlertSession.objects.get(pk=session_id)
        assert stored.source == SessionSource.TARSY_GO
        assert stored.source_document == document  # assembled from the API: nothing lost, nothing added
    counts = tarsy_go.request_counts()
    interactions = sum(len(d["llm_interactions"]) + len(d["mcp_interactions"]) for d in tarsy_go.documents.values())
    assert sum(n for path, n in counts.items() if "/trace/" in path) == interactions
    # The first run is a full pass: every finished session, newest first, the largest page.
    assert tarsy_go.list_requests() == [
        {"status": ["completed,failed,cancelled,timed_out"], "page": ["1"], "page_size": ["100"],
         "sort_by": ["created_at"], "sort_order": ["desc"]},
    ]  # fmt: skip


def test_a_go_sessions_alert_type_and_chain_choose_its_sampling_share(db, tarsy_go, settings):
    settings.SCORING_AUTO_SCORE_SHARES = {"default": 1, "alert_types": {"test-skills": 0}, "chains": {"action-chain": 0}}

    out, _, _ = sync(tarsy_go.url, "--score")

    assert "scoring: queued: 2, " in out and "not sampled: 2, waiting for budget: 0" in out
    scored = AlertSession.objects.filter(scores__isnull=False)
    assert sorted(scored.values_list("alert_type", "chain_id")) == [
        ("test-alert", "test-chain"), ("test-orchestrator", "orchestrator-chain")
    ]  # fmt: skip


def test_a_second_run_fetches_nothing_and_lists_from_the_watermark(db, tarsy_go, settings):
    sync(tarsy_go.url)
    before = fetches(tarsy_go)

    out, _, error = sync(tarsy_go.url)

    assert error is None and "created: 0, updated: 0, rejected: 0" in out
    assert fetches(tarsy_go) == before
    watermark = TarsySync.objects.get(source=tarsy_go.url).watermark_us
    assert watermark is not None
    finished, reviewed, scored = tarsy_go.list_requests()[1:]
    assert finished["start_date"] == [go_api._rfc3339(watermark)]
    # The re-check lists: sessions reviewed or scored since the last full pass was due.
    assert reviewed["review_status"] == ["in_progress,reviewed"] and scored["scoring_status"] == ["scored"]
    since = go_api.rfc3339_us(reviewed["start_date"][0])
    assert 0 < services.now_us() - since - settings.TARSY_SYNC_RECHECK_S * 1e6 < 60e6
    assert scored["start_date"] == reviewed["start_date"]


def test_a_review_added_later_is_picked_up_and_only_that_session_fetched_again(db, tarsy_go, settings):
    settings.TARSY_SYNC_RECHECK_S = 10 * 365 * 86400  # Go's e2e sessions were created in August 2026
    sync(tarsy_go.url)
    before = fetches(tarsy_go)
    document = copy.deepcopy(documents_by_id()[next(iter(tarsy_go.documents))])
    document["session"].update(review_status="reviewed", quality_rating="inaccurate", assignee="carol")
    tarsy_go.add(document)

    out, _, error = sync(tarsy_go.url)

    assert error is None and "created: 0, updated: 1" in out
    session_id = document["session"]["id"]
    assert fetches(tarsy_go)[session_id] == before[session_id] + 1
    stored = AlertSession.objects.get(pk=session_id)
    assert (stored.source_quality_rating, stored.source_reviewer) == ("inaccurate", "carol")


def test_a_session_that_was_running_is_pulled_when_it_finishes(db, tarsy_go):
    running = copy.deepcopy(golden_document("skills"))
    session_id = running["session"]["id"]
    finished = copy.deepcopy(running)
    running["session"].update(status="in_progress", completed_at=None)
    tarsy_go.add(running)
    # A newer session, so that the newest listed is after the running one.
    newer = copy.deepcopy(golden_document("pipeline"))
    tarsy_go.remove(newer["session"]["id"])
    newer["session"].update(id="6b0b4f9c-5b1e-4f49-9a3e-000000000001", created_at="2099-01-01T00:00:00Z")
    tarsy_go.add(newer)

    out, _, _ = sync(tarsy_go.url)
    assert "created: 3," in out and not AlertSession.objects.filter(pk=session_id).exists()

    tarsy_go.add(finished)
    out, _, error = sync(tarsy_go.url)

    assert error is None and "created: 1," in out
    assert AlertSession.objects.get(pk=session_id).status == "completed"


def test_a_go_tarsy_behind_tls_with_a_private_ca_and_a_token_file(db, tmp_path):
    certificate = private_ca_certificate(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text("service-account-token\n")
    server = StandInGoTarsy(token="service-account-token", certfile=certificate.certificate, keyfile=certificate.key)
    try:
        _, _, error = sync(server.url, "--token", "wrong", "--ca-bundle", str(certificate.ca_bundle))
        assert error.startswith(f"TARSy answered 401 Unauthorized to GET {server.url}/api/v1/history/sessions")

        out, _, error = sync(server.url, "--token-file", str(token_file), "--ca-bundle", str(certificate.ca_bundle))
        assert error is None and "created: 4" in out
    finally:
        server.stop()


def test_a_session_deleted_after_it_was_listed_is_gone(db, tarsy_go, monkeypatch):
    gone_id = next(iter(tarsy_go.documents))
    fetch = go_api.TarsyGoApi.fetch

    def delete_first(self, session_id, entry):
        if session_id == gone_id and gone_id in tarsy_go.documents:
            tarsy_go.remove(gone_id)
        return fetch(self, session_id, entry)

    monkeypatch.setattr(go_api.TarsyGoApi, "fetch", delete_first)

    out, err, error = sync(tarsy_go.url)

    assert error is None and "created: 3," in out and "gone: 1" in out
    assert f"gone: {gone_id}: listed, then not found" in err


def test_a_session_slower_than_its_deadline_is_reported_and_fetched_again_next_run(db, tarsy_go, settings):
    slow_id = next(iter(tarsy_go.documents))
    settings.TARSY_SYNC_SESSION_DEADLINE_S = 0.3
    tarsy_go.slow(0.5, f"{LIST}/{slow_id}/timeline")

    out, err, error = sync(tarsy_go.url)

    assert error == "1 rejected" and "created: 3," in out
    assert f"rejected: {slow_id}: session {slow_id} was not fetched within TARSY_SYNC_SESSION_DEADLINE_S" in err
    tarsy_go.slow(0)
    settings.TARSY_SYNC_SESSION_DEADLINE_S = 60
    out, _, error = sync(tarsy_go.url)  # the watermark stayed before it
    assert error is None and "created: 1," in out
    assert not TarsySyncedSession.objects.exclude(rejected_reason="").exists()


def test_an_interaction_that_is_not_json_makes_its_session_rejected_and_the_run_goes_on(db, tarsy_go):
    session_id, document = next(iter(tarsy_go.documents.items()))
    interaction_id = next(iter(document["mcp_interactions"]))
    tarsy_go.fail_next(502, times=0)
    tarsy_go.documents[session_id]["mcp_interactions"][interaction_id] = "[" * 2000

    out, err, error = sync(tarsy_go.url)

    assert error == "1 rejected" and "created: 3," in out
    assert f"rejected: {session_id}: " in err


def test_go_tarsy_down_for_a_moment_is_retried(db, tarsy_go):
    tarsy_go.fail_next(503, times=2, after=6)

    out, _, error = sync(tarsy_go.url)

    assert error is None and "created: 4" in out


def test_a_chat_added_to_an_old_session_shows_on_the_next_full_pass(db, tarsy_go, settings):
    sync(tarsy_go.url)  # the first run lists everything
    oldest = min(tarsy_go.documents.values(), key=lambda document: document["session"]["created_at"])
    chatted = copy.deepcopy(oldest)
    chatted["session"]["chat_message_count"] += 1
    tarsy_go.add(chatted)

    out, _, _ = sync(tarsy_go.url)
    assert "updated: 0" in out  # older than the watermark: not listed between full passes

    settings.TARSY_SYNC_FULL_PASS_S = 0
    out, _, error = sync(tarsy_go.url)
    assert error is None and "updated: 1" in out
    assert "start_date" not in tarsy_go.list_requests()[-1]


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d["trace"].update(stages=7),
        lambda d: d["trace"]["stages"][0]["executions"][0].update(llm_interactions=[{"id": "é/../../x"}]),
        lambda d: d["llm_interactions"].clear(),  # the trace names interactions Go then answers 404 for
    ],
)
def test_a_session_whose_answers_are_broken_is_rejected_remembered_and_the_run_goes_on(db, tarsy_go, damage):
    session_id = next(iter(tarsy_go.documents))
    document = copy.deepcopy(tarsy_go.documents[session_id])
    damage(document)
    tarsy_go.add(document)

    out, err, error = sync(tarsy_go.url)

    assert error == "1 rejected" and "created: 3," in out
    assert f"rejected: {session_id}: " in err
    before = fetches(tarsy_go)[session_id]
    _, _, error = sync(tarsy_go.url)  # remembered: not fetched again until its list entry changes
    assert error is None and fetches(tarsy_go)[session_id] == before


def test_a_document_nothing_expects_is_rejected_and_the_run_goes_on(db, tarsy_go, monkeypatch):
    session_id = next(iter(tarsy_go.documents))
    ingest = services.ingest_session

    def failing_on_one(document, **kwargs):
        if document["session"]["id"] == session_id:
            raise TypeError("'int' object is not iterable")
        return ingest(document, **kwargs)

    monkeypatch.setattr(services, "ingest_session", failing_on_one)

    out, err, error = sync(tarsy_go.url)

    assert error == "1 rejected" and "created: 3," in out
    assert f"rejected: {session_id}: could not be read: TypeError: 'int' object is not iterable" in err


def test_a_review_of_a_session_older_than_the_recheck_window_shows_on_the_next_full_pass(db, tarsy_go, settings):
    settings.TARSY_SYNC_RECHECK_S = 86400  # Go's e2e sessions are older than a day
    sync(tarsy_go.url)
    document = copy.deepcopy(next(iter(tarsy_go.documents.values())))
    document["session"].update(review_status="reviewed", quality_rating="accurate", assignee="carol")
    tarsy_go.add(document)

    out, _, _ = sync(tarsy_go.url)
    assert "updated: 0" in out

    settings.TARSY_SYNC_FULL_PASS_S = 0
    out, _, error = sync(tarsy_go.url)
    assert error is None and "updated: 1" in out
    assert AlertSession.objects.get(pk=document["session"]["id"]).source_reviewer == "carol"
