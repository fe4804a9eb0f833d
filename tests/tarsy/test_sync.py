"""manage.py sync_sessions and scoring.tarsy.sync against a stand-in tarsy-bot
serving real tarsy-bot documents (tests/support/tarsy.py)."""

import subprocess
import sys
import threading

import pytest
from django.db import OperationalError, connection

from scoring import services
from scoring.models import AlertSession, SessionScore, TarsySync, TarsySyncedSession
from scoring.tarsy import sync as tarsy_sync
from scoring.tarsy_bot import api as tarsy_bot_api
from tests.support.factories import make_session, proxy_client
from tests.support.servers import REPO_DIR, child_env
from tests.support.tarsy import StandInTarsy, new_session, real_documents, sync
from tests.support.tls import private_ca_certificate


@pytest.fixture(autouse=True)
def quick_retries(settings):
    settings.TARSY_SYNC_BACKOFF_S = 0.01
    settings.TARSY_SYNC_TIMEOUT_S = 10


def stored_ids() -> set[str]:
    return {str(session_id) for session_id in AlertSession.objects.values_list("session_id", flat=True)}


def test_imports_every_finished_session_through_tarsy_bots_list_and_detail_endpoints(db, tarsy):
    out, err, error = sync(tarsy.url)

    assert error is None, err
    assert out.splitlines() == ["source: tarsy-bot", "listed: 6, unchanged: 0, created: 6, updated: 0, rejected: 0, gone: 0"]
    assert stored_ids() == set(tarsy.documents)
    # Repeated status= values (FastAPI's List[str] query), the largest page, newest first.
    assert tarsy.list_requests() == [
        {
            "status": ["completed", "failed", "cancelled", "timed_out"],
            "page": ["1"],
            "page_size": ["100"],
            "sort_by": ["started_at_us"],
            "sort_order": ["desc"],
        }
    ]
    assert tarsy.detail_fetches() == {session_id: 1 for session_id in tarsy.documents}
    failed = AlertSession.objects.get(pk="29f47663-9a65-43bb-9c68-09c2fe2215de")
    assert failed.status == "failed" and failed.stages == tarsy.documents[str(failed.pk)]["stages"]


def test_a_second_run_with_nothing_new_fetches_no_document(db, tarsy):
    sync(tarsy.url)

    out, _, error = sync(tarsy.url)

    assert error is None
    assert out.splitlines() == ["source: tarsy-bot", "listed: 6, unchanged: 6, created: 0, updated: 0, rejected: 0, gone: 0"]
    assert tarsy.detail_fetches() == {session_id: 1 for session_id in tarsy.documents}
    assert len(tarsy.list_requests()) == 2


def test_a_fetched_document_the_same_as_the_stored_session_counts_as_unchanged(db, tarsy):
    sync(tarsy.url)
    updated_at = dict(AlertSession.objects.values_list("session_id", "updated_at"))
    TarsySyncedSession.objects.all().delete()  # the sync forgot what it fetched: it fetches all again

    out, _, error = sync(tarsy.url)

    assert error is None
    assert out.splitlines() == ["source: tarsy-bot", "listed: 6, unchanged: 6, created: 0, updated: 0, rejected: 0, gone: 0"]
    assert tarsy.detail_fetches() == {session_id: 2 for session_id in tarsy.documents}
    assert dict(AlertSession.objects.values_list("session_id", "updated_at")) == updated_at


def test_new_sessions_and_changed_ones_are_fetched_and_nothing_else(db, tarsy):
    sync(tarsy.url)
    template = tarsy.documents["80690e6f-fdcb-4ef8-a4b1-48431b6c295e"]
    added = new_session(template, started_at_us=template["started_at_us"] + 10**9)
    tarsy.add(added)
    tarsy.add_chat_message("70d57e34-7712-4304-b22f-cb34b7eaa712")

    out, _, error = sync(tarsy.url)

    assert error is None
    assert out.splitlines() == [
        "source: tarsy-bot", "listed: 7, unchanged: 5, created: 1, updated: 1, rejected: 0, gone: 0"
    ]
    fetches = tarsy.detail_fetches()
    assert fetches[added["session_id"]] == 1
    assert fetches["70d57e34-7712-4304-b22f-cb34b7eaa712"] == 2
    assert sum(fetches.values()) == 8
    chatted = AlertSession.objects.get(pk="70d57e34-7712-4304-b22f-cb34b7eaa712")
    assert chatted.stages == tarsy.documents[str(chatted.pk)]["stages"]


