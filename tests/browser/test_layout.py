"""The pages at 1280 px and 390 px wide, on realistic sessions, with screenshots.

Screenshots go to the test's temporary folder; with UPDATE_SCREENSHOTS=1 they
replace the ones in docs/screenshots (the ``screenshots`` fixture, see docs/dashboard.md).
"""

import json

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from scoring import services
from scoring.models import ScoreReview
from tests.support.browser import PHONE, WIDE
from tests.support.factories import make_score
from tests.support.servers import REPO_DIR

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

SAMPLES_DIR = REPO_DIR / "scoring" / "samples"
SCORE_ANALYSIS = """**Logical Flow: 16/25.** The agent went from the DiskPressure condition to the
evicted pods and then to the writer, a sound order. It never checked whether other nodes were
filling up the same way before concluding.

**Consistency: 18/25.** The root cause matches the evidence: `du` on `/tmp/exports` and the eviction
events agree.

**Tool Relevance: 12/25.** `kubectl describe node` and the kubelet events were the right tools; the
container's own logs were never read.

**Synthesis Quality: 12/25.** The remediation is specific, but the report claims the problem
"cannot recur" without a limit being set."""
MISSING_TOOLS = """1. **pods_log** (previous container): the worker's output would have shown what it exports.
2. **node_metrics_history**: ephemeral-storage growth over time, to date the start of the problem."""


def fits(page) -> bool:
    """Whether the page needs no sideways scrolling."""
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def imported_samples():
    sessions = []
    for path in sorted(SAMPLES_DIR.glob("*.json")):
        session, _ = services.ingest_session(json.loads(path.read_text()), written_by="test")
        sessions.append(session)
    return sessions


def test_pages_fit_wide_and_phone_screens(live_site, signed_in, screenshots):
    sessions = {session.session_id: session for session in imported_samples()}
    featured = next(s for s in sessions.values() if s.chain_id == "node-health-chain")
    others = [s for s in sessions.values() if s is not featured and s.is_terminal]
    make_score(featured, total_score=41, prompt_hash="e" * 64, scored_at_us=featured.started_at_us + 1)
    score = make_score(
        featured,
        total_score=58,
        score_analysis=SCORE_ANALYSIS,
        missing_tools_analysis=MISSING_TOOLS,
        judge_model="openai/gpt-5",
        input_tokens=48_210,
        output_tokens=1_932,
        cost_usd="0.079582",
        scored_at_us=featured.started_at_us + 2,
    )
    for session, total in zip(others[:3], [88, 73, 35], strict=True):
        make_score(session, total_score=total)
    make_score(others[3], status="failed", error_message="judge LLM timed out after 3 attempts")
    make_score(others[4], status="in_progress")

    wide = signed_in(WIDE)
    ScoreReview.objects.create(
        score=score, reviewer=User.objects.get(username="operator"), verdict="disagree", reviewer_score=45,
        note="Too generous: the pod logs were never read.",
    )  # fmt: skip
    wide.goto(live_site.url("/"))
    expect(wide.locator("table.sessions tbody tr")).to_have_count(len(sessions))
    assert fits(wide)
    wide.screenshot(path=screenshots / "session-list-1280.png", full_page=True)

    wide.goto(live_site.url(f"/sessions/{featured.session_id}/"))
    score_view = wide.locator("#score")
    investigation = wide.locator(".investigation")
    assert score_view.bounding_box()["x"] > investigation.bounding_box()["x"] + 400  # side by side
    expect(score_view).to_contain_text("58 · Weak")
    assert fits(wide)
    wide.screenshot(path=screenshots / "session-score-1280.png")

    phone = signed_in(PHONE)
    phone.goto(live_site.url("/"))
    assert fits(phone)
    phone.screenshot(path=screenshots / "session-list-390.png")
    phone.goto(live_site.url(f"/sessions/{featured.session_id}/#score"))
    phone_score_view = phone.locator("#score")
    assert phone_score_view.bounding_box()["width"] <= PHONE["width"]  # stacked, not side by side
    expect(phone_score_view).to_contain_text("58 · Weak")
    assert fits(phone)
    phone_score_view.screenshot(path=screenshots / "session-score-390.png")

    wide.goto(live_site.url("/admin/scoring/alertsession/"))
    wide.screenshot(path=screenshots / "admin-sessions.png")
    wide.goto(live_site.url(f"/admin/scoring/sessionscore/{score.score_id}/change/"))
    wide.screenshot(path=screenshots / "admin-score.png", full_page=True)
    assert wide.errors == [] and phone.errors == []
