"""Dashboard pages without a browser: badges, login, the session list and the score view's states."""

import json
import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scoring import selectors, services, views
from scoring.judge import rendering
from scoring.judge.prompts import EVALUATION_FOLLOWUP_PROMPT
from scoring.models import AlertSession, InsightReport, ScoreReview, ScoreTranscript, ScoringStatus
from scoring.templatetags.scoring_ui import badge, badge_catalog, transcript_conversations
from tests.support.criteria import make_current
from tests.support.factories import T0_US, add_missing_tools, make_go_session, make_score, make_session
from tests.support.servers import REPO_DIR

LIST_URL = reverse("scoring:session-list")


def detail_url(session) -> str:
    return reverse("scoring:session-detail", args=[session.session_id])


@pytest.mark.parametrize(
    ("total", "css", "text"),
    [
        (0, "badge-poor", "0 · Poor"),
        (49, "badge-poor", "49 · Poor"),
        (50, "badge-weak", "50 · Weak"),
        (74, "badge-weak", "74 · Weak"),
        (75, "badge-good", "75 · Good"),
        (100, "badge-good", "100 · Good"),
    ],
)
def test_completed_badges_follow_the_specs_bands(total, css, text):
    shown = badge("completed", total)
    assert (shown.css, shown.text) == (css, text)
    assert shown.title.startswith(f"Score {total}/100: ")


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (None, "Not scored"),
        ("pending", "Scoring…"),
        ("in_progress", "Scoring…"),
        ("failed", "Scoring failed"),  # not "Failed": a session's TARSy status can say that
    ],
)
def test_other_states_have_their_own_words(status, text):
    assert badge(status, None).text == text


def test_the_page_script_gets_the_same_bands():
    bands = badge_catalog()["bands"]
    assert [(b["low"], b["high"], b["label"]) for b in bands] == [
        (0, 49, "Poor"),
        (50, 74, "Weak"),
        (75, 100, "Good"),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("url", [LIST_URL, "/sessions/7c9e6679-7425-40de-944b-e07fc1f90ae7/"])
def test_pages_send_anonymous_visitors_to_the_dashboard_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={url}"


def rows(page: str) -> list[str]:
    """Session ids of the list's rows, in order."""
    return re.findall(r'data-session-row="([0-9a-f-]+)"', page)


@pytest.fixture
def scored_sessions():
    low = make_session(alert_type="kubernetes", started_at_us=T0_US + 1)
    make_score(low, total_score=30)
    high = make_session(alert_type="database", started_at_us=T0_US + 2)
    make_score(high, total_score=90, prompt_hash="a" * 64)
    unscored = make_session(alert_type="kubernetes", started_at_us=T0_US + 3)
    failed = make_session(alert_type="kubernetes", started_at_us=T0_US + 4)
    make_score(failed, status="failed")
    return {"low": low, "high": high, "unscored": unscored, "failed": failed}


def ids(*sessions) -> list[str]:
    return [str(s.session_id) for s in sessions]


@pytest.mark.django_db
def test_list_shows_badges_and_offers_scoring_only_where_it_can(admin_client, scored_sessions):
    running = make_session(status="in_progress", completed_at_us=None, started_at_us=T0_US + 5)
    page = admin_client.get(LIST_URL).content.decode()
    for text in ["30 · Poor", "90 · Good", "Not scored", "Scoring failed", "obsolete criteria"]:
        assert text in page
    assert rows(page) == ids(
        running,
        scored_sessions["failed"],
        scored_sessions["unscored"],
        scored_sessions["high"],
        scored_sessions["low"],
    )
    buttons = re.findall(r'data-score-button data-session-id="([0-9a-f-]+)"', page)
    assert buttons == ids(scored_sessions["unscored"])  # not the running one
    low = scored_sessions["low"]
    assert f'href="{detail_url(low)}#score" data-score-badge="{low.session_id}"' in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"sort": "-score"}, ["high", "low", "failed", "unscored"]),
        ({"sort": "score"}, ["low", "high", "failed", "unscored"]),
        ({"sort": "started"}, ["low", "high", "unscored", "failed"]),
        ({"score": "good"}, ["high"]),
        ({"score": "poor"}, ["low"]),
        ({"score": "not_scored"}, ["unscored"]),
        ({"score": "failed"}, ["failed"]),
        ({"criteria": "obsolete"}, ["high"]),
        ({"alert_type": "database"}, ["high"]),
        ({"q": "database"}, ["high"]),
        ({"score": "bogus", "sort": "sideways"}, ["failed", "unscored", "high", "low"]),
    ],
)
def test_list_filters_and_sorts(admin_client, scored_sessions, query, expected):
    page = admin_client.get(LIST_URL, query).content.decode()
    assert rows(page) == ids(*(scored_sessions[name] for name in expected))


