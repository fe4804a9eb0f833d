"""The session page's score view with a real-length analysis, at 1280 and 390 px: the score,
its action and its history are reachable without hunting (no scroll box of its own, nothing
hidden below a fold, the score before the investigation on a phone)."""

import pytest
from playwright.sync_api import expect

from tests.support.browser import PHONE, WIDE
from tests.support.factories import T0_US, make_score, make_session

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

PARAGRAPH = (
    "The agent moved from the alert to the pod's events and then to the node, a sound order, "
    "but it never read the previous container's logs before concluding, and its remediation "
    "assumes a cause the evidence does not show."
)
# About the length of a real judge's analysis of a large session.
LONG_ANALYSIS = "\n\n".join(f"## Point {n}\n\n{PARAGRAPH}" for n in range(1, 25)) + "\n\n**Total: 58**"
LONG_FINAL_ANALYSIS = "\n\n".join(f"Finding {n}: {PARAGRAPH}" for n in range(1, 30))

# Whether the element is inside the viewport and on top there (nothing covers its centre).
REACHABLE = """element => {
  const box = element.getBoundingClientRect();
  if (box.top < 0 || box.bottom > window.innerHeight || box.left < 0 || box.right > window.innerWidth) {
    return false;
  }
  const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
  return hit !== null && (element === hit || element.contains(hit));
}"""


def reachable(locator) -> bool:
    return locator.evaluate(REACHABLE)


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


@pytest.fixture
def long_scored_session():
    session = make_session(final_analysis=LONG_FINAL_ANALYSIS)
    for n, total in enumerate([35, 61]):
        make_score(session, total_score=total, scored_at_us=T0_US + n)
    make_score(
        session,
        total_score=58,
        score_analysis=LONG_ANALYSIS,
        missing_tools_analysis="1. **pods_log** (previous container)\n2. **node_metrics_history**",
        scored_at_us=T0_US + 10,
    )
    return session


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1280", "390"])
def test_score_action_and_history_are_reachable_with_a_long_analysis(
    live_site, signed_in, long_scored_session, viewport
):
    page = signed_in(viewport)
    page.goto(live_site.url(f"/sessions/{long_scored_session.session_id}/"))
    score_view = page.locator("#score")
    rescore = score_view.get_by_role("button", name="Re-score")
    badge = score_view.locator(".score-bar .badge")
    expect(badge).to_have_text("58 · Weak")
    # The analysis really is longer than the screen.
    assert score_view.bounding_box()["height"] > 2 * viewport["height"]
    # No scroll box of its own: nothing in it is hidden below an inner fold.
    assert score_view.evaluate("el => el.scrollHeight <= el.clientHeight + 1")
    assert fits(page)

    # On arrival: the score and its action are on screen, the history one link away.
    assert reachable(badge) and reachable(rescore)
    history_link = score_view.get_by_role("link", name="History (3)")
    assert reachable(history_link)
    history_link.click()
    expect(score_view.locator("table.history tbody tr")).to_have_count(3)
    page.wait_for_function("() => location.hash === '#scoring-history'")
    assert reachable(score_view.locator("#scoring-history"))
    assert reachable(rescore)  # the bar stays in view

    # Anywhere down the analysis, the score and its action are still at hand.
    score_view.locator(".markdown h2", has_text="Point 12").scroll_into_view_if_needed()
    assert reachable(badge) and reachable(rescore)
    assert page.errors == []


def test_wide_screens_show_the_score_beside_the_investigation_all_the_way_down(
    live_site, signed_in, long_scored_session
):
    page = signed_in(WIDE)
    page.goto(live_site.url(f"/sessions/{long_scored_session.session_id}/"))
    score_view, investigation = page.locator("#score"), page.locator(".investigation")
    assert score_view.bounding_box()["x"] > investigation.bounding_box()["x"] + 400  # side by side
    expect(score_view.get_by_role("link", name="Investigation")).to_be_hidden()  # it is right there
    rescore = score_view.get_by_role("button", name="Re-score")
    page.locator("[data-investigation-link]").scroll_into_view_if_needed()  # the investigation's end
    assert reachable(rescore)
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")  # the page's end
    assert reachable(rescore)
    assert page.errors == []


def test_phones_show_the_score_before_the_investigation(live_site, signed_in, long_scored_session):
    page = signed_in(PHONE)
    page.goto(live_site.url(f"/sessions/{long_scored_session.session_id}/"))
    score_view, investigation = page.locator("#score"), page.locator(".investigation")
    assert score_view.bounding_box()["y"] < investigation.bounding_box()["y"]
    assert score_view.bounding_box()["width"] <= PHONE["width"]
    # The investigation, after a long analysis, is one link away.
    score_view.get_by_role("link", name="Investigation").click()
    page.wait_for_function("() => location.hash === '#investigation-title'")
    assert reachable(page.locator("#investigation-title"))
    assert fits(page)
    assert page.errors == []
