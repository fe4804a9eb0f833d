"""Error bodies for the REST API: always JSON, always with a ``detail``.

A validation error keeps its messages by field (or JSON path) beside the
``detail``, which says them all on one line: ``{"detail": "force_rescore: Must
be a valid boolean.", "force_rescore": ["Must be a valid boolean."]}``.
"""

import logging

from django.db import DatabaseError
from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from scoring.tarsy.documents import DOCUMENT_ERRORS_KEY, format_errors

logger = logging.getLogger(__name__)
# What a caller is told of an error of ours (the log has the rest).
INTERNAL_ERROR_DETAIL = "internal server error"


class DetailErrorSerializer(serializers.Serializer):
    """The body of every error answer: a message for the caller."""

    detail = serializers.CharField()


def field_errors(description: str, example: dict) -> OpenApiResponse:
    """A 400 whose body lists the messages for each bad value, keyed by its field or
    JSON path, beside a ``detail`` that says them all."""
    return OpenApiResponse(
        response={
            "type": "object",
            "properties": {"detail": {"type": "string"}},
            "required": ["detail"],
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
        description=description,
        examples=[OpenApiExample("Field errors", value={"detail": format_errors(example), **example})],
    )


def _with_detail(errors) -> dict:
    """A validation error's body: its messages by field, and all of them in ``detail``."""
    if not isinstance(errors, dict):
        errors = {DOCUMENT_ERRORS_KEY: errors if isinstance(errors, list) else [errors]}
    by_field = {key: value if isinstance(value, list) else [value] for key, value in errors.items()}
    flat = {key: [str(message) for message in messages] for key, messages in by_field.items()}
    return {"detail": format_errors(flat), **by_field}


def exception_handler(exc, context):
    response = drf_exception_handler(exc, context)
    if response is not None:
        if isinstance(exc, ValidationError):
            response.data = _with_detail(response.data)
        return response
    if isinstance(exc, RecursionError):
        # Only input walks recurse (JSON parsing, session validation), so this is
        # a body nested deeper than Python can follow: the caller's to fix.
        logger.warning("request input nested too deeply in %s", context.get("view").__class__.__name__)
        return Response(
            {"detail": "the request body is nested too deeply to process"}, status=status.HTTP_400_BAD_REQUEST
        )
    # Anything DRF does not map is our fault: log it whole, answer in JSON
    # without leaking internals.
    logger.exception("unhandled error in %s", context.get("view").__class__.__name__)
    if isinstance(exc, DatabaseError):
        detail = "database error; the request was not completed, try again"
    else:
        detail = INTERNAL_ERROR_DETAIL
    return Response({"detail": detail}, status=status.HTTP_500_INTERNAL_SERVER_ERROR)
