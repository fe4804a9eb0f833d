"""Admin for sessions and scores: operators request scorings, reviewers judge the judge.

Sessions and scores are read-only here, even for a superuser (no add, change
or delete): sessions come from TARSy and scores from the judge. The session list requests scorings (through the same service
as the API); the score page records human reviews (``services.record_review``).
The session list never loads the investigation columns.
"""

import uuid

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Q
from django.db.models.functions import Left
from django.forms.models import BaseInlineFormSet
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import filesizeformat
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from scoring import batches, budget, selectors, services
from scoring.criteria import admin as criteria_admin  # noqa: F401 (registers the criteria versions' admin)
from scoring.criteria import selectors as criteria_selectors
from scoring.judge import rendering
from scoring.models import (
    REVIEW_NOTE_MAX_CHARS,
    AlertSession,
    InsightReport,
    ReviewVerdict,
    ScoreReview,
    ScoringStatus,
    SessionScore,
)
from scoring.templatetags.scoring_ui import (
    badge_html,
    coverage_note,
    dimension_rows,
    judge_name,
    samples_note,
    us_datetime,
    utc_datetime,
)
from scoring.templatetags.scoring_ui import duration as duration_text
from scoring.trials import admin as trials_admin  # noqa: F401 (registers the trials' admin)

ADMIN_MEDIA = forms.Media(css={"all": ["scoring/badges.css", "scoring/admin.css"]})
# The review form sits inside the score's change form (before its Close button);
# forms cannot nest, so its fields name their own form, which follows the change form.
REVIEW_FORM_ID = "score-review"
SESSION_CHANGED_TEXT = {
    True: "yes: the session was stored again with different content; this score judged the earlier version",
    False: "no: the session is as this score judged it",
    None: "unknown: the score was made before this service recorded what each score judged",
}


# --- Filters ----------------------------------------------------------------------------------


class ScoreBandFilter(admin.SimpleListFilter):
    title = "score band"
    parameter_name = "band"
    score_field = "total_score"

    def lookups(self, request, model_admin):
        return [(band.key, f"{band.label} ({band.low}-{band.high})") for band in selectors.SCORE_BANDS]

    def queryset(self, request, queryset):
        if self.value() in {band.key for band in selectors.SCORE_BANDS}:
            return queryset.filter(selectors.band_q(self.value(), self.score_field))
        return queryset


class CriteriaFilter(admin.SimpleListFilter):
    title = "scoring criteria"
    parameter_name = "criteria"
    hash_field = "prompt_hash"
    session_prefix = "session__"

    def lookups(self, request, model_admin):
        return [("current", "Current"), ("obsolete", "Obsolete")]

    def queryset(self, request, queryset):
        if self.value() in {"current", "obsolete"}:
            return queryset.filter(
                criteria_selectors.criteria_q(
                    obsolete=self.value() == "obsolete", field=self.hash_field, session=self.session_prefix
                )
            )
        return queryset


class SessionScoreStateFilter(admin.SimpleListFilter):
    title = "score"
    parameter_name = "scored"

    def lookups(self, request, model_admin):
        return list(selectors.SCORE_STATES.items())

    def queryset(self, request, queryset):
        if self.value() in selectors.SCORE_STATES:
            return queryset.filter(selectors.score_state_q(self.value()))
        return queryset


class SessionBandFilter(ScoreBandFilter):
    score_field = "latest_total_score"


class SessionCriteriaFilter(CriteriaFilter):
    hash_field = "latest_prompt_hash"
    session_prefix = ""


class ReviewStateFilter(admin.SimpleListFilter):
    title = "human review"
    parameter_name = "review"

    def lookups(self, request, model_admin):
        return list(selectors.REVIEW_STATES.items())

    def queryset(self, request, queryset):
        if self.value() in selectors.REVIEW_STATES:
            return queryset.filter(selectors.review_state_q(self.value()))
        return queryset


# --- Sessions ------------------------------------------------------------------------------------


