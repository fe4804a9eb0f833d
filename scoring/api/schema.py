"""``/api/schema/``: the OpenAPI schema, made once per process.

The schema depends only on the code, yet making it (drf-spectacular walks every view) and
rendering it cost about 35-55 ms of CPU, on a page anyone may fetch. Each process keeps the
rendered answer for each of the four formats it serves (two YAML, two JSON media types) and
answers again from it. A request with any query parameter but ``format`` (another language,
``?lang=``, or version, ``?version=``, which drf-spectacular writes into the schema) is made
afresh and never kept: no caller can change what the others are answered, nor fill the memory
with variants.
"""

import threading

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SCHEMA_KWARGS, SpectacularAPIView

# Renderer media type -> (body, Content-Type, Content-Disposition).
_rendered: dict[str, tuple[bytes, str, str]] = {}
_rendered_lock = threading.Lock()


def forget_rendered_schemas() -> None:
    """Drop what this process kept (for a test that changes what the schema says)."""
    with _rendered_lock:
        _rendered.clear()


class CachedSchemaView(SpectacularAPIView):
    @extend_schema(**SCHEMA_KWARGS)  # as its parent's: the schema leaves itself out
    def get(self, request, *args, **kwargs):
        kept = _rendered.get(request.accepted_renderer.media_type) if _plain(request) else None
        if kept is None:
            return super().get(request, *args, **kwargs)
        body, content_type, disposition = kept
        return HttpResponse(body, content_type=content_type, headers={"Content-Disposition": disposition})

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        fresh = getattr(response, "accepted_renderer", None) is not None  # made now, not answered from memory
        if fresh and response.status_code == 200 and _plain(request):
            response.render()
            with _rendered_lock:
                _rendered[request.accepted_renderer.media_type] = (
                    response.content,
                    response["Content-Type"],
                    response["Content-Disposition"],
                )
        return response


def _plain(request) -> bool:
    """Whether the request asks for the schema as it is, in one format (no other parameter)."""
    return set(request.GET) <= {"format"}
