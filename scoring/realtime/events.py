"""Scoring events: stored in the database, then published to WebSocket clients.

Every event is one ``ScoringEvent`` row written in the caller's transaction, so
an event exists exactly when the score change it reports was committed. After
the commit it is published to the channel layer:

* with a cross-process layer (Redis), ``record`` publishes it directly;
* with the in-memory layer, which does not cross processes, the web process's
  relay (``scoring.realtime.relay``) reads new rows and publishes them there, so events
  written by a worker process still reach browsers. ``record`` then publishes
  nothing itself, which keeps each event to one delivery.

A client that missed events (disconnected, or the layer was down) replays them
from the table with the WebSocket ``catchup`` action; ``subscribe`` replays a
channel's newest events (``recent_events``), as Go TARSy's server does.
"""

import asyncio
import atexit
import logging
import os
import sys
import threading
import time
import uuid
from collections import defaultdict
from functools import cache

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from scoring.models import ScoringEvent

logger = logging.getLogger(__name__)
# Bound on sending one event to Redis (in the background, after commit).
PUBLISH_TIMEOUT_S = 5.0

STARTED, PROGRESS, COMPLETED, FAILED = (
    "scoring.started",
    "scoring.progress",
    "scoring.completed",
    "scoring.failed",
)
PHASE_ANALYZING = "analyzing_methodology"
PHASE_MISSING_TOOLS = "identifying_missing_tools"
PHASES = (PHASE_ANALYZING, PHASE_MISSING_TOOLS)
# Sent back to the queue by the provider's quota; the event also carries ``waiting_reason``.
PHASE_WAITING = "waiting_for_quota"
# An automatic scoring held back by the spend budget until its next period (scoring.budget); with
# ``waiting_reason`` too.
PHASE_WAITING_FOR_BUDGET = "waiting_for_budget"
WAITING_PHASES = (PHASE_WAITING, PHASE_WAITING_FOR_BUDGET)

# The type-specific fields each event carries (EP-0028, "WebSocket Events").
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
# Events replayed right after a subscribe: Go TARSy's server replays up to 200.
REPLAY_LIMIT = 200


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


def on_sessions_channel(event_type: str) -> bool:
    """Whether events of this type go to ``sessions`` too: its lifecycle, not its progress."""
    return event_type != PROGRESS


def channels_of(event: ScoringEvent) -> list[str]:
    its_session = f"{SESSION_CHANNEL_PREFIX}{event.session_id}"
    return [SESSIONS_CHANNEL, its_session] if event.on_sessions_channel else [its_session]


def channels_of_payload(event: dict) -> list[str]:
    """``channels_of`` an event's payload."""
    its_session = session_channel(event)
    return [SESSIONS_CHANNEL, its_session] if on_sessions_channel(event["type"]) else [its_session]


def session_channel(event: dict) -> str:
    """The channel of the session of an event's payload."""
    return f"{SESSION_CHANNEL_PREFIX}{event['session_id']}"


