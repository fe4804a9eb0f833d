"""The admin in a real browser: bulk scoring actions and a human review."""

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from scoring import services
from scoring.models import ScoreReview, SessionScore
from tests.support.factories import T0_US, make_score, make_session
from tests.support.fake_llm import Reply
from tests.support.workers import wait_for
from tests.support.judge_replies import evaluated

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def run_action(page, action: str, sessions) -> None:
    for session in sessions:
        page.check(f'input[name="_selected_action"][value="{session.session_id}"]')
    page.select_option('select[name="action"]', action)
    page.get_by_role("button", name="Go").click()


def test_score_selected_and_force_rescore_report_their_counts(live_site, signed_in, judge_llm):
    judge_llm.set_default(Reply(evaluated("Reasonable.\n\n70")))
    unscored = make_session(started_at_us=T0_US + 3)
    scored = make_session(started_at_us=T0_US + 2)
    make_score(scored, total_score=45)
    running = make_session(status="in_progress", completed_at_us=None, started_at_us=T0_US + 1)
    page = signed_in()
    page.goto(live_site.url("/admin/scoring/alertsession/"))

    run_action(page, "score_selected", [unscored, scored, running])
    expect(page.locator(".messagelist")).to_have_text(
        "1 queued for scoring; 1 already scored (use force re-score to score again); 1 skipped: not finished."
    )
    wait_for(
        lambda: SessionScore.objects.filter(session=unscored, status="completed").exists(), what="the scoring"
    )
    page.goto(live_site.url("/admin/scoring/alertsession/?scored=scored&band=weak"))
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list tbody tr .badge")).to_have_text("70 · Weak")

    page.goto(live_site.url("/admin/scoring/alertsession/"))
    run_action(page, "force_rescore_selected", [scored])
    expect(page.locator(".messagelist")).to_have_text("1 queued for scoring.")
    assert SessionScore.objects.filter(session=scored).count() == 2
    assert page.errors == []


def test_scoring_past_a_used_up_budget_is_confirmed_on_a_page_of_its_own(live_site, signed_in, judge_llm):
    live_site.stop_server()
    live_site.server = live_site.start_web(port=live_site.server.port, SCORING_BUDGET_USD_PER_MONTH="3")
    judge_llm.set_default(Reply(evaluated("Reasonable.\n\n70")))
    make_score(make_session(started_at_us=T0_US), cost_usd=Decimal("3.5"), completed_at_us=services.now_us())
    chosen = [make_session(started_at_us=T0_US + 1), make_session(started_at_us=T0_US + 2)]
    page = signed_in()
    page.goto(live_site.url("/admin/scoring/alertsession/"))

    run_action(page, "force_rescore_selected", chosen)
    expect(page.locator("[data-over-budget]")).to_have_text(
        "the monthly scoring budget is used up ($3.50 spent of SCORING_BUDGET_USD_PER_MONTH=$3.00)."
    )
    expect(page.locator("#content")).to_contain_text("Re-score the 2 selected sessions all the same?")
    page.get_by_role("link", name="No, take me back").click()
    expect(page.locator("#result_list")).to_be_visible()
    assert not SessionScore.objects.filter(session__in=chosen).exists()

    run_action(page, "force_rescore_selected", chosen)
    page.get_by_role("button", name="Yes, score past the budget").click()
    expect(page.locator(".messagelist")).to_have_text("2 queued for scoring.")
    wait_for(
        lambda: SessionScore.objects.filter(session__in=chosen, status="completed").count() == 2, what="the scorings"
    )
    assert page.errors == []


def test_a_reviewer_records_a_disagreement_on_the_score_page(live_site, signed_in):
    score = make_score(make_session(), total_score=82, score_analysis="Thorough **enough**.")
    page = signed_in()
    page.goto(live_site.url(f"/admin/scoring/sessionscore/{score.score_id}/change/"))
    expect(page.locator(".field-score .badge")).to_have_text("82 · Good")
    expect(page.locator(".field-score_analysis_html strong")).to_have_text("enough")

    page.check('input[name="verdict"][value="disagree"]')
    page.fill('input[name="reviewer_score"]', "35")
    page.fill('textarea[name="note"]', "It never read the pod logs.")
    page.get_by_role("button", name="Record review").click()

    expect(page.locator(".messagelist")).to_have_text("Your review (disagree, 35) was recorded.")
    expect(page.locator(".inline-group")).to_contain_text("It never read the pod logs.")
    review = ScoreReview.objects.get()
    assert (review.reviewer.username, review.verdict, review.reviewer_score) == ("operator", "disagree", 35)
    assert SessionScore.objects.get(pk=score.pk).total_score == 82

    page.goto(live_site.url("/admin/scoring/sessionscore/?review=disagreed"))
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list tbody tr")).to_contain_text("0 agree, 1 disagree")
    assert page.errors == []
