"""Dashboard pages: the session list with scores, a session beside its score, the
insights across sessions, and the trials of candidate criteria.

Pages only read. Scoring is requested by the page script through the REST API
and its progress arrives on the WebSocket (``static/scoring/dashboard.js``).
Signing in and out are Django's own views on the dashboard's URLs (scoring.urls).
The site's 404 and 500 pages are here too (``handler404``, ``handler500``).
"""

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views import defaults

from scoring import selectors
from scoring.api.errors import INTERNAL_ERROR_DETAIL
from scoring.insights import page as insights_page
from scoring.insights.filters import FILTER_PARAMS, InvalidFilter, parse_filters
from scoring.judge import rendering
from scoring.models import AlertSession, SessionScore, SessionSource
from scoring.templatetags.scoring_ui import badge_catalog
from scoring.trials import page as trial_page
from scoring.trials import selectors as trial_selectors

PAGE_SIZE = 50
SORT_CHOICES = [
    ("-started", "Newest first"),
    ("started", "Oldest first"),
    ("-score", "Highest score first"),
    ("score", "Lowest score first"),
]


class SessionListFilters(forms.Form):
    """The list's query string. Invalid values are ignored, not reported."""

    score = forms.ChoiceField(
        required=False,
        choices=[("", "Any score")]
        + list(selectors.SCORE_STATES.items())
        + [(band.key, f"{band.label} ({band.low}-{band.high})") for band in selectors.SCORE_BANDS],
    )
    criteria = forms.ChoiceField(
        required=False,
        choices=[("", "Any criteria"), ("current", "Current criteria"), ("obsolete", "Obsolete criteria")],
    )
    alert_type = forms.ChoiceField(required=False)
    source = forms.ChoiceField(required=False, choices=[("", "Any source"), *SessionSource.choices])
    q = forms.CharField(required=False, label="Search", max_length=200)
    sort = forms.ChoiceField(required=False, choices=SORT_CHOICES)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["alert_type"].choices = [("", "Any alert type")] + [
            (t, t) for t in selectors.alert_types()
        ]

    def selection(self) -> dict:
        """Keyword arguments for ``selectors.dashboard_sessions``."""
        self.is_valid()
        data = self.cleaned_data
        score = data.get("score") or ""
        criteria = data.get("criteria") or ""
        return {
            "state": score if score in selectors.SCORE_STATES else None,
            "band": score if score and score not in selectors.SCORE_STATES else None,
            "obsolete": {"current": False, "obsolete": True}.get(criteria),
            "alert_type": data.get("alert_type") or None,
            "source": data.get("source") or None,
            "search": data.get("q") or "",
            "sort": data.get("sort") or "-started",
        }


def _live_context() -> dict:
    """What the page script needs: the badge catalogue and where to catch up from."""
    return {"badge_catalog": badge_catalog(), "last_event_id": selectors.latest_event_id()}


@login_required
def session_list(request):
    filters = SessionListFilters(request.GET)
    page = Paginator(selectors.dashboard_sessions(**filters.selection()), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "scoring/session_list.html",
        {"filters": filters, "page": page, "query": query.urlencode(), **_live_context()},
    )


def _session_or_404(sessions, session_id) -> AlertSession:
    try:
        return sessions.get(pk=session_id)
    except AlertSession.DoesNotExist:
        raise Http404(selectors.no_such_session(session_id)) from None


def _score_view_sessions():
    """Sessions without their investigation, with what re-scoring one costs (its Re-score asks first)."""
    return selectors.with_scoring_estimate(AlertSession.objects.defer(*AlertSession.HEAVY_FIELDS))


def _score_context(session: AlertSession) -> dict:
    history = list(selectors.with_transcript_flag(selectors.score_history(session.session_id)))
    return {"session": session, "latest": history[0] if history else None, "history": history}


@login_required
def session_detail(request, session_id):
    # The investigation can be tens of megabytes: the page links to it (session_investigation).
    session = _session_or_404(_score_view_sessions(), session_id)
    return render(
        request,
        "scoring/session_detail.html",
        {
            "alert_data_text": rendering.render_alert_data(session.alert_data),
            **_score_context(session),
            **_live_context(),
        },
    )


@login_required
def session_investigation(request, session_id):
    """The whole investigation as the judge reads it, as plain text, only when asked for."""
    session = _session_or_404(AlertSession.objects, session_id)
    return HttpResponse(rendering.render_investigation(session), content_type="text/plain; charset=utf-8")


