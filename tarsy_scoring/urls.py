from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from scoring import views_health

urlpatterns = [
    path("", include("scoring.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("scoring.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("api-auth/", include("rest_framework.urls")),
    path("healthz", views_health.healthz, name="healthz"),
    path("readyz", views_health.readyz, name="readyz"),
    path("metrics", views_health.metrics_view, name="metrics"),
]
