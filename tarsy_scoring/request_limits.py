"""Refuse request bodies over the size limit (``MAX_REQUEST_BODY_BYTES``) with 413.

Django checks ``DATA_UPLOAD_MAX_MEMORY_SIZE`` only when a body is read through
``request.body`` or form parsing; DRF's JSON parser reads the stream directly
and would take a body of any size. Two layers apply the limit, before
authentication, answering in the API's error shape (JSON with a ``detail``):

* ``RequestBodyLimit``, the ASGI application in front of Django
  (``tarsy_scoring.asgi``): 413 at once when ``Content-Length`` is over the
  limit, and otherwise counts the body's bytes as the server hands them over
  (chunked bodies have no ``Content-Length``) and answers 413 as soon as the
  count passes the limit, without reading the rest. Django itself would first
  copy the whole body into a temporary file.
* ``RequestBodyLimitMiddleware``, the Django middleware, for the WSGI path
  (and Django's test client): bodies that declare their length.

The web server (uvicorn, ``tarsy_scoring.server``) hands the body over as it
arrives, with flow control, so a refused body is never held whole (docs/deploy.md).
"""

from django.conf import settings
from django.http import JsonResponse


def _too_large_detail(limit: int, length: int | None = None) -> str:
    size = f"request body of {length} bytes" if length is not None else "request body"
    return f"{size} is larger than the limit of {limit} bytes (MAX_REQUEST_BODY_BYTES)"


def _declared_length(value: str | bytes | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0  # not a number: the server or parser refuses it on its own


class RequestBodyLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        length = _declared_length(request.META.get("CONTENT_LENGTH"))
        if limit is not None and length > limit:
            return JsonResponse({"detail": _too_large_detail(limit, length)}, status=413)
        return self.get_response(request)


class RequestBodyLimit:
    """ASGI middleware: HTTP bodies over the limit get 413 before the application reads them whole."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if scope["type"] != "http" or limit is None:
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = _declared_length(headers.get(b"content-length"))
        if length > limit:
            return await self._refuse(send, _too_large_detail(limit, length))

        received = 0
        refused = False

        async def counting_receive():
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    await self._refuse(send, _too_large_detail(limit))
                    # To the application the client has gone: Django stops reading and answers nothing.
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message):
            if not refused:  # the 413 was the answer
                await send(message)

        await self.app(scope, counting_receive, guarded_send)

    @staticmethod
    async def _refuse(send, detail: str) -> None:
        response = JsonResponse({"detail": detail}, status=413)
        headers = [
            (b"content-type", response["Content-Type"].encode()),
            (b"content-length", str(len(response.content)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": response.content})
