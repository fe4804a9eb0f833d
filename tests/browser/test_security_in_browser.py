"""Signing in and out, and the Content-Security-Policy, in a real browser.

Real web server and headless Chromium: the policy is enforced by the browser, and
a violation shows only there (a blocked script, style or worker).
"""

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tests.support.browser import EXPECT_TIMEOUT_MS, OPERATOR, RECORD_VIOLATIONS_SCRIPT, record_console_error
from tests.support.factories import make_score, make_session
from tests.support.fake_llm import Reply
from tests.support.judge_replies import evaluated

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-password-1"

def open_page(chromium):
    """A fresh browser page that records console errors, uncaught errors and CSP violations."""
    context = chromium.new_context()
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    page = context.new_page()
    page.problems = []
    page.on("console", lambda message: record_console_error(page, message))
    page.on("pageerror", lambda error: page.problems.append(str(error)))
    page.add_init_script(RECORD_VIOLATIONS_SCRIPT)
    return page


def problems(page) -> list[str]:
    return page.problems + page.evaluate("window.__cspViolations")


def sign_in(page, live_site, username: str) -> None:
    page.goto(live_site.url("/"))
    page.wait_for_url(live_site.url("/login/?next=/"))
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(live_site.url("/"))


@pytest.mark.parametrize("is_staff", [False, True], ids=["viewer", "staff"])
def test_log_out_ends_the_session_for_staff_and_non_staff_users(live_site, chromium, is_staff):
    get_user_model().objects.create_user("someone", password=PASSWORD, is_staff=is_staff)
    page = open_page(chromium)
    sign_in(page, live_site, "someone")
    expect(page.locator(".topbar .user")).to_have_text("someone")
    assert page.request.get(live_site.url("/api/v1/sessions/")).status == 200

    page.get_by_role("button", name="Log out").click()

    page.wait_for_url(live_site.url("/login/"))
    assert page.request.get(live_site.url("/api/v1/sessions/")).status == 401
    page.goto(live_site.url("/"))
    page.wait_for_url(live_site.url("/login/?next=/"))
    assert problems(page) == []


def test_the_pages_the_admin_and_the_api_docs_run_under_the_policy(live_site, chromium, judge_llm):
    judge_llm.set_default(Reply(evaluated("Fine.\n\n70")))
    get_user_model().objects.create_superuser(OPERATOR[0], "operator@example.com", PASSWORD)
    unscored = make_session()
    session = make_session()
    # A Markdown table with aligned columns: the only inline style the pages carry.
    score = make_score(session, score_analysis="| Step | Points |\n|:--|--:|\n| Logs | **10** |\n\n70")
    page = open_page(chromium)
    page.goto(live_site.url("/login/"))
    assert problems(page) == []
    sign_in(page, live_site, OPERATOR[0])
    # No script can read the CSRF cookie; the page's own script posts with the token from its <meta>.
    assert "csrftoken" not in page.evaluate("document.cookie")
    page.locator(f'[data-score-button][data-session-id="{unscored.session_id}"]').click()
    expect(page.locator(f'[data-score-badge="{unscored.session_id}"]')).to_have_text("70 · Weak")

    page.goto(live_site.url(f"/sessions/{session.session_id}/"))
    aligned = page.locator("[data-score-panel] .markdown td").last
    expect(aligned).to_have_text("10")
    assert aligned.evaluate("cell => getComputedStyle(cell).textAlign") == "right"

    for path, ready in [
        ("/admin/", "#site-name"),
        ("/admin/scoring/alertsession/", "#result_list"),
        (f"/admin/scoring/sessionscore/{score.score_id}/change/", ".field-score .badge"),
        ("/api/docs/", ".swagger-ui .info .title"),
        ("/api/v1/sessions/", ".response-info"),  # the browsable API
        ("/api-auth/login/", "#id_username"),  # and its sign-in page
    ]:
        page.goto(live_site.url(path))
        expect(page.locator(ready).first).to_be_visible()
        assert problems(page) == [], path


def test_the_redoc_page_runs_and_only_its_foreign_logo_is_blocked(live_site, chromium):
    page = open_page(chromium)
    page.goto(live_site.url("/api/redoc/"))

    expect(page.locator(".api-content h1").first).to_have_text("tarsy-scoring API (1.0.0)")
    expect(page.get_by_text("/api/v1/sessions/").first).to_be_attached()
    # Redoc always shows its maker's logo from their CDN; the policy keeps pages from
    # calling other sites, so that image is the one thing blocked.
    page.wait_for_function("() => window.__cspViolations.length > 0")
    assert problems(page)
    assert all("https://cdn.redoc.ly/redoc/logo-mini.svg" in problem for problem in problems(page))
