"""Trials: planning one (the sample, the estimate, what is refused), running its scorings as
judge jobs against the fake judge, and that no score of the service changes."""

import re

import pytest
from django.contrib.auth.models import User

from scoring import selectors, services
from scoring.criteria import services as criteria_services
from scoring.models import AlertSession, ScoringStatus, SessionScore, TrialScoring, TrialStatus
from scoring.tasks import cleanup_orphans
from scoring.trials import selectors as trial_selectors
from scoring.trials import services as trials
from tests.support.criteria import criteria_text, make_current
from tests.support.factories import make_go_session, make_score, make_session
from tests.support.fake_llm import Error, Reply
from tests.support.judge_replies import evaluated
from tests.support.trials import candidate, marked, reference_in, reviewed, run_all, scripted_judge

pytestmark = pytest.mark.django_db


# --- Planning ---------------------------------------------------------------------------------


def test_only_a_candidate_with_reviewed_sessions_and_a_size_in_range_is_planned(shipped_criteria):
    draft = criteria_services.create_draft(
        criteria_text("Draft"), scope="global", scope_value="", created_by="c"
    )
    with pytest.raises(trials.TrialRejected, match="is draft: only a candidate is tried"):
        trials.plan_trial(candidate_id=draft.pk)
    version = candidate()
    with pytest.raises(trials.TrialRejected, match="has a review of ours or a Go TARSy reviewer's rating"):
        trials.plan_trial(candidate_id=version.pk)  # nothing reviewed yet
    make_score(make_session())  # scored, not reviewed: not in the pool
    with pytest.raises(trials.TrialRejected, match="has a review"):
        trials.plan_trial(candidate_id=version.pk)
    reviewed(70)
    for size in (0, trials.MAX_TRIAL_SIZE + 1):
        with pytest.raises(trials.TrialRejected, match=f"size must be from 1 to {trials.MAX_TRIAL_SIZE}"):
            trials.plan_trial(candidate_id=version.pk, size=size)
    with pytest.raises(trials.TrialRejected, match="no criteria version 999999"):
        trials.plan_trial(candidate_id=999999)
    assert len(trials.plan_trial(candidate_id=version.pk).session_ids) == 1


def test_a_candidate_with_the_current_texts_is_refused(shipped_criteria):
    reviewed(70)
    same = criteria_services.create_draft(
        criteria_services.criteria_from_files(
            score=shipped_criteria.score_prompt.encode(), followup=shipped_criteria.followup_prompt.encode()
        ),
        scope="chain",
        scope_value="kubernetes-agent-chain",
        created_by="carol",
    )
    criteria_services.make_candidate(same.pk, changed_by="carol")
    with pytest.raises(
        trials.TrialRejected, match="is what judges every session drawn now: nothing to compare"
    ):
        trials.plan_trial(candidate_id=same.pk)


def test_the_pool_is_the_candidates_scope_of_reviewed_or_rated_finished_sessions(shipped_criteria):
    ours = reviewed(70)
    rated = make_go_session(rating="inaccurate")
    make_go_session(rating="")  # not rated
    other_chain = reviewed(40, chain_id="db-chain", alert_type="database")
    unfinished = reviewed(50, status="in_progress")
    everywhere = {str(s.session_id) for s in trial_selectors.pool(candidate())}
    assert everywhere == {str(ours.session_id), str(rated.session_id), str(other_chain.session_id)}
    assert str(unfinished.session_id) not in everywhere
    on_chain = trial_selectors.pool(candidate("Chain", scope="chain", scope_value="db-chain"))
    assert [s.session_id for s in on_chain] == [other_chain.session_id]
    narrowed = trial_selectors.pool(candidate("Narrow"), alert_type="kubernetes")
    assert {s.session_id for s in narrowed} == {ours.session_id, rated.session_id}


