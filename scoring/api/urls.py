from django.urls import include, path
from rest_framework.routers import DefaultRouter

from scoring.api.sessions import SessionViewSet

router = DefaultRouter()
router.register("sessions", SessionViewSet, basename="session")

urlpatterns = [
    path("", include(router.urls)),
]
