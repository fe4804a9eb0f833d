"""The missing-tools backlog: which tools the judge says the selected sessions lacked, most
often first (docs/insights.md, "Missing-tools backlog"). Counted from ``MissingTool`` rows
of each session's newest completed score, by the normalised ``key``."""

from collections import Counter, defaultdict

from django.db.models import Avg, Count, Exists, F, OuterRef, Window
from django.db.models.functions import RowNumber

from scoring.insights.filters import InsightFilters, latest_completed_scores
from scoring.models import MissingTool

EXAMPLES_PER_TOOL = 5


def missing_tools_backlog(filters: InsightFilters, limit: int | None = None) -> list[dict]:
    """One row per missing tool, the tools lacked by most sessions first (then by key),
    at most ``limit`` of them."""
    selected = latest_completed_scores(filters)
    tools = _once_per_session(MissingTool.objects.filter(score__in=selected.values("pk")))
    ranked = tools.values("key").annotate(sessions=Count("pk"), mean_score=Avg("score__total_score"))
    ranked = list(ranked.order_by("-sessions", "key")[:limit])
    if not ranked:
        return []
    total_sessions = selected.count()
    keys = [row["key"] for row in ranked]
    of_keys = tools.filter(key__in=keys)
    spellings = _counted(of_keys, "name")
    alert_types = _counted(of_keys, "score__session__alert_type")
    chains = _counted(of_keys, "score__session__chain_id")
    examples = _newest_sessions(of_keys)
    return [
        {
            "tool": spellings[row["key"]][0],
            "key": row["key"],
            "sessions": row["sessions"],
            "share": round(row["sessions"] / total_sessions, 4),
            "mean_score": round(row["mean_score"], 2),
            "alert_types": alert_types[row["key"]],
            "chains": chains[row["key"]],
            "example_session_ids": examples[row["key"]],
        }
        for row in ranked
    ]


def _once_per_session(tools):
    """Each tool once per score, at its first place in the judge's list: a list that names
    the same tool twice (two spellings of one key) is one session lacking it."""
    earlier = MissingTool.objects.filter(score=OuterRef("score"), key=OuterRef("key"), position__lt=OuterRef("position"))
    return tools.filter(~Exists(earlier))


def _counted(tools, field: str) -> dict[str, list[str]]:
    """Per key, the values of ``field`` among its sessions, the most frequent first (then
    alphabetically); empty values (a session without a chain) left out."""
    counts = tools.values("key", field).annotate(sessions=Count("pk")).order_by()
    by_key: dict[str, Counter] = defaultdict(Counter)
    for row in counts:
        if row[field]:
            by_key[row["key"]][row[field]] += row["sessions"]
    return defaultdict(
        list, {key: sorted(counter, key=lambda value: (-counter[value], value)) for key, counter in by_key.items()}
    )


def _newest_sessions(tools) -> dict[str, list]:
    """Per key, up to EXAMPLES_PER_TOOL sessions lacking it, the most recently started first."""
    rank = Window(
        RowNumber(),
        partition_by=F("key"),
        order_by=[F("score__session__started_at_us").desc(), F("score__session_id").desc()],
    )
    newest = tools.annotate(rank=rank).filter(rank__lte=EXAMPLES_PER_TOOL)
    examples = defaultdict(list)
    for key, session_id in newest.order_by("key", "rank").values_list("key", "score__session_id"):
        examples[key].append(session_id)
    return examples