def payload(event: ScoringEvent) -> dict:
    """What clients receive for a stored event, live, replayed or in a catchup.

    ``db_event_id`` repeats ``id``: Go TARSy's dashboard resumes from that field.
    """
    return {
        "id": event.id,
        "db_event_id": event.id,
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
    if event_type == PROGRESS and fields.get("phase") in WAITING_PHASES:
        expected = expected | {"waiting_reason"}
    if set(fields) != expected:
        raise ValueError(f"{event_type} takes fields {sorted(expected)}, got {sorted(fields)}")
    if event_type == PROGRESS and fields["phase"] not in (*PHASES, *WAITING_PHASES):
        raise ValueError(f"unknown scoring phase {fields['phase']!r}")
    return fields


def record(event_type: str, score, **fields) -> ScoringEvent:
    """Store the event in the CURRENT transaction and publish it after commit.

    The caller holds the transaction that changes the score's state, so the
    event is stored if and only if that change is. ``fields``: ``phase`` for
    progress, ``total_score`` for completed, ``error_message`` for failed.
    """
    return _insert(event_type, score, fields)


def record_if(guard: tuple[str, list], event_type: str, score, **fields) -> ScoringEvent | None:
    """``record``, in one statement, only if the SELECT ``guard`` (its SQL and parameters)
    finds a row when the event is inserted; None if it does not. Outside a transaction, that
    statement is the transaction: no round trips to begin and commit one."""
    return _insert(event_type, score, fields, guard)


def _insert(event_type: str, score, fields: dict, guard: tuple[str, list] | None = None) -> ScoringEvent | None:
    # Plain SQL, built once: the ORM's create() costs the worker more CPU than the insert
    # costs the database, four times per scoring.
    event = ScoringEvent(
        event_type=event_type,
        score_id=score.score_id,
        session_id=score.session_id,
        on_sessions_channel=on_sessions_channel(event_type),
        timestamp_us=time.time_ns() // 1000,
        fields=_validated_fields(event_type, fields),
    )
    columns, placeholders = _insert_sql()
    params = [field.get_db_prep_save(getattr(event, field.attname), connection) for field in _INSERTED]
    where = ""
    if guard is not None:
        where = f" WHERE EXISTS ({guard[0]})"
        params += guard[1]
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {columns} SELECT {placeholders}{where} RETURNING id", params)
        row = cursor.fetchone()
    if row is None:
        return None
    event.id = row[0]
    if publishes_directly():
        transaction.on_commit(lambda: publish(event))
    return event


_INSERTED = [field for field in ScoringEvent._meta.concrete_fields if not field.primary_key]


@cache
def _insert_sql() -> tuple[str, str]:
    """The event table with its columns, and a placeholder for each, for ``_insert``."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in _INSERTED)
    return f"{quote(ScoringEvent._meta.db_table)} ({columns})", ", ".join(["%s"] * len(_INSERTED))


def publishes_directly() -> bool:
    """Whether ``record`` publishes (a cross-process layer) or leaves it to the relay."""
    return not isinstance(get_channel_layer(), InMemoryChannelLayer)


def layer_message(event: ScoringEvent) -> dict:
    return {"type": LAYER_MESSAGE_TYPE, "event": payload(event)}


async def send_to_groups(layer, event: ScoringEvent) -> None:
    message = layer_message(event)
    for group in await _groups_with_members(layer, [group_name(channel) for channel in channels_of(event)]):
        await layer.group_send(group, message)


def groups_by_redis_server(layer, groups) -> dict[int, list[str]] | None:
    """``groups`` by the index of the Redis server that holds each, for a channels-redis
    layer (whose internals the callers then use); None for another layer."""
    # Not imported here: a process without Redis would load redis-py and channels-redis at
    # start for nothing (about 70 ms). A channels-redis layer has loaded them.
    redis_layers = sys.modules.get("channels_redis.core")
    if redis_layers is None or not isinstance(layer, redis_layers.RedisChannelLayer):
        return None
    by_server = defaultdict(list)
    for group in groups:
        by_server[layer.consistent_hash(group)].append(group)
    return by_server


async def _groups_with_members(layer, groups: list[str]) -> list[str]:
    """Those of ``groups`` that someone is in, in their order.

    Most events go to groups nobody is in (a session's page is seldom open while it is
    scored), and channels-redis's ``group_send`` takes two round trips to Redis to find
    that out, per group: this asks about all of them in one pipeline per Redis server,
    first dropping the members that expired, as ``group_send`` does.
    """
    by_server = groups_by_redis_server(layer, groups)
    if by_server is None:
        return groups
    expired_before = int(time.time()) - layer.group_expiry
    watched = set()
    for server, its_groups in by_server.items():
        async with layer.connection(server).pipeline(transaction=False) as pipe:
            for group in its_groups:
                key = layer._group_key(group)  # where channels-redis keeps the group's members
                pipe.zremrangebyscore(key, min=0, max=expired_before)
                pipe.zcard(key)
            members = (await pipe.execute())[1::2]
        watched.update(group for group, count in zip(its_groups, members) if count)
    return [group for group in groups if group in watched]


class _Publisher:
    """This process's event loop for publishing, on a thread of its own.

    channels-redis keeps its Redis connections per event loop, so publishing
    each event from a fresh loop (``async_to_sync``) would connect to Redis
    every time: tens of milliseconds per event. ``send`` only queues the event:
    the committing thread (a request, a worker's dispatcher or judge thread)
    never waits on Redis, and one task sends the queue in commit order.
    """

    def __init__(self):
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.queue: asyncio.Queue[ScoringEvent] = asyncio.Queue()
        threading.Thread(target=self._run, name="scoring-event-publisher", daemon=True).start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._send_forever())

    async def _send_forever(self) -> None:
        while True:
            event = await self.queue.get()
            try:
                # Bounded, and cancelled when it times out: a send stuck on a dead
                # connection must not hold up the events queued after it.
                await asyncio.wait_for(send_to_groups(get_channel_layer(), event), PUBLISH_TIMEOUT_S)
            except Exception:
                logger.exception(
                    "could not publish scoring event %s (score %s, session %s); connections will "
                    "resync it from the table",
                    event.id,
                    event.score_id,
                    event.session_id,
                )
            finally:
                self.queue.task_done()

    def send(self, event: ScoringEvent) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, event)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued event was sent (or given up); False on timeout."""
        try:
            asyncio.run_coroutine_threadsafe(self.queue.join(), self.loop).result(timeout_s)
        except TimeoutError:
            return False
        return True


_publisher: _Publisher | None = None
_publisher_lock = threading.Lock()


def _this_process_publisher() -> _Publisher:
    global _publisher
    with _publisher_lock:
        # A forked worker process inherits the object but not its thread.
        if _publisher is None or _publisher.pid != os.getpid():
            _publisher = _Publisher()
        return _publisher


def publish(event: ScoringEvent) -> None:
    """Queue a committed event for its groups; it is sent in the background.

    A failure is logged, not raised: the event is stored, and each WebSocket
    connection resyncs its channels from the table
    (``scoring.realtime.resync``), so a client that stays
    connected through a Redis outage still gets it.
    """
    _this_process_publisher().send(event)


def flush_published(timeout_s: float | None = None) -> bool:
    """Wait (at most ``timeout_s``, default PUBLISH_TIMEOUT_S) until this process's
    queued events are sent; False if some are still queued."""
    if _publisher is None or _publisher.pid != os.getpid():
        return True
    return _publisher.flush(PUBLISH_TIMEOUT_S if timeout_s is None else timeout_s)


# The publisher's thread is a daemon and dies with the interpreter: send what is
# queued first. (A worker's SIGTERM ends it with os._exit: it flushes itself.)
atexit.register(flush_published)


def _of_channel_after(channel: str, after_id: int) -> Q:
    """The events of a canonical channel with ids above ``after_id``."""
    if channel == SESSIONS_CHANNEL:
        return Q(on_sessions_channel=True, id__gt=after_id)
    return Q(session_id=channel[len(SESSION_CHANNEL_PREFIX) :], id__gt=after_id)


def events_after(channel: str, after_id: int, limit: int = CATCHUP_PAGE_SIZE) -> tuple[list[dict], bool]:
    """Stored events of a canonical channel with id > ``after_id``, oldest first.

    Returns at most ``limit`` payloads and whether more remain.
    """
    page = list(ScoringEvent.objects.filter(_of_channel_after(channel, after_id)).order_by("id")[: limit + 1])
    return [payload(event) for event in page[:limit]], len(page) > limit


def recent_events(channel: str, limit: int = REPLAY_LIMIT) -> tuple[list[dict], bool]:
    """The newest ``limit`` stored events of a canonical channel, oldest first,
    and whether older ones were left out."""
    newest = list(ScoringEvent.objects.filter(_of_channel_after(channel, 0)).order_by("-id")[: limit + 1])
    return [payload(event) for event in reversed(newest[:limit])], len(newest) > limit


def replay_pages(positions: dict[str, int | None]) -> dict[str, tuple[list[dict], bool]]:
    """For each canonical channel, its replay after a subscribe: the events after its
    position, or its newest (position None); at most REPLAY_LIMIT, oldest first, and
    whether more were left out."""
    return {
        channel: recent_events(channel) if after_id is None else events_after(channel, after_id, REPLAY_LIMIT)
        for channel, after_id in positions.items()
    }


def events_above(after_id: int, limit: int) -> list[tuple[dict, list[str]]]:
    """Stored events with id > ``after_id``, of every channel, oldest first, at most
    ``limit``, each with its channels."""
    rows = ScoringEvent.objects.filter(id__gt=after_id).order_by("id")[:limit]
    return [(payload(event), channels_of(event)) for event in rows]


def prune(now=None) -> int:
    """Delete events older than ``SCORING_EVENT_RETENTION_S``; return how many.

    ``now`` is a time in microseconds since the epoch (default: the current time).
    """
    now_us = time.time_ns() // 1000 if now is None else now
    cutoff = now_us - int(settings.SCORING_EVENT_RETENTION_S * 1_000_000)
    deleted, _ = ScoringEvent.objects.filter(timestamp_us__lt=cutoff).delete()
    return deleted
