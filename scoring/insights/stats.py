"""Fleet statistics: how the selected sessions scored, one row per group (alert type,
chain, agent, judge model, criteria hash, week or day). docs/insights.md, "Fleet
statistics", says what each figure means.

Scores are integers 0-100, so the database answers a histogram (sessions per group and
total) and the median and quartiles are read from it here: the same figures on SQLite
and PostgreSQL, from a few hundred rows whatever the number of sessions.
"""

import datetime as dt
import math
from bisect import bisect_right
from collections import defaultdict
from decimal import Decimal
from itertools import accumulate

from django.db import connection
from django.db.models import BigIntegerField, Count, ExpressionWrapper, F, Q, Sum, Value

from scoring import selectors
from scoring.insights.agreement import sortable
from scoring.insights.confidence import BAND_OF_TOTAL
from scoring.insights.filters import InsightFilters, scored_sessions, scorings, sessions_with_scorings
from scoring.judge.replies import DIMENSIONS
from scoring.judge.sampling import judge_label
from scoring.models import ScoringStatus, SessionScore

COST_QUANTUM = Decimal(1).scaleb(-SessionScore._meta.get_field("cost_usd").decimal_places)
DAY_US = 86_400_000_000
EPOCH = dt.date(1970, 1, 1)


def _start_day(session: str) -> ExpressionWrapper:
    """Days since the epoch of the session's start (UTC), from a model whose path to the
    session is ``session``; sessions start after 1970, so the databases' integer division
    (which truncates) is the floor."""
    return ExpressionWrapper(F(f"{session}started_at_us") / Value(DAY_US), output_field=BigIntegerField())


def _start_week(session: str) -> ExpressionWrapper:
    # ISO weeks start on Monday; 1970-01-01 was a Thursday, so day d is in week (d + 3) // 7,
    # which starts on day 7w - 3.
    return ExpressionWrapper((_start_day(session) + Value(3)) / Value(7), output_field=BigIntegerField())


def _day_key(day: int) -> str:
    return (EPOCH + dt.timedelta(days=day)).isoformat()


def _week_key(week: int) -> str:
    return _day_key(7 * week - 3)


# group_by: (the group's values on a session, through its copy of its newest completed
# score; the values on a scoring; how the values are shown as the row's key). A judge is its
# model and the sampling settings it was sent (scoring.judge.sampling).
GROUPINGS = {
    "alert_type": ((F("alert_type"),), (F("session__alert_type"),), str),
    "chain_id": ((F("chain_id"),), (F("session__chain_id"),), str),
    "agent_type": ((F("agent_type"),), (F("session__agent_type"),), str),
    "judge_model": (
        (F("latest_completed_judge_model"), F("latest_completed_judge_temperature"), F("latest_completed_judge_seed")),
        (F("judge_model"), F("judge_temperature"), F("judge_seed")),
        judge_label,
    ),
    "prompt_hash": ((F("latest_completed_prompt_hash"),), (F("prompt_hash"),), str),
    "week": ((_start_week(""),), (_start_week("session__"),), _week_key),
    "day": ((_start_day(""),), (_start_day("session__"),), _day_key),
}


def _group_columns(values: tuple) -> dict:
    """A grouping's values as named columns of a query: group_0, group_1, ..."""
    return {f"group_{index}": value for index, value in enumerate(values)}
# Groupings by a figure of each scoring: their per-attempt totals are summed over the
# scorings themselves, not over the sessions' sums.
PER_SCORING = {"judge_model", "prompt_hash"}


class InvalidGrouping(ValueError):
    """A group_by that is not one of GROUPINGS; the message says which are."""