def test_a_reference_is_the_mean_of_each_reviewers_newest_score_else_the_tarsy_rating(shipped_criteria):
    session = reviewed(80)
    second = make_score(session, total_score=40)
    for reviewer, score in (("rita", 60), ("sam", 71)):  # rita again (newest wins), then sam
        services.record_review(
            score_id=second.score_id,
            reviewer=User.objects.get_or_create(username=reviewer)[0],
            verdict="disagree",
            reviewer_score=score,
        )
    rated = make_go_session(rating="partially_accurate")
    both = reviewed(90, source_quality_rating="inaccurate")  # ours is taken over the rating
    found = trial_selectors.references([session.session_id, rated.session_id, both.session_id])
    assert found[str(session.session_id)] == trial_selectors.Reference(66, "weak", "reviews")  # (60 + 71) / 2
    assert found[str(rated.session_id)] == trial_selectors.Reference(None, "weak", "tarsy")
    assert found[str(both.session_id)].score == 90


def test_the_sample_keeps_each_band_and_alert_type_and_the_same_seed_draws_the_same(shipped_criteria):
    for i in range(12):
        reviewed(85, alert_type="kubernetes")  # good
    for i in range(6):
        reviewed(20, alert_type="kubernetes")  # poor
    reviewed(55, alert_type="database")  # a stratum of one
    pool = trial_selectors.pool(candidate())
    drawn = trial_selectors.stratified_sample(pool, 10, seed=7)
    found = trial_selectors.references(drawn)
    bands = sorted(found[session].band for session in drawn)
    assert len(drawn) == 10
    # 12/19, 6/19, 1/19 of 10: 6.3, 3.2, 0.5; the single one kept, the rest by largest remainders.
    assert bands.count("good") + bands.count("poor") == 9 and bands.count("weak") == 1
    assert bands.count("good") == 6
    assert trial_selectors.stratified_sample(pool, 10, seed=7) == drawn
    assert trial_selectors.stratified_sample(pool, 10, seed=8) != drawn
    assert len(trial_selectors.stratified_sample(pool, 50, seed=7)) == 19  # all of them


def test_the_dry_run_estimates_both_arms_of_every_session_and_writes_nothing(shipped_criteria, settings):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o-mini"  # litellm knows its window and price
    for score in (70, 30, 55):
        reviewed(score)
    plan = trials.plan_trial(candidate_id=candidate().pk, size=3, seed=1)
    assert plan.estimate["scorings"] == 6
    assert {arm["judge_model"] for arm in plan.estimate["arms"].values()} == {"openai/gpt-4o-mini"}
    assert plan.estimate["input_tokens"] > 6 * 100 and float(plan.estimate["cost_usd"]) > 0
    assert plan.estimate["would_fail"] == []
    assert {arm for by_arm in plan.hashes.values() for arm in by_arm} == {"candidate", "current"}
    assert all(by_arm["current"] == shipped_criteria.prompt_hash for by_arm in plan.hashes.values())
    assert (
        plan.estimate["cost_usd"]
        == f"{sum(float(arm['cost_usd']) for arm in plan.estimate['arms'].values()):.4f}"
    )
    assert not TrialScoring.objects.exists()


def test_a_judge_model_alone_is_a_candidate_and_what_judges_now_is_refused(shipped_criteria, settings):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o-mini"
    reviewed(70)
    with pytest.raises(trials.TrialRejected, match="a trial needs a candidate"):
        trials.plan_trial()
    with pytest.raises(trials.TrialRejected, match="nothing to compare"):
        trials.plan_trial(candidate_model="openai/gpt-4o-mini")  # the configured model
    with pytest.raises(trials.TrialRejected, match="litellm cannot place the judge model 'no-such-model'"):
        trials.plan_trial(candidate_model="no-such-model")
    with pytest.raises(
        trials.TrialRejected, match="is anthropic's, and a trial's model is reached through the"
    ):
        trials.plan_trial(candidate_model="anthropic/claude-3-5-sonnet-20240620")  # not sent the OpenAI key
    plan = trials.plan_trial(candidate_model="openai/gpt-4o")
    assert plan.candidate is None and plan.models == {"candidate": "openai/gpt-4o", "current": ""}
    (by_arm,) = plan.hashes.values()
    assert by_arm == {"candidate": shipped_criteria.prompt_hash, "current": shipped_criteria.prompt_hash}
    arms = plan.estimate["arms"]
    assert (
        arms["candidate"]["judge_model"] == "openai/gpt-4o"
        and arms["current"]["judge_model"] == "openai/gpt-4o-mini"
    )
    # gpt-4o costs more than gpt-4o-mini for the same prompt
    assert float(arms["candidate"]["cost_usd"]) > 5 * float(arms["current"]["cost_usd"])


