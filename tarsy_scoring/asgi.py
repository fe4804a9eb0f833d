"""One ASGI application for HTTP and WebSocket traffic."""

import logging
import os
import sys

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


def _log_daphne_access_lines():
    """daphne's command line writes its access lines to stdout itself, never as
    JSON. It builds its access logger after loading this module: give it one that
    makes log records of logger ``daphne.access``, formatted like every other line
    (LOG_FORMAT, control characters escaped in text)."""
    cli = sys.modules.get("daphne.cli")
    if cli is None:  # not served by daphne's command line
        return
    from daphne.access import AccessLogGenerator

    access_logger = logging.getLogger("daphne.access")

    class LoggedAccessLog(AccessLogGenerator):
        def write_entry(self, host, date, request, status=None, length=None, ident=None, user=None):
            access_logger.info(
                '%s "%s" %s %s',
                host,
                request,
                status or "-",
                length or "-",
                extra={"client": host, "request": request, "status": status, "size": length},
            )

    cli.AccessLogGenerator = LoggedAccessLog


_log_daphne_access_lines()