def fleet_stats(filters: InsightFilters, group_by: str) -> list[dict]:
    """One row per group, ordered by key (weeks and days in time order).

    Each selected session counts once, by its newest completed score (``sessions``, the
    score figures, ``bands``, ``dimension_means``); ``failed_scorings``, the tokens and
    the cost count every scoring of the group's sessions (failed ones and the ones a
    re-score replaced too): what the judge was asked and what it cost. A group with
    failed scorings but no completed score has a row with ``sessions`` 0, and so has one whose
    completed scores all lack an evaluation (left out unless the filters include them).
    """
    if group_by not in GROUPINGS:
        raise InvalidGrouping(f"group_by: must be one of {', '.join(GROUPINGS)}, not {group_by!r}")
    session_values, _, key_of = GROUPINGS[group_by]
    # The dimension sums are per group: in the attempts' query when it reads the sessions,
    # so that the histogram's cells (some 20,000 for a group by day) are counts alone.
    sums_from_sessions = _attempts_from_sessions(filters, group_by)
    rows: dict = {}
    histograms = _score_histograms(filters, session_values, with_dimensions=not sums_from_sessions)
    for group, histogram, dimension_totals in histograms:
        rows[group] = _score_figures(histogram, dimension_totals)
    for attempts in _attempt_totals(filters, group_by, sums_from_sessions):
        group = tuple(attempts.pop(column) for column in _group_columns(session_values))
        if group not in rows:
            rows[group] = _score_figures({}, {})
        if sums_from_sessions:
            dimension_totals = {
                name: (attempts.pop(f"{name}__sum"), attempts.pop(f"{name}__n")) for name in DIMENSIONS
            }
            rows[group]["dimension_means"] = _dimension_means(dimension_totals)
        rows[group].update(attempts)
    ordered = sorted(rows, key=lambda group: tuple(map(sortable, group)))
    return [{"key": key_of(*group), **rows[group]} for group in ordered]


def _attempts_from_sessions(filters: InsightFilters, group_by: str) -> bool:
    """Whether the per-attempt totals are read from the sessions' sums over their scorings
    (``scorings_*``); not when a grouping or filter is by a figure of each scoring."""
    return group_by not in PER_SCORING and filters.prompt_hash is None


def _dimension_sums() -> dict:
    """Each dimension's points summed and counted over sessions' newest completed scores:
    null when the judge gave the criterion no points, or the session has no completed
    score, and the sum and count skip it."""
    sums = {}
    for name in DIMENSIONS:
        sums[f"{name}__sum"] = Sum(f"latest_completed_{name}")
        sums[f"{name}__n"] = Count(f"latest_completed_{name}")
    return sums


def _score_histograms(filters: InsightFilters, values: tuple, with_dimensions: bool):
    """(group, {total: sessions}, {dimension: (sum, count)}) for each group (a tuple of its
    ``values``) with a completed score; the dimension sums only ``with_dimensions`` (else empty)."""
    dimension_sums = _dimension_sums() if with_dimensions else {}
    columns = _group_columns(values)
    cells = (
        scored_sessions(filters)
        .values("latest_completed_total_score", **columns)
        .annotate(sessions=Count("pk"), **dimension_sums)
        .values_list(*columns, "latest_completed_total_score", "sessions", *dimension_sums)
        .order_by()
    )
    # Read with a bare cursor: a group by day has some 20,000 cells, and Django's
    # per-value converters (float() of floats) cost more than the query's own transfer.
    with connection.cursor() as cursor:
        cursor.execute(*cells.query.sql_with_params())
        rows = cursor.fetchall()
    cells_of = defaultdict(list)
    width = len(columns)
    for row in rows:
        cells_of[row[:width]].append(row[width:])
    histograms = []
    for group, group_cells in cells_of.items():
        # Column by column (built-in sums), not cell by cell: a day's cells are thousands.
        totals, sessions, *points = zip(*group_cells, strict=True)
        dimension_totals = {
            name: (sum(filter(None, points[2 * index])), sum(points[2 * index + 1]))
            for index, name in enumerate(DIMENSIONS)
            if with_dimensions
        }
        histograms.append((group, dict(zip(totals, sessions, strict=True)), dimension_totals))
    return histograms