def test_a_trial_of_a_judge_model_sends_its_arm_to_that_model(shipped_criteria, judge_llm):
    reviewed(70)
    trial = trials.start_trial(
        trials.plan_trial(candidate_model="openai/fake-judge-large"), created_by="carol"
    )
    assert trial.candidate_label == "openai/fake-judge-large"
    judge_llm.set_default(
        lambda body: Reply(evaluated("80" if body["model"] == "fake-judge-large" else "50"))
    )
    run_all()
    models = {request.body["model"] for request in judge_llm.requests}
    assert models == {"fake-judge-large", "fake-judge"}
    candidate_scoring = trial.scorings.get(arm="candidate")
    assert (candidate_scoring.total_score, candidate_scoring.judge_model) == (80, "openai/fake-judge-large")
    assert candidate_scoring.transcript["model"] == "openai/fake-judge-large"
    current_scoring = trial.scorings.get(arm="current")
    assert (current_scoring.total_score, current_scoring.judge_model) == (50, "openai/fake-judge")
    assert trial_selectors.results(trial)["arms"]["candidate"]["judge_models"] == ["openai/fake-judge-large"]


# --- Running -------------------------------------------------------------------------------


def test_a_trial_judges_each_session_under_both_and_leaves_the_services_scores_alone(
    shipped_criteria, judge_llm, django_capture_on_commit_callbacks
):
    sessions = [marked(score) for score in (90, 80, 70, 40, 30, 20)]
    before = list(SessionScore.objects.order_by("pk").values_list("pk", "status", "total_score"))
    latest = [AlertSession.objects.get(pk=s.pk).latest_score_id for s in sessions]
    version = candidate()
    with django_capture_on_commit_callbacks(execute=True) as queued:
        trial = trials.start_trial(trials.plan_trial(candidate_id=version.pk, size=6), created_by="carol")
    assert len(queued) == 1 and trial.status == TrialStatus.RUNNING
    assert trial.scorings.filter(status="pending").count() == 12

    # The candidate's totals follow the reviewers (2 under each); the current criteria say 50.
    scripted_judge(judge_llm, lambda prompt: reference_in(prompt) - 2, lambda prompt: 50)
    assert run_all() == 12

    trial.refresh_from_db()
    assert trial.status == TrialStatus.COMPLETED and trial.ended_at_us >= trial.created_at_us
    candidate_scorings = trial.scorings.filter(arm="candidate")
    assert sorted(candidate_scorings.values_list("total_score", flat=True)) == [18, 28, 38, 68, 78, 88]
    assert set(trial.scorings.filter(arm="current").values_list("total_score", flat=True)) == {50}
    assert set(candidate_scorings.values_list("prompt_hash", flat=True)) == {version.prompt_hash}
    one = candidate_scorings.first()
    assert one.transcript["conversations"][0]["messages"][0]["content"].startswith("Candidate criteria.")
    assert one.missing_tools_analysis.startswith("1. **kubectl-logs**") and one.input_tokens > 0
    # Nothing of the service's own scores changed.
    assert list(SessionScore.objects.order_by("pk").values_list("pk", "status", "total_score")) == before
    assert [AlertSession.objects.get(pk=s.pk).latest_score_id for s in sessions] == latest

    figures = trial_selectors.results(trial)
    assert figures["paired_sessions"] == 6 and not figures["too_few_reviews"]
    assert figures["arms"]["candidate"]["mean_abs_diff"] == 2.0
    assert figures["arms"]["current"]["mean_abs_diff"] == pytest.approx(
        (40 + 30 + 20 + 10 + 20 + 30) / 6, abs=1e-3
    )
    assert figures["arms"]["candidate"]["spearman_rho"] == 1.0
    assert figures["arms"]["current"]["spearman_rho"] is None  # every total the same
    low, high = figures["arms"]["candidate"]["mean_abs_diff_ci"]
    assert low == high == 2.0
    mae = figures["differences"]["mean_abs_diff"]
    assert mae["difference"] < -20 and mae["ci"][1] < 0 and mae["significant"]
    assert figures["differences"]["mean_shift"]["difference"] == pytest.approx(
        (88 + 78 + 68 + 38 + 28 + 18) / 6 - 50
    )
    assert figures["largest_differences"][0]["difference"] == 38  # 88 - 50
    confusion = {row["row"]: row["counts"] for row in figures["arms"]["current"]["confusion"]}
    assert sum(confusion["weak"].values()) == 6  # 50 is weak for every session


