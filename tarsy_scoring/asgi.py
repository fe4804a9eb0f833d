"""One ASGI application for HTTP and WebSocket traffic."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_scoring.settings")
django_asgi_app = get_asgi_application()

# These import models, so they need Django set up first.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from scoring.realtime.routing import websocket_urlpatterns  # noqa: E402
from tarsy_scoring.request_limits import RequestBodyLimit  # noqa: E402

# The consumer checks Origin and authentication itself and refuses a socket in
# its handshake (HTTP 403, docs/websocket.md).
application = ProtocolTypeRouter(
    {
        "http": RequestBodyLimit(django_asgi_app),
        "websocket": AuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
    }
)