def test_unfinished_sessions_are_left_until_they_finish(db, tarsy):
    session_id = "f9a445b2-48a9-481b-8a53-e221259c59aa"
    finished = tarsy.documents[session_id]
    tarsy.add({**finished, "status": "in_progress", "completed_at_us": None})

    out, _, _ = sync(tarsy.url)
    assert "listed: 5," in out and session_id not in stored_ids()

    tarsy.add(finished)
    out, _, _ = sync(tarsy.url)
    assert out.startswith("source: tarsy-bot\nlisted: 6, unchanged: 5, created: 1,")
    assert AlertSession.objects.get(pk=session_id).status == "completed"


def test_pages_through_the_whole_list(db, tarsy, monkeypatch):
    monkeypatch.setattr(tarsy_bot_api, "PAGE_SIZE", 4)

    out, _, error = sync(tarsy.url)

    assert error is None and "created: 6" in out
    assert [query["page"] for query in tarsy.list_requests()] == [["1"], ["2"]]


def test_since_asks_tarsy_for_sessions_started_from_that_date(db, tarsy):
    _, _, error = sync(tarsy.url, "--since", "2026-11-23T12:00:00")

    assert error is None
    assert tarsy.list_requests()[0]["start_date_us"] == ["1795435200000000"]
    # Not the whole list: not a full sync for /readyz and /metrics.
    assert TarsySync.objects.get(source=tarsy.url).last_success_at_us is None


def test_an_invalid_document_is_reported_by_id_and_the_others_are_stored(db, tarsy):
    bad_id = "d7fc7f00-a9e3-47fb-a277-8516df605185"
    tarsy.documents[bad_id] = {**tarsy.documents[bad_id], "stages": "none"}

    out, err, error = sync(tarsy.url)

    assert error == "1 rejected"
    assert f"rejected: {bad_id}: stages: Expected a list, got a string." in err
    assert "created: 5" in out and bad_id not in stored_ids()
    # Not fetched again until its list entry changes.
    _, _, error = sync(tarsy.url)
    assert error is None
    assert tarsy.detail_fetches()[bad_id] == 1
    assert TarsySyncedSession.objects.get(session_id=bad_id).rejected_reason.startswith("stages:")


def test_what_ingest_had_to_change_is_reported(db, tarsy):
    session_id = "d7fc7f00-a9e3-47fb-a277-8516df605185"
    tarsy.documents[session_id] = {**tarsy.documents[session_id], "final_analysis": "python\x00manage.py"}

    out, _, error = sync(tarsy.url)

    assert error is None
    (noted,) = [line for line in out.splitlines() if line.startswith("noted:")]
    assert noted.startswith(
        f"noted: {session_id}: 1 NUL character (\\u0000), which the database cannot store"
    )
    assert AlertSession.objects.get(pk=session_id).final_analysis == "python\ufffdmanage.py"


@pytest.mark.parametrize(("status", "reason"), [(401, "Unauthorized"), (403, "Forbidden")])
def test_a_refused_request_stops_the_sync_naming_the_status(db, tarsy, status, reason):
    tarsy.fail_next(status, times=10)

    _, _, error = sync(tarsy.url)

    assert error.startswith(f"TARSy answered {status} {reason} to GET {tarsy.url}/api/v1/history/sessions?")
    assert "credentials (--token / TARSY_TOKEN / TARSY_TOKEN_FILE, or --header)" in error
    assert len(tarsy.requests) == 1  # not retried
    assert TarsySync.objects.get(source=tarsy.url).last_error == error


def test_a_redirect_to_a_login_page_is_not_followed(db, tarsy):
    tarsy.fail_next(302)

    _, _, error = sync(tarsy.url, "--token", "s3cret")

    assert error.startswith(f"TARSy answered 302 Found to GET {tarsy.url}/api/v1/history/sessions?")
    assert "redirecting to https://login.example.com/oauth2/start: most likely a proxy's login" in error
    assert len(tarsy.requests) == 1


def test_the_token_and_extra_headers_are_sent(db, tarsy):
    tarsy.required_headers = {"Authorization": "Bearer s3cret", "Cookie": "_oauth2_proxy=abc"}
    _, _, error = sync(tarsy.url)
    assert error.startswith("TARSy answered 401 Unauthorized")

    out, _, error = sync(tarsy.url, "--token", "s3cret", "--header", "Cookie: _oauth2_proxy=abc")

    assert error is None and "created: 6" in out


