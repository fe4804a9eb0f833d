import math
import random
import statistics

import pytest

from scoring.insights.confidence import (
    RESAMPLES,
    SEED,
    average_ranks,
    bootstrap_intervals,
    cached_intervals,
    confusion_table,
    mean_abs_diff,
    minimum_sessions,
    paired_difference,
    spearman_rho,
    too_few_reason,
    weighted_kappa,
)

BANDS = ["poor", "weak", "good"]


def mean_of(sample: list) -> float:
    return statistics.fmean(sample)


def test_tied_values_share_their_average_rank():
    assert average_ranks([30, 10, 20, 20]) == [4.0, 1.0, 2.5, 2.5]
    assert average_ranks([7, 7, 7]) == [2.0, 2.0, 2.0]


def test_spearman_with_ties_is_pearson_of_average_ranks():
    # Ranks of ys: [1, 2, 3.5, 5, 3.5]; deviations products sum to 8, squares to 10 and 9.5.
    assert spearman_rho([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))


def test_spearman_of_monotonic_pairs_is_one_or_minus_one():
    assert spearman_rho([10, 40, 90], [1, 2, 3]) == pytest.approx(1.0)
    assert spearman_rho([10, 40, 90], [3, 2, 1]) == pytest.approx(-1.0)


@pytest.mark.parametrize(
    ("xs", "ys"),
    [([], []), ([70], [20]), ([70, 70, 70], [10, 50, 90]), ([10, 50, 90], [60, 60, 60])],
)
def test_spearman_is_undefined_below_two_pairs_or_without_variance(xs, ys):
    assert spearman_rho(xs, ys) is None


def test_kappa_of_the_textbook_two_category_example_is_0_4():
    # Cohen's classic table: 20 both yes, 5 and 10 split, 15 both no (50 items): κ = 0.4.
    # Two bands at the ends of the scale weigh a disagreement 1, as unweighted κ does.
    first = ["good"] * 20 + ["good"] * 5 + ["poor"] * 10 + ["poor"] * 15
    second = ["good"] * 20 + ["poor"] * 5 + ["good"] * 10 + ["poor"] * 15
    assert weighted_kappa(first, second, BANDS) == pytest.approx(0.4)


def test_kappa_weighs_neighbouring_bands_linearly():
    # Observed disagreement 1/6 (two neighbours at 0.5), expected 4/9: κ = 1 − 9/24 = 0.625
    # (quadratic weights would give 0.75).
    judge = ["poor", "poor", "weak", "weak", "good", "good"]
    human = ["poor", "weak", "weak", "good", "good", "good"]
    assert weighted_kappa(judge, human, BANDS) == pytest.approx(0.625)


def test_kappa_of_full_agreement_is_one_and_of_opposite_ends_below_zero():
    assert weighted_kappa(["poor", "good", "weak"], ["poor", "good", "weak"], BANDS) == pytest.approx(1.0)
    assert weighted_kappa(["poor", "good"], ["good", "poor"], BANDS) == pytest.approx(-1.0)


@pytest.mark.parametrize(
    ("first", "second"),
    [([], []), (["poor"], ["good"]), (["weak", "weak"], ["weak", "weak"])],
)
def test_kappa_is_undefined_below_two_pairs_or_when_both_raters_use_one_band(first, second):
    assert weighted_kappa(first, second, BANDS) is None


def test_quadratic_weights_count_a_neighbouring_band_as_a_quarter():
    # Observed disagreement: two neighbours at 0.25 over six pairs, 1/12. Expected, from the
    # judge's shares (1/3 each) and the reviewer's (1/6, 2/6, 3/6): (3.5 + 1 + 1.5) / 18 = 1/3.
    # κ = 1 − (1/12) / (1/3) = 0.75.
    judge = ["poor", "poor", "weak", "weak", "good", "good"]
    human = ["poor", "weak", "weak", "good", "good", "good"]
    assert weighted_kappa(judge, human, BANDS, weights="quadratic") == pytest.approx(0.75)


def test_with_two_categories_every_weighting_is_cohens_unweighted_kappa():
    first = ["good"] * 20 + ["good"] * 5 + ["poor"] * 10 + ["poor"] * 15
    second = ["good"] * 20 + ["poor"] * 5 + ["good"] * 10 + ["poor"] * 15
    assert weighted_kappa(first, second, ["poor", "good"], weights="quadratic") == pytest.approx(0.4)


def test_mean_abs_diff_is_the_mean_distance_in_points():
    assert mean_abs_diff([70, 40, 90], [60, 50, 90]) == pytest.approx(20 / 3)
    assert mean_abs_diff([], []) is None


def test_the_confusion_table_has_every_cell_rows_in_order():
    table = confusion_table(["good", "poor", "good"], ["good", "weak", "poor"], BANDS, BANDS)
    assert table == [
        {"row": "poor", "counts": {"poor": 0, "weak": 1, "good": 0}},
        {"row": "weak", "counts": {"poor": 0, "weak": 0, "good": 0}},
        {"row": "good", "counts": {"poor": 1, "weak": 0, "good": 1}},
    ]


# --- The bootstrap --------------------------------------------------------------------------


def test_the_interval_cuts_the_resamples_2_5_percent_from_each_end():
    # Each resample's mean, drawn as the function does: its 2.5th and 97.5th percentiles
    # (linear between ranks, as numpy's default), computed here by hand.
    units = [2, 3, 5, 8, 13, 21, 34]
    generator = random.Random(SEED)
    means = sorted(statistics.fmean(generator.choices(units, k=len(units))) for _ in range(RESAMPLES))
    low = means[24] + 0.975 * (means[25] - means[24])  # rank 999 × 0.025 = 24.975
    high = means[974] + 0.025 * (means[975] - means[974])  # 974.025
    assert bootstrap_intervals(units, {"mean": mean_of})["mean"] == pytest.approx((low, high))


