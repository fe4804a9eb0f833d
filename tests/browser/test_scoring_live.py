"""Scoring from the dashboard in a real browser, followed live over the WebSocket.

Real web server, a real judge worker and the fake judge LLM; the page's script
does the POST (with the CSRF token) and reacts to the events.
"""

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from scoring import selectors, services
from scoring.models import AlertSession, SessionScore
from scoring.templatetags.scoring_ui import failure_reason
from tests.support.browser import PHONE, WIDE
from tests.support.factories import T0_US, make_score, make_session
from tests.support.fake_llm import Reply
from tests.support.workers import wait_for
from tests.support.judge_replies import evaluated

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

TURN1 = evaluated("## Logical flow\n\nThe agent **never read the pod logs**.\n\n72")
TURN2 = "1. **pods_log** - the crash output was never read."
SCORE_EVENTS_SHOWN = [
    "The judge has started scoring this session…",
    "Step 1 of 2: the judge is analysing the investigation's methodology…",
    "Step 2 of 2: the judge is identifying missing tools…",
]


def mark_document(page) -> None:
    """Tag the current document: the tag survives only if the page is never reloaded."""
    page.evaluate("window.__sameDocument = true")


def same_document(page) -> bool:
    return page.evaluate("window.__sameDocument === true")


def status_log(page) -> list[str]:
    return page.evaluate("window.__statusLog")


def test_score_and_rescore_a_session_from_its_page(live_site, signed_in, judge_llm):
    # Delays keep each phase on screen long enough to be seen, not for timing asserts.
    judge_llm.push(Reply(TURN1, delay=1), Reply(TURN2, delay=1))
    session = make_session()
    page = signed_in()
    score_requests = []
    page.on("request", lambda request: score_requests.append(request) if request.method == "POST" else None)
    page.goto(live_site.url("/"))
    row = page.locator(f'[data-session-row="{session.session_id}"]')
    expect(row).to_contain_text("Not scored")

    row.get_by_role("link", name=str(session.session_id)[:8]).click()
    panel = page.locator("[data-score-panel]")
    expect(panel).to_contain_text("Not scored yet.")
    mark_document(page)
    page.get_by_role("button", name="Score session").click()

    expect(panel.locator(".score-summary .badge")).to_have_text("72 · Weak")
    assert same_document(page)
    expect(page.locator("[data-live-status]")).to_have_text("Scoring completed: 72/100.")
    shown = [message for message in status_log(page) if not message.startswith("Scoring requested")]
    assert shown == [*SCORE_EVENTS_SHOWN, "Scoring completed: 72/100."]
    expect(panel.locator(".markdown strong").first).to_have_text("never read the pod logs")
    expect(panel).to_contain_text("current criteria")
    expect(panel).to_contain_text("pods_log - the crash output was never read.")
    assert SessionScore.objects.get(session=session).score_triggered_by == "operator"

    # Re-score asks first, saying what it costs; Cancel sends nothing.
    [annotated] = selectors.with_scoring_estimate(AlertSession.objects.filter(pk=session.pk))
    estimate = selectors.scoring_input_tokens(annotated.prompt_chars)
    panel.get_by_role("button", name="Re-score").click()
    dialog = page.locator("dialog.confirm-scoring")
    expect(dialog).to_contain_text(f"about {estimate:,} input tokens")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    expect(panel.get_by_role("button", name="Re-score")).to_be_enabled()

    # Re-score: a forced, second scoring, shown in the history.
    judge_llm.push(Reply(evaluated("Better on a second look.\n\n81")), Reply(TURN2))
    panel.get_by_role("button", name="Re-score").click()
    page.locator("dialog.confirm-scoring").get_by_role("button", name="Re-score").click()
    expect(panel.locator(".score-summary .badge")).to_have_text("81 · Good")
    expect(panel.locator("table.history tbody tr")).to_have_count(2)
    assert same_document(page)

    page.goto(live_site.url("/"))
    expect(row.locator(".badge")).to_have_text("81 · Good")
    assert [request.url.endswith("/score") for request in score_requests] == [True, True]  # none cancelled
    assert page.errors == [] and page.dialogs == []


