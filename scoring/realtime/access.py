"""WebSocket connections whose user may no longer listen are closed.

A connection is let in by its handshake (``consumers.admitted``). A user deactivated or
deleted afterwards, or a proxy user made staff (whose proxy name then no longer signs in,
on REST either), must not go on receiving events: each web process checks the users of
its open connections every ``CHECK_S``, the time in which the other processes see such a
change on REST too (``scoring.auth.PROXY_USER_MEMORY_S``), and at once after a user is
saved or deleted in this process (the admin's change). It closes their connections with
``CLOSE_POLICY_VIOLATION``; their reconnection is refused in the handshake.

One query per process and check, whatever the number of connections.
"""

import asyncio
import logging
import threading
import weakref
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db.models.signals import post_delete, post_save

from scoring import auth

logger = logging.getLogger(__name__)

CHECK_S = auth.PROXY_USER_MEMORY_S
# RFC 6455: the endpoint received a message that violates its policy (here: who may listen).
CLOSE_POLICY_VIOLATION = 1008
# The consumer's handler of a revocation (``ScoringEventsConsumer.access_revoked``).
REVOKED_MESSAGE_TYPE = "access.revoked"
LAYER_TIMEOUT_S = 5.0


@dataclass
class _Watch:
    """One event loop's open connections: channel name -> (user id, signed in by proxy)."""

    listeners: dict[str, tuple[int, bool]] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None


_watches: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch]" = weakref.WeakKeyDictionary()
_watches_lock = threading.Lock()  # saves in other threads wake the loops


def watch(channel_name: str, user_id: int, by_proxy: bool) -> None:
    """Check from now on that this connection's user may still listen (in its event loop)."""
    loop = asyncio.get_running_loop()
    with _watches_lock:
        watched = _watches.get(loop)
        if watched is None:
            watched = _watches[loop] = _Watch()
    if watched.task is None or watched.task.done():
        watched.task = loop.create_task(_check_forever(watched), name="websocket-access")
    watched.listeners[channel_name] = (user_id, by_proxy)


def forget(channel_name: str) -> None:
    watched = _watches.get(asyncio.get_running_loop())
    if watched is not None:
        watched.listeners.pop(channel_name, None)


def users_changed(**_) -> None:
    """A user was saved or deleted (in any thread): check every loop's connections now."""
    with _watches_lock:
        watches = list(_watches.items())
    for loop, watched in watches:
        if not loop.is_closed():
            loop.call_soon_threadsafe(watched.wake.set)


post_save.connect(users_changed, sender=settings.AUTH_USER_MODEL, dispatch_uid="websocket_access_on_save")
post_delete.connect(users_changed, sender=settings.AUTH_USER_MODEL, dispatch_uid="websocket_access_on_delete")


async def _check_forever(watched: _Watch) -> None:
    while True:
        try:
            await asyncio.wait_for(watched.wake.wait(), CHECK_S)
        except TimeoutError:
            pass
        watched.wake.clear()
        try:
            await check(watched)
        except Exception:  # the database or the layer is away: the next check tries again
            logger.warning("websocket access check failed; retrying in %s s", CHECK_S, exc_info=True)


async def check(watched: _Watch) -> int:
    """Close the connections whose user may no longer listen; return how many were told to."""
    listeners = dict(watched.listeners)
    if not listeners:
        return 0
    revoked = await database_sync_to_async(auth.revoked_listeners)(set(listeners.values()))
    layer = get_channel_layer()
    told = 0
    for channel_name, listener in listeners.items():
        if listener in revoked:
            message = {"type": REVOKED_MESSAGE_TYPE, "reason": revoked[listener]}
            await asyncio.wait_for(layer.send(channel_name, message), LAYER_TIMEOUT_S)
            told += 1
    return told
