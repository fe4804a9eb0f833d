"""Scoring events: stored in the database, then published to WebSocket clients.

Every event is one ``ScoringEvent`` row written in the caller's transaction, so
an event exists exactly when the score change it reports was committed. After
the commit it is published to the channel layer:

* with a cross-process layer (Redis), ``record`` publishes it directly;
* with the in-memory layer, which does not cross processes, the web process's
  relay (``scoring.relay``) reads new rows and publishes them there, so events
  written by a worker process still reach browsers. ``record`` then publishes
  nothing itself, which keeps each event to one delivery.

A client that missed events (disconnected, or the layer was down) replays them
from the table with the WebSocket ``catchup`` action.
"""

import logging
import time
import uuid

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import DatabaseError, transaction

from scoring.models import ScoringEvent

logger = logging.getLogger(__name__)

STARTED, PROGRESS, COMPLETED, FAILED = (
    "scoring.started",
    "scoring.progress",
    "scoring.completed",
    "scoring.failed",
)
PHASE_ANALYZING = "analyzing_methodology"
PHASE_MISSING_TOOLS = "identifying_missing_tools"
PHASES = (PHASE_ANALYZING, PHASE_MISSING_TOOLS)

# The type-specific fields each event carries (spec 000, "WebSocket Events").
EVENT_FIELDS = {
    STARTED: frozenset(),
    PROGRESS: frozenset({"phase"}),
    COMPLETED: frozenset({"total_score"}),
    FAILED: frozenset({"error_message"}),
}

SESSIONS_CHANNEL = "sessions"
SESSION_CHANNEL_PREFIX = "session:"
# Channel-layer message type; the consumer handles it in ``scoring_event``.
LAYER_MESSAGE_TYPE = "scoring.event"
CATCHUP_PAGE_SIZE = 100


class InvalidChannel(ValueError):
    """A channel name that is neither ``sessions`` nor ``session:<uuid>``."""


def parse_channel(name) -> str:
    """The canonical form of a client's channel name; raises ``InvalidChannel``."""
    if name == SESSIONS_CHANNEL:
        return name
    if isinstance(name, str) and name.startswith(SESSION_CHANNEL_PREFIX):
        try:
            session_id = uuid.UUID(name[len(SESSION_CHANNEL_PREFIX) :])
        except ValueError:
            pass
        else:
            return f"{SESSION_CHANNEL_PREFIX}{session_id}"
    raise InvalidChannel(f"unknown channel {name!r}: use 'sessions' or 'session:<session uuid>'")


def group_name(channel: str) -> str:
    """The channel-layer group of a canonical channel name.

    Group names allow only letters, digits, ``-``, ``_`` and ``.``, so the
    ``:`` of ``session:<uuid>`` becomes a dot.
    """
    if channel == SESSIONS_CHANNEL:
        return "scoring.sessions"
    return "scoring.session." + channel[len(SESSION_CHANNEL_PREFIX) :]


def channels_of(event: ScoringEvent) -> list[str]:
    session_channel = f"{SESSION_CHANNEL_PREFIX}{event.session_id}"
    return [SESSIONS_CHANNEL, session_channel] if event.on_sessions_channel else [session_channel]


def payload(event: ScoringEvent) -> dict:
    """What clients receive for a stored event, live or in a catchup."""
    return {
        "id": event.id,
        "type": event.event_type,
        "score_id": str(event.score_id),
        "session_id": str(event.session_id),
        "timestamp_us": event.timestamp_us,
        **event.fields,
    }


def _validated_fields(event_type: str, fields: dict) -> dict:
    if event_type not in EVENT_FIELDS:
        raise ValueError(f"unknown scoring event type {event_type!r}")
    expected = EVENT_FIELDS[event_type]
    if set(fields) != expected:
        raise ValueError(f"{event_type} takes fields {sorted(expected)}, got {sorted(fields)}")
    if event_type == PROGRESS and fields["phase"] not in PHASES:
        raise ValueError(f"unknown scoring phase {fields['phase']!r}")
    return fields


def record(event_type: str, score, **fields) -> ScoringEvent:
    """Store the event in the CURRENT transaction and publish it after commit.

    The caller holds the transaction that changes the score's state, so the
    event is stored if and only if that change is. ``fields``: ``phase`` for
    progress, ``total_score`` for completed, ``error_message`` for failed.
    """
    event = ScoringEvent.objects.create(
        event_type=event_type,
        score_id=score.score_id,
        session_id=score.session_id,
        on_sessions_channel=event_type != PROGRESS,
        timestamp_us=time.time_ns() // 1000,
        fields=_validated_fields(event_type, fields),
    )
    if publishes_directly():
        transaction.on_commit(lambda: publish(event))
    return event


def publishes_directly() -> bool:
    """Whether ``record`` publishes (a cross-process layer) or leaves it to the relay."""
    return not isinstance(get_channel_layer(), InMemoryChannelLayer)


def layer_message(event: ScoringEvent) -> dict:
    return {"type": LAYER_MESSAGE_TYPE, "event": payload(event)}


async def send_to_groups(layer, event: ScoringEvent) -> None:
    message = layer_message(event)
    for channel in channels_of(event):
        await layer.group_send(group_name(channel), message)


def publish(event: ScoringEvent) -> None:
    """Send a committed event to its groups. A failure is logged, not raised:
    the event is stored and marked, and the relays publish it again later
    (a client that stayed connected through the outage would otherwise never
    see it: catching up from the newest id it saw skips it)."""
    try:
        async_to_sync(send_to_groups)(get_channel_layer(), event)
    except Exception:
        logger.exception("could not publish scoring event %s; it will be published again", event.id)
        try:
            ScoringEvent.objects.filter(pk=event.pk).update(publish_failed=True)
        except DatabaseError:  # runs after commit: raising here would undo nothing
            logger.exception("could not mark scoring event %s for publishing again; catchup still has it", event.id)


def failed_publications(limit: int = CATCHUP_PAGE_SIZE) -> list[ScoringEvent]:
    return list(ScoringEvent.objects.filter(publish_failed=True).order_by("id")[:limit])


def mark_published(event_ids: list[int]) -> None:
    ScoringEvent.objects.filter(pk__in=event_ids).update(publish_failed=False)


def events_after(channel: str, after_id: int, limit: int = CATCHUP_PAGE_SIZE) -> tuple[list[dict], bool]:
    """Stored events of a canonical channel with id > ``after_id``, oldest first.

    Returns at most ``limit`` payloads and whether more remain.
    """
    events = ScoringEvent.objects.filter(id__gt=after_id)
    if channel == SESSIONS_CHANNEL:
        events = events.filter(on_sessions_channel=True)
    else:
        events = events.filter(session_id=channel[len(SESSION_CHANNEL_PREFIX) :])
    page = list(events.order_by("id")[: limit + 1])
    return [payload(event) for event in page[:limit]], len(page) > limit


def prune(now=None) -> int:
    """Delete events older than ``SCORING_EVENT_RETENTION_S``; return how many.

    ``now`` is a time in microseconds since the epoch (default: the current time).
    """
    now_us = time.time_ns() // 1000 if now is None else now
    cutoff = now_us - int(settings.SCORING_EVENT_RETENTION_S * 1_000_000)
    deleted, _ = ScoringEvent.objects.filter(timestamp_us__lt=cutoff).delete()
    return deleted