@pytest.mark.django_db
def test_list_names_each_alert_and_sums_it_up(admin_client):
    make_session(alert_data={"alert": "KubeHpaMaxedOut", "message": "HPA checkout/checkout-web at max"})
    make_session(alert_type="test-kubernetes", alert_data={"description": "Namespace stuck in Terminating"})
    page = admin_client.get(LIST_URL).content.decode()
    assert 'class="alert-title">KubeHpaMaxedOut</a>' in page
    assert '<span class="alert-summary">HPA checkout/checkout-web at max</span>' in page
    # No name in the data: the alert type stands in.
    assert 'class="alert-title">test-kubernetes</a>' in page
    assert '<span class="alert-summary">Namespace stuck in Terminating</span>' in page
    assert "<th>TARSy status</th>" in page


@pytest.mark.django_db
def test_a_failed_score_in_the_list_says_why_and_offers_a_retry(admin_client):
    # A session TARSy failed, whose scoring failed too: two different things.
    failed = make_session(status="failed", judge_prompt_chars=400_000)
    make_score(failed, status="failed", error_message="orphaned: queued for over 1 s <b>")
    page = admin_client.get(LIST_URL).content.decode()
    row = page[page.index(f'data-session-row="{failed.session_id}"') :]
    row = row[: row.index("</tr>")]
    assert 'data-label="TARSy status"><span class="status status-failed">Failed</span>' in row
    # The reason on hover (the badge) and in the row.
    reason = "orphaned: queued for over 1 s &lt;b&gt;"  # the service's own words, shown as recorded
    assert f'badge-failed" title="Scoring failed: {reason}">Scoring failed<' in row
    assert f'data-score-error="{failed.session_id}">{reason}</p>' in row
    assert f"data-score-button data-force data-session-id=\"{failed.session_id}\">Retry</button>" in row
    # A retry sends the prompt twice (turn 2 resends turn 1) and the follow-up: the row says how much.
    tokens = re.search(r'data-estimated-tokens="(\d+)"', page[page.index(str(failed.session_id)) - 200 :])
    assert int(tokens.group(1)) == selectors.scoring_input_tokens(400_000) > 200_000


@pytest.mark.django_db
def test_list_pages_through_many_sessions(admin_client):
    for index in range(51):
        make_session(started_at_us=T0_US + index)
    first = admin_client.get(LIST_URL, {"sort": "-started"}).content.decode()
    second = admin_client.get(LIST_URL, {"sort": "-started", "page": 2}).content.decode()
    assert len(rows(first)) == 50 and len(rows(second)) == 1
    assert "Page 1 of 2" in first and "?sort=-started&amp;page=2" in first


@pytest.mark.django_db
def test_list_does_not_load_the_investigation(admin_client, scored_sessions):
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(LIST_URL)
    session_queries = [q["sql"] for q in queries if "alert_sessions" in q["sql"]]
    assert session_queries
    assert not any(re.search(r'"(stages|session_level_interactions)"', sql) for sql in session_queries)


def score_view(client, session) -> str:
    page = client.get(detail_url(session)).content.decode()
    return page[page.index('<aside id="score"') : page.index("</aside>")]


def investigation_queries(client, url) -> tuple[str, list[str]]:
    """The page at ``url``, and its SQL that reads the investigation columns."""
    with CaptureQueriesContext(connection) as queries:
        page = client.get(url).content.decode()
    heavy = re.compile(r'"(stages|session_level_interactions)"')
    return page, [q["sql"] for q in queries if "alert_sessions" in q["sql"] and heavy.search(q["sql"])]


@pytest.mark.django_db
def test_session_page_shows_the_alert_the_analysis_and_links_the_investigation(admin_client):
    session = make_session(
        final_analysis="**Root cause:** finalizer", alert_data={"alert": "NamespaceTerminating"}
    )
    page, heavy_reads = investigation_queries(admin_client, detail_url(session))
    assert "&quot;alert&quot;: &quot;NamespaceTerminating&quot;" in page
    assert "<strong>Root cause:</strong> finalizer" in page
    # The investigation (megabytes for a large session) is neither read nor rendered for the page...
    assert heavy_reads == [] and "## INVESTIGATION TIMELINE" not in page
    # ...but one link away, whole.
    link = re.search(r'<a href="([^"]+)" data-investigation-link>', page).group(1)
    investigation = admin_client.get(link)
    assert investigation["Content-Type"] == "text/plain; charset=utf-8"
    assert investigation.content.decode() == rendering.render_investigation(session)
    assert f'data-channel="session:{session.session_id}"' in page
    catalog = re.search(r'<script id="badge-catalog" type="application/json">(.*?)</script>', page).group(1)
    assert json.loads(catalog) == badge_catalog()


