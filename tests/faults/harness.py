"""The fault suite's machinery, shared by tests/faults and bench/faults.py.

A run requests scorings through the real API of a web server process, lets worker
processes score them against the fake judge, injects a fault, waits until
every scoring has ended, and reports what happened:

* attempted, completed, failed (by reason), stuck (still pending or in progress);
* events lost: events stored for those scorings on the ``sessions`` channel
  that a dashboard client (``EventRecorder``: subscribed to ``sessions``,
  reconnecting and catching up like docs/websocket.md's client) never got;
* duplicated: judge conversations beyond one per scoring (successful turn-1
  replies per session), and sessions that had two active scorings at once.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

from django.db import OperationalError, connection
from websockets.exceptions import ConnectionClosed, InvalidStatus

from scoring.models import JudgeCircuit, ScoringEvent, ScoringStatus, SessionScore
from tests.support.api import session_document
from tests.support.fake_llm import Reply, Step, rate_limited
from tests.support.servers import EventClient
from tests.support.judge_replies import evaluated

USER = "fault-suite"
TURN1 = evaluated("Logical Flow: 15/25\nConsistency: 16/25\nTool Relevance: 14/25\nSynthesis Quality: 16/25\n\n61")
TURN2 = "1. **pods_log** - the container output was never read."
_SESSION_ID = re.compile(r"\*\*Session ID:\*\* ([0-9a-f-]{36})")
# Generous bounds, so that a broken run ends with figures instead of hanging.
SETTLE_TIMEOUT_S = 180
EVENT_WAIT_S = 15


# --- The fake judge's behaviour ----------------------------------------------------------------


class ScriptedJudge:
    """The fake LLM's answer to every request (``fake_llm.set_default(judge)``).

    Answers the two turns of a scoring, or ``fault`` while one is set, or 429
    beyond ``rate_per_s`` answered requests a second. Counts successful turn-1
    replies per session: more than one means a scoring was judged twice.
    """

    def __init__(self):
        self.fault: Step | None = None
        self.rate_per_s: int | None = None
        self.turn1_replies: Counter[str] = Counter()
        self._answered: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict | None) -> Step:
        messages = (body or {}).get("messages", [])
        with self._lock:
            if self.fault is not None:
                return self.fault
            if self.rate_per_s is not None:
                now = time.monotonic()
                self._answered = [t for t in self._answered if now - t < 1.0]
                if len(self._answered) >= self.rate_per_s:
                    return rate_limited("1")
                self._answered.append(now)
            if len(messages) == 1:
                found = _SESSION_ID.search(messages[0].get("content") or "")
                self.turn1_replies[found.group(1) if found else "?"] += 1
                return Reply(TURN1)
        return Reply(TURN2)


# --- A dashboard client ------------------------------------------------------------------------


class EventRecorder:
    """A WebSocket client on the ``sessions`` channel, in a thread of its own.

    It reconnects whenever the connection drops (0.2 s apart) and catches up
    from the last event it saw, as docs/websocket.md's client does.
    ``resync()`` makes it reconnect now (what a dashboard does after an outage).
    """

    def __init__(self, ws_url: str):
        self.ws_url = ws_url
        self.received: dict[int, dict] = {}
        self.reconnects = 0
        self._stopping = threading.Event()
        self._resync = threading.Event()
        self._connected = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self, timeout_s: float = 20) -> EventRecorder:
        self._thread.start()
        if not self._connected.wait(timeout_s):
            raise RuntimeError(f"the event recorder could not connect to {self.ws_url}")
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)

    def resync(self) -> None:
        self._resync.set()

    def wait_for(self, event_ids: set[int], timeout_s: float = EVENT_WAIT_S) -> set[int]:
        """Wait until every id was received; return the ids still missing."""
        deadline = time.monotonic() + timeout_s
        while (missing := event_ids - set(self.received)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return missing

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                async with EventClient.connect(self.ws_url, user=USER) as client:
                    await client.subscribe("sessions")
                    last_id = max(self.received, default=0)
                    replayed, _ = await client.catchup("sessions", last_id)
                    self._record(replayed)
                    self._connected.set()
                    self._resync.clear()
                    while not (self._stopping.is_set() or self._resync.is_set()):
                        try:
                            self._record([await client.receive(timeout_s=0.3)])
                        except TimeoutError:
                            continue
            except (OSError, ConnectionClosed, InvalidStatus, TimeoutError, AssertionError, KeyError):
                pass
            if not self._stopping.is_set():
                self.reconnects += 1
                await asyncio.sleep(0.2)

    def _record(self, messages: list[dict]) -> None:
        for message in messages:
            if message.get("type", "").startswith("scoring."):
                self.received[message["id"]] = message


# --- Talking to the service ------------------------------------------------------------------------


def call_api(base_url: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        base_url + path,
        data=data,
        method=method,
        headers={"X-Forwarded-User": USER, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def store_sessions(base_url: str, count: int) -> list[str]:
    """Send ``count`` finished sessions through the API; return their ids."""
    ids = []
    for _ in range(count):
        status, body = call_api(base_url, "POST", "/api/v1/sessions/", session_document())
        assert status == 201, (status, body)
        ids.append(body["session_id"])
    return ids


def request_scorings(base_url: str, session_ids: list[str], force: bool = False) -> list[str]:
    score_ids = []
    for session_id in session_ids:
        status, body = call_api(
            base_url, "POST", f"/api/v1/scoring/sessions/{session_id}/score", {"force_rescore": force}
        )
        assert status == 202, (status, body)
        score_ids.append(body["score_id"])
    return score_ids


def wait_until_settled(score_ids: list[str], timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    """Wait until no scoring of the run is pending or in progress (or the bound passes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if not SessionScore.objects.filter(pk__in=score_ids, status__in=ScoringStatus.active_values()).exists():
                return
        except OperationalError:  # the database restarted under this process: reconnect next time
            connection.close()
        time.sleep(0.2)


def reset_circuit() -> None:
    """Close the judge's circuit breaker, so one scenario's failures do not fail the next."""
    JudgeCircuit.objects.all().delete()


# --- Figures ----------------------------------------------------------------------------------------


@dataclass
class Figures:
    scenario: str
    attempted: int = 0
    completed: int = 0
    failed: Counter = field(default_factory=Counter)  # reason -> count
    stuck: int = 0
    events_stored: int = 0
    events_lost: int = 0
    duplicated: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def failed_total(self) -> int:
        return sum(self.failed.values())

    def failed_with(self, fragment: str) -> int:
        fragment = reason_group(fragment)
        return sum(count for reason, count in self.failed.items() if fragment in reason)

    def row(self) -> str:
        reasons = "; ".join(f"{count} × {reason}" for reason, count in self.failed.most_common())
        return (
            f"| {self.scenario} | {self.attempted} | {self.completed} | {self.failed_total} | {reasons or '-'} "
            f"| {self.stuck} | {self.events_lost}/{self.events_stored} | {self.duplicated} "
            f"| {'; '.join(self.notes) or '-'} |"
        )


TABLE_HEADER = (
    "| scenario | attempted | completed | failed | failure reasons | stuck | events lost/stored "
    "| duplicated | notes |\n|---|---|---|---|---|---|---|---|---|"
)
# Reasons differ by their numbers (times, attempts, ports): grouped without them.
_NUMBERS = re.compile(r"\d+(?:[.:-]\d+)*")
REASON_CHARS = 160


def reason_group(error_message: str | None) -> str:
    return _NUMBERS.sub("N", error_message or "")[:REASON_CHARS]


def collect(scenario: str, score_ids: list[str], recorder: EventRecorder, judge: ScriptedJudge) -> Figures:
    scores = list(SessionScore.objects.filter(pk__in=score_ids).values("session_id", "status", "error_message"))
    figures = Figures(scenario, attempted=len(score_ids))
    for score in scores:
        if score["status"] == ScoringStatus.COMPLETED:
            figures.completed += 1
        elif score["status"] == ScoringStatus.FAILED:
            figures.failed[reason_group(score["error_message"])] += 1
        else:
            figures.stuck += 1
    stored = set(
        ScoringEvent.objects.filter(score_id__in=score_ids, on_sessions_channel=True).values_list("id", flat=True)
    )
    figures.events_stored = len(stored)
    figures.events_lost = len(recorder.wait_for(stored))
    scorings_per_session = Counter(str(score["session_id"]) for score in scores)
    figures.duplicated = sum(
        max(0, judge.turn1_replies[session] - scorings) for session, scorings in scorings_per_session.items()
    )
    return figures
