from django.urls import include, path
from rest_framework.routers import DefaultRouter

from scoring.api.scores import SessionScoreViewSet
from scoring.api.sessions import SessionViewSet

router = DefaultRouter()
router.register("sessions", SessionViewSet, basename="session")

session_score = SessionScoreViewSet.as_view({"get": "retrieve", "post": "create"})

urlpatterns = [
    path("", include(router.urls)),
    path("scoring/sessions/<str:session_id>/score", session_score, name="session-score"),
]
