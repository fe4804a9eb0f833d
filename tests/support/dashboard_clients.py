"""The two TARSy dashboards' own WebSocket services, driven as their pages use them.

tests/support/upstream_dashboards/ holds, unmodified, tarsy-bot's
``dashboard/src/services/websocketService.ts`` and Go TARSy's
``web/dashboard/src/services/websocket.ts`` with the modules they import (see its
README). esbuild bundles each (Debian's ``esbuild`` package), with Vite's
``import.meta.env`` of a production build naming the server; Node runs the bundle
(``harness.mjs``), the test tells it what to subscribe to and when the network goes
away, and reads what each handler got.

    with DashboardClient.start(dashboard_bundles["tarsy"], server.http_url) as dashboard:
        dashboard.subscribe(f"session:{session_id}")
        dashboard.connect()                  # until the subscriptions are confirmed
        dashboard.wait_for_event(event_id)   # until the service handled it
        dashboard.received[f"session:{session_id}"]  # what that channel's handler got

Without Node (20 or later) or esbuild these tests fail, saying so; they never skip.
"""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.servers import RECEIVE_TIMEOUT_S

UPSTREAM = Path(__file__).resolve().parent / "upstream_dashboards"
HARNESS = UPSTREAM / "harness.mjs"
# Each dashboard's WebSocket service, by the repository it comes from.
SERVICES = {
    "tarsy-bot": UPSTREAM / "tarsy-bot/dashboard/src/services/websocketService.ts",
    "tarsy": UPSTREAM / "tarsy/web/dashboard/src/services/websocket.ts",
}


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"the dashboard client tests need {name} (Debian: apt-get install {name})")
    return path


def _node() -> str:
    node = _tool("node")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    if int(version.lstrip("v").split(".")[0]) < 20:
        pytest.fail(f"the dashboard client tests need Node.js 20 or later (WebSocket), not {version.strip()}")
    return node


@pytest.fixture(scope="session")
def dashboard_bundles(tmp_path_factory) -> dict[str, Path]:
    """Each dashboard's WebSocket service, bundled to one JavaScript module."""
    _node()
    out = tmp_path_factory.mktemp("dashboards")
    bundles = {}
    for name, service in SERVICES.items():
        bundles[name] = out / f"{name}.mjs"
        subprocess.run(
            [
                _tool("esbuild"),
                str(service),
                "--bundle",
                "--format=esm",
                "--platform=node",
                "--define:import.meta.env=__VITE_ENV__",
                f"--outfile={bundles[name]}",
                "--log-level=warning",
            ],
            check=True,
        )
    return bundles


class DashboardClient:
    """One dashboard's WebSocket service in a Node process."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.reports: queue.Queue[dict] = queue.Queue()
        # What each handler got, in order: "session:<id>", "sessions" or "type:<type>".
        self.received: dict[str, list[dict]] = {}
        # Every message of the server the service handled, over all its connections.
        self.delivered: list[dict] = []
        self.subscribed: list[str] = []
        self.connected = False
        threading.Thread(target=self._read, daemon=True).start()

    @classmethod
    @contextmanager
    def start(cls, bundle: Path, server_url: str, user: str = "alice"):
        process = subprocess.Popen(
            [_node(), "--experimental-websocket", "--no-warnings", HARNESS, bundle, server_url, user],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            yield cls(process)
        finally:
            process.kill()
            process.wait()
            process.stdin.close()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.reports.put(json.loads(line))

    def _command(self, **command) -> None:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def subscribe(self, channel: str) -> None:
        """``subscribeToChannel(channel, handler)``; what the handler gets is kept."""
        self.received.setdefault(channel, [])
        self.subscribed.append(channel)
        self._command(op="subscribe", channel=channel)

    def on_event(self, event_type: str) -> None:
        """``onEvent(event_type, handler)``: the service's global handler of a type."""
        self.received.setdefault(f"type:{event_type}", [])
        self._command(op="on_event", type=event_type)

    def connect(self) -> None:
        """Connect; return once the server confirmed every subscription."""
        self._command(op="connect")
        self._wait_for_subscriptions()

    def go_offline(self) -> None:
        """The network drops: the open socket closes, and reconnecting fails until ``go_online``."""
        self._command(op="offline")
        self._wait(lambda: not self.connected, "the socket to close")

    def go_online(self) -> None:
        """The network is back; return once the service reconnected and the server
        confirmed its subscriptions again."""
        self._command(op="online")
        self._wait(lambda: self.connected, "a connection")
        self._wait_for_subscriptions()

    def _wait_for_subscriptions(self) -> None:
        start = len(self.delivered)

        def confirmed() -> bool:
            since = self.delivered[start:]
            channels = {message["channel"] for message in since if message["type"] == "subscription.confirmed"}
            return set(self.subscribed) <= channels

        self._wait(confirmed, f"confirmations of {self.subscribed}")

    def wait_for_event(self, event_id: int) -> None:
        """Until the service handled the event ``event_id`` (with every handler it routes it to)."""
        self._wait(
            lambda: any(message.get("id") == event_id for message in self.delivered), f"event {event_id}"
        )

    def _wait(self, done, what: str) -> None:
        deadline = time.monotonic() + RECEIVE_TIMEOUT_S
        while not done():
            try:
                report = self.reports.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the dashboard client got no {what}; it got {self.received}") from None
            if "connected" in report:
                self.connected = report["connected"]
            elif "delivered" in report:
                self.delivered.append(report["delivered"])
            else:
                self.received[report["handler"]].append(report["event"])
