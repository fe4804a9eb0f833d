"""Dashboard pages (the API's routes are in scoring.api.urls)."""

from django.urls import path

from scoring import views

app_name = "scoring"

urlpatterns = [
    path("", views.session_list, name="session-list"),
    path("sessions/<uuid:session_id>/", views.session_detail, name="session-detail"),
    path("sessions/<uuid:session_id>/score-panel", views.score_panel, name="score-panel"),
    path(
        "sessions/<uuid:session_id>/investigation", views.session_investigation, name="session-investigation"
    ),
]
