"""The whole topology (``bin/topology``) for tests and benchmarks, and a batch of scorings through it.

    with running_topology(tmp_path, "--fake-llm", "--fake-llm-delay", "0.2", env=BATCH_ENV) as (_, env):
        session_ids = import_sample_sessions(env, 200, tmp_path)
        batch = asyncio.run(run_batch(env["TOPOLOGY_WEB_URLS"].split(), session_ids, timeout_s=150))
        assert batch_problems(batch, score_rows(env, session_ids)) == []

``run_batch`` follows every scoring from a WebSocket client on each web process while it
requests the scorings, half through each web process, and waits until every client has
seen every scoring end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from websockets.exceptions import ConnectionClosed

from tests.support.servers import REPO_DIR, WS_PATH, EventClient, child_env, run_in_process
from tests.support.workers import wait_for

# Without the .venv set-up of bin/topology (the caller runs in it already).
TOPOLOGY_PROGRAM = [sys.executable, str(REPO_DIR / "bin" / "topology.py")]
# bin/topology may first install .venv's lock file and start PostgreSQL.
START_TIMEOUT_S = 240
# Web processes get 15 s each and worker clusters 40 s each to stop (bin/topology.py).
STOP_TIMEOUT_S = 120
# One user requests every scoring of a batch: no per-user rate limit on POST .../score.
BATCH_ENV = {"SCORING_POST_RATE": ""}
SAMPLE_SESSION = REPO_DIR / "scoring" / "samples" / "00_tarsy_example.json"
EXPECTED_EVENTS = [
    ("scoring.started", None),
    ("scoring.progress", "analyzing_methodology"),
    ("scoring.progress", "identifying_missing_tools"),
    ("scoring.completed", None),
]
# A scoring the judge's quota sent back to the queue: its attempt so far (started, and its
# phases' progress), then this; it is claimed again, and starts over.
WAITED_FOR_QUOTA = ("scoring.progress", "waiting_for_quota")
TERMINAL_EVENTS = {"scoring.completed", "scoring.failed"}
# Longer than one resync of a connection (SCORING_EVENT_RESYNC_S, 2 s), which is what would
# send an event twice: the batch keeps listening this long after the last scoring ended.
SETTLE_S = 3.0
EXAMPLES = 5  # sessions quoted per problem


# --- Talking to a web process ----------------------------------------------------------------


def http(method: str, url: str, body: dict | None = None, user: str = "alice") -> tuple[int, dict | str]:
    """One request as ``user`` (through the trusted proxy headers): (status, JSON body or text)."""
    request = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"X-Forwarded-User": user, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


# --- Running the topology --------------------------------------------------------------------


def read_env_file(path: Path) -> dict[str, str]:
    return dict(shlex.split(line)[0].split("=", 1) for line in path.read_text().splitlines() if line)


@contextlib.contextmanager
def running_topology(
    folder: Path, *args: str, program: list[str] = TOPOLOGY_PROGRAM, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen, dict[str, str]]]:
    """``bin/topology --port 0 *args`` with its run folder, env file and log in ``folder``;
    yields the process and the env file's values once everything answers, and stops it
    (SIGTERM, as Ctrl-C would) at the end. ``env``: extra environment of every process."""
    env_file, log = folder / "topology.env", folder / "topology.log"
    command = [*program, "--port", "0", "--run-dir", str(folder / "run"), "--env-file", str(env_file), *args]
    with log.open("wb") as out:
        # A session of its own: a Ctrl-C in the terminal reaches only the caller, whose exit
        # sends the one SIGTERM (a second signal could cut bin/topology's clean-up short).
        process = subprocess.Popen(
            command,
            cwd=REPO_DIR,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: env_file.exists() or process.poll() is not None, START_TIMEOUT_S, what="bin/topology"
        )
        if process.poll() is not None:
            raise RuntimeError(
                f"bin/topology exited ({process.returncode}):\n{log.read_text()}{_log_tails(folder / 'run')}"
            )
        yield process, read_env_file(env_file)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=STOP_TIMEOUT_S)


def _log_tails(run_dir: Path, lines: int = 15) -> str:
    """The last lines of every process's log: why one did not start."""
    return "".join(
        f"\n--- {path.name}:\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        for path in sorted((run_dir / "logs").glob("*.log"))
    )


