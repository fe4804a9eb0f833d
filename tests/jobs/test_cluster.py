"""Judge jobs in real worker processes: POST, the worker scores, GET reads it;
and what happens when a worker is killed or told to stop mid-scoring."""

import signal
import time

import pytest
from django.core.management import call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from scoring.models import ScoringEvent, SessionScore, WorkerHeartbeat
from scoring.realtime import events
from tests.support.factories import make_session, operator_client  # noqa: F401 (fixture)
from tests.support.fake_llm import Reply, Together
from tests.support.workers import wait_for
from tests.support.judge_replies import EVALUATION, evaluated

pytestmark = pytest.mark.processes

TURN1 = evaluated("Logical Flow: 14/25\nConsistency: 17/25\nTool Relevance: 12/25\nSynthesis Quality: 13/25\n\n56")
TURN2 = "1. **pods_log (previous container)** - the crash output was never read."


def url(session_id) -> str:
    return f"/api/v1/scoring/sessions/{session_id}/score"


def score_status(score_id):
    return SessionScore.objects.values_list("status", flat=True).get(pk=score_id)


def test_a_posted_scoring_completes_in_a_worker_process(start_worker, judge_llm, operator_client):
    judge_llm.push(Reply(TURN1), Reply(TURN2))
    start_worker(**judge_llm.env())
    session = make_session()

    accepted = operator_client.post(url(session.session_id))
    assert accepted.status_code == 202

    def finished():
        body = operator_client.get(url(session.session_id)).json()
        return body if body["status"] in ("completed", "failed") else None

    body = wait_for(finished, what="the worker to finish the scoring")
    assert body["status"] == "completed", body
    assert body["score_id"] == accepted.json()["score_id"]
    assert body["total_score"] == 56
    assert body["score_analysis"].startswith(EVALUATION) and "Logical Flow: 14/25" in body["score_analysis"]
    assert body["missing_tools_analysis"] == TURN2
    assert body["score_triggered_by"] == "alice" and body["current_prompt_used"] is True
    assert len(judge_llm.requests) == 2
    assert [e.event_type for e in ScoringEvent.objects.filter(score_id=body["score_id"])] == [
        events.STARTED, events.PROGRESS, events.PROGRESS, events.COMPLETED,
    ]


def test_a_worker_process_samples_turn_one_at_once_and_keeps_the_median(start_worker, judge_llm, operator_client):
    together = Together([Reply(evaluated(f"Sample.\n\n{score}")) for score in (50, 90, 71)])
    judge_llm.set_default(lambda body: together(body) if len(body["messages"]) == 1 else Reply(TURN2))
    start_worker(**{**judge_llm.env(), "SCORING_JUDGE_SAMPLES": "3", "SCORING_LLM_TIMEOUT_S": "15"})
    session = make_session()

    operator_client.post(url(session.session_id))

    def finished():
        body = operator_client.get(url(session.session_id)).json()
        return body if body["status"] in ("completed", "failed") else None

    body = wait_for(finished, what="the worker to finish the scoring")
    assert (body["status"], body["total_score"], body["score_spread"], body["unstable"]) == ("completed", 71, 40, True)
    assert sorted(body["score_samples"]) == [50, 71, 90]
    assert judge_llm.requests[-1].messages[1] == {"role": "assistant", "content": evaluated("Sample.\n\n71")}


def test_with_no_model_configured_the_scoring_fails_saying_what_to_set(start_worker, fake_llm, operator_client):
    start_worker(SCORING_LLM_MODEL="")
    session = make_session()
    assert operator_client.post(url(session.session_id)).status_code == 202
    body = wait_for(
        lambda: (b := operator_client.get(url(session.session_id)).json())["status"] == "failed" and b,
        what="the scoring to fail",
    )
    assert body["error_message"] == "no judge model configured: set SCORING_LLM_MODEL"
    assert fake_llm.requests == []


def slow_judge_env(judge_llm, **extra) -> dict:
    """A judge that takes long enough to be caught mid-scoring."""
    judge_llm.set_default(Reply(TURN1, delay=25))
    return {**judge_llm.env(), "SCORING_LLM_TIMEOUT_S": "60", **extra}