def test_token_comes_from_tarsy_token_and_url_from_tarsy_url(db, tarsy, settings):
    tarsy.required_headers = {"Authorization": "Bearer from-env"}
    settings.TARSY_URL, settings.TARSY_TOKEN = tarsy.url, "from-env"

    out, _, error = sync()

    assert error is None and "created: 6" in out


def test_a_malformed_header_is_refused():
    _, _, error = sync("http://127.0.0.1:9", "--header", "no colon")

    assert error == "--header 'no colon' is not a header: use 'Name: value'"


@pytest.mark.parametrize("failure", [503, 500, "drop"])
def test_network_errors_and_5xx_are_retried(db, tarsy, failure):
    tarsy.fail_next(failure, times=2, after=3)  # the list, two documents, then two failures

    out, _, error = sync(tarsy.url)

    assert error is None and "created: 6" in out
    assert sum(tarsy.detail_fetches().values()) == 8


def test_tarsy_down_is_reported_after_the_retries_and_what_was_stored_stays(db, tarsy, settings):
    settings.TARSY_SYNC_MAX_RETRIES = 2
    tarsy.fail_next(503, times=100, after=3)

    out, _, error = sync(tarsy.url)

    assert error.startswith(f"GET {tarsy.url}/api/v1/history/sessions/")
    assert error.endswith("failed 3 times; last: 503 Service Unavailable")
    assert "created: 2," in out
    stored_before = stored_ids()
    assert len(stored_before) == 2
    row = TarsySync.objects.get(source=tarsy.url)
    assert row.last_success_at_us is None and row.last_error == error and row.lease_holder == ""

    tarsy.fail_next(503, times=0)
    out, _, error = sync(tarsy.url)
    assert error is None and "unchanged: 2, created: 4" in out
    assert {session_id: tarsy.detail_fetches()[session_id] for session_id in stored_before} == dict.fromkeys(
        stored_before, 1
    )
    assert TarsySync.objects.get(source=tarsy.url).last_success_at_us is not None


def test_nothing_listening_is_reported(db):
    _, _, error = sync("http://127.0.0.1:9")

    assert error.startswith("GET http://127.0.0.1:9/api/v1/history/sessions?")
    assert "failed 4 times; last: URLError: [Errno 111] Connection refused" in error


def test_a_page_that_is_not_json_is_reported(db, tarsy):
    _, _, error = sync(tarsy.url + "/not-tarsy")

    assert error.startswith(
        f"TARSy answered 404 Not Found to GET {tarsy.url}/not-tarsy/api/v1/history/sessions?"
    )


def test_a_run_while_another_holds_the_lease_does_nothing(db, tarsy):
    TarsySync.objects.create(
        source=tarsy.url, lease_holder="host-b pid 7", lease_until_us=services.now_us() + 60e6
    )

    out, _, error = sync(tarsy.url)

    assert error is None
    assert out.startswith(f"another sync of {tarsy.url} is running (host-b pid 7, lease ends in ")
    assert tarsy.requests == []


def test_an_expired_lease_is_taken_over(db, tarsy):
    TarsySync.objects.create(
        source=tarsy.url, lease_holder="dead host", lease_until_us=services.now_us() - 1
    )

    out, _, error = sync(tarsy.url)

    assert error is None and "created: 6" in out
    assert TarsySync.objects.get(source=tarsy.url).lease_holder == ""


def test_score_requests_a_scoring_of_each_new_session(db, tarsy):
    out, _, error = sync(tarsy.url, "--score")

    assert error is None
    assert "scoring: queued: 6, already scored: 0, in progress: 0, not scorable: 0, over daily cap: 0" in out
    triggers = set(SessionScore.objects.values_list("score_triggered_by", flat=True))
    assert len(triggers) == 1 and triggers.pop().startswith("tarsy-sync:cli:")

    tarsy.add_chat_message("70d57e34-7712-4304-b22f-cb34b7eaa712")
    out, _, _ = sync(tarsy.url, "--score")
    assert "updated: 1" in out and "scoring:" not in out  # only new sessions are scored
    assert SessionScore.objects.count() == 6


