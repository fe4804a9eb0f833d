"""The admin's session and score pages: badges, filters, search, actions, read-only judge output,
the review form (the rules of a review are in tests/test_services.py)."""

import re
import uuid
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scoring import services
from scoring.admin import REVIEWS_ON_SCORE_PAGE
from scoring.models import AlertSession, InsightReport, ScoreReview, ScoreTranscript, SessionScore
from tests.support.factories import T0_US, make_score, make_session

pytestmark = pytest.mark.django_db

SESSIONS_URL = reverse("admin:scoring_alertsession_changelist")
SCORES_URL = reverse("admin:scoring_sessionscore_changelist")


def listed_sessions(client, **query) -> set:
    """Short ids of the sessions on the admin list for ``query``."""
    page = client.get(SESSIONS_URL, query).content.decode()
    return set(re.findall(r'<th class="field-short_id"><a href="[^"]+">([0-9a-f]{8})</a>', page))


def short(session) -> str:
    return str(session.session_id)[:8]


@pytest.fixture
def sessions():
    """One session in each state the filters tell apart (newest score decides)."""
    unscored = make_session(alert_type="kubernetes", alert_data={"alert": "PodCrashLooping", "pod": "api-7f"})
    poor = make_session(alert_type="kubernetes")
    make_score(poor, total_score=49)
    weak = make_session(alert_type="database")
    make_score(weak, total_score=50, prompt_hash="0" * 64)  # obsolete criteria
    good = make_session(alert_type="database")
    make_score(good, total_score=75)
    rescored = make_session()  # an old good score, then a failed re-score
    make_score(rescored, total_score=90, scored_at_us=T0_US)
    make_score(rescored, status="failed", scored_at_us=T0_US + 1)
    scoring = make_session()
    make_score(scoring, status="in_progress")
    running = make_session(status="in_progress", completed_at_us=None)
    return {name: session for name, session in locals().items()}


def test_session_list_shows_each_latest_score_as_a_worded_badge(admin_client, sessions):
    page = admin_client.get(SESSIONS_URL).content.decode()
    for text in ["49 · Poor", "50 · Weak", "75 · Good", "Not scored", "Scoring…", "Scoring failed"]:
        assert text in page
    assert "90 · Good" not in page  # superseded by the failed re-score
    assert "obsolete criteria" in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"scored": "not_scored"}, {"unscored", "running"}),
        ({"scored": "scored"}, {"poor", "weak", "good"}),
        ({"scored": "scoring"}, {"scoring"}),
        ({"scored": "failed"}, {"rescored"}),
        ({"band": "poor"}, {"poor"}),
        ({"band": "weak"}, {"weak"}),
        ({"band": "good"}, {"good"}),
        ({"criteria": "obsolete"}, {"weak"}),
        ({"criteria": "current"}, {"poor", "good", "rescored", "scoring"}),
        ({"alert_type": "database"}, {"weak", "good"}),
        ({"status__exact": "in_progress"}, {"running"}),
    ],
)
def test_session_filters(admin_client, sessions, query, expected):
    assert listed_sessions(admin_client, **query) == {short(sessions[name]) for name in expected}


def test_session_list_names_each_alert_and_says_why_a_scoring_failed(admin_client, sessions):
    page = admin_client.get(SESSIONS_URL).content.decode()
    assert '<strong>PodCrashLooping</strong><br><span class="alert-summary">pod: api-7f</span>' in page
    assert 'title="Scoring failed: judge LLM timed out">Scoring failed</span>' in page
    unscored = sessions["unscored"]
    change_page = admin_client.get(reverse("admin:scoring_alertsession_change", args=[unscored.pk]))
    assert f"<h2>PodCrashLooping {unscored.session_id}</h2>" in change_page.content.decode()


def test_search_by_session_id_and_alert_text(admin_client, sessions):
    assert listed_sessions(admin_client, q=str(sessions["good"].session_id)) == {short(sessions["good"])}
    assert listed_sessions(admin_client, q="podcrashloop") == {short(sessions["unscored"])}
    assert listed_sessions(admin_client, q="database") == {short(sessions["weak"]), short(sessions["good"])}
    summed_up = make_session(final_analysis_summary="The cert-manager webhook was down.")
    assert listed_sessions(admin_client, q="cert-manager webhook") == {short(summed_up)}