@pytest.mark.django_db
def test_session_page_is_headed_by_its_alert(admin_client):
    session = make_session(alert_data={"alert": "KubePodCrashLooping", "message": "payments-api restarts"})
    page = admin_client.get(detail_url(session)).content.decode()
    assert f'<h1>KubePodCrashLooping <span class="muted mono">{session.session_id}</span></h1>' in page
    assert '<p class="alert-summary" data-alert-summary>payments-api restarts</p>' in page
    assert f"<title>KubePodCrashLooping {str(session.session_id)[:8]}" in page
    assert ">TARSy: Completed</span>" in page and "alert type kubernetes" in page


@pytest.mark.django_db
def test_rescore_button_carries_the_estimated_tokens_it_costs(admin_client):
    stored_before_prompts_were_measured = make_session(investigation_bytes=10_000)
    make_score(stored_before_prompts_were_measured)
    view = score_view(admin_client, stored_before_prompts_were_measured)
    [annotated] = selectors.with_scoring_estimate(
        AlertSession.objects.filter(pk=stored_before_prompts_were_measured.pk)
    )
    estimate = selectors.scoring_input_tokens(annotated.prompt_chars)
    assert f'data-estimated-tokens="{estimate}">Re-score</button>' in view


@pytest.mark.django_db
def test_unscored_session_offers_to_score_it(admin_client):
    view = score_view(admin_client, make_session())
    assert "Not scored yet." in view and "Score session</button>" in view and "data-force" not in view


@pytest.mark.django_db
def test_running_session_cannot_be_scored_yet(admin_client):
    view = score_view(admin_client, make_session(status="in_progress", completed_at_us=None))
    assert "it can be scored once it finishes" in view and "data-score-button" not in view


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "text"),
    [("pending", "Queued: waiting for a judge worker."), ("in_progress", "The judge is scoring this session.")],
)
def test_active_scoring_says_its_state_once_and_blocks_rescoring(admin_client, status, text):
    session = make_session()
    make_score(session, status=status)
    view = score_view(admin_client, session)
    assert "Scoring…" in view and text in view
    assert '<button type="button" disabled>Re-score</button>' in view
    # Said once, in the live status line (where the live steps follow).
    page = admin_client.get(detail_url(session)).content.decode()
    assert page.count(text) == 1
    assert re.search(r"<p [^>]*data-live-status>([^<]*)</p>", page).group(1) == text


@pytest.mark.django_db
def test_the_score_comes_first_with_its_action_and_links_before_the_analysis(admin_client):
    session = make_session()
    make_score(session, total_score=40, scored_at_us=T0_US)
    make_score(session, total_score=77, scored_at_us=T0_US + 1, score_analysis="Long analysis.")
    page = admin_client.get(detail_url(session)).content.decode()
    assert page.index('<aside id="score"') < page.index('<section class="investigation"')
    view = score_view(admin_client, session)
    assert view.index("Re-score</button>") < view.index('id="score-analysis"') < view.index('id="scoring-history"')
    for link in ('href="#score-analysis"', 'href="#missing-tools"', 'href="#scoring-history">History (2)'):
        assert link in view[: view.index('id="score-analysis"')], link


@pytest.mark.django_db
def test_unstable_scores_have_their_own_filter_and_show_their_samples(admin_client):
    unstable = make_session(started_at_us=T0_US + 1)
    make_score(unstable, total_score=70, score_samples=[62, 70, 85], score_spread=23, unstable=True)
    stable = make_session(started_at_us=T0_US + 2)
    make_score(stable, total_score=66, score_samples=[64, 66, 70], score_spread=6)
    rescoring = make_session(started_at_us=T0_US + 3)  # an unstable score being replaced
    make_score(rescoring, total_score=50, score_samples=[20, 50, 90], score_spread=70, unstable=True, scored_at_us=1)
    make_score(rescoring, status="in_progress")
    single = make_session(started_at_us=T0_US + 4)
    make_score(single)

    page = admin_client.get(LIST_URL, {"score": "unstable"}).content.decode()
    assert rows(page) == ids(unstable)
    assert rows(admin_client.get(LIST_URL, {"score": "scored"}).content.decode()) == ids(single, stable, unstable)
    assert '<p class="notice" data-score-samples>unstable: samples 62, 70, 85 (spread 23)</p>' in score_view(
        admin_client, unstable
    )
    assert '<p class="muted" data-score-samples>samples 64, 66, 70 (spread 6)</p>' in score_view(admin_client, stable)
    assert "data-score-samples" not in score_view(admin_client, single)


@pytest.mark.django_db
def test_the_pages_say_why_a_scoring_failed_in_the_services_words_not_the_providers(admin_client):
    session = make_session()
    recorded = "judge LLM provider error (401): key sk-proj-abc***xyz"
    make_score(session, status="failed", error_message=recorded)

    pages = admin_client.get(LIST_URL).content.decode() + score_view(admin_client, session)

    assert "sk-proj" not in pages
    # The badge, the list's row, the score panel.
    assert pages.count("the judge model&#x27;s provider answered with an error") >= 3