def test_sync_scorings_stop_at_the_daily_cap(db, tarsy, settings):
    settings.SCORING_AUTO_SCORE_MAX_PER_DAY = 4
    template = tarsy.documents["80690e6f-fdcb-4ef8-a4b1-48431b6c295e"]

    out, _, _ = sync(tarsy.url, "--score")
    assert "queued: 4," in out and "over daily cap: 2" in out

    tarsy.add(new_session(template, started_at_us=template["started_at_us"] + 10**9))
    out, _, _ = sync(tarsy.url, "--score")
    assert "scoring: over daily cap: 1" in out
    assert SessionScore.objects.count() == 4


def test_sync_scorings_take_each_alert_types_and_chains_share_and_wait_while_the_budget_is_used_up(
    db, tarsy, settings
):
    settings.SCORING_AUTO_SCORE_SHARES = {
        "default": 1,
        "alert_types": {"test-kubernetes": 0},  # two of the six sessions
        "chains": {"replica-parallel-chain": 0},  # one
    }
    settings.SCORING_BUDGET_USD_PER_DAY = 0

    out, _, _ = sync(tarsy.url, "--score")

    assert (
        "scoring: queued: 3, already scored: 0, in progress: 0, not scorable: 0, over daily cap: 0, "
        "not sampled: 3, waiting for budget: 3" in out
    )
    waiting = SessionScore.objects.select_related("session")
    assert {score.session.alert_type for score in waiting} == {
        "test-cancel-agent-execution", "test-native-thinking", "test-parallel-execution"
    }  # fmt: skip
    assert {(score.status, score.waiting_for) for score in waiting} == {("pending", "budget")}


def test_a_user_named_like_the_sync_does_not_use_its_daily_cap(db, settings):
    settings.SCORING_AUTO_SCORE_MAX_PER_DAY = 1
    for name in ("tarsy-sync", "tarsy-syncer"):
        answer = proxy_client(name).post(f"/api/v1/scoring/sessions/{make_session().session_id}/score")
        assert answer.status_code == 202
    assert proxy_client("tarsy-sync:worker").get("/api/v1/sessions/").status_code == 403

    outcome = tarsy_sync.request_scorings([str(make_session().pk)], triggered_by="tarsy-sync:worker")

    assert (outcome["queued"], outcome["over_daily_cap"]) == (1, 0)


def test_concurrent_sync_scorings_cannot_pass_the_cap_together(transactional_db, settings):
    settings.SCORING_AUTO_SCORE_MAX_PER_DAY = 5
    batches = [[str(make_session().pk) for _ in range(4)] for _ in range(2)]
    outcomes = []
    start = threading.Barrier(2)

    def request(session_ids):
        start.wait()
        try:
            outcomes.append(tarsy_sync.request_scorings(session_ids, triggered_by="tarsy-sync:worker"))
        finally:
            connection.close()

    threads = [threading.Thread(target=request, args=(ids,)) for ids in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted((o["queued"], o["over_daily_cap"]) for o in outcomes) == [(1, 3), (4, 0)]
    assert SessionScore.objects.count() == 5


BAD_TARSY_URLS = ("tarsy.example.com", "https://user:password@tarsy.example.com", "https://tarsy?token=t")


def test_a_settings_url_must_be_http(tmp_path):
    from tests.test_settings import load_settings

    for url in BAD_TARSY_URLS:
        process = load_settings(tmp_path, "settings.TARSY_URL", TARSY_URL=url)

        assert process.returncode != 0
        assert f"TARSY_URL: {url!r} is not an http(s) URL without credentials" in process.stderr


@pytest.mark.parametrize("url", BAD_TARSY_URLS)
def test_the_command_refuses_the_urls_the_settings_refuse(db, url):
    _, _, error = sync(url)

    assert error.startswith(f"{url!r} is not an http(s) URL without credentials")
    assert not TarsySync.objects.exists()  # nothing holding the URL was stored


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("TARSY_SYNC_INTERVAL_S", "0"),
        ("TARSY_SYNC_MAX_RETRIES", "-1"),
        ("SCORING_AUTO_SCORE_MAX_PER_DAY", "-5"),
    ],
)
def test_sync_settings_out_of_range_stop_the_start(tmp_path, variable, value):
    from tests.test_settings import load_settings

    process = load_settings(tmp_path, "settings.TARSY_URL", **{variable: value})

    assert process.returncode != 0
    assert f"ImproperlyConfigured: {variable}" in process.stderr


