from rest_framework import viewsets

from scoring.models import AlertSession


class SessionViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = AlertSession.objects.none()