@pytest.mark.django_db
def test_failed_scoring_shows_its_error_and_offers_a_rescore(admin_client):
    session = make_session()
    make_score(session, status="failed", error_message="worker shut down <b>badly</b>")
    view = score_view(admin_client, session)
    assert "Scoring failed." in view and "worker shut down &lt;b&gt;badly&lt;/b&gt;" in view
    assert "data-score-button data-force" in view
    history = view[view.index("Scoring history") :]
    assert 'title="Scoring failed: worker shut down &lt;b&gt;badly&lt;/b&gt;"' in history


@pytest.mark.django_db
def test_completed_score_shows_analyses_criteria_history_and_reviews(admin_client, admin_user):
    session = make_session()
    old = make_score(session, total_score=40, prompt_hash="b" * 64, scored_at_us=T0_US)
    make_score(
        session,
        total_score=77,
        scored_at_us=T0_US + 10,
        score_analysis="Good flow. <script>alert(1)</script>",
        missing_tools_analysis="1. **pods_log**",
    )
    ScoreReview.objects.create(
        score=old, reviewer=admin_user, verdict="disagree", reviewer_score=60, note="too harsh"
    )
    view = score_view(admin_client, session)
    assert "77 · Good" in view and "77/100: good investigation" in view and "current criteria" in view
    assert "Good flow. &lt;script&gt;" in view and "<strong>pods_log</strong>" in view
    history = view[view.index("Scoring history") :]
    assert history.index("77 · Good") < history.index("40 · Poor")
    assert "obsolete" in history and "admin: disagree (60)" in history
    assert "Re-score</button>" in view


@pytest.mark.django_db
def test_completed_score_shows_its_criteria_breakdown_and_the_missing_tools_named(admin_client):
    session = make_session()
    score = make_score(
        session,
        total_score=50,
        score_analysis="Logical Flow: 15/25\nConsistency: 18/25\nSynthesis Quality: 13/25",
        missing_tools_analysis="1. **pods_log** - the output\n2. `read-file` - the script",
    )
    services.store_reply_structure([score])

    view = score_view(admin_client, session)

    rows = re.findall(r"<tr><td>([^<]+)</td><td data-dimension>(.*?)</td></tr>", view)
    assert rows == [
        ("Logical Flow", "15/25"),
        ("Consistency", "18/25"),
        ("Tool Relevance", '<span class="muted">not given</span>'),
        ("Synthesis Quality", "13/25"),
    ]
    assert "Breakdown: no points found for Tool Relevance." in view
    tools = view[view.index('id="missing-tools"') :]
    assert re.findall(r"<li><code>([^<]+)</code></li>", tools)[:2] == ["pods_log", "read-file"]


@pytest.mark.django_db
def test_a_shortened_investigation_is_said_apart_from_the_other_warnings(admin_client):
    session = make_session()
    warning = "input shortened: the judge saw 31% of the investigation: the middle of 1 tool result was left out to fit the judge model's context window of 128,000 tokens: kubernetes-server.pods_log (2.1 MB of 3.0 MB)"
    injection = "instruction override in stages[0]: 'ignore previous instructions'"
    make_score(session, input_coverage=0.31, warnings=[injection, warning])

    view = score_view(admin_client, session)

    (shown,) = re.findall(r'<p class="notice" data-input-coverage="0.31">([^<]*)</p>', view)
    assert shown == (
        "The investigation was shortened for the judge: the judge saw 31% of the investigation: the middle of 1 "
        "tool result was left out to fit the judge model&#x27;s context window of 128,000 tokens: "
        "kubernetes-server.pods_log (2.1 MB of 3.0 MB)."
    )
    assert "ignore previous instructions" not in view and "Breakdown:" not in view


@pytest.mark.django_db
def test_a_score_without_a_breakdown_or_tools_shows_neither(admin_client):
    session = make_session()
    make_score(session, score_analysis="Prose only.", missing_tools_analysis="No critical missing tools identified.")

    view = score_view(admin_client, session)

    assert "data-dimension" not in view and "missing-tool-names" not in view
    assert "Breakdown:" not in view and "No critical missing tools identified." in view


@pytest.mark.django_db
def test_criteria_promoted_for_a_chain_make_only_that_chains_scores_obsolete(admin_client):
    on_chain, elsewhere = make_session(chain_id="k8s-chain"), make_session(chain_id="db-chain")
    for session in (on_chain, elsewhere):
        make_score(session)  # under the shipped criteria
    make_current("Chain", scope="chain", scope_value="k8s-chain")

    assert "obsolete criteria" in score_view(admin_client, on_chain)
    assert "obsolete criteria" not in score_view(admin_client, elsewhere)
    listed = admin_client.get(LIST_URL, {"criteria": "obsolete"}).content.decode()
    assert str(on_chain.session_id)[:8] in listed and str(elsewhere.session_id)[:8] not in listed


@pytest.mark.django_db
def test_obsolete_score_says_so(admin_client):
    session = make_session()
    make_score(session, prompt_hash="c" * 64)
    view = score_view(admin_client, session)
    assert "obsolete criteria" in view and "re-score to judge it by them" in view


