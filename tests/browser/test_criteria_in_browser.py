"""Criteria versions in a real browser: a draft written in the admin, its differences and its
prompt previewed, made a candidate and promoted for a chain, each asking why; the chain's next
scoring is judged by it (the worker and the fake judge)."""

import pytest
from playwright.sync_api import expect

from scoring.models import CriteriaChange, CriteriaVersion, SessionScore
from tests.support.criteria import criteria_text
from tests.support.factories import make_session
from tests.support.fake_llm import Reply
from tests.support.judge_replies import evaluated
from tests.support.workers import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_an_operator_drafts_previews_and_promotes_criteria_for_a_chain(
    live_site, signed_in, judge_llm, shipped_criteria
):
    judge_llm.set_default(Reply(evaluated("Reasonable.\n\n66")))
    session = make_session(chain_id="k8s-chain", alert_data={"alert": "PodCrashLooping"})
    criteria = criteria_text("Chain")
    page = signed_in()
    page.goto(live_site.url("/admin/scoring/criteriaversion/add/"))
    page.select_option('select[name="scope"]', "chain")
    page.fill('input[name="scope_value"]', "k8s-chain")
    page.fill('textarea[name="description"]', "The chain's own")
    page.fill('textarea[name="score_prompt"]', criteria.score_prompt)
    page.fill('textarea[name="followup_prompt"]', criteria.followup_prompt)
    page.get_by_role("button", name="Save and continue editing").click()

    version = CriteriaVersion.objects.get(description="The chain's own")
    assert version.prompt_hash == criteria.prompt_hash
    expect(page.locator("pre.criteria-diff .diff-add").first).to_contain_text("+Chain criteria.")

    page.fill("#preview-session", str(session.session_id))
    page.get_by_role("button", name="Preview the prompt").click()
    expect(page.locator('pre[data-preview="score"]')).to_contain_text("PodCrashLooping")
    expect(page.locator('pre[data-preview="followup"]')).to_have_text(criteria.followup_prompt)

    for action, reason in (("Make candidate", "ready"), ("Promote", "the chain's reviewers asked for it")):
        page.goto(live_site.url(f"/admin/scoring/criteriaversion/{version.pk}/change/"))
        page.get_by_role("link", name=action).click()
        page.fill('textarea[name="reason"]', reason)
        page.get_by_role("button", name=action).click()
        expect(page.locator(".messagelist")).to_be_visible()
    expect(page.locator(".messagelist")).to_have_text(
        f"Criteria v{version.pk} (Chain k8s-chain) are current."
    )
    assert (
        CriteriaChange.objects.get(version=version, action="promote").reason
        == "the chain's reviewers asked for it"
    )

    page.goto(live_site.url("/admin/scoring/alertsession/"))
    page.check(f'input[name="_selected_action"][value="{session.session_id}"]')
    page.select_option('select[name="action"]', "score_selected")
    page.get_by_role("button", name="Go").click()
    wait_for(
        lambda: SessionScore.objects.filter(session=session, status="completed").exists(), what="the scoring"
    )
    assert SessionScore.objects.get(session=session).prompt_hash == criteria.prompt_hash
    assert page.errors == []