def _attempt_totals(filters: InsightFilters, group_by: str, from_sessions: bool) -> list[dict]:
    """Per group: failed scorings, tokens and cost of every scoring (cost with the column's
    decimal places, as PostgreSQL sums it; SQLite drops trailing zeros). ``from_sessions``:
    from the sessions' sums over their scorings (``scorings_*``), with the dimension sums
    (``_dimension_sums``: the sessions without a completed score have none); else from
    the scorings."""
    session_values, scoring_values, _ = GROUPINGS[group_by]
    if not from_sessions:
        rows, values, sums = scorings(filters), scoring_values, {
            "failed_scorings": Count("pk", filter=Q(status=ScoringStatus.FAILED)),
            "input_tokens": Sum("input_tokens"),
            "output_tokens": Sum("output_tokens"),
            "cost_usd": Sum("cost_usd"),
            "cached_input_tokens": Sum("cached_input_tokens"),
        }
    else:
        rows, values, sums = sessions_with_scorings(filters), session_values, {
            "failed_scorings": Sum("scorings_failed"),
            "input_tokens": Sum("scorings_input_tokens"),
            "output_tokens": Sum("scorings_output_tokens"),
            "cost_usd": Sum("scorings_cost_usd"),
            "cached_input_tokens": Sum("scorings_cached_input_tokens"),
            **_dimension_sums(),
        }
    # The columns are named as the sessions' are, so that ``fleet_stats`` reads both alike.
    totals = list(rows.values(**_group_columns(values)).annotate(**sums).order_by())
    for row in totals:
        if row["cost_usd"] is not None:
            row["cost_usd"] = Decimal(row["cost_usd"]).quantize(COST_QUANTUM)
    return totals


def _score_figures(histogram: dict[int, int], dimension_totals: dict) -> dict:
    """A row's figures from its sessions' totals ({total: sessions}) and dimension sums."""
    values = sorted(histogram.items())
    sessions = sum(histogram.values())
    return {
        "sessions": sessions,
        "mean_score": round(sum(total * count for total, count in values) / sessions, 2)
        if sessions
        else None,
        "median_score": percentile(values, 0.5),
        "q1_score": percentile(values, 0.25),
        "q3_score": percentile(values, 0.75),
        "bands": _bands(values),
        "failed_scorings": 0,
        "dimension_means": _dimension_means(dimension_totals),
        "input_tokens": None,
        "output_tokens": None,
        "cost_usd": None,
        "cached_input_tokens": None,
    }


def _dimension_means(dimension_totals: dict) -> dict:
    """Each dimension's mean from its (sum, count), or None with no points."""
    return {
        name: round(points / count, 2) if count else None
        for name, (points, count) in ((name, dimension_totals.get(name, (0, 0))) for name in DIMENSIONS)
    }


def _bands(counted_values: list[tuple[int, int]]) -> dict[str, int]:
    """Sessions per band of their total, from (total, sessions) pairs; every band present."""
    bands = {band.key: 0 for band in selectors.SCORE_BANDS}
    for total, count in counted_values:
        bands[BAND_OF_TOTAL[total]] += count
    return bands


def percentile(counted_values: list[tuple[int, int]], fraction: float) -> float | None:
    """The ``fraction`` percentile of values given as sorted (value, count) pairs, by linear
    interpolation between the two nearest ranks (PostgreSQL's percentile_cont, Python's
    ``statistics.quantiles(method="inclusive")``, numpy's default); None with no values."""
    # ends[i]: how many values the first i + 1 pairs stand for.
    ends = list(accumulate(count for _, count in counted_values))
    if not ends:
        return None
    position = (ends[-1] - 1) * fraction
    below = math.floor(position)

    def at_rank(rank: int) -> int:  # the value at this 0-based rank of the sorted values
        return counted_values[bisect_right(ends, rank)][0]

    lower, upper = at_rank(below), at_rank(min(below + 1, ends[-1] - 1))
    return lower + (position - below) * (upper - lower)
