"""A real headless Chromium (Debian's ``chromium`` package) driven by Playwright.

The browser tests run the whole service: a web server process, a judge worker
cluster and the fake judge LLM, all on the test database.

    def test_x(live_site, signed_in):
        page = signed_in()               # a logged-in page, 1280 px wide
        page.goto(live_site.url("/"))

The pages carry a Content-Security-Policy without 'unsafe-eval': give
``page.wait_for_function`` a function (``"() => ..."``), since an expression is
evaluated with eval in the page, which the policy refuses.

Playwright's own browser download is not used (``playwright install`` needs
the internet): install the browser with ``apt-get install -y chromium``.
Without it these tests fail, saying so; they never skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connections

from tests.support.servers import REPO_DIR, WebServer, child_env

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDE = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
OPERATOR = ("operator", "operator-password-1")
# Generous bound on waiting for the worker and the page, so a broken run fails instead of hanging.
EXPECT_TIMEOUT_MS = 30_000

# Every message the page's live status line shows, in order, kept in the page
# (the line is rewritten as the scoring moves on, too fast to poll).
RECORD_STATUS_SCRIPT = """
window.__statusLog = [];
document.addEventListener("DOMContentLoaded", () => {
  for (const line of document.querySelectorAll("[data-live-status]")) {
    new MutationObserver(() => { if (line.textContent) window.__statusLog.push(line.textContent); })
      .observe(line, {childList: true, characterData: true, subtree: true});
  }
});
"""

# Records every Content-Security-Policy violation the page reports, before any of its scripts run.
RECORD_VIOLATIONS_SCRIPT = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(
    `${event.violatedDirective} blocked ${event.blockedURI || "inline"} at ${event.sourceFile}:${event.lineNumber} ${event.sample}`
  );
});
"""


def record_console_error(page, message) -> None:
    # Also a failed request: Chromium asks for /favicon.ico wherever a page names no icon.
    if message.type == "error":
        page.problems.append(f"{message.text} ({message.location.get('url')})")


@pytest.fixture
def screenshots(tmp_path):
    """Where a test writes its screenshots: its temporary folder, or with UPDATE_SCREENSHOTS=1
    docs/screenshots (to update the ones the docs show)."""
    folder = REPO_DIR / "docs" / "screenshots" if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def collected_static():
    """Static files where the server's WhiteNoise serves them from (as bin/run does)."""
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=REPO_DIR,
        env=child_env(),
        check=True,
        capture_output=True,
    )


@dataclass
class LiveSite:
    server: WebServer
    start_web: Callable[..., WebServer]

    @property
    def http_url(self) -> str:
        return self.server.http_url

    def url(self, path: str) -> str:
        return self.http_url + path

    def stop_server(self) -> None:
        """Stop the web server: open pages lose their WebSocket and cannot reconnect (the worker runs on)."""
        self.server.stop()

    def restart_server(self) -> None:
        """Start the web server again on the same port, where the open pages reconnect."""
        self.server = self.start_web(port=self.server.port)


@pytest.fixture
def live_site(collected_static, start_web, start_worker, judge_llm) -> LiveSite:
    """A web server + a judge worker using the fake judge; the pages are served by the web server."""
    start_worker(**judge_llm.env())
    return LiveSite(start_web(), start_web)


@pytest.fixture
def chromium(live_site, monkeypatch):
    """A headless Chromium for one test, started after the site's processes.

    Playwright's sync API keeps an asyncio loop marked as running in this
    thread, and Django refuses database calls while one runs. The test code
    itself is plain synchronous code, so Django's check is switched off in
    this process only, and only while the browser runs: the server and worker
    processes were started before (their environment is copied at start).
    """
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"The browser tests need Chromium at {CHROMIUM}: install it with `apt-get install -y chromium` "
            "(or set CHROMIUM_PATH). Do not use `playwright install`."
        )
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.fail("The browser tests need the playwright package: pip install -r requirements/dev.txt")
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()
        # With a loop running, Django keeps this thread's connections apart
        # from the usual ones (asgiref's Local); close them while it still runs,
        # or they outlive the test and block dropping the test database.
        connections.close_all()


@pytest.fixture
def signed_in(chromium, live_site):
    """Factory: a new browser page, logged in through the admin login as a superuser.

    Every page records JavaScript dialogs (``page.dialogs``) and uncaught errors
    (``page.errors``), and its live status messages (``window.__statusLog``).
    """
    User.objects.create_superuser(OPERATOR[0], "operator@example.com", OPERATOR[1])
    contexts = []

    def open_page(viewport: dict = WIDE):
        context = chromium.new_context(viewport=viewport)
        context.set_default_timeout(EXPECT_TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.dialogs, page.errors = [], []
        page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        page.add_init_script(RECORD_STATUS_SCRIPT)
        page.goto(live_site.url("/admin/login/?next=/"))
        page.fill("#id_username", OPERATOR[0])
        page.fill("#id_password", OPERATOR[1])
        page.click("input[type=submit]")
        page.wait_for_url(live_site.url("/"))
        return page

    yield open_page
    for context in contexts:
        context.close()
