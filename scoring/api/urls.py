from django.urls import include, path, reverse
from rest_framework import routers

from scoring.api.reports import ReportDetailView, ReportListView
from scoring.api.scores import SessionScoreViewSet
from scoring.api.sessions import SessionViewSet

SESSION_ID_PLACEHOLDER = "{session_id}"


class APIRoot(routers.APIRootView):
    """The API's endpoints. `{session_id}` stands for a session's UUID; the schema
    and its docs describe every operation."""

    name = "API root"

    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)

        def link(name, **kwargs):
            # With a stand-in for the id: building the URL would percent-encode the braces.
            return request.build_absolute_uri(reverse(name, kwargs=kwargs)).replace(
                "SESSION-ID", SESSION_ID_PLACEHOLDER
            )

        response.data.update(
            {
                "session": link("session-detail", session_id="SESSION-ID"),
                "session-score": link("session-score", session_id="SESSION-ID"),
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
    path("scoring/reports/", ReportListView.as_view(), name="insight-reports"),
    path("scoring/reports/<str:report_id>", ReportDetailView.as_view(), name="insight-report"),
]
