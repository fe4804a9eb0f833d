"""The channel layer of a web process without Redis (``CHANNEL_LAYERS`` in settings)."""

import time

from channels import layers
from channels.exceptions import ChannelFull

# How often the in-memory layer looks for expired messages and memberships.
SWEEP_INTERVAL_S = 1.0


class InMemoryChannelLayer(layers.InMemoryChannelLayer):
    """channels' in-memory layer, its cost per message bounded as the number of connections
    grows (bench/bench_idle_sockets.py: an event to 5,000 dashboards).

    channels sweeps every channel and group member for expired ones on each ``receive`` and
    ``group_send``, so an event sent to N connections cost N sweeps of N: here a sweep runs
    at most once a SWEEP_INTERVAL_S (messages expire after a minute, memberships after a
    day: a sweep a second removes them as surely). And ``group_send`` starts a task per
    member; here it sends to them in turn (``send`` never waits).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.next_sweep = 0.0

    def _clean_expired(self):
        now = time.monotonic()
        if now < self.next_sweep:
            return
        self.next_sweep = now + SWEEP_INTERVAL_S
        super()._clean_expired()

    async def group_send(self, group, message):
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        for channel in list(self.groups.get(group, ())):
            try:
                await self.send(channel, message)
            except ChannelFull:  # as channels' own: that member misses it
                pass
