from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerSplitView

from scoring import views as scoring_views
from scoring.api.schema import CachedSchemaView
from scoring.ops import views as ops_views
from tarsy_scoring.csp import third_party_page

# The names DRF's templates reverse for the browsable API (rest_framework.urls): its
# sign-in is the dashboard's own page (shown to a signed-in user too, as DRF's was).
browsable_api_auth = (
    [
        path("login/", auth_views.LoginView.as_view(template_name="scoring/login.html"), name="login"),
        path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    ],
    "rest_framework",
)

admin.site.site_header = "TARSy scoring administration"
admin.site.site_title = "TARSy scoring"

handler404 = scoring_views.page_not_found
handler500 = scoring_views.server_error

urlpatterns = [
    path("", include("scoring.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("scoring.api.urls")),
    # Made once per process: it only changes with the code (scoring/api/schema.py).
    path("api/schema/", CachedSchemaView.as_view(), name="schema"),
    # The split view serves Swagger UI's start script as a file, not inline.
    path(
        "api/docs/",
        third_party_page(SpectacularSwaggerSplitView.as_view(url_name="schema")),
        name="swagger-ui",
    ),
    path("api/redoc/", third_party_page(SpectacularRedocView.as_view(url_name="schema")), name="redoc"),
    path("api-auth/", include(browsable_api_auth)),
    path("favicon.ico", scoring_views.favicon, name="favicon"),
    path("healthz", ops_views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
    path("metrics", ops_views.metrics_view, name="metrics"),
]
