"""The insights page's figures: each insight's selector over the same filters, and what
the page's filter form offers. Reads only; the page's view renders what this returns."""

from scoring import selectors
from scoring.insights.agreement import agreement
from scoring.insights.backlog import missing_tools_backlog
from scoring.insights.filters import InsightFilters
from scoring.insights.reports import latest_report
from scoring.insights.stability import unstable_scores
from scoring.insights.stats import fleet_stats
from scoring.insights.tarsy_agreement import tarsy_agreement
from scoring.judge.replies import DIMENSION_LABELS
from scoring.models import AlertSession, ScoringStatus, SessionScore

# The page shows the head of the long lists; the API gives them whole.
BACKLOG_ROWS = 20
UNSTABLE_ROWS = 20


def dimension_labels() -> list[dict]:
    """The judge's four criteria, each with its name as the judge's prompt writes it."""
    return [{"key": key, "label": label} for key, label in DIMENSION_LABELS.items()]


def any_completed_score() -> bool:
    """Whether anything has been scored yet: without it the page says how to start."""
    return AlertSession.objects.filter(latest_completed_score_id__isnull=False).exists()


def filter_choices() -> dict:
    """The values the filter form lists: alert types, chains, and the criteria hashes
    scores were made under."""
    chains = AlertSession.objects.exclude(chain_id="").order_by("chain_id").values_list("chain_id", flat=True).distinct()
    return {
        "alert_types": selectors.alert_types(),
        "chains": list(chains),
        "prompt_hashes": list(
            SessionScore.objects.filter(status=ScoringStatus.COMPLETED)
            .order_by("prompt_hash")
            .values_list("prompt_hash", flat=True)
            .distinct()
        ),
    }


def insights_figures(filters: InsightFilters) -> dict:
    """Every figure of the page, over the sessions the filters select (``scored_sessions``:
    how many sessions have a completed score; a group can have failed scorings only)."""
    weeks = fleet_stats(filters, "week")
    alert_types = fleet_stats(filters, "alert_type")
    return {
        "scored_sessions": sum(row["sessions"] for row in weeks),
        "weeks": weeks,
        "alert_types": alert_types,
        "chains": fleet_stats(filters, "chain_id"),
        "backlog": missing_tools_backlog(filters, limit=BACKLOG_ROWS),
        "agreement": agreement(filters),
        **tarsy_agreement(filters),  # tarsy_reviewers, tarsy_judge
        "dimensions": dimension_labels(),
        "dimension_table": _dimension_table(alert_types),
        "unstable": list(unstable_scores(filters, limit=UNSTABLE_ROWS)),
        "report": latest_report(),
    }


def _dimension_table(rows: list[dict]) -> list[dict]:
    """Each group's criteria means as (criterion's label, mean) pairs, in the criteria's order."""
    labels = dimension_labels()
    return [
        {"key": row["key"], "means": [(d["label"], row["dimension_means"].get(d["key"])) for d in labels]}
        for row in rows
    ]
