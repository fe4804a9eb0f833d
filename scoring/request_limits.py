"""Refuse request bodies over the size limit with 413, before anything reads them.

Django checks ``DATA_UPLOAD_MAX_MEMORY_SIZE`` only when a body is read through
``request.body`` or form parsing; DRF's JSON parser reads the stream directly
and would take a body of any size. This middleware applies the limit
(``MAX_REQUEST_BODY_BYTES``) to every request that declares its length, and
answers in the API's error shape (JSON with a ``detail``).
"""

from django.conf import settings
from django.http import JsonResponse


class RequestBodyLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0  # not a number: the server or parser refuses it on its own
        if limit is not None and length > limit:
            return JsonResponse(
                {
                    "detail": f"request body of {length} bytes is larger than the limit of {limit} bytes "
                    "(MAX_REQUEST_BODY_BYTES)"
                },
                status=413,
            )
        return self.get_response(request)
