"""Sessions are told apart by their alert's name and summary, at 1280 px and 390 px."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_layout import fits, imported_samples
from tests.support.browser import PHONE, WIDE

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_the_list_and_the_session_page_name_each_alert(live_site, signed_in):
    sessions = imported_samples()
    for viewport in (WIDE, PHONE):
        page = signed_in(viewport)
        page.goto(live_site.url("/"))
        shown = []
        for session in sessions:
            row = page.locator(f'[data-session-row="{session.session_id}"]')
            title, summary = row.locator(".alert-title"), row.locator(".alert-summary")
            expect(title).to_have_text(session.heading.title)
            expect(summary).to_have_text(session.heading.summary)
            assert summary.bounding_box()["x"] + summary.bounding_box()["width"] <= viewport["width"]
            shown.append((title.inner_text(), summary.inner_text()))
        assert len(set(shown)) == len(sessions)  # no two alike, though 10 of 13 are "kubernetes"
        assert fits(page)

        page.get_by_role("link", name="KubeHpaMaxedOut").click()
        expect(page.locator("h1").first).to_contain_text("KubeHpaMaxedOut")
        expect(page.locator("[data-alert-summary]")).to_have_text(
            "HPA checkout/checkout-web has been running at max replicas (20) for 30 minutes"
        )
        expect(page).to_have_title(re.compile(r"^KubeHpaMaxedOut [0-9a-f]{8}"))
        expect(page.locator(".meta .status")).to_have_text("TARSy: Completed")
        assert fits(page)
        assert page.errors == []
