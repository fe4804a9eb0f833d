"""Trials in a real browser: a candidate tried from its admin page on 30 reviewed sessions (the
sample's form, the estimate, the start), its scorings judged by the worker with the fake judge,
and the figures read on the dashboard's trial page (also on a phone), with a scoring's
transcript. Screenshots as in test_layout.py (UPDATE_SCREENSHOTS=1 writes
docs/screenshots/trial-1280.png, admin-trial-estimate.png and admin-trial.png)."""

import pytest
from playwright.sync_api import expect

from scoring.models import Trial
from tests.support.browser import PHONE, record_console_error
from tests.support.trials import candidate, marked, reference_in, scripted_judge
from tests.support.workers import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

# The reviewers' scores of the 30 sessions, 10 to 97: every band, and a candidate to tell apart.
REVIEWER_SCORES = [10 + 3 * i for i in range(30)]
# The screenshots show the figures, not all 60 scorings listed below them.
TOP_OF_THE_PAGE = {"x": 0, "y": 0, "width": 1280, "height": 1500}


def test_an_operator_tries_a_candidate_on_30_reviewed_sessions_and_reads_its_figures(
    live_site, signed_in, judge_llm, shipped_criteria, screenshots
):
    for score in REVIEWER_SCORES:
        marked(score)
    version = candidate()
    # The candidate scores two under each reviewer; the current criteria say 50 for everything.
    scripted_judge(judge_llm, lambda prompt: reference_in(prompt) - 2, lambda prompt: 50)
    page = signed_in()
    page.problems = []
    page.on("console", lambda message: record_console_error(page, message))

    page.goto(live_site.url(f"/admin/scoring/criteriaversion/{version.pk}/change/"))
    page.get_by_role("link", name="Try this candidate").click()
    expect(page.locator('input[name="size"]')).to_have_value("30")
    page.get_by_role("button", name="Estimate").click()
    expect(page.locator('[data-estimate="sessions"]')).to_have_text("30")
    expect(page.locator('[data-estimate="scorings"]')).to_contain_text("60")
    expect(page.locator('[data-estimate="would_fail"]')).to_have_text("none")
    assert not Trial.objects.exists()  # the estimate writes nothing
    page.screenshot(path=screenshots / "admin-trial-estimate.png")
    page.get_by_role("button", name="Start the trial").click()
    expect(page.locator(".messagelist")).to_have_text("Trial started: 30 sessions, 60 scorings queued.")

    trial = Trial.objects.get()
    wait_for(
        lambda: Trial.objects.get().status == "completed", timeout_s=120, what="the trial's 60 scorings"
    )
    page.get_by_role("link", name="On the dashboard").click()
    expect(page.locator("[data-trial-status]")).to_have_text("Completed")
    expect(page.locator("[data-trial-progress]")).to_contain_text("60 of 60 scorings completed.")
    mae = page.locator('tr[data-figure="mean_abs_diff"]')
    expect(mae.locator("[data-n]")).to_have_text("30")
    expect(mae.locator('[data-arm="candidate"]')).to_have_text("2.0 [2.0, 2.0]")
    expect(mae.locator("[data-difference]")).to_contain_text("significant")
    expect(mae.locator('[data-significant="yes"]')).to_be_visible()
    rho = page.locator('tr[data-figure="spearman_rho"] [data-arm="candidate"]')
    expect(rho).to_have_text("1.00 [1.00, 1.00]")
    expect(page.locator('tr[data-figure="mean_shift"] [data-significant]')).to_be_visible()
    expect(page.locator("[data-largest-session]")).to_have_count(10)
    page.screenshot(path=screenshots / "trial-1280.png", full_page=True, clip=TOP_OF_THE_PAGE)
    page.goto(live_site.url(f"/admin/scoring/trial/{trial.pk}/change/"))
    expect(page.locator('tr[data-figure="mean_abs_diff"] [data-n]')).to_have_text("30")
    page.screenshot(path=screenshots / "admin-trial.png", full_page=True, clip=TOP_OF_THE_PAGE)
    page.go_back()

    page.locator("[data-transcript-link]").first.click()
    expect(page.locator("h1")).to_contain_text("What the judge saw")
    turn_one = page.locator('[data-transcript-message="user"]').first
    turn_one.locator("summary").click()  # the long prompt is folded
    expect(turn_one.locator("pre")).to_contain_text("Candidate criteria.")
    assert trial.scorings.count() == 60

    phone = signed_in(PHONE)
    phone.goto(live_site.url(f"/trials/{trial.pk}/"))
    expect(phone.locator('tr[data-figure="mean_abs_diff"] [data-arm="candidate"]')).to_contain_text("2.0")
    assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # nothing overflows
    assert page.errors == [] and page.problems == []
