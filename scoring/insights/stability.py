"""How stable the judge's scores are: the selected sessions' scores whose samples lay
further apart than SCORING_UNSTABLE_SPREAD (with SCORING_JUDGE_SAMPLES above 1; see
docs/insights.md, "How stable a score is")."""

from django.db.models import QuerySet

from scoring.insights.filters import InsightFilters, latest_completed_scores
from scoring.models import SessionScore


def unstable_scores(filters: InsightFilters, limit: int | None = None) -> QuerySet[SessionScore]:
    """The selected sessions' newest completed scores that are unstable, with their
    sessions: the largest spread first, then the newest."""
    scores = (
        latest_completed_scores(filters)
        .filter(unstable=True)
        .select_related("session")
        .order_by("-score_spread", "-completed_at_us", "score_id")
    )
    return scores[:limit] if limit is not None else scores