def test_session_list_does_not_load_the_investigation(admin_client, sessions):
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(SESSIONS_URL).status_code == 200
    session_queries = [q["sql"] for q in queries if "alert_sessions" in q["sql"]]
    assert session_queries
    assert not any(re.search(r'"(stages|session_level_interactions)"', sql) for sql in session_queries)


def run_action(client, action: str, sessions) -> str:
    response = client.post(
        SESSIONS_URL,
        {"action": action, "_selected_action": [str(s.session_id) for s in sessions]},
        follow=True,
    )
    assert response.status_code == 200
    return response.content.decode()


def test_score_selected_reports_what_happened_to_each(
    admin_client, sessions, django_capture_on_commit_callbacks
):
    chosen = [sessions[name] for name in ("unscored", "good", "scoring", "running")]
    with django_capture_on_commit_callbacks():
        page = run_action(admin_client, "score_selected", chosen)
    assert (
        "1 queued for scoring; 1 already scored (use force re-score to score again); "
        "1 already being scored; 1 skipped: not finished." in page
    )
    new = SessionScore.objects.get(session=sessions["unscored"])
    assert (new.status, new.score_triggered_by) == ("pending", "admin")


def test_force_rescore_selected_queues_finished_sessions_again(
    admin_client, sessions, django_capture_on_commit_callbacks
):
    chosen = [sessions[name] for name in ("good", "rescored", "scoring")]
    with django_capture_on_commit_callbacks():
        page = run_action(admin_client, "force_rescore_selected", chosen)
    assert "2 queued for scoring; 1 already being scored." in page
    assert SessionScore.objects.filter(session=sessions["good"]).count() == 2


def test_scoring_past_a_used_up_budget_asks_first_and_queues_once_confirmed(
    admin_client, settings, django_capture_on_commit_callbacks
):
    settings.SCORING_BUDGET_USD_PER_DAY = 1
    make_score(make_session(), cost_usd="1.25", completed_at_us=services.now_us())
    chosen = [make_session(), make_session()]

    page = run_action(admin_client, "score_selected", chosen)

    assert "the daily scoring budget is used up ($1.25 spent of SCORING_BUDGET_USD_PER_DAY=$1.00)." in page
    assert "Score the 2 selected sessions all the same?" in page
    assert not SessionScore.objects.filter(session__in=chosen).exists()
    form = {
        "action": "score_selected",
        "_selected_action": re.findall(r'name="_selected_action" value="([^"]+)"', page),
        "confirm_over_budget": re.search(r'name="confirm_over_budget" value="([^"]+)"', page).group(1),
    }
    assert sorted(form["_selected_action"]) == sorted(str(session.pk) for session in chosen)
    with django_capture_on_commit_callbacks():
        page = admin_client.post(SESSIONS_URL, form, follow=True).content.decode()

    assert "2 queued for scoring." in page
    assert SessionScore.objects.filter(session__in=chosen, status="pending", score_triggered_by="admin").count() == 2


def test_scoring_every_filtered_session_past_the_budget_posts_the_selection_back_as_select_all(
    admin_client, settings, django_capture_on_commit_callbacks
):
    # "Select all N" and the changelist's filter, not one field a session: Django refuses a
    # form of more than DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000) fields.
    settings.SCORING_BUDGET_USD_PER_DAY, settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 1, 10
    make_score(make_session(), cost_usd="1.25", completed_at_us=services.now_us())
    chosen = [make_session(alert_type="payments") for _ in range(12)]
    make_session(alert_type="database")
    url = f"{SESSIONS_URL}?alert_type=payments"
    selecting_all = {"action": "score_selected", "select_across": "1", "_selected_action": [str(chosen[0].pk)]}

    page = admin_client.post(url, selecting_all).content.decode()

    assert "Score the 12 selected sessions all the same?" in page
    assert 'name="select_across" value="1"' in page
    posted_back = re.findall(r'name="_selected_action" value="([^"]+)"', page)  # one: Django wants one
    assert len(posted_back) == 1
    with django_capture_on_commit_callbacks():
        page = admin_client.post(
            url,
            {**selecting_all, "_selected_action": posted_back, "confirm_over_budget": "yes"},
            follow=True,
        ).content.decode()

    assert "12 queued for scoring." in page
    assert set(SessionScore.objects.filter(status="pending").values_list("session_id", flat=True)) == {
        session.pk for session in chosen
    }


