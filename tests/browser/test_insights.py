"""The insights page in headless Chromium: its charts drawn under the site's
Content-Security-Policy, its filters, its links to sessions, at 1280 px and 390 px wide,
with data and before anything is scored. Screenshots as in test_layout.py."""

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from scoring.models import ScoreReview
from tests.support.browser import PHONE, RECORD_VIOLATIONS_SCRIPT, WIDE, record_console_error
from tests.support.factories import T0_US, add_missing_tools, make_go_session, make_score, make_session
from tests.support.fake_llm import Reply

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

WEEK_US = 7 * 86_400_000_000
REPORT = """## Build first: a pod-logs MCP tool

**kubectl_logs** is missing in 6 kubernetes sessions (half of those scored), whose mean score is 58."""
CHARTS = ("trend-chart", "alert-type-chart", "chain-chart", "dimensions-chart")
# How many pixels of a canvas are drawn on (not transparent).
DRAWN_PIXELS = """(canvas) => {
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let drawn = 0;
  for (let alpha = 3; alpha < pixels.length; alpha += 4) if (pixels[alpha]) drawn += 1;
  return drawn;
}"""


def watched(page):
    """The page, also recording console errors and Content-Security-Policy violations from now on."""
    page.problems = []
    page.on("console", lambda message: record_console_error(page, message))
    page.add_init_script(RECORD_VIOLATIONS_SCRIPT)
    return page


def problems(page) -> list[str]:
    return page.errors + page.problems + page.evaluate("window.__cspViolations")


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def dimensions(total: int) -> dict:
    """A breakdown adding up to the total, losing most on tool relevance."""
    quarter = total // 4
    return {
        "logical_flow": quarter + 2,
        "consistency": quarter + 1,
        "tool_relevance": quarter - 3,
        "synthesis_quality": total - 3 * quarter,
    }


def fleet() -> dict:
    """Four weeks of kubernetes and database sessions on two chains, with missing tools
    and an unstable score."""
    scores = {}
    plan = [
        ("kubernetes", "kubernetes-agent-chain", [38, 55, 61], ["kubectl_logs", "node_metrics_history"]),
        ("kubernetes", "kubernetes-agent-chain", [52, 64, 79], ["kubectl_logs"]),
        ("database", "database-agent-chain", [71, 80, 45], ["pg_stat_activity"]),
        ("database", "database-agent-chain", [83, 90, 77], []),
    ]
    for week, (alert_type, chain, totals, tools) in enumerate(plan):
        for index, total in enumerate(totals):
            started_us = T0_US + week * WEEK_US + index * 3_600_000_000
            session = make_session(alert_type=alert_type, chain_id=chain, started_at_us=started_us)
            score = make_score(
                session, total_score=total, dimensions=dimensions(total), judge_model="openai/gpt-5"
            )
            add_missing_tools(score, *tools, keys=tools)
            scores[(week, index)] = score
    unstable = scores[(0, 1)]
    unstable.score_samples, unstable.score_spread, unstable.unstable = [40, 55, 72], 32, True
    unstable.save()
    return scores


