"""Each web process fans a live event out to its own WebSocket connections.

A connection that subscribes to a channel is added here, under that channel, in its event
loop (one per web process); an event goes to every connection of its channels, its JSON
text made once for all of them (``Listener.deliver``). The channel layer carries an event
to the process, not to each connection:

* with the in-memory layer, the process's relay (``scoring.realtime.relay``) reads the
  event from the table and hands it here directly: no group, so no membership that the
  layer's group expiry (a day) could end under a dashboard left open;
* with Redis, one layer channel of the process is in the group of each channel some
  connection here is subscribed to: joined by the first such subscribe, left with the last
  such connection's unsubscribe or close (by the resync's next pass when it ended by an
  error), renewed by the resync's passes (``scoring.realtime.resync``). An
  event comes once a group it was sent to (a lifecycle event: ``sessions`` and its session's)
  and goes out once. A burst of subscribes to one channel costs Redis one ``group_add``, not
  one each (thousands at once exhausted redis-py's pool of connections).

bench/bench_idle_sockets.py measures an event to 5,000 connections.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections import OrderedDict, defaultdict
from typing import Protocol

from channels.layers import get_channel_layer

from scoring.realtime import events

logger = logging.getLogger(__name__)

# Event ids the process remembers having fanned out, to send the second copy of an event
# that came through two groups once (they come one right after the other).
REMEMBERED_EVENT_IDS = 1000
# After a failed read of the process's layer channel (Redis down), the next try.
RETRY_S = 1.0


class Listener(Protocol):
    """A WebSocket connection as the fan-out sees it (``ScoringEventsConsumer``)."""

    channel_name: str

    async def deliver(self, event: dict, text: str | None = None) -> None:
        """Send ``event`` (``text``: its JSON, made once for all connections) if due."""


class Fanout:
    """One event loop's connections by channel, and its process channel's groups (Redis)."""

    def __init__(self):
        # channel -> layer channel name of a connection -> that connection
        self.listeners: dict[str, dict[str, Listener]] = defaultdict(dict)
        # Redis: the process's layer channel, the groups it is in (group -> channel), their
        # changes one at a time, and the channel's reader.
        self.channel_name: str | None = None
        self.joined: dict[str, str] = {}
        self.changing = asyncio.Lock()
        self.reader: asyncio.Task | None = None
        self.fanned_out: OrderedDict[int, None] = OrderedDict()

    async def add(self, channel: str, listener: Listener) -> None:
        """Send ``channel``'s live events to ``listener`` from now on: with Redis, once the
        process is in its group (raises if the layer fails; then nothing is added)."""
        self.listeners[channel][listener.channel_name] = listener
        try:
            await self.follow(channel)
        except BaseException:
            self.discard(channel, listener)
            raise

    async def remove(self, channel: str, listener: Listener) -> None:
        """No more of ``channel``'s events for ``listener``; the process leaves its group
        when no connection here is subscribed to it any more."""
        self.discard(channel, listener)
        await self.follow(channel)

    def forget(self, listener: Listener) -> None:
        """A connection ended (also by an exception): out of every channel at once. The
        groups no connection here follows any more are left by the next ``renew``."""
        for channel in [channel for channel, its in self.listeners.items() if listener.channel_name in its]:
            self.discard(channel, listener)

    def discard(self, channel: str, listener: Listener) -> None:
        its = self.listeners.get(channel)
        if its is not None:
            its.pop(listener.channel_name, None)
            if not its:
                del self.listeners[channel]

    async def follow(self, channel: str) -> None:
        """With Redis: put the process's channel in ``channel``'s group while a connection
        here is subscribed to it, and out of it once none is."""
        if not events.publishes_directly():
            return
        group = events.group_name(channel)
        if (channel in self.listeners) == (group in self.joined):
            return
        async with self.changing:
            layer = get_channel_layer()
            if channel in self.listeners and group not in self.joined:
                await layer.group_add(group, await self.layer_channel(layer))
                self.joined[group] = channel
            elif channel not in self.listeners and group in self.joined:
                await layer.group_discard(group, self.channel_name)
                del self.joined[group]

    async def layer_channel(self, layer) -> str:
        """The process's layer channel, read from its first use on."""
        if self.channel_name is None:
            self.channel_name = await layer.new_channel()
        if self.reader is None or self.reader.done():
            self.reader = asyncio.get_running_loop().create_task(self.read_forever(layer), name="websocket-fanout")
        return self.channel_name

    async def read_forever(self, layer) -> None:
        while True:
            try:
                message = await layer.receive(self.channel_name)
            except Exception:  # Redis is down: the resync sends from the table what was missed
                logger.warning("websocket fan-out could not read the channel layer; retrying", exc_info=True)
                await asyncio.sleep(RETRY_S)
                continue
            if message.get("type") == events.LAYER_MESSAGE_TYPE:
                await self.publish(message["event"])

    async def renew(self) -> None:
        """With Redis: put the process's channel back in its groups (a restarted Redis forgot
        them) and renew those memberships before the layer's group expiry, in one pipeline
        per Redis server; then leave the groups whose last connection here ended."""
        joined = set(self.joined)
        if joined:
            layer = get_channel_layer()
            by_server = events.groups_by_redis_server(layer, joined)
            if by_server is None:
                for group in joined:
                    await layer.group_add(group, self.channel_name)
            else:
                # channels-redis's group_add, for every group: two round trips each there.
                now = time.time()
                for server, groups in by_server.items():
                    async with layer.connection(server).pipeline(transaction=False) as pipe:
                        for group in groups:
                            key = layer._group_key(group)  # where channels-redis keeps the group's members
                            pipe.zadd(key, {self.channel_name: now})
                            pipe.expire(key, layer.group_expiry)
                        await pipe.execute()
            async with self.changing:
                # Left while the pipeline ran (and maybe put back by it): out again.
                for group in joined - set(self.joined):
                    await layer.group_discard(group, self.channel_name)
        for channel in [channel for channel in self.joined.values() if channel not in self.listeners]:
            await self.follow(channel)

    async def publish(self, event: dict) -> None:
        """Send ``event`` to every connection here subscribed to one of its channels; an
        event already fanned out (its copy from another group) is not sent again."""
        if event["id"] in self.fanned_out:
            return
        self.fanned_out[event["id"]] = None
        if len(self.fanned_out) > REMEMBERED_EVENT_IDS:
            self.fanned_out.popitem(last=False)
        listeners = {}
        for channel in events.channels_of_payload(event):
            listeners.update(self.listeners.get(channel, ()))
        if not listeners:
            return
        text = json.dumps(event)
        for listener in listeners.values():
            try:
                await listener.deliver(event, text)
            except Exception:  # this connection's trouble, not the others'
                logger.warning("websocket fan-out could not send event %s", event["id"], exc_info=True)


_fanouts: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Fanout]" = weakref.WeakKeyDictionary()


def of_this_loop() -> Fanout:
    """The running event loop's fan-out (one per web process)."""
    loop = asyncio.get_running_loop()
    fanout = _fanouts.get(loop)
    if fanout is None:
        fanout = _fanouts[loop] = Fanout()
    return fanout
