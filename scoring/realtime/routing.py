"""WebSocket URL routes (the HTTP ones are in tarsy_scoring.urls)."""

from django.urls import path

from scoring.realtime.consumers import ScoringEventsConsumer

websocket_urlpatterns = [
    path("api/v1/ws", ScoringEventsConsumer.as_asgi()),
]