def test_the_interval_of_a_proportion_is_close_to_the_normal_approximation():
    # 200 sessions, half agreeing: the textbook interval is 0.5 ± 1.96 √(0.25 / 200) = ± 0.069.
    units = [1, 0] * 100
    low, high = bootstrap_intervals(units, {"share": mean_of})["share"]
    half_width = 1.96 * math.sqrt(0.25 / 200)
    assert low == pytest.approx(0.5 - half_width, abs=0.012)
    assert high == pytest.approx(0.5 + half_width, abs=0.012)


def test_the_interval_is_the_same_every_time_and_moves_with_the_seed():
    generator = random.Random(7)
    units = [generator.randint(0, 100) for _ in range(30)]
    first = bootstrap_intervals(units, {"mean": mean_of})
    assert bootstrap_intervals(units, {"mean": mean_of}) == first
    assert bootstrap_intervals(units, {"mean": mean_of}, seed=1) != first
    low, high = first["mean"]
    assert low < statistics.fmean(units) < high


def test_every_statistic_reads_the_same_resamples():
    # The second statistic is the first plus 10 on every resample: its interval is shifted alike.
    units = [3, 9, 12, 40, 41, 70]
    intervals = bootstrap_intervals(units, {"mean": mean_of, "shifted": lambda sample: mean_of(sample) + 10})
    assert intervals["shifted"] == pytest.approx((intervals["mean"][0] + 10, intervals["mean"][1] + 10))


def test_a_constant_figure_has_a_zero_width_interval():
    assert bootstrap_intervals([4, 4, 4], {"mean": mean_of})["mean"] == (4, 4)


def test_units_are_resampled_whole():
    # Each unit is a session with its pairs; a statistic of the drawn sessions sees them together.
    sessions = [[(1, 1), (1, 1)], [(2, 2)], [(3, 3), (3, 3), (3, 3)]]
    seen_sizes = set()

    def pairs_per_session(sample):
        seen_sizes.update(len(session) for session in sample)
        return 1.0

    bootstrap_intervals(sessions, {"sizes": pairs_per_session}, resamples=50)
    assert seen_sizes == {1, 2, 3}


def test_an_interval_is_none_when_the_figure_is_undefined_in_most_resamples_or_without_units():
    # A figure defined only on resamples that mostly draw the largest value: few of them.
    rare = {"rare": lambda sample: mean_of(sample) if mean_of(sample) > 3 else None}
    assert bootstrap_intervals([1, 2, 3, 4], rare)["rare"] is None
    # ρ of three sessions: undefined only when a resample draws one session thrice (1/9).
    rho = {"rho": lambda sample: spearman_rho(*zip(*sample, strict=True))}
    assert bootstrap_intervals([(10, 1), (50, 3), (90, 2)], rho)["rho"] is not None
    assert bootstrap_intervals([], {"mean": mean_of})["mean"] is None


def test_the_resamples_are_as_documented():
    calls = []
    bootstrap_intervals([1, 2], {"count": lambda sample: calls.append(1) or 0.0})
    assert len(calls) == RESAMPLES == 1000


# --- Paired differences (a candidate against the current judge, on the same sessions) ---------


def test_a_paired_difference_that_holds_on_every_session_is_significant():
    # The candidate is 5 points nearer the reviewer on every session: the difference is −5 on
    # every resample, whatever the sessions' own spread.
    sessions = [(reviewer, reviewer + 12, reviewer + 7) for reviewer in (10, 35, 50, 62, 80, 95)]

    def current(sample):
        return mean_abs_diff([s[0] for s in sample], [s[1] for s in sample])

    def candidate(sample):
        return mean_abs_diff([s[0] for s in sample], [s[2] for s in sample])

    result = paired_difference(sessions, candidate, current)
    assert result["difference"] == pytest.approx(-5)
    assert result["ci"] == pytest.approx((-5, -5))
    assert result["significant"] is True


def test_a_paired_difference_within_the_noise_is_not_significant():
    generator = random.Random(3)
    sessions = [generator.choice([-4, 4]) for _ in range(20)]
    result = paired_difference(sessions, mean_of, lambda sample: 0.0)
    low, high = result["ci"]
    assert low < 0 < high and result["significant"] is False
    assert result["difference"] == pytest.approx(statistics.fmean(sessions))


def test_a_paired_difference_of_an_undefined_figure_is_none():
    result = paired_difference([1, 2, 3], lambda sample: None, mean_of)
    assert result == {"difference": None, "ci": None, "significant": False}


def test_the_too_few_reason_says_how_many_and_how_many_are_needed():
    assert too_few_reason(3) == f"too few reviews: 3 sessions, a figure needs at least {minimum_sessions()}"
    assert too_few_reason(2, "sessions").startswith("too few sessions: 2 sessions")
    assert too_few_reason(1).startswith("too few reviews: 1 session,")


def test_remembered_intervals_are_the_bootstrap_s_and_are_computed_once():
    cached_intervals.cache_clear()
    units = (3, 9, 12, 40, 41, 70)
    statistics_of = (("mean", mean_of),)
    first = cached_intervals(units, statistics_of)
    assert first == bootstrap_intervals(units, {"mean": mean_of})
    assert cached_intervals(units, statistics_of) is first
    assert cached_intervals.cache_info().hits == 1