def test_sigkilled_worker_blocks_rescoring_no_longer_than_the_job_timeout(
    start_worker, judge_llm, operator_client, settings
):
    cluster = start_worker(**slow_judge_env(judge_llm))
    session = make_session()
    first = operator_client.post(url(session.session_id)).json()["score_id"]
    wait_for(lambda: judge_llm.requests, what="the judge call to start")

    cluster.signal_all(signal.SIGKILL)
    cluster.wait_stopped()
    assert score_status(first) == "in_progress"  # nobody is left to finish it

    # The job timeout that decides is this (API) process's; set it to end a few
    # seconds from now, whatever the worker's start-up took.
    claimed_s_ago = time.time() - SessionScore.objects.get(pk=first).started_at_us / 1e6
    settings.SCORING_JOB_TIMEOUT_S = claimed_s_ago + 3
    force = {"force_rescore": True}
    # Before the job timeout, the orphan still counts as active: re-scoring is refused...
    blocked = operator_client.post(url(session.session_id), force, format="json")
    assert blocked.status_code == 409 and blocked.json()["score_id"] == first

    time.sleep(3.5)
    # ...after it, the orphan is failed and the re-score starts.
    retry = operator_client.post(url(session.session_id), force, format="json")
    assert retry.status_code == 202 and retry.json()["score_id"] != first
    orphan = SessionScore.objects.get(pk=first)
    assert orphan.status == "failed" and orphan.error_message.startswith("orphaned: in progress")
    assert ScoringEvent.objects.filter(score_id=first, event_type=events.FAILED).exists()

    judge_llm.reset()
    judge_llm.push(Reply(TURN1), Reply(TURN2))
    start_worker(**judge_llm.env())
    wait_for(lambda: score_status(retry.json()["score_id"]) == "completed", what="the re-score to complete")


def test_cleanup_command_fails_orphans_left_by_a_killed_worker(start_worker, judge_llm, operator_client, capsys):
    cluster = start_worker(**slow_judge_env(judge_llm))
    session = make_session()
    orphan = operator_client.post(url(session.session_id)).json()["score_id"]
    wait_for(lambda: judge_llm.requests, what="the judge call to start")
    cluster.signal_all(signal.SIGKILL)
    cluster.wait_stopped()

    call_command("cleanup_orphaned_scorings", "--older-than", "0")

    assert "orphaned scorings marked failed: 1" in capsys.readouterr().out
    score = SessionScore.objects.get(pk=orphan)
    assert score.status == "failed" and "orphaned" in score.error_message
    rescore = operator_client.post(url(session.session_id), {"force_rescore": True}, format="json")
    assert rescore.status_code == 202 and rescore.json()["score_id"] != orphan


def test_sigterm_fails_in_flight_scorings_as_worker_shut_down(start_worker, judge_llm, operator_client):
    cluster = start_worker(**slow_judge_env(judge_llm))
    session = make_session()
    score_id = operator_client.post(url(session.session_id)).json()["score_id"]
    wait_for(lambda: judge_llm.requests, what="the judge call to start")

    cluster.signal_all(signal.SIGTERM)
    cluster.wait_stopped()

    score = SessionScore.objects.get(pk=score_id)
    assert (score.status, score.error_message) == ("failed", "worker shut down")
    failed = ScoringEvent.objects.get(score_id=score_id, event_type=events.FAILED)
    assert failed.fields == {"error_message": "worker shut down"}


def test_worker_start_fails_orphans_older_than_the_job_timeout(start_worker, judge_llm, settings):
    from tests.support.factories import make_score

    stale = make_score(make_session(), "in_progress", started_at_us=int(time.time() * 1e6) - 3_600_000_000)
    fresh = make_score(make_session(), "in_progress", started_at_us=int(time.time() * 1e6))
    start_worker(**judge_llm.env())
    assert score_status(stale.score_id) == "failed"
    assert score_status(fresh.score_id) == "in_progress"  # may belong to another live cluster


def first_turns(judge_llm) -> list:
    return [request for request in judge_llm.requests if len(request.messages) == 1]


def all_completed(score_ids) -> bool:
    return set(SessionScore.objects.filter(pk__in=score_ids).values_list("status", flat=True)) == {"completed"}


def post_scorings(operator_client, count: int) -> list[str]:
    return [operator_client.post(url(make_session().session_id)).json()["score_id"] for _ in range(count)]


def test_one_worker_process_runs_many_judge_jobs_at_once(start_worker, judge_llm, operator_client):
    delay_s = 4
    judge_llm.set_default(Reply(TURN1, delay=delay_s))
    start_worker(**{**judge_llm.env(), "SCORING_WORKERS": "1", "SCORING_CONCURRENCY_PER_WORKER": "5", "SCORING_LLM_TIMEOUT_S": "30"})
    score_ids = post_scorings(operator_client, 5)

    wait_for(lambda: len(first_turns(judge_llm)) == 5, what="five judge conversations to start")
    arrivals = sorted(request.arrived for request in first_turns(judge_llm))
    # Run one after another, the fifth would start four turns (16 s) after the first.
    assert arrivals[-1] - arrivals[0] < delay_s
    wait_for(
        lambda: all_completed(score_ids),
        what="all five to complete",
    )


