"""The statistics of agreement between two raters of the same sessions (the judge and a
reviewer, or two judges), and how sure each figure is: its 95 % bootstrap confidence
interval, withheld below a minimum of sessions. docs/insights.md, "How sure a figure is",
says what each means and why.

Reviews are written by people, so there are few: everything is plain Python (``random``
and ``statistics``), no statistics library.
"""

import functools
import random
import statistics
from collections import Counter
from collections.abc import Callable, Sequence

from django.conf import settings

from scoring import selectors

# The bootstrap: this many resamples of the sessions, from a generator with this seed, so
# that the same reviews always give the same interval (a page reload does not move it).
RESAMPLES = 1000
SEED = 32
# How many groups' intervals each process remembers (``cached_intervals``).
INTERVALS_REMEMBERED = 256
CONFIDENCE = 0.95

Statistic = Callable[[list], float | None]
# The score bands in order, and each total's band (totals are 0-100), looked up once: the
# bootstrap asks for the bands of the same totals a thousand times.
BAND_KEYS = [band.key for band in selectors.SCORE_BANDS]
BAND_OF_TOTAL = [selectors.band_of(total).key for total in range(101)]


def minimum_sessions() -> int:
    """Below this many (reviewed) sessions a figure is withheld as "too few reviews"
    (``SCORING_AGREEMENT_MINIMUM_SESSIONS``, 5 unless set): over four sessions one more
    moves ρ or an AUC by tenths, and a bootstrap of four sessions has almost nothing to
    resample."""
    return settings.SCORING_AGREEMENT_MINIMUM_SESSIONS


def too_few_reason(sessions: int, of: str = "reviews") -> str:
    """Why a group's figures are withheld, for the API's ``reason``: "too few reviews" (or
    "too few sessions", where nobody reviewed: two judges compared)."""
    counted = "1 session" if sessions == 1 else f"{sessions} sessions"
    return f"too few {of}: {counted}, a figure needs at least {minimum_sessions()}"


def bootstrap_intervals(
    units: Sequence, statistics_of: dict[str, Statistic], *, resamples: int = RESAMPLES, seed: int = SEED
) -> dict[str, tuple[float, float] | None]:
    """Each statistic's 95 % percentile bootstrap interval over ``units``.

    A *unit* is what is resampled: a session (with all its pairs, when several reviewers
    reviewed it, so that they move together). Each resample draws ``len(units)`` units with
    replacement, the same draws for every statistic; a statistic gets the drawn units as a
    list. The interval is the 2.5th and 97.5th percentiles of the resamples' values
    (interpolating linearly between the nearest ranks: ``statistics.quantiles`` inclusive,
    numpy's default). A resample where a statistic is undefined (None: a side without
    variance, say) is skipped for it; when more than half are, its interval is None, as it
    is with no unit.
    """
    draws = {name: [] for name in statistics_of}
    if units:
        generator = random.Random(seed)
        for _ in range(resamples):
            sample = generator.choices(units, k=len(units))
            for name, statistic in statistics_of.items():
                value = statistic(sample)
                if value is not None:
                    draws[name].append(value)
    # Cut the values in 40 parts: the first cut is the 2.5th percentile, the last the 97.5th.
    parts = round(2 / (1 - CONFIDENCE))
    intervals = {}
    for name, values in draws.items():
        if len(values) * 2 < resamples or not units:
            intervals[name] = None
        elif len(values) == 1:
            intervals[name] = (values[0], values[0])
        else:
            cuts = statistics.quantiles(values, n=parts, method="inclusive")
            intervals[name] = (cuts[0], cuts[-1])
    return intervals


@functools.lru_cache(maxsize=INTERVALS_REMEMBERED)
def cached_intervals(units: tuple, statistics_of: tuple[tuple[str, Statistic], ...]) -> dict:
    """``bootstrap_intervals`` remembered: the same units (hashable, in the order the caller
    puts them, which should not depend on the database's) and statistics (module-level
    functions) answer at once. Reviews change rarely and the insights page asks again at
    each load; the answer is the same either way (a fixed seed). Not to be changed."""
    return bootstrap_intervals(units, dict(statistics_of))


