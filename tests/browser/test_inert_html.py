"""LLM text with HTML and scripts is shown as text: nothing in it runs, on any page.

Each payload would set ``window.__pwned`` and open a dialog if it ran.
"""

import pytest
from playwright.sync_api import expect

from tests.support.factories import make_score, make_session
from tests.support.fake_llm import Reply
from tests.support.judge_replies import evaluated

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

SCRIPT = "<script>window.__pwned = 'script'; alert('script')</script>"
IMG = "<img src=x onerror=\"window.__pwned = 'img'; alert('img')\">"
LINK = "[click me](javascript:alert('link'))"
PAYLOAD = f"Root cause found. {SCRIPT} {IMG} {LINK}"


def assert_inert(page) -> None:
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.dialogs == []
    assert page.locator(".markdown script, .markdown img, .markdown a[href^='javascript']").count() == 0
    assert page.locator("[onerror], img[src='x']").count() == 0


def test_payloads_in_stored_analyses_stay_text(live_site, signed_in):
    session = make_session(final_analysis=PAYLOAD, alert_data={"alert": IMG})
    score = make_score(session, score_analysis=PAYLOAD, missing_tools_analysis=SCRIPT)
    page = signed_in()

    page.goto(live_site.url(f"/sessions/{session.session_id}/"))
    expect(page.locator(".investigation .markdown")).to_contain_text("<script>window.__pwned")
    expect(page.locator(".score-view .markdown").first).to_contain_text("<img src=x onerror=")
    assert_inert(page)

    page.goto(live_site.url(f"/admin/scoring/sessionscore/{score.score_id}/change/"))
    expect(page.locator(".field-score_analysis_html")).to_contain_text("<img src=x onerror=")
    assert_inert(page)

    page.goto(live_site.url(f"/admin/scoring/alertsession/{session.session_id}/change/"))
    expect(page.locator(".field-final_analysis_view")).to_contain_text("<script>")
    assert_inert(page)

    page.locator(".field-investigation_view a").click()  # the investigation holds the payload too
    expect(page.locator("body")).to_contain_text(f"Root cause found. {SCRIPT}")
    assert_inert(page)
    assert page.errors == []


def test_a_judge_reply_with_payloads_is_inert_when_the_score_view_refreshes_live(
    live_site, signed_in, judge_llm
):
    # The live refresh inserts the server's HTML with innerHTML, where an
    # <img onerror> would run if anything but sanitized HTML came back.
    judge_llm.push(Reply(evaluated(f"{PAYLOAD}\n\n40")), Reply(f"1. {IMG}"))
    session = make_session()
    page = signed_in()
    page.goto(live_site.url(f"/sessions/{session.session_id}/"))
    page.get_by_role("button", name="Score session").click()
    panel = page.locator("[data-score-panel]")
    expect(panel.locator(".score-summary .badge")).to_have_text("40 · Poor")
    expect(panel.locator(".markdown").last).to_contain_text("<img src=x onerror=")
    assert_inert(page)
    assert page.errors == []