@pytest.mark.django_db
def test_score_panel_alone_matches_the_pages_score_view(admin_client):
    session = make_session()
    make_score(session, total_score=55)
    panel = admin_client.get(reverse("scoring:score-panel", args=[session.session_id])).content.decode()
    assert "55 · Weak" in panel and "<html" not in panel


@pytest.mark.django_db
def test_unknown_session_is_the_sites_404_page_naming_it(admin_client, settings):
    assert not settings.DEBUG  # with DEBUG on, Django shows its own technical page instead
    missing = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
    for url in (f"/sessions/{missing}/", reverse("scoring:score-panel", args=[missing])):
        response = admin_client.get(url)
        page = response.content.decode()
        assert response.status_code == 404, url
        assert "<title>Not found · TARSy scoring</title>" in page
        assert f"No session with id {missing}." in page
        assert '<a class="brand" href="/">TARSy scoring</a>' in page


@pytest.mark.django_db
def test_an_address_that_names_nothing_is_the_sites_404_page(client):
    response = client.get("/no/such/page/")

    page = response.content.decode()
    assert response.status_code == 404
    assert "<title>Not found · TARSy scoring</title>" in page
    assert "There is no page at this address." in page


@pytest.mark.django_db
def test_a_server_error_is_the_sites_500_page(admin_client, monkeypatch):
    def fail(**_):
        raise RuntimeError("a bug")

    monkeypatch.setattr("scoring.selectors.dashboard_sessions", fail)
    admin_client.raise_request_exception = False

    response = admin_client.get(LIST_URL)

    page = response.content.decode()
    assert response.status_code == 500
    assert "<title>Server error · TARSy scoring</title>" in page
    assert "a bug" not in page and "RuntimeError" not in page


def test_a_server_error_under_the_api_is_the_apis_json(rf):
    response = views.server_error(rf.get("/api/v1/sessions/"))

    assert response.status_code == 500
    assert json.loads(response.content) == {"detail": "internal server error"}


@pytest.mark.django_db
def test_pages_name_their_icon_and_favicon_ico_leads_to_it(client):
    page = client.get("/login/").content.decode()
    favicon = client.get("/favicon.ico")

    assert '<link rel="icon" href="/static/scoring/favicon.svg" type="image/svg+xml">' in page
    assert favicon.status_code == 302 and favicon["Location"] == "/static/scoring/favicon.svg"


# --- The insights page (its browser behaviour: tests/browser/test_insights.py) ---

INSIGHTS_URL = reverse("scoring:insights")


@pytest.fixture
def fleet():
    """Two alert types on two chains, one session lacking a tool, one re-scored (it counts once,
    by its newest), one unstable."""
    k8s = make_session(alert_type="kubernetes", chain_id="k8s-chain", started_at_us=T0_US)
    db = make_session(alert_type="database", chain_id="db-chain", started_at_us=T0_US + 8 * 86_400_000_000)
    make_score(k8s, total_score=20, scored_at_us=T0_US + 1)
    latest = make_score(
        k8s, total_score=40, scored_at_us=T0_US + 2,
        dimensions={"logical_flow": 10, "consistency": 12, "tool_relevance": 8, "synthesis_quality": 10},
    )  # fmt: skip
    add_missing_tools(latest, "`pods_log`", keys=["pods_log"])
    make_score(db, total_score=90, score_samples=[70, 90, 95], score_spread=25, unstable=True)
    return {"kubernetes": k8s, "database": db}


def chart_rows(page: str, data_id: str) -> list[dict]:
    """The rows a chart is drawn from (the page's json_script data)."""
    pattern = rf'<script id="{data_id}" type="application/json">(.*?)</script>'
    return json.loads(re.search(pattern, page, re.S).group(1))


def group_keys(page: str, data_id: str) -> list:
    return [row["key"] for row in chart_rows(page, data_id)]


@pytest.mark.django_db
def test_insights_need_a_login_and_the_header_links_them(client, admin_client):
    assert client.get(INSIGHTS_URL)["Location"] == f"/login/?next={INSIGHTS_URL}"
    assert f'<a href="{INSIGHTS_URL}">Insights</a>' in admin_client.get(LIST_URL).content.decode()


@pytest.mark.django_db
def test_insights_without_scores_say_how_to_get_some(admin_client):
    make_score(make_session(), status="failed")  # a failed scoring is no score to compute from
    response = admin_client.get(INSIGHTS_URL)
    page = response.content.decode()
    assert response.status_code == 200
    assert "No scores yet." in page and "manage.py import_sessions" in page and "score_sessions" in page
    assert "<canvas" not in page and "chart.umd.min.js" not in page
    assert "data-report-button" not in page  # a report needs scores to read


