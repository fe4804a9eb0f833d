from csp.decorators import csp_replace
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from scoring import views_health

# Swagger UI and Redoc set inline styles as they render, and Redoc parses the
# schema in a Web Worker made from a blob: URL; their scripts still come only
# from this site (Swagger UI's start script too: the split view serves it as a file).
DOCS_PAGE_CSP = {
    "style-src": ["'self'", "'unsafe-inline'"],
    "style-src-attr": ["'unsafe-inline'"],
    "worker-src": ["'self'", "blob:"],
}

urlpatterns = [
    path("", include("scoring.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("scoring.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/",
        csp_replace(DOCS_PAGE_CSP)(SpectacularSwaggerSplitView.as_view(url_name="schema")),
        name="swagger-ui",
    ),
    path("api/redoc/", csp_replace(DOCS_PAGE_CSP)(SpectacularRedocView.as_view(url_name="schema")), name="redoc"),
    path("api-auth/", include("rest_framework.urls")),
    path("healthz", views_health.healthz, name="healthz"),
    path("readyz", views_health.readyz, name="readyz"),
    path("metrics", views_health.metrics_view, name="metrics"),
]
