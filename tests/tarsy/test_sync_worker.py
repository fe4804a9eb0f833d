"""The periodic sync in the worker cluster, and how /readyz and /metrics show it."""

import threading

import pytest
from django.core.management import CommandError, call_command

from scoring import services
from scoring.models import AlertSession, SessionScore, TarsySync
from scoring.tarsy import sync
from tests.ops.test_metrics import scrape, value
from tests.support.tarsy import new_session
from tests.support.workers import wait_for


@pytest.fixture(autouse=True)
def quick_retries(settings):
    settings.TARSY_SYNC_BACKOFF_S = 0.01
    settings.TARSY_SYNC_MAX_RETRIES = 1


def readyz_sync_check(client) -> tuple[int, dict | None]:
    response = client.get("/readyz")
    return response.status_code, response.json()["checks"].get("tarsy_sync")


def test_readyz_has_no_sync_check_without_tarsy_url(client, db, settings):
    settings.TARSY_URL = ""

    assert readyz_sync_check(client)[1] is None


def test_readyz_reports_the_last_successful_sync_and_its_errors(client, transactional_db, settings, tarsy):
    settings.TARSY_URL = tarsy.url
    assert readyz_sync_check(client)[1] == {
        "status": "ok",
        "detail": "no successful sync yet",
    }

    call_command("sync_sessions", tarsy.url)
    _, check = readyz_sync_check(client)
    assert check["status"] == "ok"
    assert check["detail"].startswith("last successful sync started ")

    tarsy.fail_next(401)
    with pytest.raises(CommandError):
        call_command("sync_sessions", tarsy.url)
    _, check = readyz_sync_check(client)
    assert check["status"] == "ok"  # TARSY_SYNC_MAX_LAG_S=0: reported, never failed
    # What failed, not where: TARSy's URL and the error's text stay in the worker's log.
    assert check["detail"].endswith(" s ago; the latest sync failed (the worker log says why)")
    assert tarsy.url.split("//")[1] not in check["detail"]


def test_readyz_fails_when_the_sync_lags_more_than_allowed(client, transactional_db, settings, tarsy):
    settings.TARSY_URL, settings.TARSY_SYNC_MAX_LAG_S = tarsy.url, 600
    _, check = readyz_sync_check(client)
    assert check == {
        "status": "failed",
        "detail": "no successful sync yet (TARSY_SYNC_MAX_LAG_S=600)",
    }

    call_command("sync_sessions", tarsy.url)
    assert readyz_sync_check(client)[1]["status"] == "ok"

    TarsySync.objects.update(last_success_at_us=services.now_us() - 700_000_000)
    _, check = readyz_sync_check(client)
    assert check["status"] == "failed" and check["detail"].endswith("s ago (TARSY_SYNC_MAX_LAG_S=600)")


def test_metrics_show_each_sync_its_lag_and_its_sessions(db, tarsy):
    bad_id = "d7fc7f00-a9e3-47fb-a277-8516df605185"
    tarsy.documents[bad_id] = {**tarsy.documents[bad_id], "stages": None}
    with pytest.raises(CommandError):
        call_command("sync_sessions", tarsy.url)

    samples = scrape()

    row = TarsySync.objects.get()
    assert value(samples, "tarsy_scoring_tarsy_sync_last_success_timestamp_seconds", source=tarsy.url) == (
        row.last_success_at_us / 1e6
    )
    assert value(samples, "tarsy_scoring_tarsy_sync_lag_seconds", source=tarsy.url) >= 0
    assert value(samples, "tarsy_scoring_tarsy_sync_failing", source=tarsy.url) == 0
    assert value(samples, "tarsy_scoring_tarsy_sync_sessions", source=tarsy.url, outcome="stored") == 5
    assert value(samples, "tarsy_scoring_tarsy_sync_sessions", source=tarsy.url, outcome="rejected") == 1

    tarsy.fail_next(503, times=10)
    with pytest.raises(CommandError):
        call_command("sync_sessions", tarsy.url)
    assert value(scrape(), "tarsy_scoring_tarsy_sync_failing", source=tarsy.url) == 1


def test_the_periodic_sync_auto_scores_new_sessions_and_survives_failures(
    transactional_db, settings, tarsy, caplog
):
    settings.TARSY_URL, settings.TARSY_TOKEN = tarsy.url, "t0ken"
    settings.SCORING_AUTO_SCORE, settings.SCORING_AUTO_SCORE_MAX_PER_DAY = True, 5
    settings.TARSY_SYNC_INTERVAL_S = 0.05
    tarsy.required_headers = {"Authorization": "Bearer t0ken"}
    tarsy.fail_next(401)  # the first round fails; the next ones go on
    stop = threading.Event()
    thread = threading.Thread(target=sync.run_periodically, args=(stop,))
    thread.start()
    try:
        wait_for(lambda: TarsySync.objects.filter(last_success_at_us__isnull=False).exists(), what="a sync")
    finally:
        stop.set()
        thread.join(timeout=30)

    assert not thread.is_alive()
    assert AlertSession.objects.count() == 6
    assert set(SessionScore.objects.values_list("score_triggered_by", flat=True)) == {"tarsy-sync:worker"}
    assert SessionScore.objects.count() == 5
    assert f"sync from {tarsy.url} failed: TARSy answered 401 Unauthorized" in caplog.text
    assert "SCORING_AUTO_SCORE_MAX_PER_DAY=5 reached: 1 synced sessions left unscored" in caplog.text


def test_a_worker_cluster_syncs_by_itself(start_worker, tarsy):
    start_worker(TARSY_URL=tarsy.url, TARSY_SYNC_INTERVAL_S="0.5", SCORING_WORKERS="1")

    wait_for(lambda: AlertSession.objects.count() == 6, what="the first sync")
    template = tarsy.documents["80690e6f-fdcb-4ef8-a4b1-48431b6c295e"]
    added = new_session(template, started_at_us=template["started_at_us"] + 10**9)
    tarsy.add(added)
    wait_for(lambda: AlertSession.objects.filter(pk=added["session_id"]).exists(), what="the new session")

    assert max(tarsy.detail_fetches().values()) == 1
