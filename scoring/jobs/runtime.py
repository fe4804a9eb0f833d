"""Many judge jobs at once inside one worker process, pulled from the database.

A judge job spends nearly all of its 10-60 s waiting on the LLM over the
network. Running one job per worker process would take hundreds of processes
(each ~100 MB) for hundreds of scorings in flight, so each worker process runs
up to ``SCORING_CONCURRENCY_PER_WORKER`` jobs on threads instead. Threads wait
on the network with the GIL released, and hold no database connection while
they wait (``scoring.judge.llm.release_db_connection``).

A judge job is a scoring, an MCP prioritization report (``scoring.insights.reports``) or a
trial's scoring (``scoring.trials``): each takes a slot, and counts in the global limit. The
pending row is the job. Whenever slots are free, the process's dispatcher thread claims as many
of the oldest pending reports as their share of the slots allows (SCORING_REPORT_SLOT_SHARE),
then scores, then trial scorings (within the global limit), and hands each to a thread. The django-q2
wake-up tasks queued when new jobs commit only wake a dispatcher; dispatchers also
look every ``SCORING_WORKER_POLL_S``. So a process whose slots are all busy never
holds work that another process could start, and a job is run even if its wake-up
was lost (Redis has no receipts).

SIGTERM to a worker process fails every job it holds with "worker shut down"
(and so sends their events), then ends the process at once: waiting for the
judge to answer could take minutes, and the jobs are already recorded.

Each process also writes how many jobs it holds into memory it shares with its
cluster (``HeldCounts``), which reports their sum in its heartbeat.
"""

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import psutil
from django.conf import settings
from django.db import connection

from scoring import services
from scoring.insights import reports
from scoring.realtime import events
from scoring.trials import services as trial_services

logger = logging.getLogger(__name__)
# How long a stopping worker waits for a claim in progress.
CLAIM_WAIT_S = 10.0


class HeldCounts:
    """How many judge jobs each worker process of a cluster holds, for the cluster's
    heartbeat (``worker_in_flight``).

    The cluster makes it before starting django-q2, which forks the worker
    processes, so they share its memory: one (pid, held) entry per process. Each
    process writes only its own entry and takes no lock to do so: a process killed
    mid-write (SIGKILL, a django-q2 timeout) would leave a lock held and stop every
    other from counting. The cluster adds up the entries of its live processes, so
    the jobs of a process that died are not counted.
    """

    def __init__(self, entries: int):
        self._pids = multiprocessing.Array(ctypes.c_long, entries, lock=False)
        self._held = multiprocessing.Array(ctypes.c_long, entries, lock=False)
        self._taking = multiprocessing.Lock()

    def take_entry(self) -> int | None:
        """In a worker process: the entry it writes its count to (one it had under a
        reused pid, else a free one or one of an ended process); None if none is left."""
        pid = os.getpid()
        # In turn, so that processes starting together take different entries; but a
        # process killed while taking one must not stop the next ones from counting.
        locked = self._taking.acquire(timeout=CLAIM_WAIT_S)
        try:
            owners = list(self._pids)
            if pid in owners:
                entry = owners.index(pid)
            else:
                entry = next(
                    (i for i, owner in enumerate(owners) if owner == 0 or not psutil.pid_exists(owner)), None
                )
            if entry is not None:
                self._held[entry] = 0
                self._pids[entry] = pid
            return entry
        finally:
            if locked:
                self._taking.release()

    def report(self, entry: int, held: int) -> None:
        self._held[entry] = held

    def total(self, pids: set[int]) -> int:
        """Jobs held by the processes ``pids`` (the cluster's live ones)."""
        return sum(held for owner, held in zip(self._pids, self._held) if owner in pids)


_held_counts: HeldCounts | None = None


def share_held_counts(processes: int) -> HeldCounts:
    """Called by the cluster before it forks its ``processes`` worker processes; the
    runtime of each reports to what this returns."""
    global _held_counts
    # Room for replacements started before the process they replace is gone.
    _held_counts = HeldCounts(2 * processes + 2)
    return _held_counts


@dataclass(frozen=True)
class ClaimedJob:
    """A judge job this process claimed: how to run it to its end, and how to fail it."""

    name: str  # "score <id>", "report <id>", "trial scoring <id>"
    run: Callable[[], object]
    fail: Callable[[str], object]
    kind: str = "score"  # or "report", "trial": the kinds that hold a share of the slots at most


def _score_job(score) -> ClaimedJob:
    return ClaimedJob(
        f"score {score.score_id}",
        partial(services.run_claimed_score, score),
        partial(services.fail_scoring, score.score_id),
    )


def _trial_job(scoring) -> ClaimedJob:
    return ClaimedJob(
        f"trial scoring {scoring.pk}",
        partial(trial_services.run_claimed_trial_scoring, scoring),
        partial(trial_services.fail_trial_scoring, scoring.pk),
        kind="trial",
    )


def _report_job(report) -> ClaimedJob:
    return ClaimedJob(
        f"report {report.report_id}",
        partial(reports.run_claimed_report, report),
        partial(reports.fail_report, report.report_id),
        kind="report",
    )