def test_the_page_draws_its_figures_writes_a_report_filters_and_leads_to_sessions(
    live_site, signed_in, screenshots, judge_llm
):
    judge_llm.set_default(Reply(REPORT))
    scores = fleet()
    wide = watched(signed_in(WIDE))
    ScoreReview.objects.create(
        score=scores[(2, 2)], reviewer=User.objects.get(username="operator"), verdict="disagree",
        reviewer_score=20, note="The replication lag was never checked.",
    )  # fmt: skip

    wide.get_by_role("link", name="Insights").click()
    wide.wait_for_url(live_site.url("/insights/"))
    wide.wait_for_function("() => window.Chart && Object.keys(window.Chart.instances).length === 4")
    for chart in CHARTS:
        assert wide.locator(f"#{chart}").evaluate(DRAWN_PIXELS) > 1000, chart
    by_alert_type = wide.locator("#by-alert-type table tbody tr")
    expect(by_alert_type).to_have_count(2)
    expect(wide.locator("#missing-tools")).to_contain_text("kubectl_logs")
    expect(wide.locator("#unstable-title + p + table")).to_contain_text("40, 55, 72")
    expect(wide.locator("#agreement-title + table")).to_contain_text("openai/gpt-5")

    wide.get_by_role("button", name="Write a new report").click()
    expect(wide.locator("[data-report-status]")).to_contain_text("Report requested")
    # The worker writes it with the (fake) judge model; the page then shows it.
    expect(wide.locator("[data-report] .markdown h2")).to_have_text("Build first: a pod-logs MCP tool")
    expect(wide.locator("[data-report-meta]")).to_contain_text("over 12 scores")
    wide.wait_for_function("() => window.Chart && Object.keys(window.Chart.instances).length === 4")
    assert fits(wide)
    wide.screenshot(path=screenshots / "insights-1280.png", full_page=True)
    assert problems(wide) == []

    wide.select_option("select[name=alert_type]", "database")
    wide.get_by_role("button", name="Apply").click()
    wide.wait_for_url("**/insights/?*alert_type=database*")
    expect(by_alert_type).to_have_count(1)
    expect(by_alert_type).to_contain_text("database")
    expect(wide.locator("#missing-tools")).not_to_contain_text("kubectl_logs")

    lacking = wide.locator("[data-backlog-session]").first
    session_id = str(scores[(2, 2)].session_id)  # the database session lacking pg_stat_activity
    expect(lacking).to_have_attribute("href", f"/sessions/{session_id}/#missing-tools")
    lacking.click()
    wide.wait_for_url(live_site.url(f"/sessions/{session_id}/#missing-tools"))
    expect(wide.locator("#missing-tools")).to_be_visible()
    assert problems(wide) == []

    wide.goto(live_site.url("/insights/"))
    wide.fill("input[name=since]", "last week")
    wide.get_by_role("button", name="Apply").click()
    expect(wide.locator("[data-filter-error]")).to_contain_text("since: not an ISO 8601 date or date-time")
    # The page's own status (400) is all the browser reports.
    [reported] = problems(wide)
    assert reported.startswith("Failed to load resource: the server responded with a status of 400")

    phone = watched(signed_in(PHONE))
    phone.goto(live_site.url("/insights/"))
    phone.wait_for_function("() => window.Chart && Object.keys(window.Chart.instances).length === 4")
    for chart in CHARTS:
        box = phone.locator(f"#{chart}").bounding_box()
        assert 0 < box["width"] <= PHONE["width"], chart
    assert fits(phone)
    phone.screenshot(path=screenshots / "insights-390.png", full_page=True)
    assert problems(phone) == []


def test_before_any_score_the_page_says_what_to_do(live_site, signed_in, screenshots):
    make_score(make_session(), status="failed")
    page = watched(signed_in(WIDE))
    page.goto(live_site.url("/insights/"))
    expect(page.locator("[data-empty-state]")).to_contain_text("No scores yet.")
    expect(page.locator("[data-empty-state]")).to_contain_text("manage.py score_sessions --unscored")
    expect(page.locator("canvas")).to_have_count(0)
    page.get_by_role("link", name="session list").click()
    page.wait_for_url(live_site.url("/"))
    page.goto(live_site.url("/insights/"))
    page.screenshot(path=screenshots / "insights-empty-1280.png")
    assert problems(page) == []