def test_two_runs_at_once_fetch_each_document_once(transactional_db, tarsy):
    """Two processes (two hosts) syncing the same TARSy at the same moment."""
    tarsy.detail_delay_s = 0.2  # so that the second starts while the first is fetching
    env = child_env(TARSY_SYNC_BACKOFF_S="0.01")
    runs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "sync_sessions", tarsy.url],
            cwd=REPO_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=120)[0] for run in runs]

    assert [run.returncode for run in runs] == [0, 0], outputs
    assert tarsy.detail_fetches() == {session_id: 1 for session_id in tarsy.documents}
    assert stored_ids() == set(tarsy.documents)
    created = [line for output in outputs for line in output.splitlines() if "created: 6" in line]
    skipped_or_unchanged = [
        output for output in outputs if "is running" in output or "unchanged: 6, created: 0" in output
    ]
    assert len(created) == 1 and len(skipped_or_unchanged) == 1, outputs


def test_a_document_the_database_cannot_store_is_reported_and_the_others_are_stored(db, tarsy):
    bad_id = "d7fc7f00-a9e3-47fb-a277-8516df605185"
    # A lone surrogate: valid JSON (\ud800), but no database encoding can store it.
    tarsy.documents[bad_id] = {**tarsy.documents[bad_id], "final_analysis": "cut \ud800 here"}

    out, err, error = sync(tarsy.url)

    assert error == "1 rejected"
    assert f"rejected: {bad_id}: could not be stored: UnicodeEncodeError" in err
    assert "created: 5" in out and bad_id not in stored_ids()
    _, _, error = sync(tarsy.url)
    assert error is None and tarsy.detail_fetches()[bad_id] == 1


def test_a_run_that_stops_mid_page_still_requests_scorings_of_what_it_stored(db, tarsy, settings):
    settings.TARSY_SYNC_MAX_RETRIES = 0
    tarsy.fail_next(503, times=100, after=3)  # the list and two documents, then TARSy fails

    out, _, error = sync(tarsy.url, "--score")

    assert error is not None and "created: 2," in out
    assert "scoring: queued: 2" in out
    assert set(SessionScore.objects.values_list("session_id", flat=True)) == set(
        AlertSession.objects.values_list("session_id", flat=True)
    )


# --- A broken or hostile TARSy ------------------------------------------------------------------

BAD_BODIES = {
    "html": ("text/html", b"<!doctype html><title>Sign in</title>"),
    "a 5,000-digit number": ("application/json", b'{"session_id": ' + b"9" * 5000 + b"}"),
    "JSON nested 1,000 deep": ("application/json", b'{"stages": ' + b"[" * 1000 + b"]" * 1000 + b"}"),
}


@pytest.mark.parametrize("kind", BAD_BODIES)
def test_a_document_that_is_not_json_this_service_reads_is_reported_and_skipped(db, tarsy, kind):
    bad_id = "d7fc7f00-a9e3-47fb-a277-8516df605185"
    tarsy.raw_answers[f"/api/v1/history/sessions/{bad_id}"] = (200, *BAD_BODIES[kind])

    out, err, error = sync(tarsy.url)

    assert error == "1 rejected"
    assert f"rejected: {bad_id}: TARSy's answer to GET {tarsy.url}/api/v1/history/sessions/{bad_id} is " in err
    assert "created: 5" in out and bad_id not in stored_ids()
    _, _, error = sync(tarsy.url)  # remembered: not fetched again until its list entry changes
    assert error is None and tarsy.detail_fetches()[bad_id] == 1


def test_a_database_locked_for_a_moment_is_waited_for_not_taken_for_a_bad_document(db, tarsy, monkeypatch):
    monkeypatch.setattr(tarsy_sync, "DATABASE_BACKOFF_S", 0.01)
    ingest = services.ingest_session
    refusals = iter([True, True])

    def locked_twice(document, **kwargs):
        if next(refusals, False):
            raise OperationalError("database is locked")
        return ingest(document, **kwargs)

    monkeypatch.setattr(services, "ingest_session", locked_twice)

    out, err, error = sync(tarsy.url)

    assert error is None and "created: 6" in out and err == ""
    assert not TarsySyncedSession.objects.exclude(rejected_reason="").exists()


