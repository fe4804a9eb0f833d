"""Helpers of the tests of scoring events: committing one, listening on the channel layer or
in the process's fan-out."""

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


class Collector:
    """A listener of the fan-out (``scoring.realtime.fanout.Listener``) that keeps what it gets."""

    def __init__(self, channel_name: str = "collector"):
        self.channel_name = channel_name
        self.received: list[dict] = []
        self.texts: list[str] = []

    async def deliver(self, event: dict, text: str | None = None) -> None:
        self.received.append(event)
        self.texts.append(text)