def test_our_judge_against_go_tarsy_reads_at_both_widths(live_site, signed_in, screenshots):
    """TARSy's reviewers and TARSy's judge each in their own labelled table, with their n, the
    confusion table a click away, "too few" where a group is too small, and nothing overflowing."""
    plan = [
        (22, "inaccurate", 35), (41, "inaccurate", 40), (47, "partially_accurate", 60),
        (58, "inaccurate", 55), (66, "partially_accurate", 62), (78, "accurate", 70),
        (85, "accurate", 90), (92, "accurate", 88),
    ]  # fmt: skip
    for total, rating, tarsy_total in plan:
        make_score(make_go_session(rating, tarsy_total), total_score=total, judge_model="openai/gpt-5")
    for total, rating in [(30, "inaccurate"), (80, "accurate")]:  # another of our judges, too few for figures
        make_score(make_go_session(rating), total_score=total, judge_model="anthropic/claude-sonnet-4")

    for viewport in (WIDE, PHONE):
        page = watched(signed_in(viewport))
        page.goto(live_site.url("/insights/"))
        tarsy = page.locator("#tarsy-agreement")
        reviewers = tarsy.locator("[data-tarsy-reviewers] tbody tr")
        expect(reviewers).to_have_count(2)
        expect(reviewers.first).to_contain_text("openai/gpt-5")
        expect(reviewers.first).to_contain_text("8 (3 accurate, 2 partially, 3 inaccurate)")
        # Every accurate session above every inaccurate one.
        expect(reviewers.first).to_contain_text("1.00 [1.00, 1.00] (n = 6)")
        expect(reviewers.nth(1).locator("[data-too-few]")).to_have_count(3)
        expect(reviewers.nth(1).locator("[data-too-few]").first).to_have_text("too few reviews")
        judge = tarsy.locator("[data-tarsy-judge] tbody tr")
        expect(judge).to_have_count(1)
        expect(judge).to_contain_text("gemini-2.5-flash")
        heading = tarsy.get_by_role("heading", name="Against TARSy's judge (another judge, not ours)")
        expect(heading).to_be_visible()
        confusion = tarsy.locator("[data-tarsy-confusion]").first
        confusion.locator("summary").click()
        expect(confusion.locator("tbody tr")).to_have_count(3)
        assert fits(page)
        if viewport is WIDE:
            tarsy.screenshot(path=screenshots / "insights-tarsy-1280.png")
        assert problems(page) == []


def test_judge_and_human_agreement_says_its_intervals_and_too_few_reviews_at_both_widths(
    live_site, signed_in, screenshots
):
    """Each judge-human figure with its n and 95% interval; a judge with two reviewed sessions
    says "too few reviews", its reason on hover; nothing overflows on a phone."""
    operator = User.objects.get(username="operator")
    for total, reviewer_score in [(22, 30), (41, 35), (58, 70), (66, 60), (85, 80), (92, 95)]:
        score = make_score(make_session(), total_score=total, judge_model="openai/gpt-5")
        ScoreReview.objects.create(score=score, reviewer=operator, verdict="agree", reviewer_score=reviewer_score)
    for total, reviewer_score in [(30, 75), (80, 20)]:
        score = make_score(make_session(), total_score=total, judge_model="anthropic/claude-sonnet-4")
        ScoreReview.objects.create(score=score, reviewer=operator, verdict="disagree", reviewer_score=reviewer_score)

    for viewport in (WIDE, PHONE):
        page = watched(signed_in(viewport))
        page.goto(live_site.url("/insights/"))
        groups = page.locator("#agreement-title + table tbody tr")
        expect(groups).to_have_count(2)
        expect(groups.first).to_contain_text("openai/gpt-5")
        expect(groups.first).to_contain_text("6 (6 sessions)")
        # Every figure of the first judge with its interval, none of the second's.
        expect(groups.first.locator("[data-ci]")).to_have_count(4)
        expect(groups.first.locator("[data-ci]").first).to_have_attribute("title", "95% confidence interval")
        too_few = groups.nth(1).locator("[data-too-few]")
        expect(too_few).to_have_count(4)
        expect(too_few.first).to_have_text("too few reviews")
        expect(too_few.first).to_have_attribute(
            "title", "too few reviews: 2 sessions, a figure needs at least 5"
        )
        expect(page.locator("[data-agreement-note]")).to_contain_text("fewer than 5 reviewed sessions")
        assert fits(page)
        if viewport is WIDE:
            page.locator("#agreement").screenshot(path=screenshots / "insights-agreement-1280.png")
        else:
            page.locator("#agreement").screenshot(path=screenshots / "insights-agreement-390.png")
        assert problems(page) == []