def test_a_scoring_past_a_used_up_budget_asks_first_with_the_servers_reason(live_site, signed_in, judge_llm):
    live_site.stop_server()
    live_site.server = live_site.start_web(port=live_site.server.port, SCORING_BUDGET_USD_PER_DAY="1")
    make_score(make_session(), cost_usd=Decimal("1.5"), completed_at_us=services.now_us())
    judge_llm.push(Reply(TURN1), Reply(TURN2))
    session = make_session()
    page = signed_in()
    page.goto(live_site.url(f"/sessions/{session.session_id}/"))
    panel = page.locator("[data-score-panel]")
    reason = "the daily scoring budget is used up ($1.50 spent of SCORING_BUDGET_USD_PER_DAY=$1.00)"

    panel.get_by_role("button", name="Score session").click()
    dialog = page.locator("dialog.confirm-scoring")
    expect(dialog).to_contain_text(reason)
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    expect(page.locator("[data-live-status]")).to_contain_text(f"Scoring not started: {reason}")
    assert not session.scores.exists()

    panel.get_by_role("button", name="Score session").click()
    page.locator("dialog.confirm-scoring").get_by_role("button", name="Score past the budget").click()
    expect(panel.locator(".score-summary .badge")).to_have_text("72 · Weak")
    assert page.errors == [] and page.dialogs == []


def test_list_badges_follow_scorings_started_here_and_elsewhere(live_site, signed_in, judge_llm):
    judge_llm.set_default(Reply(evaluated("Solid work.\n\n88"), delay=1))
    here = make_session(started_at_us=T0_US + 2)
    elsewhere = make_session(started_at_us=T0_US + 1)
    page = signed_in()
    page.goto(live_site.url("/"))
    mark_document(page)
    here_row = page.locator(f'[data-session-row="{here.session_id}"]')
    elsewhere_row = page.locator(f'[data-session-row="{elsewhere.session_id}"]')

    here_row.get_by_role("button", name="Score").click()
    expect(here_row.locator(".badge")).to_have_text("Scoring…")
    expect(here_row.get_by_role("button", name="Score")).to_be_hidden()
    expect(here_row.locator(".badge")).to_have_text("88 · Good")

    # Another operator (or the CLI) scores a session while this list is open.
    services.score_request(session_id=elsewhere.session_id, triggered_by="cli")
    expect(elsewhere_row.locator(".badge")).to_have_text("88 · Good")
    assert same_document(page)
    assert page.errors == []


def test_the_list_catches_up_on_what_it_missed_while_disconnected(live_site, signed_in, judge_llm):
    judge_llm.set_default(Reply(evaluated("Fine.\n\n64")))
    session = make_session()
    page = signed_in()
    connection = {"blocked": False, "routes": []}

    def route(ws):
        # While "blocked" the network is down: every attempt is dropped at once.
        if connection["blocked"]:
            ws.close()
            return
        ws.connect_to_server()
        connection["routes"].append(ws)

    page.route_web_socket("**/api/v1/ws", route)
    page.goto(live_site.url("/"))
    page.wait_for_function("() => document.body.dataset.live === 'connected'")
    mark_document(page)

    connection["blocked"] = True
    connection["routes"][-1].close()
    page.wait_for_function("() => document.body.dataset.live === 'reconnecting'")
    score, _ = services.score_request(session_id=session.session_id, triggered_by="cli")
    wait_for(lambda: SessionScore.objects.get(pk=score.pk).status == "completed", what="the worker to score")
    badge = page.locator(f'[data-session-row="{session.session_id}"] .badge')
    expect(badge).to_have_text("Not scored")  # it missed the events

    connection["blocked"] = False
    expect(badge).to_have_text("64 · Weak")
    assert same_document(page)
    assert page.errors == []