def test_a_database_that_stays_away_stops_the_run_and_rejects_nothing(db, tarsy, monkeypatch):
    monkeypatch.setattr(tarsy_sync, "DATABASE_BACKOFF_S", 0.01)
    ingest = services.ingest_session
    calls = []

    def failing_over(document, **kwargs):
        calls.append(document["session_id"])
        if len(calls) > 1:
            raise OperationalError("terminating connection due to administrator command")
        return ingest(document, **kwargs)

    monkeypatch.setattr(services, "ingest_session", failing_over)

    out, _, error = sync(tarsy.url)

    assert error == (
        "the database failed 4 times: OperationalError: terminating connection due to administrator command"
    )
    assert "created: 1, updated: 0, rejected: 0" in out
    assert TarsySyncedSession.objects.count() == 1  # the session it could not store is fetched again
    monkeypatch.setattr(services, "ingest_session", ingest)
    out, _, error = sync(tarsy.url)
    assert error is None and "unchanged: 1, created: 5" in out


def test_a_run_stops_at_its_deadline_keeping_what_it_stored(db, tarsy, settings):
    settings.TARSY_SYNC_RUN_DEADLINE_S = 0.5
    tarsy.detail_delay_s = 0.2

    out, _, error = sync(tarsy.url)

    assert error.startswith("the deadline was reached ")
    stored = len(stored_ids())
    assert 0 < stored < 6 and f"created: {stored}," in out
    settings.TARSY_SYNC_RUN_DEADLINE_S = 60
    out, _, error = sync(tarsy.url)
    assert error is None and f"unchanged: {stored}, created: {6 - stored}" in out


def test_a_run_reads_at_most_the_page_limit(db, tarsy, settings, monkeypatch):
    monkeypatch.setattr(tarsy_bot_api, "PAGE_SIZE", 4)
    settings.TARSY_SYNC_MAX_PAGES = 1

    out, _, error = sync(tarsy.url)

    assert error == (
        f"{tarsy.url}/api/v1/history/sessions lists more than TARSY_SYNC_MAX_PAGES (1) pages; "
        "the sessions of the pages read are stored"
    )
    assert "created: 4," in out and len(tarsy.list_requests()) == 1


def test_a_token_with_a_trailing_newline_is_sent_without_it(db, tarsy, tmp_path):
    tarsy.required_headers = {"Authorization": "Bearer s3cret"}
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")

    out, _, error = sync(tarsy.url, "--token", "s3cret\n")
    assert error is None and "created: 6" in out
    out, _, error = sync(tarsy.url, "--token-file", str(token_file))
    assert error is None and "unchanged: 6" in out


def test_a_token_and_a_token_file_together_are_refused(tmp_path):
    _, _, error = sync("http://127.0.0.1:9", "--token", "t", "--token-file", str(tmp_path / "token"))

    assert error == "--token and --token-file are both given: give one"


def test_the_token_never_reaches_the_recorded_error(db, tarsy):
    tarsy.raw_answers["/api/v1/history/sessions"] = (400, "text/plain", b"rejected header: Bearer s3cret-token")

    _, _, error = sync(tarsy.url, "--token", "s3cret-token")

    assert error.endswith("rejected header: Bearer <credentials>")
    assert "s3cret-token" not in TarsySync.objects.get().last_error


def test_credentials_are_not_sent_over_plain_http_to_another_machine_unless_allowed(db):
    _, _, error = sync("http://tarsy.example.com", "--token", "t")
    assert error.startswith("http://tarsy.example.com is plain http: the credentials would cross the network")
    assert not TarsySync.objects.exists()

    _, _, error = sync("http://tarsy.example.com:1", "--token", "t", "--allow-plain-http")
    assert "plain http" not in error  # tried: nothing answers there


def test_one_tarsy_is_one_source_however_its_url_is_spelled(db, tarsy):
    sync(tarsy.url.upper().replace("HTTP://", "http://") + "/")
    out, _, error = sync(tarsy.url.replace("http://", "HTTP://"))

    assert error is None and "unchanged: 6" in out
    assert list(TarsySync.objects.values_list("source", flat=True)) == [tarsy.url]
    assert set(TarsySyncedSession.objects.values_list("source", flat=True)) == {tarsy.url}


def test_a_tarsy_behind_tls_with_a_private_ca_is_synced_with_the_ca_bundle(db, tmp_path):
    certificate = private_ca_certificate(tmp_path)
    server = StandInTarsy(real_documents(), tls=certificate)
    try:
        _, _, error = sync(server.url)
        assert "CERTIFICATE_VERIFY_FAILED" in error

        out, _, error = sync(server.url, "--ca-bundle", str(certificate.ca_bundle))
        assert error is None and "created: 6" in out
    finally:
        server.stop()
