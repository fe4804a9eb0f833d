"""Error bodies for the REST API: always JSON, always with a ``detail``."""

import logging

from django.db import DatabaseError
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger(__name__)


class DetailErrorSerializer(serializers.Serializer):
    """The body of every error answer: a message for the caller."""

    detail = serializers.CharField()


def exception_handler(exc, context):
    response = drf_exception_handler(exc, context)
    if response is not None:
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
        detail = "internal server error"
    return Response({"detail": detail}, status=status.HTTP_500_INTERNAL_SERVER_ERROR)