def test_a_page_opened_after_a_scoring_does_not_replay_it(live_site, signed_in, judge_llm):
    """The server replays a channel's newest events after every subscribe (Go TARSy's
    dashboard relies on it); the page already shows those up to its rendered event id
    and must not act them out again."""
    judge_llm.push(Reply(TURN1), Reply(TURN2))
    session = make_session()
    first, _ = services.score_request(session_id=session.session_id, triggered_by="cli")
    wait_for(lambda: SessionScore.objects.get(pk=first.pk).status == "completed", what="the worker to score")
    page = signed_in()
    page.goto(live_site.url(f"/sessions/{session.session_id}/"))
    page.wait_for_function("() => document.body.dataset.live === 'connected'")
    mark_document(page)

    # A live scoring after the replay: once its end is shown, the replay was handled too.
    judge_llm.push(Reply(evaluated("Better on a second look.\n\n81")), Reply(TURN2))
    services.score_request(session_id=session.session_id, triggered_by="cli", force_rescore=True)
    expect(page.locator("[data-live-status]")).to_have_text("Scoring completed: 81/100.")
    assert status_log(page) == [*SCORE_EVENTS_SHOWN, "Scoring completed: 81/100."]
    assert same_document(page)
    assert page.errors == []


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1280", "390"])
def test_a_failed_scoring_in_the_list_says_why_and_is_retried_after_asking(
    live_site, signed_in, judge_llm, viewport
):
    # The judge gives no score, even when asked to restate it: the scoring fails. Its record
    # quotes the reply's end, for staff; the pages say why in the service's words.
    judge_llm.push(Reply("A critique without its number. " * 20), Reply("Still no number."))
    session = make_session(status="failed", judge_prompt_chars=400_000)  # TARSy failed it too
    page = signed_in(viewport)
    page.goto(live_site.url("/"))
    row = page.locator(f'[data-session-row="{session.session_id}"]')
    badge = row.locator(".badge")
    reason = row.locator("[data-score-error]")
    row.get_by_role("button", name="Score").click()

    # Live: the badge, the reason in the row and on hover, and a Retry.
    expect(badge).to_have_text("Scoring failed")
    expect(reason).to_have_text("the judge's reply had no 0-100 score")
    expect(badge).to_have_attribute("title", "Scoring failed: the judge's reply had no 0-100 score")
    expect(row.get_by_role("button", name="Retry")).to_be_visible()
    live_reason, live_title = reason.text_content(), badge.get_attribute("title")
    assert live_reason == failure_reason(SessionScore.objects.get(session=session).error_message)

    # As rendered by the server, too, shown the same; the session's own failure looks unlike the scoring's.
    page.goto(live_site.url("/"))
    expect(reason).to_have_text(live_reason)
    expect(badge).to_have_attribute("title", live_title)
    status = row.locator(".status")
    expect(status).to_have_text("Failed")
    assert status.evaluate("e => getComputedStyle(e).borderStyle") == "none"
    assert badge.evaluate("e => getComputedStyle(e).borderStyle") == "dashed"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    mark_document(page)

    # Retry asks first, saying what it costs, then scores again.
    judge_llm.push(Reply(evaluated("Solid on a second look.\n\n88")), Reply(TURN2))
    row.get_by_role("button", name="Retry").click()
    dialog = page.locator("dialog.confirm-scoring")
    expect(dialog).to_contain_text(f"about {selectors.scoring_input_tokens(400_000):,} input tokens")
    assert dialog.bounding_box()["width"] <= viewport["width"]
    dialog.get_by_role("button", name="Retry").click()
    expect(badge).to_have_text("88 · Good")
    expect(reason).to_be_hidden()
    expect(row.get_by_role("button", name="Retry")).to_be_hidden()
    assert same_document(page)
    assert page.errors == [] and page.dialogs == []
