"""scoring/budget.py: the sampling share of automatic scoring, and the spend budget, counted from
what the judge's provider charged for each scoring (the fake judge reports its usage, litellm
prices it), that holds automatic scorings back until the next period and asks manual ones to
confirm (docs/scoring.md, "Cost controls")."""

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from scoring import budget, services, tasks
from scoring.models import ScoringEvent, ScoringStatus, SessionScore
from scoring.realtime import events
from scoring.tarsy import sync
from tests.support.factories import make_score, make_session, run_next_scoring
from tests.support.fake_llm import Error, Reply
from tests.support.judge_replies import evaluated

pytestmark = pytest.mark.django_db

TURN1 = evaluated("## Score breakdown\nLogical Flow: 15/25\nConsistency: 18/25\n\n63")
TURN2 = "1. **kubectl-logs** - would have shown the pod's last output."
SYNC = "tarsy-sync:worker"


def us(moment: str) -> int:
    return int(datetime.fromisoformat(moment).replace(tzinfo=UTC).timestamp()) * 1_000_000


# --- Sampling ----------------------------------------------------------------------------------------


def test_a_share_picks_the_same_sessions_every_time_and_a_smaller_share_picks_a_subset():
    ids = [uuid.uuid4() for _ in range(4000)]

    third = {session_id for session_id in ids if budget.is_sampled(session_id, 0.3)}
    tenth = {session_id for session_id in ids if budget.is_sampled(session_id, 0.1)}

    assert third == {session_id for session_id in ids if budget.is_sampled(str(session_id).upper(), 0.3)}
    assert tenth < third
    assert 0.26 < len(third) / len(ids) < 0.34 and 0.07 < len(tenth) / len(ids) < 0.13
    assert not any(budget.is_sampled(session_id, 0) for session_id in ids)
    assert all(budget.is_sampled(session_id, 1) for session_id in ids)


def test_the_alert_types_share_comes_before_the_chains_which_comes_before_the_default(settings):
    settings.SCORING_AUTO_SCORE_SHARES = {
        "default": 0.5,
        "alert_types": {"PodCrashLooping": 0.1},
        "chains": {"kubernetes-agent-chain": 0.25},
    }

    assert budget.auto_score_share("PodCrashLooping", "kubernetes-agent-chain") == 0.1
    assert budget.auto_score_share("NamespaceTerminating", "kubernetes-agent-chain") == 0.25
    assert budget.auto_score_share("NamespaceTerminating", "other-chain") == 0.5


def test_a_sync_scores_only_the_share_of_each_alert_type_and_a_second_run_picks_the_same(settings):
    settings.SCORING_AUTO_SCORE_SHARES = {"default": 1, "alert_types": {"noisy": 0.5, "ignored": 0}, "chains": {}}
    noisy = [str(make_session(alert_type="noisy").pk) for _ in range(40)]
    ignored = [str(make_session(alert_type="ignored").pk) for _ in range(5)]
    other = [str(make_session(alert_type="kubernetes").pk) for _ in range(3)]

    outcome = sync.request_scorings(noisy + ignored + other, triggered_by=SYNC)

    picked = {session_id for session_id in noisy if budget.is_sampled(session_id, 0.5)}
    assert 0 < len(picked) < len(noisy)
    scored = {str(session_id) for session_id in SessionScore.objects.values_list("session_id", flat=True)}
    assert scored == picked | set(other)
    assert (outcome["queued"], outcome["not_sampled"]) == (len(picked) + 3, len(noisy) - len(picked) + 5)

    again = sync.request_scorings(noisy + ignored + other, triggered_by=SYNC)  # a sync run again
    assert (again["queued"], again["in_progress"], again["not_sampled"]) == (0, len(picked) + 3, outcome["not_sampled"])


# --- The spend ---------------------------------------------------------------------------------------


