"""The web process's relay of stored scoring events, and periodic pruning.

The in-memory channel layer does not cross processes, so without Redis an
event recorded by a worker process would never reach the browsers connected to
a web process. The relay closes that gap: it polls the events table for rows it
has not seen and hands them to this process's fan-out (``scoring.realtime.fanout``),
which sends each to the connections of its channels. With a cross-process
layer ``scoring.realtime.events.record`` publishes directly (each WebSocket connection
resyncs from the table what did not arrive), and the relay only prunes.

One relay runs per event loop (one per web process); the first
WebSocket connection starts it.
"""

import asyncio
import logging
import time
import weakref

from channels.db import database_sync_to_async
from django.conf import settings
from django.db.models import Q

from scoring import selectors
from scoring.models import ScoringEvent
from scoring.realtime import events, fanout

logger = logging.getLogger(__name__)

BATCH_SIZE = 500
# An id skipped by the rows read so far belongs to a transaction that has not
# committed yet (PostgreSQL hands out ids before commit) or was rolled back.
# It is looked for this long before the relay gives up on it.
GAP_GRACE_S = 60.0
# Skips wider than this are not tracked (a sequence jump, not open transactions).
MAX_GAP_SPAN = 1000


def events_since(after_id: int, gap_ids: list[int]) -> list[ScoringEvent]:
    """Events with id > ``after_id`` or in ``gap_ids``, oldest first."""
    rows = ScoringEvent.objects.filter(Q(id__gt=after_id) | Q(id__in=gap_ids)).order_by("id")
    return list(rows[:BATCH_SIZE])


class EventRelay:
    """Hands events stored by any process to this process's fan-out."""

    def __init__(self):
        self.relaying = not events.publishes_directly()
        self.after_id = 0
        # id -> monotonic deadline, for ids skipped over (see GAP_GRACE_S).
        self.gaps: dict[int, float] = {}
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        """Begin after the newest stored event: older ones are catchup's business."""
        if self.relaying:
            self.after_id = await database_sync_to_async(selectors.latest_event_id)()
        self.task = asyncio.create_task(self.run(), name="scoring-event-relay")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_prune = loop.time()
        while True:
            if self.relaying:
                await self.guarded(self.relay_new_events)
            if loop.time() >= next_prune:
                await self.guarded(database_sync_to_async(events.prune))
                next_prune = loop.time() + settings.SCORING_EVENT_PRUNE_INTERVAL_S
            await asyncio.sleep(settings.SCORING_EVENT_RELAY_POLL_S)

    @staticmethod
    async def guarded(step) -> None:
        # A database outage must not end the relay: it resumes from
        # where it was once the outage is over.
        try:
            await step()
        except Exception:
            logger.exception("scoring event relay step failed; retrying")

    async def relay_new_events(self) -> None:
        """Publish every event committed since the last poll, oldest first."""
        while True:
            rows = await database_sync_to_async(events_since)(self.after_id, list(self.gaps))
            for row in rows:
                await fanout.of_this_loop().publish(events.payload(row))
                self.mark_seen(row.id)
            self.expire_gaps()
            if len(rows) < BATCH_SIZE:
                return

    def mark_seen(self, event_id: int) -> None:
        if self.gaps.pop(event_id, None) is not None or event_id <= self.after_id:
            return
        if event_id - self.after_id <= MAX_GAP_SPAN:
            deadline = time.monotonic() + GAP_GRACE_S
            self.gaps.update((skipped, deadline) for skipped in range(self.after_id + 1, event_id))
        self.after_id = event_id

    def expire_gaps(self) -> None:
        now = time.monotonic()
        self.gaps = {event_id: deadline for event_id, deadline in self.gaps.items() if deadline > now}


# Per event loop: the task that started its relay (its result is the relay).
_started: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task]" = weakref.WeakKeyDictionary()


async def _start_relay() -> EventRelay:
    relay = EventRelay()
    await relay.start()
    return relay


def _needs_start(starting: asyncio.Task | None) -> bool:
    if starting is None:
        return True
    if not starting.done():
        return False
    if starting.cancelled() or starting.exception() is not None:
        return True
    return starting.result().task.done()


async def ensure_running() -> EventRelay:
    """Start this event loop's relay if it is not running; return it.

    Returns once the relay knows where to start, so an event committed after
    this returns is relayed.
    """
    loop = asyncio.get_running_loop()
    starting = _started.get(loop)
    if _needs_start(starting):
        starting = _started[loop] = loop.create_task(_start_relay())
    # shield: a connection that gives up waiting must not cancel the start for the others.
    return await asyncio.shield(starting)