@login_required
def score_panel(request, session_id):
    """The score view alone, for the page script to refresh it in place."""
    session = _session_or_404(_score_view_sessions(), session_id)
    return render(request, "scoring/_score_panel.html", _score_context(session))


@login_required
def score_transcript(request, session_id, score_id):
    """What the judge was sent and wrote for one score: for staff only, as the API's transcript."""
    if not request.user.is_staff:
        raise PermissionDenied("Only the service's staff may read the judge's transcripts.")
    score = SessionScore.objects.filter(pk=score_id, session_id=session_id).defer(
        "score_analysis", "missing_tools_analysis"
    ).first()
    if score is None:
        raise Http404(selectors.no_such_score(score_id))
    transcript = selectors.score_transcript(score.score_id)
    if transcript is None:
        raise Http404(
            f"No transcript of score {score_id} is kept (past SCORING_TRANSCRIPT_RETENTION_DAYS, made before "
            "transcripts were kept, or not judged yet)."
        )
    return render(request, "scoring/score_transcript.html", {"score": score, "transcript": transcript})


@login_required
def insights(request):
    """Fleet statistics, the missing-tools backlog, the judge's trust and the MCP report,
    under the insights' shared filters; a filter that cannot be read is said, with a 400."""
    context = {
        "values": {name: request.GET.get(name, "") for name in FILTER_PARAMS},
        "choices": insights_page.filter_choices(),
        "has_scores": insights_page.any_completed_score(),
        "band_list": [{"key": band.key, "label": band.label} for band in selectors.SCORE_BANDS],
    }
    try:
        filters = parse_filters(request.GET)
    except InvalidFilter as error:
        return render(request, "scoring/insights.html", {**context, "filter_error": str(error)}, status=400)
    figures = insights_page.insights_figures(filters) if context["has_scores"] else {}
    return render(
        request,
        "scoring/insights.html",
        {**context, **figures, "filters": filters.as_params()},
    )


@login_required
def trial_list(request):
    """Every trial, newest first, with its progress."""
    page = Paginator(trial_selectors.trials(), PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [(trial, trial_selectors.progress(trial)) for trial in page]
    return render(request, "scoring/trial_list.html", {"page": page, "rows": rows})


def _trial_or_404(trial_id):
    trial = trial_selectors.get_trial(trial_id)
    if trial is None:
        raise Http404(f"No trial {trial_id}.")
    return trial


@login_required
def trial_detail(request, trial_id):
    """A trial's progress and figures against the reviewers, as its admin page shows them."""
    return render(request, "scoring/trial_detail.html", trial_page.trial_context(_trial_or_404(trial_id)))


@login_required
def trial_scoring_transcript(request, trial_id, scoring_id):
    """What the judge was sent and wrote for one trial scoring: for staff only, as a score's."""
    if not request.user.is_staff:
        raise PermissionDenied("Only the service's staff may read the judge's transcripts.")
    trial = _trial_or_404(trial_id)
    scoring = trial.scorings.filter(pk=scoring_id).first()
    if scoring is None:
        raise Http404(f"No scoring {scoring_id} in trial {trial_id}.")
    if scoring.transcript is None:
        raise Http404(f"No transcript of trial scoring {scoring_id} is kept (not judged yet).")
    return render(request, "scoring/trial_scoring_transcript.html", {"trial": trial, "scoring": scoring})


def favicon(request):
    """Browsers ask for /favicon.ico where a page names no icon (the admin's, the API docs')."""
    return redirect(static("scoring/favicon.svg"))


API_PREFIX = "/api/"


def page_not_found(request, exception):
    """The site's 404 page, saying what is missing; under /api/, the API's JSON error."""
    if request.path_info.startswith(API_PREFIX):
        return JsonResponse({"detail": f"No API endpoint at {request.path} (see /api/docs/)."}, status=404)
    message = exception.args[0] if exception.args and isinstance(exception.args[0], str) else ""
    return render(request, "404.html", {"message": message}, status=404)


def server_error(request):
    """The site's 500 page (rendered without the request: it may be what failed);
    under /api/, the API's JSON error."""
    if request.path_info.startswith(API_PREFIX):
        return JsonResponse({"detail": INTERNAL_ERROR_DETAIL}, status=500)
    return defaults.server_error(request)
