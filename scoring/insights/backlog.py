"""The missing-tools backlog: which tools the judge says the selected sessions lacked, most
often first (docs/insights.md, "Missing-tools backlog"). Counted from ``MissingTool`` rows
of each session's newest completed score, by the normalised ``key``."""

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.db import connection

from scoring.insights.filters import InsightFilters, scored_sessions
from scoring.models import AlertSession, MissingTool

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
    examples = _newest_sessions(filters, {key: by_key[key].sessions for key in ranked}, every_key=limit is None)
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


def _selected_tools(filters: InsightFilters) -> tuple[str, list]:
    """SQL (with its parameters) of a FROM clause joining the selected sessions (``newest``:
    their id, start and newest completed score's id) to that score's tools (``tool``).

    A join on the sessions' copy of that id, not the ORM's ``score_id IN (...)`` semi-join
    through the scores: PostgreSQL runs the join in parallel and reads the sessions' start
    from the same row, on 100,000 sessions 95 against 140 ms for the grouped query and 6
    against 25 ms for the newest rows (docs/performance.md).
    """
    sessions = scored_sessions(filters).order_by().values("session_id", "started_at_us", "latest_completed_score_id")
    newest, params = sessions.query.sql_with_params()
    tools = MissingTool._meta.db_table
    return f"({newest}) AS newest JOIN {tools} AS tool ON tool.score_id = newest.latest_completed_score_id", list(params)


def _fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _tool_cells(filters: InsightFilters) -> list[tuple]:
    """(key, spelling, alert type, chain, sessions, sum of their totals) for each such
    combination among the tools of the selected sessions' newest completed scores.

    Grouped on the tools' own copies of their score's total and session's alert type and
    chain (``MissingTool``): the sessions are read only for the ids of those scores.
    """
    selected, params = _selected_tools(filters)
    return _fetch(
        f"""SELECT tool.key, tool.name, tool.alert_type, tool.chain_id, COUNT(*), SUM(tool.total_score)
        FROM {selected} GROUP BY tool.key, tool.name, tool.alert_type, tool.chain_id""",
        params,
    )


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


def _newest_sessions(filters: InsightFilters, sessions_per_key: dict[str, int], every_key: bool) -> dict[str, list]:
    """Per key of ``sessions_per_key`` (how many sessions each has), up to EXAMPLES_PER_TOOL
    of the selected sessions lacking it, the most recently started first.

    The newest NEWEST_ROWS (session, tool) rows, read through the sessions' start index, give
    the common tools theirs: those rows begin every key's own newest-first list. Only the
    keys still short of examples are ranked by a window over all their rows.
    """
    selected, params = _selected_tools(filters)
    newest_first = "newest.started_at_us DESC, newest.session_id DESC"
    keys = list(sessions_per_key)
    of_keys = f"tool.key IN ({', '.join(['%s'] * len(keys))})"
    rows = _fetch(
        f"""SELECT tool.key, newest.session_id FROM {selected} {"" if every_key else f"WHERE {of_keys}"}
        ORDER BY {newest_first} LIMIT {NEWEST_ROWS}""",
        params if every_key else [*params, *keys],
    )
    examples = defaultdict(list)
    for key, session_id in rows:
        if len(examples[key]) < EXAMPLES_PER_TOOL:
            examples[key].append(session_id)
    short = [key for key in keys if len(examples[key]) < min(sessions_per_key[key], EXAMPLES_PER_TOOL)]
    if short:
        of_keys = f"tool.key IN ({', '.join(['%s'] * len(short))})"
        ranked = _fetch(
            f"""SELECT key, session_id FROM (
                SELECT tool.key AS key, newest.session_id AS session_id,
                    ROW_NUMBER() OVER (PARTITION BY tool.key ORDER BY {newest_first}) AS rank
                FROM {selected} WHERE {of_keys}
            ) AS ranked WHERE rank <= {EXAMPLES_PER_TOOL} ORDER BY key, rank""",
            [*params, *short],
        )
        for key in short:
            examples[key] = []
        for key, session_id in ranked:
            examples[key].append(session_id)
    # As the ORM reads them (SQLite keeps UUIDs as text).
    to_uuid = AlertSession._meta.pk.to_python
    return {key: [to_uuid(session_id) for session_id in ids] for key, ids in examples.items()}