def test_the_spend_of_the_day_and_the_month_are_summed_from_the_stored_costs(settings, django_assert_num_queries):
    settings.SCORING_BUDGET_USD_PER_MONTH = 10
    now = us("2026-12-31T10:00:00")
    session = make_session()
    for completed_at, cost in (
        ("2026-12-31T09:00:00", "1.5"),  # today
        ("2026-12-31T00:00:00", "0.25"),  # today, from its first instant
        ("2026-12-30T23:59:59", "8"),  # this month
        ("2026-11-30T23:00:00", "100"),  # last month
        ("2026-12-31T08:00:00", None),  # unpriced
    ):
        make_score(session, completed_at_us=us(completed_at), cost_usd=cost and Decimal(cost))

    spend = budget.current_spend(now)

    assert (spend.today_usd, spend.month_usd) == (Decimal("1.75"), Decimal("9.75"))
    assert spend.used_up == ""
    with django_assert_num_queries(1):  # today's scorings alone: the earlier days' are remembered
        assert budget.current_spend(now) == spend
    make_score(session, completed_at_us=us("2026-12-31T09:30:00"), cost_usd=Decimal("0.25"))
    spend = budget.current_spend(now)
    assert spend.used_up == (
        "the monthly scoring budget is used up ($10.00 spent of SCORING_BUDGET_USD_PER_MONTH=$10.00)"
    )
    assert spend.frees_at_us == us("2027-01-01T00:00:00")
    assert spend.waiting_reason.endswith("; automatic scorings wait until 2027-01-01T00:00:00Z")


def test_with_both_used_up_the_month_is_waited_for_and_without_budgets_nothing_is_read(
    settings, django_assert_num_queries
):
    settings.SCORING_BUDGET_USD_PER_DAY, settings.SCORING_BUDGET_USD_PER_MONTH = 1, 2
    make_score(make_session(), completed_at_us=us("2026-06-15T12:00:00"), cost_usd=Decimal("3"))

    assert budget.current_spend(us("2026-06-15T13:00:00")).frees_at_us == us("2026-07-01T00:00:00")
    settings.SCORING_BUDGET_USD_PER_MONTH = None
    assert budget.current_spend(us("2026-06-15T13:00:00")).frees_at_us == us("2026-06-16T00:00:00")

    settings.SCORING_BUDGET_USD_PER_DAY = None
    with django_assert_num_queries(0):
        budget.confirm_manual_scoring(us("2026-06-15T13:00:00"), confirmed=False)


# --- Automatic scorings wait; manual ones ask -------------------------------------------------------


def priced_judge(judge_llm, settings, scorings: int) -> None:
    """A judge litellm knows the price of, answering ``scorings`` scorings of about $1 each:
    200,000 prompt tokens a turn at gpt-4o's price, most of turn 2's read from the prompt cache."""
    settings.SCORING_LLM_MODEL = "openai/gpt-4o"
    for _ in range(scorings):
        judge_llm.push(
            Reply(TURN1, prompt_tokens=200_000, completion_tokens=500, cached_tokens=0),
            Reply(TURN2, prompt_tokens=200_600, completion_tokens=100, cached_tokens=199_936),
        )


def test_a_used_up_budget_holds_automatic_scorings_saying_why_until_the_next_day(judge_llm, settings, monkeypatch):
    priced_judge(judge_llm, settings, scorings=2)
    settings.SCORING_BUDGET_USD_PER_DAY = 0.5
    first, second = make_session(), make_session()

    assert sync.request_scorings([str(first.pk)], triggered_by=SYNC)["waiting_for_budget"] == 0
    spent = run_next_scoring()
    # litellm's cost of both turns, turn 2's cached tokens at the cache's price: all 400,600
    # prompt tokens at gpt-4o's full price would be over $1.
    assert Decimal("0.5") < spent.cost_usd < Decimal("0.8")
    assert spent.cached_input_tokens == 199_936

    outcome = sync.request_scorings([str(second.pk)], triggered_by=SYNC)

    assert (outcome["queued"], outcome["waiting_for_budget"]) == (1, 1)
    held = SessionScore.objects.get(session=second)
    tomorrow = us(datetime.now(UTC).strftime("%Y-%m-%dT00:00:00")) + 86_400_000_000
    assert (held.status, held.started_at_us, held.waiting_for) == ("pending", tomorrow, "budget")
    assert held.waiting_reason == (
        f"the daily scoring budget is used up (${spent.cost_usd:.2f} spent of SCORING_BUDGET_USD_PER_DAY=$0.50); "
        f"automatic scorings wait until {datetime.fromtimestamp(tomorrow / 1e6, UTC):%Y-%m-%dT%H:%M:%SZ}"
    )
    event = ScoringEvent.objects.filter(score_id=held.score_id).last()
    assert event.fields == {"phase": events.PHASE_WAITING_FOR_BUDGET, "waiting_reason": held.waiting_reason}
    assert run_next_scoring() is None  # not lost, not taken: it waits
    assert services.expire_stale_scorings() == 0  # and waiting is not being orphaned

    monkeypatch.setattr(services, "now_us", lambda: tomorrow + 1_000_000)
    done = run_next_scoring()

    assert (done.score_id, done.status, done.waiting_reason) == (held.score_id, "completed", "")