@pytest.mark.django_db
def test_insights_show_each_figure_over_each_sessions_newest_score(admin_client, fleet):
    response = admin_client.get(INSIGHTS_URL)
    page = response.content.decode()
    assert response.status_code == 200
    for chart in ("trend-chart", "alert-type-chart", "chain-chart", "dimensions-chart"):
        assert f'<canvas id="{chart}"' in page
    assert '/static/vendor/chart.js/chart.umd.min.js' in page
    assert sorted(group_keys(page, "insights-alert-types")) == ["database", "kubernetes"]
    assert sorted(group_keys(page, "insights-chains")) == ["db-chain", "k8s-chain"]
    assert len(group_keys(page, "insights-weeks")) == 2
    kubernetes = next(row for row in chart_rows(page, "insights-alert-types") if row["key"] == "kubernetes")
    assert kubernetes["sessions"] == 1 and kubernetes["mean_score"] == 40  # the re-score replaced the 20
    session_link = reverse("scoring:session-detail", args=[fleet["kubernetes"].session_id])
    assert f'href="{session_link}#missing-tools"' in page  # the backlog's session lacking pods_log
    assert "`pods_log`" in page
    assert '<td data-label="Tool Relevance">8.0</td>' in page  # the criteria means' table, beside their chart
    assert '<td data-label="Samples">70, 90, 95</td>' in page  # the unstable score
    assert "data-report-button" in page


@pytest.mark.django_db
def test_insights_filters_select_the_sessions(admin_client, fleet):
    page = admin_client.get(INSIGHTS_URL, {"alert_type": "database"}).content.decode()
    assert group_keys(page, "insights-alert-types") == ["database"]
    assert '<option value="database" selected>' in page
    page = admin_client.get(INSIGHTS_URL, {"since": "2026-01-05", "until": "2026-02-01"}).content.decode()
    assert group_keys(page, "insights-chains") == ["db-chain"]
    assert 'name="since" value="2026-01-05"' in page


@pytest.mark.django_db
@pytest.mark.parametrize("chain", ["no-such-chain", "failing-chain"])
def test_insights_filters_that_match_no_completed_score_say_so(admin_client, fleet, chain):
    make_score(make_session(chain_id="failing-chain"), status="failed")
    response = admin_client.get(INSIGHTS_URL, {"chain_id": chain})
    assert response.status_code == 200
    assert "No scored session matches these filters." in response.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"since": "last tuesday"}, "since: not an ISO 8601 date or date-time: &#x27;last tuesday&#x27;"),
        ({"since": "2026-02-01", "until": "2026-01-01"}, "until: must be later than since"),
    ],
)
def test_an_unreadable_insights_filter_is_a_400_that_says_which(admin_client, fleet, query, message):
    response = admin_client.get(INSIGHTS_URL, query)
    page = response.content.decode()
    assert response.status_code == 400
    assert "This filter cannot be read." in page and message in page
    assert "<canvas" not in page
    assert f'value="{query["since"]}"' in page  # the form keeps what was typed, to correct it


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        (
            {"status": "completed", "report": "## Build first: pods_log\n\n<script>alert(1)</script>"},
            "<h2>Build first: pods_log</h2>",
        ),
        (
            {"status": "failed", "error_message": "judge LLM timed out: provider says <b>"},
            "The report failed.</strong> the judge model&#x27;s provider answered with an error",
        ),
        ({"status": "in_progress"}, "data-report-running="),
    ],
)
def test_insights_show_the_latest_report_in_its_state(admin_client, fleet, fields, shown):
    InsightReport.objects.create(
        requested_by="alice", requested_at_us=T0_US, filters={"alert_type": "kubernetes"},
        score_ids=["a", "b"], **fields,
    )  # fmt: skip
    page = admin_client.get(INSIGHTS_URL).content.decode()
    assert shown in page
    assert "requested by alice on 2026-01-01 00:00:00 UTC over 2 scores (alert_type kubernetes)" in page
    assert "<script>alert(1)</script>" not in page  # the model's text is rendered safely (scoring.markdown)


def go_session_scored(total: int, rating: str = "", tarsy_total: int | None = None) -> AlertSession:
    session = make_go_session(rating, tarsy_total)
    make_score(session, total_score=total, judge_model="openai/gpt-5")
    return session


def section(page: str, section_id: str) -> str:
    return re.search(rf'<section [^>]*id="{section_id}".*?</section>', page, re.S).group(0)