def test_session_page_shows_alert_analysis_investigation_and_history(admin_client):
    session = make_session(
        alert_data={"alert": "NamespaceTerminating", "namespace": "stuck-ns"},
        final_analysis="**Root cause:** a finalizer <script>alert(1)</script>",
    )
    old = make_score(session, total_score=30, scored_at_us=T0_US, prompt_hash="f" * 64)
    make_score(session, total_score=80, scored_at_us=T0_US + 5)
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(
            reverse("admin:scoring_alertsession_change", args=[session.session_id])
        ).content.decode()
    assert "&quot;namespace&quot;: &quot;stuck-ns&quot;" in page
    assert "<strong>Root cause:</strong>" in page and "<script>alert(1)" not in page
    # The investigation is linked, not read and rendered into the page.
    assert f'<a href="{reverse("scoring:session-investigation", args=[session.session_id])}">' in page
    assert "## FINAL ANALYSIS" not in page
    assert not any('"stages"' in q["sql"] for q in queries if "alert_sessions" in q["sql"])
    assert page.index("80 · Good") < page.index("30 · Poor")  # newest first
    assert reverse("admin:scoring_sessionscore_change", args=[old.score_id]) in page


def test_score_list_badges_criteria_and_review_filters(admin_client, admin_user, sessions):
    good = SessionScore.objects.get(session=sessions["good"])
    poor = SessionScore.objects.get(session=sessions["poor"])
    ScoreReview.objects.create(score=good, reviewer=admin_user, verdict="agree", reviewer_score=78)
    ScoreReview.objects.create(score=poor, reviewer=admin_user, verdict="disagree", reviewer_score=70)

    def listed(**query):
        page = admin_client.get(SCORES_URL, query).content.decode()
        return set(re.findall(r'<th class="field-short_id"><a href="[^"]+">([0-9a-f]{8})</a>', page))

    def ids(*scores):
        return {str(s.score_id)[:8] for s in scores}

    weak = SessionScore.objects.get(session=sessions["weak"])
    assert listed(review="agreed") == ids(good)
    assert listed(review="disagreed") == ids(poor)
    unreviewed = listed(review="unreviewed")
    assert ids(weak) <= unreviewed and ids(good, poor).isdisjoint(unreviewed)
    assert listed(band="poor") == ids(poor)
    assert listed(criteria="obsolete") == ids(weak)
    assert listed(status__exact="in_progress") == ids(SessionScore.objects.get(session=sessions["scoring"]))
    page = admin_client.get(SCORES_URL).content.decode()
    assert "1 agree, 0 disagree" in page and "not reviewed" in page
    # The list says obsolete or current; the prompt hash is in the tooltip (the score page shows it).
    assert f'title="prompt hash {"0" * 64}">obsolete</span>' in page
    assert 'title="Scoring failed: judge LLM timed out">Scoring failed</span>' in page


def test_score_list_does_not_load_the_analyses(admin_client, sessions):
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(SCORES_URL)
    score_queries = [q["sql"] for q in queries if "session_scores" in q["sql"]]
    assert score_queries and not any('"score_analysis"' in sql for sql in score_queries)


def test_score_page_renders_analyses_safely_with_cost_and_criteria(admin_client):
    score = make_score(
        make_session(),
        total_score=64,
        score_analysis="## Logical flow\n\nWeak. <img src=x onerror=alert(1)>",
        missing_tools_analysis="1. **pods_log** <script>alert(2)</script>",
        judge_model="openai/gpt-5",
        input_tokens=12345,
        output_tokens=678,
        cached_input_tokens=10000,
        cost_usd="0.123456",
    )
    page = admin_client.get(
        reverse("admin:scoring_sessionscore_change", args=[score.score_id])
    ).content.decode()
    assert "<h2>Logical flow</h2>" in page and "<strong>pods_log</strong>" in page
    assert "<img src=x" not in page and "<script>alert(2)" not in page
    assert "64 · Weak" in page and "current (" in page
    assert "12,345 (10,000 cached) / 678" in page and "0.123456" in page and "openai/gpt-5" in page
    assert "30 s" in page  # started -> completed


