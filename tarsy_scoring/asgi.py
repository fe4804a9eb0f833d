"""One ASGI application for HTTP and WebSocket traffic."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_scoring.settings")
django_asgi_app = get_asgi_application()

# These import models, so they need Django set up first.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from scoring.routing import websocket_urlpatterns  # noqa: E402

# The consumer checks Origin and authentication itself, so that a refusal
# closes with a documented code (docs/websocket.md).
application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
    }
)