@pytest.mark.django_db
def test_insights_show_our_judge_against_tarsys_reviewers_and_judge_with_their_n(admin_client):
    ratings = ["inaccurate"] * 3 + ["partially_accurate"] + ["accurate"] * 2
    for total, rating in zip([20, 40, 45, 60, 80, 90], ratings, strict=True):
        go_session_scored(total, rating, tarsy_total=total + 10)
    go_session_scored(70, "excellent")
    go_session_scored(85, tarsy_total=95)  # scored by TARSy's judge, not rated
    page = section(admin_client.get(INSIGHTS_URL).content.decode(), "tarsy-agreement")

    assert "Against TARSy's reviewers" in page and "Against TARSy's judge" in page
    assert "another judge, not ours" in page
    counts = '<span class="muted">(2 accurate, 1 partially, 3 inaccurate)</span>'
    assert f'<td data-label="Rated sessions">6 {counts}</td>' in page
    # Each figure with its 95% interval: the AUC and the band matches are the same on every resample.
    ci = '<span class="muted ci" data-ci title="95% confidence interval">'
    assert f'<td data-label="AUC">1.00 {ci}[1.00, 1.00]</span> <span class="muted">(n = 5)</span></td>' in page
    assert f'<td data-label="Band agrees">100% {ci}[100–100%]</span></td>' in page
    assert f'<td data-label="Spearman ρ">0.93 {ci}[0.67, 1.00]</span></td>' in page
    assert "poor ↔ inaccurate, weak ↔ partially_accurate, good ↔ accurate" in page
    assert "Left out, for a rating this service does not know: excellent (1)." in page
    # TARSy's judge scored all seven sessions, each 10 points above ours.
    assert '<td data-label="Sessions">7</td>' in page
    assert f'<td data-label="Ours − TARSy\'s">-10.0 {ci}[-10.0, -10.0]</span></td>' in page


@pytest.mark.django_db
def test_insights_say_too_few_below_the_minimum_instead_of_a_number(admin_client):
    for total, rating in [(20, "inaccurate"), (80, "accurate")]:
        go_session_scored(total, rating, tarsy_total=50)
    page = section(admin_client.get(INSIGHTS_URL).content.decode(), "tarsy-agreement")
    assert page.count(">too few reviews</span>") == 3 and page.count(">too few sessions</span>") == 3
    # The reason, on hovering: how many sessions there are and how many a figure needs.
    assert page.count('title="too few reviews: 2 sessions, a figure needs at least 5"') == 3
    assert "data-ci" not in page
    assert '<td data-label="Rated sessions">2 ' in page and '<td data-label="Sessions">2</td>' in page


def reviewed_by(reviewer, total: int, reviewer_score: int, verdict: str = "agree") -> None:
    score = make_score(make_session(), total_score=total)
    services.record_review(
        score_id=score.score_id, reviewer=reviewer, verdict=verdict, reviewer_score=reviewer_score
    )


@pytest.mark.django_db
def test_insights_show_judge_human_agreement_with_its_n_and_intervals(admin_client, admin_user):
    for total in (20, 40, 60, 80, 95):
        reviewed_by(admin_user, total, total + 3)
    page = section(admin_client.get(INSIGHTS_URL).content.decode(), "agreement")
    ci = '<span class="muted ci" data-ci title="95% confidence interval">'
    assert '<td data-label="Reviews">5 <span class="muted">(5 sessions)</span></td>' in page
    # Three points apart on every session: the mean difference is 3 whatever the sessions drawn.
    assert f'<td data-label="Mean difference">3.0 {ci}[3.0, 3.0]</span></td>' in page
    assert f'<td data-label="Agree">100% {ci}[100–100%]</span></td>' in page
    assert "fewer than 5 reviewed sessions says “too few reviews”" in page


@pytest.mark.django_db
def test_insights_say_too_few_reviews_for_the_judge_below_the_minimum(admin_client, admin_user):
    reviewed_by(admin_user, 30, 75, "disagree")
    page = section(admin_client.get(INSIGHTS_URL).content.decode(), "agreement")
    assert '<td data-label="Reviews">1 <span class="muted">(1 session)</span></td>' in page
    assert page.count(">too few reviews</span>") == 4 and "data-ci" not in page
    assert 'title="too few reviews: 1 session, a figure needs at least 5"' in page
    assert "judge 30, reviewer 75 (+45)" in page  # the review itself is still listed


@pytest.mark.django_db
def test_insights_without_go_sessions_say_tarsy_has_nothing_to_compare(admin_client, fleet):
    page = section(admin_client.get(INSIGHTS_URL).content.decode(), "tarsy-agreement")
    assert "No scored session here has a rating from TARSy's reviewers" in page
    assert "No scored session here has a score from TARSy's judge." in page
    assert "<table" not in page


def test_the_vendored_chart_library_is_the_one_the_docs_name_with_its_licence():
    vendored = REPO_DIR / "static" / "vendor" / "chart.js"
    docs = (REPO_DIR / "docs" / "dashboard.md").read_text()
    documented = re.search(r"\*\*Chart\.js (\d+\.\d+\.\d+)\*\* \(MIT licence", docs)
    banner = (vendored / "chart.umd.min.js").read_text()[:200]
    assert documented and f"Chart.js v{documented.group(1)}" in banner
    assert "Released under the MIT License" in banner
    assert (vendored / "LICENSE.md").read_text().startswith("The MIT License (MIT)")