def paired_difference(
    units: Sequence, first: Statistic, second: Statistic, *, resamples: int = RESAMPLES, seed: int = SEED
) -> dict:
    """``first`` − ``second`` over the same units (two judges on the same sessions, say),
    with the 95 % bootstrap interval of the difference: each resample draws the sessions
    once and computes both, so what the sessions share cancels out. ``significant``: the
    interval leaves out 0. The difference and its interval are None where either side is
    undefined."""

    def difference(sample: list) -> float | None:
        a, b = first(sample), second(sample)
        return None if a is None or b is None else a - b

    whole = difference(list(units))
    interval = bootstrap_intervals(units, {"difference": difference}, resamples=resamples, seed=seed)[
        "difference"
    ]
    return {
        "difference": whole,
        "ci": interval,
        "significant": interval is not None and (interval[0] > 0 or interval[1] < 0),
    }


def mean_abs_diff(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Mean of |x − y| over the pairs; None with none."""
    if not xs:
        return None
    return statistics.fmean(abs(x - y) for x, y in zip(xs, ys, strict=True))


def spearman_rho(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation: Pearson's correlation of the ranks, tied values
    sharing their average rank. None with fewer than two pairs or when either side
    does not vary (every value the same), where it is undefined."""
    if len(xs) < 2:
        return None
    try:
        return statistics.correlation(average_ranks(xs), average_ranks(ys))
    except statistics.StatisticsError:  # a side that does not vary
        return None


def average_ranks(values: Sequence[float]) -> list[float]:
    """Each value's rank (1 for the smallest); tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        value, end = values[order[start]], start + 1
        while end < len(order) and values[order[end]] == value:
            end += 1
        rank = (start + end + 1) / 2  # the mean of ranks start + 1 to end
        for position in order[start:end]:
            ranks[position] = rank
        start = end
    return ranks


# How far apart two ordered categories i and j are, over k categories.
WEIGHTS = {
    "linear": lambda i, j, k: abs(i - j) / (k - 1),
    "quadratic": lambda i, j, k: ((i - j) / (k - 1)) ** 2,
}


def weighted_kappa(
    first: Sequence[str], second: Sequence[str], categories: Sequence[str], weights: str = "linear"
) -> float | None:
    """Cohen's weighted κ between two raters' ordered categories.

    A disagreement weighs how far apart the two are over the most they can be: linearly
    (``|i − j| / (k − 1)``: with three bands, a neighbour 0.5, opposite ends 1) or
    quadratically (its square: a neighbour 0.25). κ = 1 − observed / expected weighted
    disagreement, the expected one from each rater's own shares. None with fewer than two
    pairs, or when the expected disagreement is 0 (both raters put everything in the same
    one category), where κ is undefined.
    """
    if len(first) < 2:
        return None
    distance, count, span = WEIGHTS[weights], len(first), len(categories)
    weight = {
        (a, b): distance(i, j, span) for i, a in enumerate(categories) for j, b in enumerate(categories)
    }
    pair_counts = Counter(zip(first, second, strict=True))
    observed = sum(weight[pair] * pairs for pair, pairs in pair_counts.items()) / count
    first_counts, second_counts = Counter(first), Counter(second)
    expected = sum(
        weight[a, b] * first_counts[a] * second_counts[b] for a in first_counts for b in second_counts
    ) / (count * count)
    if expected == 0:
        return None
    return 1 - observed / expected


def confusion_table(
    rows: Sequence[str],
    columns: Sequence[str],
    row_categories: Sequence[str],
    column_categories: Sequence[str],
) -> list[dict]:
    """How many pairs have each (row category, column category): one dict per row category,
    in order, ``{"row": category, "counts": {column category: pairs}}``, every cell present."""
    cells = Counter(zip(rows, columns, strict=True))
    return [
        {"row": row, "counts": {column: cells[row, column] for column in column_categories}}
        for row in row_categories
    ]