def test_score_page_shows_the_criteria_breakdown_and_the_missing_tools_named(admin_client):
    breakdown = make_score(
        make_session(),
        total_score=70,
        score_analysis="Logical Flow: 15/25\nConsistency: 18/25\nTool Relevance: 14/25\nSynthesis Quality: 13/25",
        missing_tools_analysis="1. **pods_log**\n2. **events_list**",
    )
    services.store_reply_structure([breakdown])
    neither = make_score(make_session(), score_analysis="Prose.", missing_tools_analysis="None.")

    page = admin_client.get(reverse("admin:scoring_sessionscore_change", args=[breakdown.score_id])).content.decode()
    empty = admin_client.get(reverse("admin:scoring_sessionscore_change", args=[neither.score_id])).content.decode()

    assert "Logical Flow 15, Consistency 18, Tool Relevance 14, Synthesis Quality 13" in page
    assert "pods_log, events_list" in page
    assert "score breakdown: the four criteria add up to 60, not to the total score 70" in page
    assert re.search(r"Criteria breakdown:</label>\s*<div class=\"readonly\">-</div>", empty)
    assert re.search(r"Missing tools named:</label>\s*<div class=\"readonly\">-</div>", empty)


def test_unstable_scores_are_filtered_and_their_samples_shown(admin_client):
    unstable_session = make_session()
    unstable = make_score(unstable_session, total_score=70, score_samples=[85, 62, 70], score_spread=23, unstable=True)
    stable = make_score(make_session(), total_score=66, score_samples=[64, None, 66], score_spread=2)
    single = make_score(make_session())
    listed_scores = admin_client.get(SCORES_URL, {"unstable__exact": "1"}).content.decode()
    assert re.findall(r'<th class="field-short_id"><a href="[^"]+">([0-9a-f]{8})</a>', listed_scores) == [
        str(unstable.score_id)[:8]
    ]
    assert listed_sessions(admin_client, scored="unstable") == {short(unstable_session)}

    def samples_field(score):
        page = admin_client.get(reverse("admin:scoring_sessionscore_change", args=[score.score_id])).content.decode()
        return re.search(r'<div class="readonly">([^<]*)</div>', page[page.index("Judge samples") :]).group(1)

    assert samples_field(unstable) == "unstable: samples 85, 62, 70 (spread 23)"
    assert samples_field(stable) == "samples 64, failed, 66 (spread 2)"
    assert samples_field(single) == "one"


def test_a_score_says_how_much_of_the_investigation_the_judge_saw(admin_client):
    shortened = make_score(make_session(), input_coverage=0.0458)
    whole = make_score(make_session(), input_coverage=1.0)
    before = make_score(make_session())  # made before coverage was recorded

    def coverage_field(score):
        page = admin_client.get(reverse("admin:scoring_sessionscore_change", args=[score.score_id])).content.decode()
        return re.search(r'<div class="readonly">([^<]*)</div>', page[page.index("Investigation seen") :]).group(1)

    assert coverage_field(shortened) == "4.6% (cut to fit the window)"
    assert coverage_field(whole) == "all"
    assert coverage_field(before) == "-"


def test_scores_are_read_only_even_for_superusers(admin_client):
    score = make_score(make_session())
    change_url = reverse("admin:scoring_sessionscore_change", args=[score.score_id])
    assert admin_client.get(reverse("admin:scoring_sessionscore_add")).status_code == 403
    assert admin_client.post(change_url, {"total_score": "100"}).status_code == 403
    assert (
        admin_client.post(reverse("admin:scoring_sessionscore_delete", args=[score.score_id])).status_code
        == 403
    )
    assert SessionScore.objects.get(pk=score.pk).total_score == 61


