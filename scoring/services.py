"""Writes: every change to sessions and scores goes through a function here."""

from django.db import transaction

from scoring import ingest
from scoring.models import AlertSession


def ingest_session(document: dict) -> tuple[AlertSession, bool]:
    """Store one TARSy session document; return it and whether it was new.

    Idempotent: sending the same session again updates it in place. Raises
    ``ingest.InvalidSession`` (with field errors) for a document that is not a
    TARSy session.
    """
    fields = ingest.parse_session(document)
    session_id = fields.pop("session_id")
    with transaction.atomic():
        return AlertSession.objects.update_or_create(session_id=session_id, defaults=fields)