def service_env(topology_env: dict[str, str]) -> dict[str, str]:
    """Environment of a ``manage.py`` process on the topology's database and Redis."""
    return child_env(topology_env.get("REDIS_URL"), db_url=topology_env["DATABASE_URL"])


def import_sample_sessions(topology_env: dict[str, str], count: int, folder: Path) -> list[str]:
    """Store ``count`` copies of the TARSy example session (distinct ids) with
    ``manage.py import_sessions``; return their ids."""
    document = json.loads(SAMPLE_SESSION.read_text())
    session_ids = [str(uuid.uuid4()) for _ in range(count)]
    path = folder / "sessions.jsonl"
    path.write_text("".join(json.dumps({**document, "session_id": id_}) + "\n" for id_ in session_ids))
    done = subprocess.run(
        [sys.executable, "manage.py", "import_sessions", str(path)],
        cwd=REPO_DIR,
        env=service_env(topology_env),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or f"created: {count}," not in done.stdout:
        raise RuntimeError(f"import_sessions failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return session_ids


def score_rows(topology_env: dict[str, str], session_ids: list[str]) -> list[dict]:
    """Every stored score of these sessions, read from the topology's database."""
    code = f"""
        import json
        from scoring.models import SessionScore
        rows = SessionScore.objects.filter(session_id__in={session_ids!r}).values(
            "session_id", "score_id", "status", "error_message",
            "scored_at_us", "started_at_us", "completed_at_us",
        )
        print(json.dumps(list(rows), default=str))
    """
    return json.loads(run_in_process(service_env(topology_env), code).strip().splitlines()[-1])


# --- A batch of scorings -----------------------------------------------------------------------


@dataclass
class Arrival:
    received_us: int  # the client's clock (the machine's), like the event's timestamp_us
    event: dict


@dataclass
class Batch:
    web_urls: list[str]
    session_ids: list[str]
    accepted: dict[str, str] = field(default_factory=dict)  # session id -> score id of the 202
    refused: list[str] = field(default_factory=list)  # the other answers, described
    # Per web process: every scoring event its client received, in arrival order.
    arrivals: dict[str, list[Arrival]] = field(default_factory=lambda: defaultdict(list))
    # Per web process: any other message after the subscriptions (errors), or a closed connection.
    other_messages: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    timeout_s: float = 0.0
    first_request_us: int = 0
    last_answer_us: int = 0  # when every POST had been answered
    finished_us: int | None = None  # the last scoring's end reached the last client; None: timed out


def _now_us() -> int:
    return time.time_ns() // 1000


async def run_batch(
    web_urls: list[str],
    session_ids: list[str],
    timeout_s: float,
    post_concurrency: int = 10,
    user: str = "batch",
) -> Batch:
    """Request a scoring of every session (``POST .../score``, alternately through each web
    process, ``post_concurrency`` at a time) while one client per web process follows them
    all, and wait (at most ``timeout_s`` from the first request) until every accepted
    scoring's end reached every client, then ``SETTLE_S`` more.

    A client subscribes to ``session:<id>`` of every session (``sessions`` carries no
    progress events); a connection holds at most ``MAX_SUBSCRIPTIONS``, so a client is as
    many connections as that needs.
    """
    import httpx

    from scoring.realtime.consumers import MAX_SUBSCRIPTIONS

    batch = Batch(web_urls, session_ids, timeout_s=timeout_s)
    ended: dict[str, set[str]] = {url: set() for url in web_urls}
    all_ended = asyncio.Event()
    requests_answered = False

    def check_all_ended() -> None:
        if requests_answered and all(set(batch.accepted) <= ended[url] for url in web_urls):
            batch.finished_us = batch.finished_us or _now_us()
            all_ended.set()

    async def follow(url: str, client: EventClient) -> None:
        try:
            async for raw in client.websocket:
                received_us = _now_us()
                message = json.loads(raw)
                if not message.get("type", "").startswith("scoring."):
                    batch.other_messages[url].append(message)
                    continue
                batch.arrivals[url].append(Arrival(received_us, message))
                if message["type"] in TERMINAL_EVENTS:
                    ended[url].add(message["session_id"])
                    check_all_ended()
        except ConnectionClosed as closed:
            batch.other_messages[url].append({"type": "connection closed", "close": str(closed.rcvd)})
        else:  # the server closed it normally, before the end of the batch
            batch.other_messages[url].append({"type": "connection closed"})

    async def request(http: httpx.AsyncClient, index: int, session_id: str, slots: asyncio.Semaphore):
        url = web_urls[index % len(web_urls)]
        async with slots:
            response = await http.post(f"{url}/api/v1/scoring/sessions/{session_id}/score", json={})
        if response.status_code == 202:
            batch.accepted[session_id] = response.json()["score_id"]
        else:
            batch.refused.append(f"{session_id} via {url}: {response.status_code} {response.text[:200]}")

    async with contextlib.AsyncExitStack() as stack:
        followers = []
        for url in web_urls:
            ws_url = url.replace("http://", "ws://", 1) + WS_PATH
            for start in range(0, len(session_ids), MAX_SUBSCRIPTIONS):
                client = await stack.enter_async_context(EventClient.connect(ws_url, user=user))
                for session_id in session_ids[start : start + MAX_SUBSCRIPTIONS]:
                    await client.subscribe(f"session:{session_id}")
                followers.append(asyncio.create_task(follow(url, client)))
        deadline = time.monotonic() + timeout_s
        slots = asyncio.Semaphore(post_concurrency)
        http = await stack.enter_async_context(
            httpx.AsyncClient(headers={"X-Forwarded-User": user}, timeout=timeout_s)
        )
        batch.first_request_us = _now_us()
        requests = asyncio.gather(*(request(http, i, id_, slots) for i, id_ in enumerate(session_ids)))
        try:
            await asyncio.wait_for(requests, timeout_s)
        except TimeoutError:
            batch.refused.append(f"not every request answered within {timeout_s:g} s")
        batch.last_answer_us = _now_us()
        requests_answered = True
        check_all_ended()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_ended.wait(), max(0.0, deadline - time.monotonic()))
        await asyncio.sleep(SETTLE_S)
        for follower in followers:
            follower.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
    return batch


# --- What a batch should have done ----------------------------------------------------------


def shape(events: list[dict]) -> list[tuple]:
    return [(event["type"], event.get("phase")) for event in events]


def as_expected(received: list[tuple]) -> bool:
    """Whether a scoring's events (their ``shape``) are the four expected ones, each attempt
    the quota sent back to the queue before them being started, one or both phases, waiting."""
    *sent_back, last = _attempts(received)
    return last == EXPECTED_EVENTS and all(
        attempt[-1] == WAITED_FOR_QUOTA and attempt[:-1] in (EXPECTED_EVENTS[:2], EXPECTED_EVENTS[:3])
        for attempt in sent_back
    )


def _attempts(received: list[tuple]) -> list[list[tuple]]:
    """``received`` cut after each wait for the quota."""
    attempts = [[]]
    for event in received:
        attempts[-1].append(event)
        if event == WAITED_FOR_QUOTA:
            attempts.append([])
    return attempts


def _examples(items) -> str:
    items = list(items)
    more = f", and {len(items) - EXAMPLES} more" if len(items) > EXAMPLES else ""
    return "; ".join(str(item) for item in items[:EXAMPLES]) + more


def _described(events: list[dict]) -> list[str]:
    return [f"{type_}({phase})" if phase else type_ for type_, phase in shape(events)]


def delivery(batch: Batch, url: str) -> dict:
    """What the client on web process ``url`` received: counts; the sessions whose events
    were not the accepted score's started, progress, progress and completed, after its waits
    for the quota if any (``wrong``, see ``as_expected``); and those that were, but arrived in
    another order (``out_of_order``)."""
    arrivals = batch.arrivals[url]
    by_session: dict[str, list[dict]] = defaultdict(list)
    for arrival in arrivals:
        by_session[arrival.event["session_id"]].append(arrival.event)
    wrong, out_of_order = {}, {}
    for session_id, score_id in batch.accepted.items():
        events = by_session.get(session_id, [])
        by_id = sorted(events, key=lambda event: event["id"])
        if not as_expected(shape(by_id)) or {event["score_id"] for event in events} != {score_id}:
            wrong[session_id] = _described(events)
        elif events != by_id:
            out_of_order[session_id] = _described(events)
    ids = Counter(arrival.event["id"] for arrival in arrivals)
    return {
        "events": len(arrivals),
        "duplicates": sum(count - 1 for count in ids.values()),
        "as_expected": len(batch.accepted) - len(wrong) - len(out_of_order),
        "wrong": wrong,
        "out_of_order": out_of_order,
        "types": Counter(arrival.event["type"] for arrival in arrivals),
    }


def batch_problems(batch: Batch, rows: list[dict]) -> list[str]:
    """Everything that went wrong, one line each; [] when every scoring was accepted and
    completed, and every client received each scoring's four events once (see
    ``order_problems`` for the order they came in)."""
    problems = [f"POST .../score not accepted: {refusal}" for refusal in batch.refused]
    if batch.finished_us is None:
        problems.append(f"not every scoring's end reached every client within {batch.timeout_s:g} s")
    rows_by_session: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        rows_by_session[row["session_id"]].append(row)
    statuses = Counter(row["status"] for row in rows)
    if statuses != {"completed": len(batch.session_ids)}:
        problems.append(f"scores by status: {dict(statuses)} (expected {len(batch.session_ids)} completed)")
    failed = [f"{row['session_id']}: {row['error_message']}" for row in rows if row["status"] == "failed"]
    if failed:
        problems.append(f"failed scorings: {_examples(failed)}")
    not_one = [session_id for session_id in batch.session_ids if len(rows_by_session[session_id]) != 1]
    if not_one:
        problems.append(f"sessions without exactly one score: {_examples(not_one)}")
    for url in batch.web_urls:
        seen = delivery(batch, url)
        if seen["duplicates"]:
            problems.append(f"client on {url}: {seen['duplicates']} events received more than once")
        if seen["wrong"]:
            received = (f"{session_id}: {events}" for session_id, events in seen["wrong"].items())
            problems.append(
                f"client on {url}: {len(seen['wrong'])} of {len(batch.accepted)} scorings without exactly "
                f"one started, two progress and one completed event after their waits for the quota: "
                f"{_examples(received)}"
            )
        if batch.other_messages[url]:
            problems.append(f"client on {url}: other messages: {_examples(batch.other_messages[url])}")
    return problems


def order_problems(batch: Batch) -> list[str]:
    """Scorings whose events all reached a client, but not in the order they were recorded."""
    problems = []
    for url in batch.web_urls:
        out_of_order = delivery(batch, url)["out_of_order"]
        if out_of_order:
            received = (f"{session_id}: {events}" for session_id, events in out_of_order.items())
            problems.append(
                f"client on {url}: {len(out_of_order)} of {len(batch.accepted)} scorings' events arrived "
                f"out of order: {_examples(received)}"
            )
    return problems
