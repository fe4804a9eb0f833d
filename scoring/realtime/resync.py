"""With a cross-process channel layer (Redis): what keeps connected clients whole.

Every SCORING_EVENT_RESYNC_S each web process rejoins the groups of its connections'
channels (its one membership per group, ``scoring.realtime.fanout``), and sends them from
the events table the events of those channels they have not been sent. A Redis restart forgets group memberships, and an event whose publication failed
is never published live; a client that stays connected would notice neither, and its
catchup from the newest id it saw would skip them.

One pass per process (per event loop), whatever the number of connections: one pipeline to
each Redis server and one query. An idle dashboard costs nothing of its own there, not a
query and a round trip (``bench/bench_idle_sockets.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Protocol

from channels.db import database_sync_to_async
from django.conf import settings

from scoring import selectors
from scoring.realtime import events, fanout

logger = logging.getLogger(__name__)

# Age after which no event with a lower id can still be committing: ids are handed out
# before commit, so a lower id can still be committing (a claim's transaction) when a
# higher one is read. The process's mark moves past an event only once it is this old.
GRACE_S = 10.0
# Events read per pass (the next pass reads on).
PAGE_SIZE = 500
LAYER_TIMEOUT_S = 5.0


class Listener(Protocol):
    """A WebSocket connection as the resync sees it (``ScoringEventsConsumer``)."""

    channel_name: str
    subscriptions: Collection[str]
    # channel -> the newest stored event id when it was subscribed: older events are the
    # subscribe's replay's and catchup's business, never the resync's.
    checked_up_to: dict[str, int]

    async def deliver(self, event: dict) -> None: ...


@dataclass
class _Resync:
    """One event loop's connections, and the events table read up to ``mark``."""

    listeners: dict[str, Listener] = field(default_factory=dict)
    task: asyncio.Task | None = None
    # Every event up to this id was offered to the listeners, and is GRACE_S old.
    mark: int = 0


_resyncs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Resync]" = weakref.WeakKeyDictionary()


def watch(listener: Listener) -> None:
    """Resync this connection from now on (in its event loop)."""
    loop = asyncio.get_running_loop()
    resync = _resyncs.get(loop)
    if resync is None:
        resync = _resyncs[loop] = _Resync()
    if resync.task is None or resync.task.done():
        resync.task = loop.create_task(_resync_forever(resync), name="websocket-resync")
    resync.listeners[listener.channel_name] = listener


def forget(listener: Listener) -> None:
    resync = _resyncs.get(asyncio.get_running_loop())
    if resync is not None:
        resync.listeners.pop(listener.channel_name, None)


async def _resync_forever(resync: _Resync) -> None:
    """Pass after pass while the loop has connections (``watch`` starts it again)."""
    started = False
    while resync.listeners:
        if not started:
            # Begin after the newest stored event: older ones are the subscribe's replay's.
            started = await _guarded("start", _start, resync)
        await asyncio.sleep(settings.SCORING_EVENT_RESYNC_S)
        # Apart: with Redis down, the events it did not publish are still sent from the table.
        await _guarded("rejoin", rejoin, resync)
        if started:
            await _guarded("send", send_unsent_events, resync)


async def _start(resync: _Resync) -> None:
    resync.mark = await database_sync_to_async(selectors.latest_event_id)()


async def _guarded(what: str, step, resync: _Resync) -> bool:
    try:
        await step(resync)
    except Exception:  # Redis or the database is down: try again next time
        logger.warning("websocket resync (%s) failed; retrying", what, exc_info=True)
        return False
    return True


async def rejoin(resync: _Resync) -> None:
    """Put the process back in the groups of its connections' channels (a restarted Redis
    forgot them), and renew those memberships (``fanout.Fanout.renew``)."""
    await asyncio.wait_for(fanout.of_this_loop().renew(), LAYER_TIMEOUT_S)


async def send_unsent_events(resync: _Resync) -> None:
    """Offer each connection the stored events of its channels above the process's mark
    that it has not been sent (``deliver`` sends an event once per connection, in order with
    a replay under way).

    The mark moves past an event only once the event is GRACE_S old, so an event is offered
    on every pass until then: also to a connection that subscribed while it was committing.
    """
    settled_before_us = time.time_ns() // 1000 - int(GRACE_S * 1_000_000)
    rows = await database_sync_to_async(events.events_above)(resync.mark, PAGE_SIZE)
    settled = True
    for event, channels in rows:
        settled = settled and event["timestamp_us"] < settled_before_us
        for listener in list(resync.listeners.values()):
            if any(_wants(listener, channel, event["id"]) for channel in channels):
                await _offer(resync, listener, event)
        if settled:
            resync.mark = event["id"]


def _wants(listener: Listener, channel: str, event_id: int) -> bool:
    return channel in listener.subscriptions and event_id > listener.checked_up_to.get(channel, event_id)


async def _offer(resync: _Resync, listener: Listener, event: dict) -> None:
    if listener.channel_name not in resync.listeners:  # closed during this pass
        return
    try:
        await listener.deliver(event)
    except Exception:  # this connection's trouble, not the others'
        logger.warning("websocket resync could not send event %s", event["id"], exc_info=True)
