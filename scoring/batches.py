"""Writes for many sessions at once: scoring requests in batches (``score_sessions``,
for the command of that name and the admin's actions).

One session at a time through ``services.score_request`` costs several statements
and a commit each; here a batch of sessions costs a few statements in all.
"""

from django.db import transaction

from scoring import services
from scoring.criteria import selectors as criteria_selectors
from scoring.models import SessionScore
from scoring.services import ScoringDecision

BATCH_SIZE = 500


def score_sessions(session_ids, *, triggered_by: str, force_rescore: bool) -> dict[str, int]:
    """Request scoring for many sessions (each once); count the outcomes.

    The decisions of ``services.score_request`` (``services.decide_scorings``), a
    batch at a time: a session that is not finished (or not found) is not
    scorable, one with an active score is in progress, one with a finished score
    is already scored unless ``force_rescore``. The rest get their pending scores
    in one transaction per batch, and their wake-ups after it.
    """
    outcome = {"queued": 0, "already_scored": 0, "in_progress": 0, "not_scorable": 0}
    unique_ids = list(dict.fromkeys(session_ids))
    for start in range(0, len(unique_ids), BATCH_SIZE):
        batch = unique_ids[start : start + BATCH_SIZE]
        for key, count in _score_batch(batch, triggered_by, force_rescore).items():
            outcome[key] += count
    return outcome


# The count each decision but a new score goes into (a session not found: not_scorable).
_COUNTED_AS = {
    ScoringDecision.NOT_SCORABLE: "not_scorable",
    ScoringDecision.IN_PROGRESS: "in_progress",
    ScoringDecision.ALREADY_SCORED: "already_scored",
}


def _score_batch(session_ids: list, triggered_by: str, force_rescore: bool) -> dict[str, int]:
    decided = services.decide_scorings(session_ids, force_rescore=force_rescore)
    counts = {
        "queued": 0,
        "already_scored": 0,
        "in_progress": 0,
        "not_scorable": len(session_ids) - len(decided),
    }
    wanted = {}
    for state, decision in decided:
        if decision is ScoringDecision.NEW_SCORE:
            wanted[state.session_id] = state
        else:
            counts[_COUNTED_AS[decision]] += 1
    if not wanted:
        return counts
    requested_at = services.now_us()
    current = criteria_selectors.current_criteria()
    # In session order, so that two batches at once take the index's locks in the same order.
    pending = [
        services.pending_score(
            session_id,
            current.hash_for(wanted[session_id].alert_type, wanted[session_id].chain_id),
            triggered_by,
            requested_at,
        )
        for session_id in sorted(wanted)
    ]
    with transaction.atomic():
        # A session that gained an active score since it was read keeps that one:
        # the unique index refuses this insert, and ignore_conflicts skips it.
        SessionScore.objects.bulk_create(pending, ignore_conflicts=True)
        created = dict(
            SessionScore.objects.filter(pk__in=[score.score_id for score in pending]).values_list(
                "score_id", "session_id"
            )
        )
        services.copy_latest_scores(created.values())
        transaction.on_commit(lambda: services.wake_workers(len(created)))
    counts["queued"] = len(created)
    counts["in_progress"] += len(pending) - len(created)
    return counts