class JudgeRuntime:
    def __init__(self, slots: int, poll_s: float, held_counts: HeldCounts | None = None):
        self.slots = slots
        self.poll_s = poll_s
        self._free_slots = threading.BoundedSemaphore(slots)
        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="judge")
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._held: dict[str, ClaimedJob] = {}
        # Held by the dispatcher from a claim until its jobs are in ``_held``, so
        # that shutting down fails every job this process has claimed.
        self._claiming = threading.Lock()
        self._stopping = False
        self._dispatcher = threading.Thread(target=self._dispatch_forever, name="judge-dispatcher", daemon=True)
        self._held_counts = held_counts
        self._held_entry = held_counts.take_entry() if held_counts is not None else None
        if held_counts is not None and self._held_entry is None:
            logger.warning("no room to report this process's judge jobs: worker_in_flight undercounts them")

    def start(self) -> None:
        self._dispatcher.start()

    def wake(self) -> None:
        """Look for pending jobs now rather than at the next poll."""
        self._wake.set()

    def held(self) -> list[ClaimedJob]:
        with self._lock:
            return list(self._held.values())

    def _report_held(self) -> None:
        """Tell the cluster how many jobs this process holds (with ``_lock`` held)."""
        if self._held_entry is not None:
            self._held_counts.report(self._held_entry, len(self._held))

    def _dispatch_forever(self) -> None:
        while True:
            try:
                idle = self._dispatch_once()
            except Exception:  # the dispatcher must never die: nothing else claims jobs
                logger.exception("judge dispatcher failed; going on in %s s", self.poll_s)
                idle = True
            if idle:
                self._wake.wait(self.poll_s)
                self._wake.clear()

    def _dispatch_once(self) -> bool:
        """Claim pending jobs for the free slots and start them; True if slots stay free."""
        self._free_slots.acquire()
        free = 1
        while self._free_slots.acquire(blocking=False):
            free += 1
        with self._claiming:
            jobs = [] if self._stopping else self._claim(free)
            with self._lock:
                self._held.update((job.name, job) for job in jobs)
                self._report_held()
        for _ in range(free - len(jobs)):
            self._free_slots.release()
        for job in jobs:
            self._pool.submit(self._run, job)
        connection.close()  # hold no connection between claims
        return len(jobs) < free  # nothing more pending, or the global limit is reached

    def _claim(self, limit: int) -> list[ClaimedJob]:
        """Reports first (few, and someone waits on each), as far as they stay within their
        share of this process's slots (``reports.report_slots``), then scores for the slots left,
        then trial scorings within their share (``trial_services.trial_slots``): a queue of
        reports or a trial of hundreds of sessions never holds every slot."""
        with self._lock:
            held = Counter(job.kind for job in self._held.values())
        report_room = min(limit, reports.report_slots(self.slots) - held["report"])
        jobs = self._claim_kind("reports", reports.claim_pending_reports, _report_job, report_room)
        jobs += self._claim_kind("scores", services.claim_pending_scores, _score_job, limit - len(jobs))
        trial_room = min(limit - len(jobs), trial_services.trial_slots(self.slots) - held["trial"])
        jobs += self._claim_kind(
            "trial scorings", trial_services.claim_pending_trial_scorings, _trial_job, trial_room
        )
        return jobs

    def _claim_kind(self, what: str, claim, job, room: int) -> list[ClaimedJob]:
        if room <= 0:
            return []
        try:
            return [job(claimed) for claimed in claim(room)]
        except Exception:  # the database is away; the dispatcher must outlive it
            logger.exception("could not claim pending %s; trying again in %s s", what, self.poll_s)
            return []

    def _run(self, job: ClaimedJob) -> None:
        try:
            job.run()
        except Exception:  # each job records its own failures; this is a last resort
            logger.exception("judge job for %s crashed", job.name)
        finally:
            with self._lock:
                self._held.pop(job.name, None)
                self._report_held()
            connection.close()  # this thread's; threads are reused for other jobs
            self._free_slots.release()

    def stop_claiming(self) -> bool:
        """Claim no more jobs; wait (at most CLAIM_WAIT_S) for a claim in progress to
        register its jobs in ``held``. False if it did not finish in time."""
        self._stopping = True
        if not self._claiming.acquire(timeout=CLAIM_WAIT_S):
            return False
        self._claiming.release()
        return True

    def shut_down(self, signum, frame) -> None:
        """SIGTERM handler: fail the held jobs, then end the process."""
        # A second SIGTERM (the service manager signals every process, and the
        # cluster forwards it too) must not re-enter this handler mid-write.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        claim_done = self.stop_claiming()
        held = self.held()
        logger.info("worker process stopping: failing %d judge jobs it holds", len(held))
        for job in held:
            try:
                job.fail(services.WORKER_SHUT_DOWN)
            except Exception:  # the orphan cleanup will fail it instead
                logger.exception("could not record the shutdown of %s", job.name)
        if not claim_done:
            logger.warning("a claim was still running; its jobs will be failed as orphans")
        # os._exit skips atexit: send the failed events before going.
        events.flush_published()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


_runtime: JudgeRuntime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> JudgeRuntime:
    """This process's runtime, started (and its SIGTERM handler set) on first use."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = JudgeRuntime(
                settings.SCORING_CONCURRENCY_PER_WORKER, settings.SCORING_WORKER_POLL_S, _held_counts
            )
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, _runtime.shut_down)
            _runtime.start()
        return _runtime