def outcome_message(outcome: dict[str, int]) -> str:
    """One sentence for the counts of ``batches.score_sessions``."""
    parts = [f"{outcome['queued']} queued for scoring"]
    if outcome["already_scored"]:
        parts.append(f"{outcome['already_scored']} already scored (use force re-score to score again)")
    if outcome["in_progress"]:
        parts.append(f"{outcome['in_progress']} already being scored")
    if outcome["not_scorable"]:
        parts.append(f"{outcome['not_scorable']} skipped: not finished")
    return "; ".join(parts) + "."


# The field of the admin's confirmation page that says "score past the used-up budget".
CONFIRM_OVER_BUDGET = "confirm_over_budget"


def score_admin_url(score_id) -> str:
    return reverse("admin:scoring_sessionscore_change", args=[score_id])


class WideChangelist:
    """A list whose columns and filters need the page's width at 1280 px: Django's app
    sidebar is left out of it (the breadcrumbs and the index still lead everywhere)."""

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), "is_nav_sidebar_enabled": False})


class ReadOnly:
    """An admin that shows what the service wrote and changes nothing: sessions come from
    TARSy, scores and reports from the judge (actions and review forms aside)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AlertSession)
class AlertSessionAdmin(ReadOnly, WideChangelist, admin.ModelAdmin):
    list_display = ["short_id", "alert", "source", "alert_type", "status", "started", "score", "in_tarsy"]
    list_filter = [
        SessionScoreStateFilter, SessionBandFilter, SessionCriteriaFilter, "source", "alert_type", "status",
        "source_quality_rating",
    ]  # fmt: skip
    # get_search_results does the searching; a non-empty list shows the box.
    search_fields = ["session_id"]
    search_help_text = (
        "A whole session id, or text from the alert type, the alert data or the final analysis summary."
    )
    list_per_page = 50
    actions = ["score_selected", "force_rescore_selected"]
    fields = [
        "session_id", "source", "tarsy_link", "alert", "alert_type", "agent_type", "chain_id", "status", "author",
        "runbook_url", "started", "completed", "error_message", "ingest_notes_view", "alert_data_view",
        "final_analysis_view", "investigation_view", "in_tarsy", "writes_view", "score_history",
    ]  # fmt: skip
    readonly_fields = fields

    @property
    def media(self):
        return super().media + ADMIN_MEDIA

    def get_queryset(self, request):
        sessions = super().get_queryset(request).defer(*AlertSession.HEAVY_FIELDS)
        return criteria_selectors.with_criteria_current(
            selectors.with_latest_error(sessions), field="latest_prompt_hash", session=""
        )

    def get_search_results(self, request, queryset, search_term):
        return selectors.search_sessions(queryset, search_term), False

    @admin.display(description="Session", ordering="session_id")
    def short_id(self, session):
        return str(session.session_id)[:8]

    @admin.display(description="Alert")
    def alert(self, session):
        heading = session.heading
        if not heading.summary:
            return heading.title
        return format_html(
            '<strong>{}</strong><br><span class="alert-summary">{}</span>', heading.title, heading.summary
        )

    @admin.display(description="Started", ordering="started_at_us")
    def started(self, session):
        return us_datetime(session.started_at_us)

    @admin.display(description="Completed")
    def completed(self, session):
        return us_datetime(session.completed_at_us)

    @admin.display(description="Score", ordering="latest_total_score")
    def score(self, session):
        shown = badge_html(
            session.latest_status, session.latest_total_score, session.latest_error_message, as_recorded=True
        )
        if session.latest_score_id is None:
            return shown
        if session.latest_prompt_hash is not None and not session.criteria_current:
            shown = format_html('{} <span class="criteria-obsolete">obsolete criteria</span>', shown)
        return format_html('<a href="{}">{}</a>', score_admin_url(session.latest_score_id), shown)

    @admin.display(description="In TARSy")
    def in_tarsy(self, session):
        """Go TARSy's own judge's score and its reviewers' verdict: another judge's, never ours."""
        parts = []
        if session.source_score_total is not None:
            model = f" ({session.source_score_model})" if session.source_score_model else ""
            parts.append(f"judge {session.source_score_total}{model}")
        if session.source_quality_rating:
            parts.append(f"reviewers: {session.get_source_quality_rating_display().lower()}")
        elif session.source_review_status:
            parts.append(f"review: {session.source_review_status}")
        return " · ".join(parts) or "-"

    @admin.display(description="TARSy's page")
    def tarsy_link(self, session):
        url = session.tarsy_dashboard_url
        return format_html('<a href="{}" rel="noopener">{}</a>', url, url) if url else "-"

    @admin.display(description="Ingest notes")
    def ingest_notes_view(self, session):
        if not session.ingest_notes:
            return "(stored as sent)"
        items = format_html_join("", "<li>{}</li>", ((note,) for note in session.ingest_notes))
        return format_html("<ul>{}</ul>", items)

    @admin.display(description="Alert data")
    def alert_data_view(self, session):
        return format_html(
            '<pre class="scoring-pre">{}</pre>', rendering.render_alert_data(session.alert_data)
        )

    @admin.display(description="Final analysis")
    def final_analysis_view(self, session):
        return render_to_string("scoring/_markdown.html", {"text": session.final_analysis})

    @admin.display(description="Investigation")
    def investigation_view(self, session):
        # Linked, not shown: it can be tens of megabytes, and this page defers it.
        return format_html(
            '<a href="{}">The investigation as the judge reads it</a> (plain text; stored document {})',
            reverse("scoring:session-investigation", args=[session.session_id]),
            filesizeformat(session.investigation_bytes),
        )

    @admin.display(description="Written by")
    def writes_view(self, session):
        writes = selectors.session_writes(session.session_id)
        if not writes:
            return "(not recorded: stored before writers were recorded)"
        items = format_html_join(
            "",
            "<li>{} {} by {}</li>",
            (
                (us_datetime(w.written_at_us), "created" if w.created else "replaced", w.written_by)
                for w in writes
            ),
        )
        return format_html("<ul>{}</ul>", items)

    @admin.display(description="Score history")
    def score_history(self, session):
        return render_to_string(
            "admin/scoring/score_history.html",
            {"scores": selectors.score_history(session.session_id)},
        )

    def _request_scoring(self, request, queryset, *, force_rescore: bool, action: str):
        """Queue the scorings; while a spend budget is used up, first a page that asks to confirm."""
        confirmed = request.POST.get(CONFIRM_OVER_BUDGET) == "yes"
        try:
            budget.confirm_manual_scoring(services.now_us(), confirmed=confirmed)
        except budget.OverBudget as over:
            return TemplateResponse(
                request,
                "admin/scoring/confirm_over_budget.html",
                {
                    **self.admin_site.each_context(request),
                    "title": "Score past the spending budget?",
                    "opts": self.model._meta,
                    "reason": str(over),
                    "spend": over.spend,
                    "count": queryset.count(),
                    # "Select all N" is posted back as such (the changelist's filters are in the
                    # URL), not as N fields: Django reads at most DATA_UPLOAD_MAX_NUMBER_FIELDS.
                    "select_across": request.POST.get("select_across") == "1",
                    "sessions": queryset.values_list("session_id", flat=True),
                    "action": action,
                    "force_rescore": force_rescore,
                    "confirm_field": CONFIRM_OVER_BUDGET,
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                },
            )
        outcome = batches.score_sessions(
            list(queryset.values_list("session_id", flat=True)),
            triggered_by=request.user.get_username(),
            force_rescore=force_rescore,
        )
        level = messages.SUCCESS if outcome["queued"] else messages.WARNING
        self.message_user(request, outcome_message(outcome), level)
        return None

    @admin.action(description="Score selected sessions")
    def score_selected(self, request, queryset):
        return self._request_scoring(request, queryset, force_rescore=False, action="score_selected")

    @admin.action(description="Force re-score selected sessions")
    def force_rescore_selected(self, request, queryset):
        return self._request_scoring(request, queryset, force_rescore=True, action="force_rescore_selected")


# --- Scores ----------------------------------------------------------------------------------------


class ReviewForm(forms.Form):
    verdict = forms.ChoiceField(
        choices=ReviewVerdict.choices, widget=forms.RadioSelect(attrs={"form": REVIEW_FORM_ID})
    )
    reviewer_score = forms.IntegerField(
        min_value=0, max_value=100, label="Your score (0-100)",
        widget=forms.NumberInput(attrs={"form": REVIEW_FORM_ID}),
    )  # fmt: skip
    note = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "form": REVIEW_FORM_ID}),
        required=False,
        label="Why",
        max_length=REVIEW_NOTE_MAX_CHARS,
    )


# The score page lists this many reviews, the newest; every review is on the reviews list, paged.
REVIEWS_ON_SCORE_PAGE = 20


class NewestReviews(BaseInlineFormSet):
    def get_queryset(self):
        return super().get_queryset()[:REVIEWS_ON_SCORE_PAGE]


def reviews_with_short_notes(reviews, length: int):
    """``reviews`` with their reviewers and the start of their notes (``note_start``), not the
    notes themselves: a note is capped when recorded, but one recorded before could be megabytes."""
    return reviews.select_related("reviewer").defer("note").annotate(note_start=Left("note", length))


class ScoreReviewInline(admin.TabularInline):
    model = ScoreReview
    formset = NewestReviews
    fields = ["reviewed", "reviewer", "verdict", "reviewer_score", "note_view"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name = "human review"
    verbose_name_plural = (
        f"human reviews (the newest {REVIEWS_ON_SCORE_PAGE}: all of them under “Human reviews” above)"
    )

    def get_queryset(self, request):
        return reviews_with_short_notes(super().get_queryset(request), REVIEW_NOTE_MAX_CHARS)

    @admin.display(description="Note")
    def note_view(self, review):
        return review.note_start

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="Reviewed", ordering="created_at")
    def reviewed(self, review):
        return utc_datetime(review.created_at)


@admin.register(SessionScore)
class SessionScoreAdmin(ReadOnly, WideChangelist, admin.ModelAdmin):
    # The badge says the status (the filter and the score page tell pending from in progress).
    list_display = [
        "short_id", "session_link", "score", "list_criteria", "judge",
        "score_triggered_by", "scored", "reviews_summary",
    ]  # fmt: skip
    list_filter = [
        "status",
        ScoreBandFilter,
        CriteriaFilter,
        "judge_model",
        "score_triggered_by",
        ReviewStateFilter,
        "unstable",
        "analysis_missing",
    ]
    search_fields = ["score_id"]
    search_help_text = (
        "A whole score or session id, a whole criteria hash, or text from the judge model or who triggered it."
    )
    list_per_page = 50
    fields = [
        "score_id", "session_link", "status", "score", "samples", "criteria", "judge", "analysis_missing", "coverage",
        "tokens", "cost",
        "duration", "score_triggered_by", "scored", "started", "completed", "error_message", "waiting_reason",
        "warnings", "dimensions_view", "missing_tool_names", "session_changed_view", "reviews_view",
        "score_analysis_html", "missing_tools_html", "transcript_html",
    ]  # fmt: skip
    readonly_fields = fields
    inlines = [ScoreReviewInline]
    change_form_template = "admin/scoring/sessionscore/change_form.html"

    @property
    def media(self):
        return super().media + ADMIN_MEDIA

    def get_queryset(self, request):
        # The list shows no analyses; the score page loads them when it shows them.
        scores = super().get_queryset(request).defer("score_analysis", "missing_tools_analysis")
        return criteria_selectors.with_criteria_current(
            selectors.with_session_digest(selectors.with_review_counts(scores))
        )

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            key = uuid.UUID(term)
        except ValueError:
            return queryset.filter(
                Q(judge_model__icontains=term) | Q(score_triggered_by__icontains=term) | Q(prompt_hash=term.lower())
            ), False
        return queryset.filter(Q(score_id=key) | Q(session_id=key)), False

    def get_urls(self):
        review = self.admin_site.admin_view(self.review_view)
        return [
            path("<uuid:score_id>/review/", review, name="scoring_sessionscore_review")
        ] + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {
            **(extra_context or {}),
            "review_form": ReviewForm(),
            "review_form_id": REVIEW_FORM_ID,
            "can_review": services.can_review(request.user),
        }
        return super().change_view(request, object_id, form_url, extra_context)

    def review_view(self, request, score_id):
        """Record the signed-in user's review of a score (POST from the score page)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        score = get_object_or_404(SessionScore.objects.only("score_id"), pk=score_id)
        back = HttpResponseRedirect(reverse("admin:scoring_sessionscore_change", args=[score.score_id]))
        if not services.can_review(request.user):
            self.message_user(request, "You may not review scores (needs the “add score review” permission).",
                              messages.ERROR)  # fmt: skip
            return back
        form = ReviewForm(request.POST)
        if not form.is_valid():
            errors = "; ".join(f"{field}: {' '.join(errs)}" for field, errs in form.errors.items())
            self.message_user(request, f"Review not recorded: {errors}", messages.ERROR)
            return back
        try:
            review = services.record_review(
                score_id=score.score_id, reviewer=request.user, **form.cleaned_data
            )
        except services.ReviewRejected as exc:
            self.message_user(request, f"Review not recorded: {exc}", messages.ERROR)
            return back
        self.message_user(request, f"Your review ({review.get_verdict_display().lower()}, "
                                   f"{review.reviewer_score}) was recorded.", messages.SUCCESS)  # fmt: skip
        return back

    @admin.display(description="Score", ordering="score_id")
    def short_id(self, score):
        return str(score.score_id)[:8]

    @admin.display(description="Session", ordering="session_id")
    def session_link(self, score):
        url = reverse("admin:scoring_alertsession_change", args=[score.session_id])
        return format_html('<a href="{}">{}</a>', url, str(score.session_id)[:8])

    @admin.display(description="Total", ordering="total_score")
    def score(self, score):
        return badge_html(score.status, score.total_score, score.error_message, as_recorded=True)

    @admin.display(description="Judge samples")
    def samples(self, score):
        if score.score_samples:
            return samples_note(score)
        return "one" if score.status == ScoringStatus.COMPLETED else None

    @admin.display(description="Criteria", ordering="prompt_hash")
    def criteria(self, score):
        label = "current" if score.criteria_current else "obsolete"
        return format_html(
            '<span class="criteria-{}" title="{}">{} ({})</span>', label, score.prompt_hash, label, score.prompt_hash[:12]
        )

    @admin.display(description="Criteria", ordering="prompt_hash")
    def list_criteria(self, score):
        """The list's short form of ``criteria``: the prompt hash is in its tooltip."""
        label = "current" if score.criteria_current else "obsolete"
        return format_html('<span class="criteria-{}" title="prompt hash {}">{}</span>', label, score.prompt_hash, label)

    @admin.display(description="Tokens (in / out)")
    def tokens(self, score):
        if score.input_tokens is None and score.output_tokens is None:
            return "-"
        cached = f" ({score.cached_input_tokens:,} cached)" if score.cached_input_tokens else ""
        return f"{score.input_tokens or 0:,}{cached} / {score.output_tokens or 0:,}"

    @admin.display(description="Judge", ordering="judge_model")
    def judge(self, score):
        return judge_name(score) or "-"

    @admin.display(description="Investigation seen")
    def coverage(self, score):
        return coverage_note(score.input_coverage) or "-"

    @admin.display(description="Cost (USD)")
    def cost(self, score):
        return "-" if score.cost_usd is None else f"{score.cost_usd:.6f}"

    @admin.display(description="Duration")
    def duration(self, score):
        return duration_text(score.started_at_us, score.completed_at_us) or "-"

    @admin.display(description="Requested", ordering="scored_at_us")
    def scored(self, score):
        return us_datetime(score.scored_at_us)

    @admin.display(description="Started")
    def started(self, score):
        return us_datetime(score.started_at_us)

    @admin.display(description="Completed")
    def completed(self, score):
        return us_datetime(score.completed_at_us)

    @admin.display(description="Reviews")
    def reviews_summary(self, score):
        if not (score.agree_count or score.disagree_count):
            return "not reviewed"
        return f"{score.agree_count} agree, {score.disagree_count} disagree"

    @admin.display(description="Human reviews")
    def reviews_view(self, score):
        reviewed = score.agree_count + score.disagree_count
        if not reviewed:
            return "not reviewed"
        every = reverse("admin:scoring_scorereview_changelist") + f"?score={score.score_id}"
        return format_html(
            '{} agree, {} disagree: <a href="{}">all {} reviews</a>',
            score.agree_count, score.disagree_count, every, reviewed,
        )  # fmt: skip

    @admin.display(description="Session changed since")
    def session_changed_view(self, score):
        return SESSION_CHANGED_TEXT[score.session_changed]

    @admin.display(description="Criteria breakdown")
    def dimensions_view(self, score):
        rows = dimension_rows(score.dimensions)
        return ", ".join(f"{criterion} {'-' if points is None else points}" for criterion, points in rows) or "-"

    @admin.display(description="Missing tools named")
    def missing_tool_names(self, score):
        return ", ".join(tool.name for tool in score.missing_tools.all()) or "-"

    @admin.display(description="Score analysis")
    def score_analysis_html(self, score):
        return render_to_string("scoring/_markdown.html", {"text": score.score_analysis})

    @admin.display(description="Missing tools")
    def missing_tools_html(self, score):
        if score.missing_tools_analysis is None and score.analysis_missing:
            return "Not asked: the judge gave no evaluation to base it on."
        return render_to_string("scoring/_markdown.html", {"text": score.missing_tools_analysis})

    @admin.display(description="What the judge saw")
    def transcript_html(self, score):
        """The transcript, read for this page alone (the list never reads it)."""
        transcript = selectors.score_transcript(score.score_id)
        if transcript is None:
            return "None kept (past SCORING_TRANSCRIPT_RETENTION_DAYS, made before transcripts were kept, or not judged yet)."
        return render_to_string("scoring/_transcript.html", {"transcript": transcript.transcript})


