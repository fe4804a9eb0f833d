"""/healthz, /readyz and /metrics: thin views over scoring.ops.health and scoring.ops.metrics.

None needs a login (a load balancer or Prometheus calls them); they reveal the
state of dependencies and aggregate numbers, never sessions or scores.
/metrics names the judge model, its cost and the worker hosts, so it answers
only ``Authorization: Bearer <METRICS_TOKEN>`` when that is set, and otherwise
only loopback, ``TRUSTED_PROXY_IPS`` and ``METRICS_ALLOWED_IPS`` (403 to others).
"""

import hmac

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from scoring.auth import address_in
from scoring.ops import health, metrics


@never_cache
@require_GET
async def healthz(request):
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
async def readyz(request):
    # Off the event loop, and off the thread shared by sync views: a check may wait its full timeout.
    ready, checks = await sync_to_async(health.readiness, thread_sensitive=False)()
    return JsonResponse(
        {"status": "ok" if ready else "failed", "checks": checks}, status=200 if ready else 503
    )


def may_scrape_without_token(remote_addr: str | None) -> bool:
    return address_in(
        remote_addr, (*settings.TRUSTED_PROXY_IPS, *settings.METRICS_ALLOWED_IPS), loopback=True
    )


@never_cache
@require_GET
def metrics_view(request):
    token = settings.METRICS_TOKEN
    given = request.headers.get("Authorization", "").encode()
    if token and not hmac.compare_digest(given, f"Bearer {token}".encode()):
        response = JsonResponse(
            {"detail": "/metrics needs Authorization: Bearer <METRICS_TOKEN>"}, status=401
        )
        response["WWW-Authenticate"] = "Bearer"
        return response
    if not token and not may_scrape_without_token(request.META.get("REMOTE_ADDR")):
        return JsonResponse(
            {
                "detail": "/metrics answers only loopback, TRUSTED_PROXY_IPS and METRICS_ALLOWED_IPS "
                "(or set METRICS_TOKEN)"
            },
            status=403,
        )
    body, content_type = metrics.exposition()
    return HttpResponse(body, content_type=content_type)
