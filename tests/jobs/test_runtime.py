"""The judge runtime's dispatcher, in-process. Worker processes running it are
tested in test_cluster.py."""

import multiprocessing

import pytest

from scoring.insights import reports
from scoring.insights.filters import InsightFilters
from scoring.jobs.runtime import HeldCounts, JudgeRuntime
from scoring.models import InsightReport, ScoringStatus, SessionScore
from scoring.trials import services as trial_services
from tests.support.factories import make_score, make_session
from tests.support.trials import candidate, reviewed
from tests.support.workers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def status_of(score) -> str:
    return SessionScore.objects.get(pk=score.pk).status


def test_a_dispatch_claims_a_pending_score_and_runs_it():
    score = make_score(make_session(), status=ScoringStatus.PENDING)
    runtime = JudgeRuntime(slots=2, poll_s=0.1)

    idle = runtime._dispatch_once()
    runtime._pool.shutdown(wait=True)

    assert idle  # one score for two free slots
    assert status_of(score) != ScoringStatus.PENDING
    assert runtime.held() == []  # the job ended (here failed: no judge model is configured)


def test_a_report_takes_one_of_the_slots_as_a_score_does_and_goes_first():
    make_score(make_session(), missing_tools_analysis="1. kubectl-logs")
    score = make_score(make_session(), status=ScoringStatus.PENDING)
    report = reports.request_report(InsightFilters(), "alice")
    runtime = JudgeRuntime(slots=1, poll_s=0.1)

    assert not runtime._dispatch_once()  # its one slot taken
    assert InsightReport.objects.get(pk=report.pk).status != ScoringStatus.PENDING
    assert status_of(score) == ScoringStatus.PENDING  # no slot was left for it
    wait_for(lambda: runtime.held() == [], what="the report's job to end")  # failed: no judge model

    runtime._dispatch_once()  # with the report's slot back
    runtime._pool.shutdown(wait=True)
    assert status_of(score) != ScoringStatus.PENDING


def test_reports_take_at_most_their_share_of_the_slots_and_a_score_gets_one_of_the_rest(settings):
    settings.SCORING_REPORT_SLOT_SHARE = 0.25
    for number in range(10):  # ten reports, each on scores of its own
        make_score(make_session(alert_type=f"type-{number}"), missing_tools_analysis="1. kubectl-logs")
        reports.request_report(InsightFilters(alert_type=f"type-{number}"), "alice")
    score = make_score(make_session(), status=ScoringStatus.PENDING)
    runtime = JudgeRuntime(slots=4, poll_s=0.1)

    runtime._dispatch_once()
    runtime._pool.shutdown(wait=True)

    assert InsightReport.objects.filter(status=ScoringStatus.PENDING).count() == 9  # one of four slots
    assert status_of(score) != ScoringStatus.PENDING


@pytest.mark.usefixtures("shipped_criteria")
def test_a_trial_scoring_takes_a_slot_scores_leave_and_is_judged_to_its_end():
    reviewed(70)
    trial = trial_services.start_trial(trial_services.plan_trial(candidate_id=candidate().pk), created_by="c")
    score = make_score(make_session(), status=ScoringStatus.PENDING)
    runtime = JudgeRuntime(slots=2, poll_s=0.1)

    runtime._dispatch_once()  # the score first, then one of the trial's two scorings
    runtime._pool.shutdown(wait=True)

    assert status_of(score) != ScoringStatus.PENDING
    statuses = sorted(trial.scorings.values_list("status", flat=True))
    assert statuses == [ScoringStatus.FAILED, ScoringStatus.PENDING]  # failed: no judge model is configured
    assert "no judge model configured" in trial.scorings.get(status=ScoringStatus.FAILED).error_message


def test_a_runtime_that_stopped_claiming_leaves_pending_scores_to_other_workers():
    """A stopping worker fails the scores it holds; it must not claim more meanwhile."""
    score = make_score(make_session(), status=ScoringStatus.PENDING)
    runtime = JudgeRuntime(slots=2, poll_s=0.1)

    assert runtime.stop_claiming()
    idle = runtime._dispatch_once()

    assert idle
    assert runtime.held() == []
    assert status_of(score) == ScoringStatus.PENDING


def hold(counts: HeldCounts, jobs: int) -> None:
    counts.report(counts.take_entry(), jobs)


def test_held_counts_add_up_live_processes_and_reuse_the_entries_of_ended_ones():
    counts = HeldCounts(1)
    child = multiprocessing.get_context("fork").Process(target=hold, args=(counts, 3))
    child.start()
    child.join()

    assert counts.total({child.pid}) == 3  # written in the child, read here
    assert counts.total(set()) == 0  # not counted once its process is gone
    # The one entry belonged to a process that has ended: the next process takes it.
    assert counts.take_entry() == 0
    assert counts.total({child.pid}) == 0
