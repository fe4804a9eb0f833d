"""The missing-tools backlog: which tools the judge says the selected sessions lacked, most
often first (docs/insights.md, "Missing-tools backlog"). Counted from ``MissingTool`` rows
of each session's newest completed score, by the normalised ``key``."""

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from scoring.insights.filters import InsightFilters, latest_completed_scores, scored_sessions
from scoring.models import MissingTool

EXAMPLES_PER_TOOL = 5
# How many of the newest (session, tool) rows are read for the examples before a window
# ranks the rows of the tools still short of them.
NEWEST_ROWS = 2000


def missing_tools_backlog(filters: InsightFilters, limit: int | None = None) -> list[dict]:
    """One row per missing tool, the tools lacked by most sessions first (then by key),
    at most ``limit`` of them.

    A score names each key once (``uq_score_missing_tools_key``), so its rows are sessions:
    one grouped query counts them per key, spelling, alert type and chain, with the sum of
    their totals (``_tool_cells``), and the rows per key are added up here.
    """
    by_key: dict[str, _Tool] = defaultdict(_Tool)
    for key, name, alert_type, chain_id, sessions, score_sum in _tool_cells(filters):
        tool = by_key[key]
        tool.sessions += sessions
        tool.score_sum += score_sum
        tool.spellings[name] += sessions
        tool.alert_types[alert_type] += sessions
        tool.chains[chain_id] += sessions
    ranked = sorted(by_key, key=lambda key: (-by_key[key].sessions, key))[:limit]
    if not ranked:
        return []
    total_sessions = scored_sessions(filters).count()
    examples = _newest_sessions(
        latest_completed_scores(filters), {key: by_key[key].sessions for key in ranked}, every_key=limit is None
    )
    return [
        {
            "tool": _by_frequency(by_key[key].spellings)[0],
            "key": key,
            "sessions": by_key[key].sessions,
            "share": round(by_key[key].sessions / total_sessions, 4),
            "mean_score": round(by_key[key].score_sum / by_key[key].sessions, 2),
            "alert_types": _by_frequency(by_key[key].alert_types),
            "chains": _by_frequency(by_key[key].chains),
            "example_session_ids": examples[key],
        }
        for key in ranked
    ]


def _tool_cells(filters: InsightFilters) -> list[tuple]:
    """(key, spelling, alert type, chain, sessions, sum of their totals) for each such
    combination among the tools of the selected sessions' newest completed scores.

    Grouped on the tools' own copies of their score's total and session's alert type and
    chain (``MissingTool``): the sessions are read only for the ids of those scores (from
    an index of them), not joined row by row. Written as a join on those ids, which
    PostgreSQL runs in parallel, where the ORM's ``score_id IN (...)`` semi-join runs on
    one core: on 100,000 sessions 95 against 140 ms (docs/performance.md).
    """
    newest, params = scored_sessions(filters).order_by().values("latest_completed_score_id").query.sql_with_params()
    sql = f"""
        SELECT tool.key, tool.name, tool.alert_type, tool.chain_id, COUNT(*), SUM(tool.total_score)
        FROM ({newest}) AS newest
        JOIN {MissingTool._meta.db_table} AS tool ON tool.score_id = newest.latest_completed_score_id
        GROUP BY tool.key, tool.name, tool.alert_type, tool.chain_id
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


@dataclass
class _Tool:
    """What the grouped rows say of one key."""

    sessions: int = 0
    score_sum: int = 0
    spellings: Counter = field(default_factory=Counter)
    alert_types: Counter = field(default_factory=Counter)
    chains: Counter = field(default_factory=Counter)


def _by_frequency(counter: Counter) -> list[str]:
    """The values, the most frequent first (then in sort order); empty values (a session
    without a chain) left out."""
    return sorted((value for value in counter if value), key=lambda value: (-counter[value], value))


def _newest_sessions(selected, sessions_per_key: dict[str, int], every_key: bool) -> dict[str, list]:
    """Per key of ``sessions_per_key`` (how many sessions each has), up to EXAMPLES_PER_TOOL
    of the ``selected`` scores' sessions lacking it, the most recently started first.

    The newest NEWEST_ROWS (session, tool) rows, read through the sessions' start index, give
    the common tools theirs: those rows begin every key's own newest-first list. Only the
    keys still short of examples are ranked by a window over all their rows. (Each query
    filters the tools in one filter() call, so that it joins them once.)
    """
    newest_first = [F("session__started_at_us").desc(), F("session_id").desc()]
    keys = list(sessions_per_key)
    with_tools = (
        selected.filter(missing_tools__isnull=False)
        if every_key
        else selected.filter(missing_tools__key__in=keys)
    )
    rows = list(
        with_tools.order_by(*newest_first).values_list("missing_tools__key", "session_id")[:NEWEST_ROWS]
    )
    examples = defaultdict(list)
    for key, session_id in rows:
        if len(examples[key]) < EXAMPLES_PER_TOOL:
            examples[key].append(session_id)
    short = [key for key in keys if len(examples[key]) < min(sessions_per_key[key], EXAMPLES_PER_TOOL)]
    if short:
        rank = Window(RowNumber(), partition_by=F("missing_tools__key"), order_by=newest_first)
        ranked = (
            selected.filter(missing_tools__key__in=short)
            .annotate(rank=rank)
            .filter(rank__lte=EXAMPLES_PER_TOOL)
        )
        for key in short:
            examples[key] = []
        for key, session_id in ranked.order_by("missing_tools__key", "rank").values_list(
            "missing_tools__key", "session_id"
        ):
            examples[key].append(session_id)
    return examples