def test_sessions_cannot_be_deleted_even_by_a_superuser(admin_client):
    session = make_session()
    assert 'value="delete_selected"' not in admin_client.get(SESSIONS_URL).content.decode()
    delete_url = reverse("admin:scoring_alertsession_delete", args=[session.session_id])
    assert admin_client.get(delete_url).status_code == 403
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    page = admin_client.get(reverse("admin:scoring_alertsession_change", args=[session.session_id]))
    assert delete_url not in page.content.decode()
    assert AlertSession.objects.filter(pk=session.pk).exists()


def test_a_user_with_view_permission_can_read_scores_and_request_scoring(
    client, django_capture_on_commit_callbacks
):
    viewer = User.objects.create_user("vic", password="pw", is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_alertsession", "view_sessionscore"])
    )
    client.force_login(viewer)
    session = make_session()
    assert client.get(SCORES_URL).status_code == 200
    with django_capture_on_commit_callbacks():
        page = run_action(client, "score_selected", [session])
    assert "1 queued for scoring." in page
    assert SessionScore.objects.get(session=session).score_triggered_by == "vic"


def test_unknown_uuid_search_finds_nothing(admin_client, sessions):
    assert listed_sessions(admin_client, q=str(uuid.uuid4())) == set()


# --- The review form -------------------------------------------------------------------------


@pytest.fixture
def score():
    return make_score(make_session(), total_score=82)


def review_url(score) -> str:
    return reverse("admin:scoring_sessionscore_review", args=[score.score_id])


def score_page(score) -> str:
    return reverse("admin:scoring_sessionscore_change", args=[score.score_id])


def test_admin_records_a_disagreement_and_shows_it(admin_client, admin_user, score):
    page = admin_client.get(score_page(score)).content.decode()
    assert 'value="Record review"' in page

    response = admin_client.post(
        review_url(score),
        {"verdict": "disagree", "reviewer_score": "35", "note": "Never read the pod logs."},
        follow=True,
    )
    review = ScoreReview.objects.get()
    assert (review.reviewer, review.verdict, review.reviewer_score) == (admin_user, "disagree", 35)
    text = response.content.decode()
    assert "Your review (disagree, 35) was recorded." in text
    assert "Never read the pod logs." in text
    assert SessionScore.objects.get(pk=score.pk).total_score == 82


def test_the_review_form_comes_before_close_and_posts_on_its_own(admin_client, score):
    page = admin_client.get(score_page(score)).content.decode()
    # Its fields sit in the change form, before the Close link, but belong to the review form.
    assert page.index('value="Record review"') < page.index('class="closelink"')
    review_form = re.search(r'<form id="score-review" method="post" action="([^"]+)">', page)
    assert review_form and review_form.group(1) == review_url(score)
    for name in ("verdict", "reviewer_score", "note"):
        assert re.search(rf'name="{name}"[^>]* form="score-review"', page), name
    assert re.search(r'value="Record review"[^>]* form="score-review"', page)


def test_reviews_show_their_time_in_utc_as_every_other_time(admin_client, admin_user, score):
    review = ScoreReview.objects.create(score=score, reviewer=admin_user, verdict="agree", reviewer_score=80)
    ScoreReview.objects.filter(pk=review.pk).update(
        created_at=datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    )
    page = admin_client.get(score_page(score)).content.decode()
    assert "2026-03-04 05:06:07 UTC" in page


def notes_shown(page: str) -> list[str]:
    return re.findall(r"<td class=\"field-note_view\">\s*(?:<p>)?(note \d+)", page)


def test_the_score_page_lists_the_newest_reviews_and_links_to_all_of_them(admin_client, admin_user, score):
    def reviewed(of, value):
        return ScoreReview(score=of, reviewer=admin_user, verdict="agree", reviewer_score=value,
                           note=f"note {value}")  # fmt: skip

    ScoreReview.objects.bulk_create(reviewed(score, value) for value in range(101))
    ScoreReview.objects.create(score=make_score(make_session(), total_score=50), reviewer=admin_user,
                               verdict="agree", reviewer_score=50, note="another score's")  # fmt: skip

    page = admin_client.get(score_page(score)).content.decode()

    assert notes_shown(page) == [f"note {value}" for value in range(100, 100 - REVIEWS_ON_SCORE_PAGE, -1)]
    every = re.search(r'101 agree, 0 disagree: <a href="([^"]+)">all 101 reviews</a>', page).group(1)
    assert every == f"/admin/scoring/scorereview/?score={score.score_id}"
    first, second = (admin_client.get(every + query).content.decode() for query in ("", "&p=2"))
    assert notes_shown(first) == [f"note {value}" for value in range(100, 0, -1)]  # 100 a page, newest first
    assert notes_shown(second) == ["note 0"]


