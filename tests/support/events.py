"""Helpers of the tests of scoring events: committing one, listening on the channel layer."""

from channels.layers import get_channel_layer
from django.db import transaction

from scoring.models import ScoringEvent
from scoring.realtime import events

IN_MEMORY_LAYER = {"default": {"BACKEND": "scoring.realtime.layers.InMemoryChannelLayer"}}


def record_committed(event_type, score, **fields) -> ScoringEvent:
    with transaction.atomic():
        return events.record(event_type, score, **fields)


async def listen(*channels: str) -> str:
    """A layer channel added to the groups of ``channels``."""
    layer = get_channel_layer()
    listener = await layer.new_channel()
    for channel in channels:
        await layer.group_add(events.group_name(channel), listener)
    return listener
