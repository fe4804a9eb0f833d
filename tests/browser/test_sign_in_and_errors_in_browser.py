"""The sign-in page and the site's 404 page at 1280 and 390 px, with the site's icon, in Chromium."""

import uuid

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tests.support.browser import EXPECT_TIMEOUT_MS, PHONE, WIDE

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-password-1"
NO_SIDEWAYS_SCROLLING = "document.documentElement.scrollWidth <= window.innerWidth"


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1280", "390"])
def test_a_user_signs_in_on_the_sites_page_and_a_missing_session_is_its_404(live_site, chromium, viewport):
    get_user_model().objects.create_user("viewer", password=PASSWORD)
    context = chromium.new_context(viewport=viewport)
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    page = context.new_page()
    errors, failed = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "response",
        lambda response: response.status >= 400 and failed.append(f"{response.status} {response.url}"),
    )

    page.goto(live_site.url("/"))
    page.wait_for_url(live_site.url("/login/?next=/"))
    expect(page).to_have_title("Sign in · TARSy scoring")
    expect(page.locator(".topbar .brand")).to_have_text("TARSy scoring")
    assert page.evaluate(NO_SIDEWAYS_SCROLLING)
    icon = page.request.get(live_site.url(page.locator("link[rel=icon]").get_attribute("href")))
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert page.request.get(live_site.url("/favicon.ico")).url == icon.url
    page.get_by_label("User name").fill("viewer")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(live_site.url("/"))

    missing = uuid.uuid4()
    response = page.goto(live_site.url(f"/sessions/{missing}/"))

    assert response.status == 404
    expect(page).to_have_title("Not found · TARSy scoring")
    expect(page.locator("main")).to_contain_text(f"No session with id {missing}.")
    assert page.evaluate(NO_SIDEWAYS_SCROLLING)
    page.get_by_role("link", name="All sessions").click()
    page.wait_for_url(live_site.url("/"))
    assert failed == [f"404 {live_site.url(f'/sessions/{missing}/')}"] and errors == []
    context.close()