def test_below_the_minimum_the_figures_are_withheld_with_the_reason(shipped_criteria, judge_llm, settings):
    settings.SCORING_AGREEMENT_MINIMUM_SESSIONS = 5
    for score in (90, 20):
        reviewed(score)
    scripted_judge(judge_llm, lambda p: 70, lambda p: 50)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    run_all()
    figures = trial_selectors.results(trial)
    assert figures["too_few_reviews"] and figures["paired_sessions"] == 2
    assert figures["reason"]["mean_abs_diff"] == "too few reviews: 2 sessions, a figure needs at least 5"
    assert figures["n"] == {"mean_abs_diff": 2, "spearman_rho": 2, "weighted_kappa": 2, "mean_shift": 2}
    assert figures["arms"]["candidate"]["mean_abs_diff"] is None and figures["differences"] == {}
    assert figures["arms"]["candidate"]["completed"] == 2  # what ran is still said


def test_sessions_with_a_tarsy_rating_alone_count_for_kappa_and_not_for_mae_or_rho(
    shipped_criteria, judge_llm
):
    for score in (90, 20):
        marked(score)
    for rating in ("accurate", "inaccurate", "partially_accurate", "accurate", "inaccurate"):
        make_go_session(rating=rating, alert_data={"note": "REF-50"})
    scripted_judge(judge_llm, lambda prompt: reference_in(prompt), lambda prompt: 50)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    run_all()

    figures = trial_selectors.results(trial)

    assert figures["paired_sessions"] == 7
    assert figures["n"] == {"mean_abs_diff": 2, "spearman_rho": 2, "weighted_kappa": 7, "mean_shift": 7}
    assert figures["too_few"] == ["mean_abs_diff", "spearman_rho"] and figures["too_few_reviews"]
    candidate_arm = figures["arms"]["candidate"]
    assert candidate_arm["mean_abs_diff"] is None and candidate_arm["mean_abs_diff_ci"] is None
    assert candidate_arm["weighted_kappa"] is not None and candidate_arm["weighted_kappa_ci"] is not None
    assert set(figures["differences"]) == {"weighted_kappa", "mean_shift"}


def test_a_score_without_an_evaluation_is_left_out_of_the_figures_and_counted(shipped_criteria, judge_llm):
    for score in (90, 80, 70, 30, 20, 10):
        marked(score)

    def reply(body):
        prompt = body["messages"][0]["content"]
        if prompt.startswith("Candidate criteria.") and reference_in(prompt) == 10:
            return Reply("10")  # the score line alone, as a small real model writes it, every time
        return Reply(evaluated(str(reference_in(prompt))))

    judge_llm.set_default(reply)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    run_all()

    figures = trial_selectors.results(trial)
    assert figures["paired_sessions"] == 5  # the session whose candidate scoring gave no evaluation is out
    assert figures["arms"]["candidate"]["completed"] == 6
    assert figures["arms"]["candidate"]["analysis_missing"] == 1
    assert figures["arms"]["current"]["analysis_missing"] == 0