def test_the_session_page_shows_why_its_scoring_waits(admin_client):
    session = make_session()
    make_score(
        session,
        ScoringStatus.PENDING,
        waiting_reason="judge LLM rate-limited (429): try later",
        rate_limited_since_us=1_763_900_000_000_000,
    )

    page = admin_client.get(f"/sessions/{session.session_id}/").content.decode()

    assert "Waiting for the judge's quota: judge LLM rate-limited (429): try later" in page


def test_the_session_page_shows_that_an_automatic_scoring_waits_for_the_budget(admin_client, settings):
    settings.SCORING_BUDGET_USD_PER_DAY = 0
    session = make_session()
    make_score(session, ScoringStatus.PENDING, score_triggered_by="tarsy-sync:worker")
    services.claim_pending_scores(1)  # a worker finds the budget used up

    page = admin_client.get(f"/sessions/{session.session_id}/").content.decode()

    assert re.search(
        r'data-waiting-reason="budget">Waiting for the scoring budget: the daily scoring budget is used up '
        r"\(\$0\.00 spent of SCORING_BUDGET_USD_PER_DAY=\$0\.00\); automatic scorings wait until \d{4}-\d\d-\d\dT00:00:00Z<",
        page,
    )


@pytest.mark.django_db
def test_insights_chain_filter_lists_no_blank_chain(admin_client, fleet):
    make_score(make_session(chain_id=""))
    page = admin_client.get(INSIGHTS_URL).content.decode()
    assert page.count('<option value="">') == 3  # "Any" of alert type, chain and criteria only
    assert '<option value="" selected>' not in page


# --- The judge's sampling, a score without an evaluation, and the transcript (staff only) ----------

TRANSCRIPT = {
    "model": "openai/qwen",
    "temperature": 0.0,
    "seed": 0,
    "conversations": [
        {
            "messages": [
                {"role": "user", "content": "the score prompt <script>"},
                {"role": "assistant", "content": "**Total Score:** 54"},
                {"role": "user", "content": EVALUATION_FOLLOWUP_PROMPT},
                {"role": "assistant", "content": "54"},
            ],
            "error": None,
        }
    ],
}


@pytest.mark.django_db
def test_a_score_names_its_judge_with_the_sampling_it_was_sent(admin_client):
    session = make_session()
    make_score(session, judge_model="openai/qwen", judge_temperature=0.0, judge_seed=0)

    view = score_view(admin_client, session)

    assert re.search(r"<span data-judge>openai/qwen \(temperature 0, seed 0\)</span>", view)


@pytest.mark.django_db
def test_a_score_without_an_evaluation_says_so_and_that_its_tools_were_not_asked(admin_client):
    session = make_session()
    make_score(session, score_analysis="", missing_tools_analysis=None, analysis_missing=True)

    view = score_view(admin_client, session)

    assert "data-analysis-missing" in view and "left out of the fleet statistics" in view
    assert "data-missing-tools-not-asked" in view


def test_a_transcript_under_criteria_with_a_system_prompt_labels_each_message_by_its_part():
    transcript = {
        "conversations": [
            {
                "messages": [
                    {"role": "system", "content": "You judge k8s chains."},
                    {"role": "user", "content": "Chain criteria. The session..."},
                    {"role": "assistant", "content": "Good work.\n70"},
                    {"role": "user", "content": "Chain follow-up: which tools were missing?"},
                    {"role": "assistant", "content": "None."},
                ],
                "error": None,
            }
        ]
    }

    (conversation,) = transcript_conversations(transcript)

    assert [message["label"] for message in conversation["messages"]] == [
        "The criteria's system prompt",
        "Turn 1: the score prompt, as sent after fitting",
        "The judge's reply",
        "Turn 2: the criteria's follow-up (missing tools)",
        "The judge's reply",
    ]


@pytest.mark.django_db
def test_staff_find_the_transcript_from_the_score_and_read_it_escaped(admin_client, client):
    session = make_session()
    score = make_score(session)
    ScoreTranscript.objects.create(score=score, recorded_at_us=T0_US, transcript=TRANSCRIPT)
    url = reverse("scoring:score-transcript", args=[session.session_id, score.score_id])

    assert f'href="{url}"' in score_view(admin_client, session)
    page = admin_client.get(url).content.decode()
    assert "the score prompt &lt;script&gt;" in page and "<script>" not in page.split("<main")[-1]
    assert "The service asks the judge for the evaluation it left out" in page
    assert "temperature 0.0 · seed 0" in page

    viewer = User.objects.create_user("viewer", password="pw")
    client.force_login(viewer)
    assert client.get(url).status_code == 403
    assert f'href="{url}"' not in score_view(client, session)


@pytest.mark.django_db
def test_a_score_without_a_transcript_has_no_link_and_its_page_is_not_found(admin_client):
    session = make_session()
    score = make_score(session)

    assert "data-transcript-link" not in score_view(admin_client, session)
    url = reverse("scoring:score-transcript", args=[session.session_id, score.score_id])
    assert admin_client.get(url).status_code == 404
