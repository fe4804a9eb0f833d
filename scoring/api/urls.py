from django.urls import include, path, reverse
from rest_framework import routers

from scoring.api.agreement import AgreementView
from scoring.api.criteria import (
    CriteriaCalibrateView,
    CriteriaCandidateView,
    CriteriaDetailView,
    CriteriaListView,
    CriteriaPromoteView,
    CriteriaRetireView,
    CriteriaRollbackView,
)
from scoring.api.insights import FleetStatsView, MissingToolsView
from scoring.api.reports import ReportDetailView, ReportListView
from scoring.api.reviews import ScoreReviewsView
from scoring.api.scores import SessionScoreHistoryView, SessionScoreViewSet
from scoring.api.sessions import SessionViewSet
from scoring.api.transcripts import ScoreTranscriptView
from scoring.api.trials import (
    TrialCancelView,
    TrialDetailView,
    TrialListView,
    TrialScoringListView,
    TrialScoringView,
)

# Stand-ins for the ids in the links, and what the root shows in their place.
ID_PLACEHOLDERS = {
    "SESSION-ID": "{session_id}",
    "SCORE-ID": "{score_id}",
    "REPORT-ID": "{report_id}",
    "424242": "{version_id}",
    "TRIAL-ID": "{trial_id}",
}


class APIRoot(routers.APIRootView):
    """The API's endpoints. `{session_id}`, `{score_id}`, `{report_id}` and `{trial_id}` stand
    for UUIDs, `{version_id}` for a criteria version's number; the schema and its docs describe
    every operation."""

    name = "API root"

    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)

        def link(name, **kwargs):
            # With a stand-in for the id: building the URL would percent-encode the braces.
            url = request.build_absolute_uri(reverse(name, kwargs=kwargs))
            for stand_in, placeholder in ID_PLACEHOLDERS.items():
                url = url.replace(stand_in, placeholder)
            return url

        response.data.update(
            {
                "session": link("session-detail", session_id="SESSION-ID"),
                "session-score": link("session-score", session_id="SESSION-ID"),
                "session-scores": link("session-scores", session_id="SESSION-ID"),
                "score-reviews": link("score-reviews", score_id="SCORE-ID"),
                "score-transcript": link("score-transcript", score_id="SCORE-ID"),
                "stats": link("fleet-stats"),
                "missing-tools": link("missing-tools"),
                "agreement": link("agreement"),
                "reports": link("insight-reports"),
                "report": link("insight-report", report_id="REPORT-ID"),
                "criteria": link("criteria"),
                "criteria-version": link("criteria-version", version_id=424242),
                "criteria-rollback": link("criteria-rollback"),
                "criteria-calibrate": link("criteria-calibrate"),
                "trials": link("trials"),
                "trial": link("trial", trial_id="TRIAL-ID"),
                "schema": link("schema"),
                "docs": link("swagger-ui"),
            }
        )
        return response


router = routers.DefaultRouter()
router.APIRootView = APIRoot
router.register("sessions", SessionViewSet, basename="session")

session_score = SessionScoreViewSet.as_view({"get": "retrieve", "post": "create"})

urlpatterns = [
    path("", include(router.urls)),
    path("scoring/sessions/<str:session_id>/score", session_score, name="session-score"),
    path("scoring/sessions/<str:session_id>/scores", SessionScoreHistoryView.as_view(), name="session-scores"),
    path("scoring/stats/", FleetStatsView.as_view(), name="fleet-stats"),
    path("scoring/missing-tools/", MissingToolsView.as_view(), name="missing-tools"),
    path("scoring/scores/<str:score_id>/reviews", ScoreReviewsView.as_view(), name="score-reviews"),
    path("scoring/scores/<str:score_id>/transcript", ScoreTranscriptView.as_view(), name="score-transcript"),
    path("scoring/agreement/", AgreementView.as_view(), name="agreement"),
    path("scoring/reports/", ReportListView.as_view(), name="insight-reports"),
    path("scoring/reports/<str:report_id>", ReportDetailView.as_view(), name="insight-report"),
    path("scoring/criteria/", CriteriaListView.as_view(), name="criteria"),
    path("scoring/criteria/rollback", CriteriaRollbackView.as_view(), name="criteria-rollback"),
    path("scoring/criteria/calibrate", CriteriaCalibrateView.as_view(), name="criteria-calibrate"),
    path("scoring/criteria/<int:version_id>", CriteriaDetailView.as_view(), name="criteria-version"),
    path(
        "scoring/criteria/<int:version_id>/candidate", CriteriaCandidateView.as_view(), name="criteria-candidate"
    ),
    path("scoring/criteria/<int:version_id>/promote", CriteriaPromoteView.as_view(), name="criteria-promote"),
    path("scoring/criteria/<int:version_id>/retire", CriteriaRetireView.as_view(), name="criteria-retire"),
    path("scoring/trials/", TrialListView.as_view(), name="trials"),
    path("scoring/trials/<str:trial_id>", TrialDetailView.as_view(), name="trial"),
    path("scoring/trials/<str:trial_id>/cancel", TrialCancelView.as_view(), name="trial-cancel"),
    path("scoring/trials/<str:trial_id>/scorings", TrialScoringListView.as_view(), name="trial-scorings"),
    path(
        "scoring/trials/<str:trial_id>/scorings/<int:scoring_id>",
        TrialScoringView.as_view(),
        name="trial-scoring",
    ),
]