def test_admin_refuses_an_invalid_review_with_the_reason(admin_client, score):
    response = admin_client.post(
        review_url(score), {"verdict": "disagree", "reviewer_score": "140"}, follow=True
    )
    assert "Review not recorded: reviewer_score:" in response.content.decode()
    assert not ScoreReview.objects.exists()


def test_failed_scores_offer_no_review_form_and_refuse_one(admin_client):
    failed = make_score(make_session(), status="failed")
    assert 'value="Record review"' not in admin_client.get(score_page(failed)).content.decode()
    response = admin_client.post(
        review_url(failed), {"verdict": "agree", "reviewer_score": "50"}, follow=True
    )
    assert "only completed scores can be reviewed" in response.content.decode()


def test_reviewing_needs_the_add_review_permission(client, score):
    viewer = User.objects.create_user("vic", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_sessionscore"))
    client.force_login(viewer)
    assert 'value="Record review"' not in client.get(score_page(score)).content.decode()
    response = client.post(review_url(score), {"verdict": "agree", "reviewer_score": "80"}, follow=True)
    assert "You may not review scores" in response.content.decode()
    assert not ScoreReview.objects.exists()

    viewer.user_permissions.add(Permission.objects.get(codename="add_scorereview"))
    client.post(review_url(score), {"verdict": "agree", "reviewer_score": "80"})
    assert ScoreReview.objects.get().reviewer == viewer


def test_review_url_takes_only_post(admin_client, score):
    assert admin_client.get(review_url(score)).status_code == 405


def test_mcp_reports_are_listed_and_shown_read_only(admin_client):
    report = InsightReport.objects.create(
        status="completed",
        filters={"alert_type": "kubernetes"},
        score_ids=[str(uuid.uuid4()), str(uuid.uuid4())],
        requested_by="alice",
        requested_at_us=T0_US,
        completed_at_us=T0_US + 60_000_000,
        report="## Build first\n\n1. **pods_log** <script>alert(1)</script>",
        judge_model="openai/gpt-4o",
        rounds=1,
    )
    listed = admin_client.get(reverse("admin:scoring_insightreport_changelist")).content.decode()
    assert str(report.report_id) in listed and "alice" in listed and "2026-01-01 00:00:00 UTC" in listed

    page = admin_client.get(reverse("admin:scoring_insightreport_change", args=[report.report_id])).content.decode()
    assert "<h2>Build first</h2>" in page and "<strong>pods_log</strong>" in page
    assert "<script>alert(1)</script>" not in page
    assert 'name="_save"' not in page and "Delete" not in page
    assert admin_client.get(reverse("admin:scoring_insightreport_add")).status_code == 403


def test_a_score_page_shows_the_judge_and_what_it_saw(admin_client):
    score = make_score(make_session(), judge_model="openai/qwen", judge_temperature=0.0, judge_seed=0)
    transcript = {
        "model": "openai/qwen",
        "temperature": 0.0,
        "seed": 0,
        "conversations": [{"messages": [{"role": "user", "content": "prompt <b>"}], "error": "judge LLM timed out"}],
    }
    ScoreTranscript.objects.create(score=score, recorded_at_us=T0_US, transcript=transcript)
    page = admin_client.get(score_page(score)).content.decode()
    assert "openai/qwen (temperature 0, seed 0)" in page
    assert "prompt &lt;b&gt;" in page and "The last call failed: judge LLM timed out" in page

    without = make_score(make_session())
    assert "None kept" in admin_client.get(score_page(without)).content.decode()


def test_the_score_list_does_not_read_transcripts(admin_client):
    ScoreTranscript.objects.create(score=make_score(make_session()), recorded_at_us=T0_US, transcript={"x": "y"})
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(SCORES_URL)
    assert not any("score_transcripts" in query["sql"] for query in queries)
