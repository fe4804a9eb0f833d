"""The admin's score and session lists and score page in a real browser at 1280 px: the lists fit, the
judge's Markdown looks like text (not like the admin's own sections), the review form comes
before Close, and sessions offer no Delete."""

import re

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from scoring.models import ScoreReview
from tests.browser.test_layout import imported_samples
from tests.support.browser import WIDE
from tests.support.factories import T0_US, make_score, make_session

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

ANALYSIS = """## Logical flow

The agent went from the alert to the node, then to the writer.

- it never read the pod logs
- it never compared other nodes

1. first step
2. second step"""


def test_the_score_list_fits_1280_px(live_site, signed_in):
    page = signed_in(WIDE)
    operator = User.objects.get(username="operator")
    for n, (status, total) in enumerate([("completed", 88), ("completed", 41), ("failed", None),
                                         ("in_progress", None), ("pending", None)]):  # fmt: skip
        obsolete = {"prompt_hash": "e" * 64} if n == 1 else {}
        score = make_score(
            make_session(started_at_us=T0_US + n),
            status=status,
            total_score=total,
            judge_model="anthropic/claude-sonnet-4-20250514",
            score_triggered_by="operations-team-member@example.com",
            **obsolete,
        )
        if status == "completed":
            ScoreReview.objects.create(score=score, reviewer=operator, verdict="agree", reviewer_score=80)
    page.goto(live_site.url("/admin/scoring/sessionscore/"))
    expect(page.locator("#result_list tbody tr")).to_have_count(5)
    assert_fits(page, "the score list")


def test_the_session_list_fits_1280_px_with_the_samples(live_site, signed_in):
    sessions = imported_samples()
    page = signed_in(WIDE)
    page.goto(live_site.url("/admin/scoring/alertsession/"))
    expect(page.locator("#result_list tbody tr")).to_have_count(len(sessions))
    assert_fits(page, "the session list")


def assert_fits(page, what: str) -> None:
    results = page.locator("#changelist .results")
    assert results.evaluate("el => el.scrollWidth <= el.clientWidth"), f"{what} scrolls sideways"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.errors == []


def test_the_score_page_shows_markdown_as_text_and_the_review_form_before_close(live_site, signed_in):
    page = signed_in(WIDE)
    score = make_score(make_session(), total_score=64, score_analysis=ANALYSIS)
    ScoreReview.objects.create(
        score=score, reviewer=User.objects.get(username="operator"), verdict="agree", reviewer_score=70
    )
    page.goto(live_site.url(f"/admin/scoring/sessionscore/{score.score_id}/change/"))
    analysis = page.locator(".field-score_analysis_html .markdown")
    heading = analysis.locator("h2")
    expect(heading).to_have_text("Logical flow")
    style = heading.evaluate(
        "el => { const s = getComputedStyle(el); return [s.backgroundColor, s.textTransform]; }"
    )
    assert style == ["rgba(0, 0, 0, 0)", "none"]  # not the admin's section bar
    bullets = analysis.locator("ul > li").first.evaluate("el => getComputedStyle(el).listStyleType")
    numbers = analysis.locator("ol > li").first.evaluate("el => getComputedStyle(el).listStyleType")
    assert (bullets, numbers) == ("disc", "decimal")

    record = page.get_by_role("button", name="Record review")
    close = page.locator(".submit-row a.closelink")
    assert record.bounding_box()["y"] < close.bounding_box()["y"]
    # The existing review's time, in the form of every other time on the page.
    expect(page.locator(".inline-group .field-reviewed").first).to_have_text(
        re.compile(r"^\s*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\s*$")
    )
    assert page.errors == []


def test_sessions_offer_no_delete(live_site, signed_in):
    page = signed_in(WIDE)
    session = make_session()
    page.goto(live_site.url("/admin/scoring/alertsession/"))
    actions = page.locator('select[name="action"] option')
    expect(actions).not_to_have_count(0)
    assert "delete_selected" not in actions.evaluate_all("options => options.map(o => o.value)")
    page.goto(live_site.url(f"/admin/scoring/alertsession/{session.session_id}/change/"))
    expect(page.locator("#content")).to_contain_text(str(session.session_id))
    expect(page.locator("a.deletelink")).to_have_count(0)
    assert page.errors == []