def test_the_global_in_flight_limit_holds_jobs_back(start_worker, judge_llm, operator_client):
    delay_s = 2
    judge_llm.set_default(Reply(TURN1, delay=delay_s))
    start_worker(
        **{
            **judge_llm.env(),
            "SCORING_WORKERS": "1",
            "SCORING_CONCURRENCY_PER_WORKER": "4",
            "SCORING_MAX_IN_FLIGHT": "2",
            "SCORING_LLM_TIMEOUT_S": "30",
        }
    )
    score_ids = post_scorings(operator_client, 4)

    wait_for(
        lambda: all_completed(score_ids),
        what="all four to complete",
    )
    arrivals = sorted(request.arrived for request in first_turns(judge_llm))
    # Two at a time: the third conversation starts only after one of the first
    # two has finished both of its turns.
    assert arrivals[2] - arrivals[0] >= 2 * delay_s


def test_pending_scores_without_a_task_are_run_by_polling_workers(start_worker, judge_llm):
    """A backlog left from before the start, or a score whose wake-up task was lost:
    the pending row is the job, and free slots look for it."""
    from tests.support.factories import make_score

    judge_llm.set_default(Reply(TURN1))
    backlog = [make_score(make_session(), "pending").score_id for _ in range(3)]
    start_worker(**{**judge_llm.env(), "SCORING_WORKER_POLL_S": "0.5"})

    wait_for(
        lambda: all_completed(backlog),
        what="the backlog to complete",
    )


def test_a_busy_worker_process_leaves_new_scorings_to_one_with_free_slots(start_worker, judge_llm, operator_client):
    delay_s = 4
    judge_llm.set_default(Reply(TURN1, delay=delay_s))
    start_worker(
        **{**judge_llm.env(), "SCORING_WORKERS": "2", "SCORING_CONCURRENCY_PER_WORKER": "1", "SCORING_LLM_TIMEOUT_S": "30"}
    )
    score_ids = post_scorings(operator_client, 2)

    wait_for(lambda: len(first_turns(judge_llm)) == 2, what="two judge conversations to start")
    arrivals = sorted(request.arrived for request in first_turns(judge_llm))
    # One slot per process: both at once only if each process took one.
    assert arrivals[1] - arrivals[0] < delay_s
    wait_for(
        lambda: all_completed(score_ids),
        what="both to complete",
    )


def test_sigterm_fails_every_job_the_worker_process_holds(start_worker, judge_llm, operator_client):
    cluster = start_worker(**slow_judge_env(judge_llm, SCORING_WORKERS="1", SCORING_CONCURRENCY_PER_WORKER="3"))
    score_ids = post_scorings(operator_client, 3)
    wait_for(lambda: len(first_turns(judge_llm)) == 3, what="three judge calls to start")

    cluster.signal_all(signal.SIGTERM)
    cluster.wait_stopped()

    for score_id in score_ids:
        score = SessionScore.objects.get(pk=score_id)
        assert (score.status, score.error_message) == ("failed", "worker shut down")
        assert ScoringEvent.objects.filter(score_id=score_id, event_type=events.FAILED).exists()


def test_the_heartbeat_reports_the_judge_jobs_the_worker_processes_hold(
    start_worker, judge_llm, operator_client
):
    judge_llm.set_default(Reply(TURN1, delay=40))
    cluster = start_worker(
        **{
            **judge_llm.env(),
            "SCORING_WORKERS": "2",
            "SCORING_CONCURRENCY_PER_WORKER": "2",
            "SCORING_LLM_TIMEOUT_S": "60",
        }
    )
    post_scorings(operator_client, 3)
    # Two slots a process: the three jobs are held by both worker processes.
    wait_for(lambda: len(first_turns(judge_llm)) == 3, what="three judge conversations to start")

    beat = wait_for(
        lambda: WorkerHeartbeat.objects.filter(pid=cluster.process.pid, in_flight=3).first(),
        what="a heartbeat counting the three jobs",
    )
    metrics = Client().get("/metrics")
    gauge = {
        tuple(sample.labels.values()): sample.value
        for family in text_string_to_metric_families(metrics.content.decode())
        for sample in family.samples
        if sample.name == "tarsy_scoring_worker_in_flight"
    }
    assert gauge == {(beat.cluster_name, beat.host, str(cluster.process.pid)): 3}
