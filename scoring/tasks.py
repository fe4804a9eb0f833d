"""django-q2 entry points for judge jobs. Thin: each calls one service.

django-q2 stores a task by the dotted path of its function (``scoring.tasks.…``, in
queued tasks and in the cleanup ``Schedule`` row), so these stay here; what
enqueues them is ``scoring.jobs.queue``."""

from scoring import services
from scoring.insights import reports
from scoring.jobs import runtime
from scoring.realtime import events
from scoring.trials import services as trial_services


def wake_judge_runtime() -> None:
    """Wake the judge runtime of the worker process that runs this task: it claims
    pending reports and scores, oldest first, as long as it has free slots (jobs/runtime.py).
    Returns at once."""
    runtime.get_runtime().wake()


def cleanup_orphans() -> int:
    """The minutely cleanup: fail orphaned scorings, reports and trial scorings, prune expired events (so
    they are pruned even where no WebSocket client ever starts a web process's relay) and
    transcripts past SCORING_TRANSCRIPT_RETENTION_DAYS, and let the automatic scorings that
    wait for a spend budget go once it is raised or removed."""
    events.prune()
    services.prune_transcripts()
    reports.expire_stale_reports()
    trial_services.expire_stale_trial_scorings()
    services.release_budget_waits()
    return services.expire_stale_scorings()
