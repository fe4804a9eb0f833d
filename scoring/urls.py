"""Dashboard pages (the API's routes are in scoring.api.urls)."""

from django.contrib.auth import views as auth_views
from django.urls import path

from scoring import views

app_name = "scoring"

urlpatterns = [
    path("", views.session_list, name="session-list"),
    # Password sign-in for the dashboard (behind oauth2-proxy the proxy signs users in).
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="scoring/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    # POST only: ends the Django session of any user, staff or not (the admin's
    # logout sends a non-staff user back to its index without ending it).
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("insights/", views.insights, name="insights"),
    path("sessions/<uuid:session_id>/", views.session_detail, name="session-detail"),
    path("sessions/<uuid:session_id>/score-panel", views.score_panel, name="score-panel"),
    path(
        "sessions/<uuid:session_id>/scores/<uuid:score_id>/transcript",
        views.score_transcript,
        name="score-transcript",
    ),
    path("trials/", views.trial_list, name="trial-list"),
    path("trials/<uuid:trial_id>/", views.trial_detail, name="trial-detail"),
    path(
        "trials/<uuid:trial_id>/scorings/<int:scoring_id>/transcript",
        views.trial_scoring_transcript,
        name="trial-scoring-transcript",
    ),
    path(
        "sessions/<uuid:session_id>/investigation", views.session_investigation, name="session-investigation"
    ),
]
