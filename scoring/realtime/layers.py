"""The channel layer of a web process without Redis (``CHANNEL_LAYERS`` in settings)."""

import time

from channels import layers

# How often the in-memory layer looks for expired messages and memberships.
SWEEP_INTERVAL_S = 1.0


class InMemoryChannelLayer(layers.InMemoryChannelLayer):
    """channels' in-memory layer, its cost per message bounded as the number of connections
    grows (bench/bench_idle_sockets.py: 5,000 dashboards).

    Each connection has a channel of its own (a revoked user's close reaches it there), and
    channels sweeps every channel and group member for expired ones on each ``receive`` and
    ``group_send``: N connections, each reading its channel, cost N sweeps of N. Here a sweep
    runs at most once a SWEEP_INTERVAL_S (messages expire after a minute, memberships after a
    day: a sweep a second removes them as surely). Live events do not go through this layer:
    the relay hands them to the process's fan-out (``scoring.realtime.fanout``).
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