@admin.register(ScoreReview)
class ScoreReviewAdmin(ReadOnly, admin.ModelAdmin):
    """Every human review, newest first, 100 a page (a score's page lists its newest
    ``REVIEWS_ON_SCORE_PAGE`` and links here for the rest); recorded on the score's page."""

    list_display = ["reviewed", "score_link", "reviewer", "verdict", "reviewer_score", "note_view"]
    list_filter = ["verdict"]
    list_per_page = 100
    show_full_result_count = False  # the count above the filters: one query less on a large table

    def get_queryset(self, request):
        return reviews_with_short_notes(super().get_queryset(request), 200)

    @admin.display(description="Reviewed", ordering="created_at")
    def reviewed(self, review):
        return utc_datetime(review.created_at)

    @admin.display(description="Score")
    def score_link(self, review):
        url = reverse("admin:scoring_sessionscore_change", args=[review.score_id])
        return format_html('<a href="{}">{}</a>', url, str(review.score_id)[:8])

    @admin.display(description="Note")
    def note_view(self, review):
        return review.note_start if len(review.note_start) < 200 else review.note_start[:199] + "…"


@admin.register(InsightReport)
class InsightReportAdmin(ReadOnly, admin.ModelAdmin):
    """The MCP prioritization reports, read only: they are written by a worker
    (``scoring.insights.reports``), requested on the insights page or the API."""

    list_display = ["report_id", "status", "requested_by", "requested", "judge_model", "inputs", "rounds"]
    list_filter = ["status", "judge_model"]
    fields = [
        "report_id", "status", "requested_by", "requested", "completed", "filters", "inputs", "judge_model",
        "input_tokens", "output_tokens", "cost_usd", "rounds", "error_message", "report_html",
    ]  # fmt: skip
    readonly_fields = fields

    @property
    def media(self):
        return super().media + ADMIN_MEDIA

    @admin.display(description="Requested", ordering="requested_at_us")
    def requested(self, report):
        return us_datetime(report.requested_at_us)

    @admin.display(description="Completed")
    def completed(self, report):
        return us_datetime(report.completed_at_us)

    @admin.display(description="Scores read")
    def inputs(self, report):
        return len(report.score_ids)

    @admin.display(description="Report")
    def report_html(self, report):
        return render_to_string("scoring/_markdown.html", {"text": report.report})