def test_the_figures_follow_a_review_recorded_after_the_trial_ended(shipped_criteria, judge_llm):
    for score in (90, 80, 70, 30, 20):
        marked(score)
    scripted_judge(judge_llm, lambda prompt: reference_in(prompt), lambda prompt: 50)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    run_all()
    assert trial_selectors.results(trial)["arms"]["candidate"]["mean_abs_diff"] == 0.0
    session = trial.scorings.first().session
    score = session.scores.first()
    services.record_review(
        score_id=score.score_id,
        reviewer=User.objects.create_user("zoe"),
        verdict="disagree",
        reviewer_score=0,
    )
    assert trial_selectors.results(trial)["arms"]["candidate"]["mean_abs_diff"] > 0


def test_the_pool_leaves_out_sessions_a_narrower_current_version_judges(shipped_criteria):
    plain = reviewed(70)
    on_chain = reviewed(60, chain_id="db-chain")
    on_type = reviewed(50, alert_type="disk-full", chain_id="db-chain")
    make_current("Chain", scope="chain", scope_value="db-chain")
    make_current("Type", scope="alert_type", scope_value="disk-full")
    assert {s.pk for s in trial_selectors.pool(candidate())} == {plain.pk}
    chain_pool = trial_selectors.pool(candidate("C2", scope="chain", scope_value="db-chain"))
    assert {s.pk for s in chain_pool} == {on_chain.pk}
    type_pool = trial_selectors.pool(candidate("T2", scope="alert_type", scope_value="disk-full"))
    assert {s.pk for s in type_pool} == {on_type.pk}
    assert len(trial_selectors.pool(None)) == 3  # a model alone: every session


def test_a_dry_runs_sessions_start_that_very_sample_or_are_refused_once_out_of_the_pool(shipped_criteria):
    sessions = [reviewed(score) for score in (90, 70, 50, 30, 10, 80)]
    version = candidate()
    shown = trials.plan_trial(candidate_id=version.pk, size=3, seed=5).session_ids
    reviewed(40)  # the pool changed since: the same seed might draw others
    plan = trials.plan_trial(candidate_id=version.pk, session_ids=shown)
    assert plan.session_ids == shown and plan.size == 3
    gone = next(s for s in sessions if str(s.session_id) == shown[0])
    AlertSession.objects.filter(pk=gone.pk).update(status="in_progress")
    with pytest.raises(
        trials.TrialRejected, match=f"1 of the session_ids are not in the trial's pool .*{gone.pk}"
    ):
        trials.plan_trial(candidate_id=version.pk, session_ids=shown)


def test_a_quota_sends_a_trial_scoring_back_until_the_provider_says(shipped_criteria, judge_llm, settings):
    settings.SCORING_LLM_MAX_RETRY_AFTER_S = 0  # every 429 sends the scoring back to the queue
    reviewed(70)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    judge_llm.set_default(Error(429, "rate limited", headers={"Retry-After": "30"}))
    (claimed, *_) = trials.claim_pending_trial_scorings(1)
    waiting = trials.run_claimed_trial_scoring(claimed)
    assert waiting.status == "pending" and waiting.rate_limited_since_us is not None
    assert waiting.due_at_us >= services.now_us() + 25_000_000
    assert "next try at" in waiting.waiting_reason
    # Not due: the next claim takes the other arm's scoring, not this one.
    assert [s.pk for s in trials.claim_pending_trial_scorings(5)] == [
        s.pk for s in trial.scorings.exclude(pk=claimed.pk)
    ]


def test_a_trial_scoring_rate_limited_after_its_trial_was_cancelled_fails(
    shipped_criteria, judge_llm, settings
):
    settings.SCORING_LLM_MAX_RETRY_AFTER_S = 0
    reviewed(70)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    (claimed, _) = trials.claim_pending_trial_scorings(2)
    trials.cancel_trial(trial.pk, cancelled_by="dave")
    judge_llm.set_default(Error(429, "rate limited", headers={"Retry-After": "30"}))

    ended = trials.run_claimed_trial_scoring(claimed)

    assert ended.status == "failed" and ended.error_message == "trial cancelled"
    assert trials.claim_pending_trial_scorings(5) == []