def test_a_scoring_that_fails_after_a_paid_call_keeps_its_cost_and_the_spend_counts_it(judge_llm, settings):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o"
    settings.SCORING_LLM_MAX_RETRIES = 0
    settings.SCORING_BUDGET_USD_PER_DAY = 0.4
    judge_llm.push(Reply(TURN1, prompt_tokens=200_000, completion_tokens=500, cached_tokens=0), Error(500))
    make_score(make_session(), ScoringStatus.PENDING)

    failed = run_next_scoring()

    assert failed.status == "failed"
    assert (failed.input_tokens, failed.output_tokens, failed.cached_input_tokens) == (200_000, 500, 0)
    assert Decimal("0.4") < failed.cost_usd < Decimal("0.6")  # turn 1, paid for
    assert budget.current_spend(services.now_us()).used_up.startswith("the daily scoring budget is used up")


def test_automatic_scorings_queued_before_the_budget_ran_out_wait_and_manual_ones_run(judge_llm, settings):
    priced_judge(judge_llm, settings, scorings=1)
    settings.SCORING_BUDGET_USD_PER_MONTH = 2
    make_score(make_session(), cost_usd=Decimal("2.5"), completed_at_us=services.now_us())
    automatic = make_score(make_session(), ScoringStatus.PENDING, score_triggered_by=SYNC)
    manual, created = services.score_request(
        session_id=make_session().pk, triggered_by="alice", confirm_over_budget=True
    )

    done = run_next_scoring()

    assert created and done.score_id == manual.score_id and done.status == "completed"
    automatic.refresh_from_db()
    assert automatic.status == "pending" and automatic.waiting_reason.startswith(
        "the monthly scoring budget is used up ($2.50 spent of SCORING_BUDGET_USD_PER_MONTH=$2.00)"
    )
    assert run_next_scoring() is None


def test_after_a_wait_for_the_quota_a_wait_for_the_budget_starts_the_quotas_patience_over(settings):
    settings.SCORING_BUDGET_USD_PER_DAY = 0
    score = make_score(
        make_session(),
        ScoringStatus.PENDING,
        score_triggered_by=SYNC,
        waiting_reason="judge LLM rate-limited (429): try later",
        rate_limited_since_us=services.now_us() - 60_000_000,
    )

    assert services.claim_pending_scores(1) == []

    score.refresh_from_db()
    assert (score.waiting_for, score.rate_limited_since_us) == ("budget", None)


def test_a_manual_scoring_over_budget_is_refused_until_confirmed(settings):
    settings.SCORING_BUDGET_USD_PER_DAY = 1
    make_score(make_session(), cost_usd=Decimal("1"), completed_at_us=services.now_us())
    session = make_session()

    with pytest.raises(budget.OverBudget, match=r"^the daily scoring budget is used up \(\$1\.00 spent"):
        services.score_request(session_id=session.pk, triggered_by="alice")
    assert not session.scores.exists()

    score, created = services.score_request(session_id=session.pk, triggered_by="alice", confirm_over_budget=True)
    assert created and score.status == "pending" and score.waiting_reason == ""
    # Asking for a scoring that is already there costs nothing: nothing to confirm.
    assert services.score_request(session_id=session.pk, triggered_by="bob") == (score, False)


def test_scorings_waiting_for_a_budget_that_was_raised_go_at_the_next_cleanup(settings):
    settings.SCORING_BUDGET_USD_PER_DAY = 1
    make_score(make_session(), cost_usd=Decimal("1"), completed_at_us=services.now_us())
    automatic = make_score(make_session(), ScoringStatus.PENDING, score_triggered_by=SYNC)
    rate_limited = make_score(
        make_session(),
        ScoringStatus.PENDING,
        score_triggered_by=SYNC,
        started_at_us=services.now_us() + 3_600_000_000,
        waiting_reason="judge LLM rate-limited (429): try later",
        rate_limited_since_us=services.now_us(),
    )
    assert services.claim_pending_scores(1) == []
    tasks.cleanup_orphans()
    automatic.refresh_from_db()
    assert automatic.waiting_for == "budget"  # still used up: it waits on

    settings.SCORING_BUDGET_USD_PER_DAY = 5
    tasks.cleanup_orphans()

    automatic.refresh_from_db()
    assert (automatic.status, automatic.waiting_reason) == ("pending", "")
    assert automatic.started_at_us <= services.now_us()
    assert SessionScore.objects.get(pk=rate_limited.pk).started_at_us == rate_limited.started_at_us  # the quota's own
    [claimed] = services.claim_pending_scores(1)
    assert claimed.score_id == automatic.score_id
