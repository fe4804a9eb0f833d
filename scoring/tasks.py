"""django-q2 entry points for judge jobs. Thin: each calls one service.

django-q2 stores a task by the dotted path of its function (``scoring.tasks.…``, in
queued tasks and in the cleanup ``Schedule`` row), so these stay here; what
enqueues them is ``scoring.jobs.queue``."""

from scoring import services
from scoring.insights import reports
from scoring.jobs import runtime
from scoring.realtime import events


def wake_judge_runtime() -> None:
    """Wake the judge runtime of the worker process that runs this task: it claims
    pending scores, oldest first, as long as it has free slots (jobs/runtime.py).
    Returns at once."""
    runtime.get_runtime().wake()


def run_insight_report(report_id: str) -> None:
    """Claim the pending report and write it on a thread of this worker process; returns
    at once, so that django-q2's timeout and re-delivery never meet a long report."""
    reports.start_report(report_id)


def cleanup_orphans() -> int:
    """The minutely cleanup: fail orphaned scorings and reports, and prune expired events (so
    they are pruned even where no WebSocket client ever starts a web process's relay)."""
    events.prune()
    reports.expire_stale_reports()
    return services.expire_stale_scorings()