def test_a_judge_failure_fails_the_trial_scoring_with_its_transcript(shipped_criteria, judge_llm):
    reviewed(70)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    judge_llm.set_default(Error(401, "bad key"))
    run_all()
    trial.refresh_from_db()
    assert trial.status == TrialStatus.COMPLETED  # ended: nothing more will run
    failed = trial.scorings.get(arm="candidate")
    assert failed.status == "failed" and failed.error_message
    assert failed.transcript["conversations"][0]["error"]
    assert trial_selectors.results(trial)["paired_sessions"] == 0


def test_cancelling_fails_the_pending_scorings_unasked(shipped_criteria):
    for score in (70, 40):
        reviewed(score)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    (claimed,) = trials.claim_pending_trial_scorings(1)
    trials.cancel_trial(trial.pk, cancelled_by="dave")
    trial.refresh_from_db()
    assert trial.status == TrialStatus.CANCELLED
    assert trial_selectors.progress(trial) == {
        "pending": 0, "in_progress": 1, "completed": 0, "failed": 3, "total": 4
    }  # fmt: skip
    assert set(trial.scorings.filter(status="failed").values_list("error_message", flat=True)) == {
        "trial cancelled by dave"
    }
    with pytest.raises(trials.TrialRejected, match="only a running trial is cancelled"):
        trials.cancel_trial(trial.pk, cancelled_by="dave")


def test_trial_scorings_hold_their_share_of_the_judge_jobs_in_flight(shipped_criteria, settings):
    settings.SCORING_MAX_IN_FLIGHT, settings.SCORING_TRIAL_SLOT_SHARE = 4, 0.5
    for score in (70, 40):
        reviewed(score)
    trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")  # four scorings
    assert len(trials.claim_pending_trial_scorings(4)) == 2  # half of four
    assert trials.claim_pending_trial_scorings(4) == []
    pending = make_score(make_session(), status=ScoringStatus.PENDING)
    assert [s.pk for s in services.claim_pending_scores(4)] == [pending.pk]  # the rest stays the scorings'


def test_trial_scorings_count_in_the_judge_jobs_in_flight_and_come_after_scorings(shipped_criteria, settings):
    settings.SCORING_MAX_IN_FLIGHT = 2
    reviewed(70)
    trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    pending = make_score(make_session(), status=ScoringStatus.PENDING)
    assert [s.pk for s in services.claim_pending_scores(2)] == [pending.pk]
    assert len(trials.claim_pending_trial_scorings(5)) == 1  # one room left of two
    assert selectors.in_progress_count() == 2
    assert trials.claim_pending_trial_scorings(5) == []


def test_a_trial_scoring_whose_worker_stopped_is_failed_by_the_cleanup(shipped_criteria, settings):
    reviewed(70)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    (claimed,) = trials.claim_pending_trial_scorings(1)
    TrialScoring.objects.filter(pk=claimed.pk).update(started_at_us=1)
    cleanup_orphans()
    claimed.refresh_from_db()
    assert claimed.status == "failed"
    assert re.match(r"orphaned: in progress for over \d+ s", claimed.error_message)
    assert trial.scorings.get(arm="current").status == "pending"  # pending is never lost


def test_the_cleanup_ends_a_running_trial_none_of_whose_scorings_is_active(shipped_criteria):
    reviewed(70)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    trial.scorings.update(status="completed", total_score=60)  # as if the last write's end was lost
    cleanup_orphans()
    trial.refresh_from_db()
    assert trial.status == TrialStatus.COMPLETED and trial.ended_at_us is not None


def test_a_trials_model_stays_with_its_scoring_and_the_next_job_on_the_thread_judges_with_the_configured(
    shipped_criteria, judge_llm
):
    reviewed(70)
    trials.start_trial(trials.plan_trial(candidate_model="openai/fake-judge-large"), created_by="carol")
    judge_llm.set_default(Reply(evaluated("70")))
    run_all()
    make_score(make_session(), status=ScoringStatus.PENDING)
    judge_llm.reset(Reply(evaluated("70")))
    (claimed,) = services.claim_pending_scores(1)
    scored = services.run_claimed_score(claimed)
    assert scored.judge_model == "openai/fake-judge"
    assert {request.body["model"] for request in judge_llm.requests} == {"fake-judge"}
