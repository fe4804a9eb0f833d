"""Many judge jobs at once inside one worker process.

A judge job spends nearly all of its 10-60 s waiting on the LLM over the
network. Running one job per worker process would take hundreds of processes
(each ~100 MB) for hundreds of scorings in flight, so each worker process runs
up to ``SCORING_CONCURRENCY_PER_WORKER`` jobs on threads instead: the django-q2
task only waits for a free slot, hands the job to a thread and returns, and
the process takes its next task at once. Threads wait on the network with the
GIL released, and hold no database connection while they wait (see llm.py).

SIGTERM to a worker process fails every job it holds with "worker shut down"
(and so sends their events), then ends the process at once: waiting for the
judge to answer could take minutes, and the scores are already recorded.
"""

import logging
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connection

from scoring import services

logger = logging.getLogger(__name__)


class JudgeRuntime:
    def __init__(self, slots: int):
        self.slots = slots
        self._free_slots = threading.BoundedSemaphore(slots)
        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="judge")
        self._lock = threading.Lock()
        self._held: set[str] = set()

    def submit(self, score_id: str) -> None:
        """Run the judge job of ``score_id`` on a thread, once a slot is free."""
        self._free_slots.acquire()
        with self._lock:
            self._held.add(score_id)
        self._pool.submit(self._run, score_id)

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._held)

    def _run(self, score_id: str) -> None:
        try:
            services.score_run(score_id)
        except Exception:  # score_run records its own failures; this is a last resort
            logger.exception("judge job for score %s crashed", score_id)
        finally:
            with self._lock:
                self._held.discard(score_id)
            connection.close()  # this thread's; threads are reused for other jobs
            self._free_slots.release()

    def shut_down(self, signum, frame) -> None:
        """SIGTERM handler: fail the held jobs, then end the process."""
        # A second SIGTERM (the service manager signals every process, and the
        # cluster forwards it too) must not re-enter this handler mid-write.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        held = self.held()
        logger.info("worker process stopping: failing %d judge jobs it holds", len(held))
        for score_id in held:
            try:
                services.fail_scoring(score_id, services.WORKER_SHUT_DOWN)
            except Exception:  # the orphan cleanup will fail it instead
                logger.exception("could not record the shutdown of score %s", score_id)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


_runtime: JudgeRuntime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> JudgeRuntime:
    """This process's runtime, created (and its SIGTERM handler set) on first use."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = JudgeRuntime(settings.SCORING_CONCURRENCY_PER_WORKER)
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, _runtime.shut_down)
        return _runtime
