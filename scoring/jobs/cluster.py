"""The judge worker cluster's lifecycle: start django-q2, stop it without hanging.

django-q2's own SIGTERM handling sets a multiprocessing Event that its
sentinel process waits on. When a service manager signals every process of
the service at once (systemd's default), the sentinel dies first and that
Event.set() never returns, so the cluster hangs until it is SIGKILLed. So
this module handles the signals itself: it forwards SIGTERM to every process
of the cluster, lets the judge jobs record "worker shut down" on their scores
(``runtime.JudgeRuntime.shut_down``), and kills what is left after a grace period.

Every ``HEARTBEAT_INTERVAL_S`` the main process records its heartbeat, with the
judge jobs its worker processes hold (``runtime.HeldCounts``).

With ``TARSY_URL`` set, the cluster's main process also syncs sessions from
that TARSy every ``TARSY_SYNC_INTERVAL_S`` (``scoring.tarsy.sync``), and sooner
when a Go TARSy's events say so (its listener is a thread the sync starts).
"""

import logging
import signal
import threading
import time

import psutil
from django.conf import settings
from django.dispatch import receiver
from django_q.cluster import Cluster
from django_q.signals import post_spawn

from scoring.jobs import runtime
from scoring.judge import described, llm
from scoring.ops import health
from scoring.tarsy import sync

logger = logging.getLogger(__name__)

# How long stopping jobs get to record their failure before they are killed.
STOP_GRACE_S = 20
SENTINEL_CHECK_INTERVAL_S = 1.0
# /readyz wants a heartbeat within WORKER_HEARTBEAT_MAX_AGE_S (60 s by default).
HEARTBEAT_INTERVAL_S = 10.0


@receiver(post_spawn)
def start_judge_runtime(sender, proc_name, **kwargs) -> None:
    """In each new worker process, load the LLM client and say what it judges with (model,
    window, timeouts, calls at once), then start taking pending scores: a backlog left from
    before the start runs without any new task."""
    llm.preload()
    for line in described.judge_lines():
        logger.info("worker process judges with %s", line)
    runtime.get_runtime()


def run_cluster() -> None:
    """Run a django-q2 cluster until SIGTERM/SIGINT or until its sentinel dies."""
    # Before django-q2 forks the worker processes, which inherit it.
    held_counts = runtime.share_held_counts(settings.Q_CLUSTER["workers"])
    cluster = Cluster()  # installs django-q2's handlers, replaced below
    stop_requested = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop_requested.set())
    cluster.start()
    # On a thread of this process, beside the cluster: a sync never holds a judge
    # job's worker process, and has no task time limit to outgrow.
    sync_stop = threading.Event()
    if settings.TARSY_URL:
        threading.Thread(
            target=sync.run_periodically, args=(sync_stop,), name="tarsy-sync", daemon=True
        ).start()
    last_heartbeat = 0.0
    while not stop_requested.wait(SENTINEL_CHECK_INTERVAL_S):
        if not cluster.sentinel.is_alive():
            logger.error("the worker cluster's sentinel died; stopping")
            break
        if time.monotonic() - last_heartbeat >= HEARTBEAT_INTERVAL_S:
            live = {process.pid for process in psutil.Process().children(recursive=True)}
            in_flight = held_counts.total(live)
            health.record_worker_heartbeat(settings.Q_CLUSTER["name"], in_flight)
            last_heartbeat = time.monotonic()
    # A sync in progress stops before its next document and lets its lease go; the events
    # listener closes its connection.
    sync_stop.set()
    stop_cluster_processes()


def stop_cluster_processes(grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every descendant of this process, wait, then SIGKILL the rest."""
    processes = psutil.Process().children(recursive=True)
    for process in processes:
        try:
            process.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        logger.warning("worker process %s did not stop within %s s; killing it", process.pid, grace_s)
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    logger.info("worker cluster stopped")
