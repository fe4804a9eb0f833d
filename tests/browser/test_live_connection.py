"""What the pages say live: the judge's step, once; that the WebSocket is down (the server
process is stopped under open pages), and that they caught up when it is back."""

import pytest
from playwright.sync_api import expect

from scoring import services
from scoring.models import SessionScore
from tests.support.browser import PHONE, WIDE
from tests.support.factories import make_session
from tests.support.fake_llm import Reply
from tests.support.workers import wait_for
from tests.support.judge_replies import evaluated

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

# Every text the connection banner shows, in order (it changes faster than a poll).
RECORD_CONNECTION_SCRIPT = """
window.__connectionLog = [];
document.addEventListener("DOMContentLoaded", () => {
  const banner = document.querySelector("[data-connection]");
  new MutationObserver(() => { if (banner.textContent) window.__connectionLog.push(banner.textContent); })
    .observe(banner, {childList: true, characterData: true, subtree: true});
});
"""
LOST = "Live updates lost: reconnecting"
# The most times the page's text said a step of the judge at once, over its whole life.
COUNT_STEP_TEXTS_SCRIPT = """
window.__mostStepTexts = 0;
document.addEventListener("DOMContentLoaded", () => {
  new MutationObserver(() => {
    const shown = document.body.innerText.split("Step 1 of 2").length - 1;
    window.__mostStepTexts = Math.max(window.__mostStepTexts, shown);
  }).observe(document.body, {childList: true, characterData: true, subtree: true});
});
"""


def connection_log(page) -> list[str]:
    return page.evaluate("window.__connectionLog")


def wait_for_banner(page, text: str) -> None:
    """Until the banner has said ``text`` last (it hides a "caught up" after a few seconds)."""
    page.wait_for_function("(text) => window.__connectionLog.at(-1) === text", arg=text)


def open_followed(signed_in, live_site, viewport, path):
    page = signed_in(viewport)
    page.add_init_script(RECORD_CONNECTION_SCRIPT)
    page.goto(live_site.url(path))
    page.wait_for_function("() => document.body.dataset.live === 'connected'")
    page.evaluate("window.__sameDocument = true")
    return page


def on_screen(locator, viewport) -> bool:
    box = locator.bounding_box()
    return 0 <= box["y"] and box["y"] + box["height"] <= viewport["height"] and box["width"] <= viewport["width"]


def test_pages_say_they_are_reconnecting_then_that_they_caught_up(live_site, signed_in, judge_llm):
    judge_llm.push(Reply(evaluated("Reasonable.\n\n72")), Reply("1. **pods_log**"))
    session = make_session()
    # The session page at 1280 px (session channel), the list on a phone (sessions channel).
    detail = open_followed(signed_in, live_site, WIDE, f"/sessions/{session.session_id}/")
    listing = open_followed(signed_in, live_site, PHONE, "/")
    banners = {detail: detail.locator("[data-connection]"), listing: listing.locator("[data-connection]")}
    for banner in banners.values():
        expect(banner).to_be_hidden()  # nothing to say while live

    live_site.stop_server()
    for page, banner in banners.items():
        expect(banner).to_contain_text(LOST)
        expect(banner).to_contain_text("This page may be out of date")
        assert on_screen(banner, page.viewport_size)  # fixed: on screen wherever the page is scrolled

    # The whole scoring happens while the pages cannot hear of it.
    score, _ = services.score_request(session_id=session.session_id, triggered_by="cli")
    wait_for(lambda: SessionScore.objects.get(pk=score.pk).status == "completed", what="the worker to score")
    panel = detail.locator("[data-score-panel]")
    list_badge = listing.locator(f'[data-session-row="{session.session_id}"] .badge')
    expect(panel).to_contain_text("Not scored yet.")
    expect(list_badge).to_have_text("Not scored")

    live_site.restart_server()
    # The session channel: started, two steps, completed; the list's: started, completed.
    caught_up = {
        detail: "Reconnected and caught up: 4 missed updates applied.",
        listing: "Reconnected and caught up: 2 missed updates applied.",
    }
    for page in banners:
        wait_for_banner(page, caught_up[page])
    expect(panel.locator(".score-summary .badge")).to_have_text("72 · Weak")
    expect(panel.locator(".markdown").first).to_contain_text("Reasonable.")  # the panel was refreshed
    expect(detail.locator("[data-live-status]")).to_have_text("Scoring completed: 72/100.")
    expect(list_badge).to_have_text("72 · Weak")
    for page in banners:
        log = connection_log(page)
        assert log[0].startswith(LOST) and log[-1] == caught_up[page], log
        assert page.evaluate("window.__sameDocument === true")  # caught up in place, not reloaded

    # A drop during which nothing happened says so too.
    live_site.stop_server()
    expect(banners[detail]).to_contain_text(LOST)
    live_site.restart_server()
    wait_for_banner(detail, "Reconnected and caught up: nothing was missed.")
    assert detail.errors == [] and listing.errors == []


def test_the_judges_step_is_shown_once(live_site, signed_in, judge_llm):
    # The delay keeps the step on screen long enough to be seen, not for a timing assert.
    judge_llm.push(Reply(evaluated("Reasonable.\n\n72"), delay=1), Reply("1. **pods_log**"))
    session = make_session()
    page = signed_in(WIDE)
    page.add_init_script(COUNT_STEP_TEXTS_SCRIPT)
    page.goto(live_site.url(f"/sessions/{session.session_id}/"))
    page.get_by_role("button", name="Score session").click()
    expect(page.locator("[data-live-status]")).to_have_text("Scoring completed: 72/100.")
    assert page.evaluate("window.__mostStepTexts") == 1
    assert page.errors == []
