"""The service's ASGI application plus bare Django reference views, for bench_api.py.

    python -m tarsy_scoring.server bench.reference_app:application

serves everything the service serves, and under ``/bench/reference/`` two plain
Django views (no DRF, no authentication, no events, no queue) doing the least
work the API's score endpoints could do: read the newest score of a session as
JSON, and insert a pending score unless one is active. They run in the same
process, through the same middleware, so the API's cost can be compared with
them side by side. The service's own URLs are untouched: the reference views
are found through a per-request URLconf set here, only in this application.
"""

import functools
import time

from django.core.handlers.asgi import ASGIHandler
from django.db import IntegrityError, transaction
from django.http import JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from tarsy_scoring.asgi import application as service_application

PREFIX = "/bench/reference/"


@functools.cache
def score_fields() -> list[str]:
    """The stored fields of the API's score body (the API computes the others, such as
    current_prompt_used and session_changed_since_score). Looked up on first use: the models
    can be imported only once the ASGI application has set Django up."""
    from scoring.api.scores import ScoreSerializer
    from scoring.models import SessionScore

    stored = {field.name for field in SessionScore._meta.concrete_fields}
    return [name for name in ScoreSerializer.Meta.fields if name in stored]


def score_row(session_id) -> dict | None:
    from scoring.models import SessionScore

    return (
        SessionScore.objects.filter(session_id=session_id)
        .order_by("-scored_at_us")
        .values(*score_fields())
        .first()
    )


@csrf_exempt
def reference_score(request, session_id):
    """GET: the newest score row as JSON. POST: insert a pending score unless one is active."""
    from scoring.judge.prompts import PROMPT_HASH
    from scoring.models import ScoringStatus, SessionScore

    if request.method == "POST":
        now_us = time.time_ns() // 1000
        try:
            with transaction.atomic():
                SessionScore.objects.create(
                    session_id=session_id,
                    prompt_hash=PROMPT_HASH,
                    score_triggered_by="bench",
                    scored_at_us=now_us,
                    started_at_us=now_us,
                    status=ScoringStatus.PENDING,
                )
            created = True
        except IntegrityError:  # the one-active-score index: another request won
            created = False
        row = score_row(session_id)
        return JsonResponse(
            {"score_id": row["score_id"], "status": row["status"]}, status=202 if created else 200
        )
    row = score_row(session_id)
    if row is None:
        return JsonResponse({"detail": "not scored"}, status=404)
    return JsonResponse(row)


urlpatterns = [path("bench/reference/score/<uuid:session_id>", reference_score)]


class ReferenceHandler(ASGIHandler):
    """Django's ASGI handler, resolving URLs with this module's patterns."""

    def create_request(self, scope, body_file):
        request, error_response = super().create_request(scope, body_file)
        if request is not None:
            request.urlconf = __name__
        return request, error_response


reference_application = ReferenceHandler()


async def application(scope, receive, send):
    if scope["type"] == "http" and scope["path"].startswith(PREFIX):
        await reference_application(scope, receive, send)
    else:
        await service_application(scope, receive, send)
