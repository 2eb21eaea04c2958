"""torchpace.stats, each estimator against values from a table or worked by hand."""

import math
import random
import statistics

import pytest

from torchpace import stats

# Lower-tail critical values of Wilcoxon's signed-rank statistic W+ (the largest w with
# P(W+ <= w) <= alpha, one-sided), as printed in the usual tables (e.g. Hollander & Wolfe,
# Nonparametric Statistical Methods, table A.4); None: no w is that unlikely at this n.
CRITICAL = {
    # n: alpha 0.05, 0.025, 0.01, 0.005
    5: (0, None, None, None),
    6: (2, 0, None, None),
    7: (3, 2, 0, None),
    8: (5, 3, 1, 0),
    9: (8, 5, 3, 1),
    10: (10, 8, 5, 3),
}
# Exact tail probabilities P(W+ <= w) from the same tables, four decimals.
TAILS = {
    (5, 0): 0.0312,
    (5, 1): 0.0625,
    (6, 2): 0.0469,
    (6, 3): 0.0781,
    (7, 3): 0.0391,
    (7, 4): 0.0547,
    (8, 5): 0.0391,
    (8, 6): 0.0547,
    (9, 8): 0.0488,
    (9, 9): 0.0645,
    (10, 10): 0.0420,
    (10, 11): 0.0527,
}


@pytest.mark.parametrize("n", sorted(CRITICAL))
def test_the_signed_rank_cdf_matches_the_printed_critical_values(n):
    cdf = stats.signed_rank_cdf(n)
    assert len(cdf) == n * (n + 1) // 2 + 1
    assert cdf[-1] == 1.0
    for alpha, expected in zip((0.05, 0.025, 0.01, 0.005), CRITICAL[n], strict=True):
        below = [w for w, p in enumerate(cdf) if p <= alpha]
        assert (below[-1] if below else None) == expected, (n, alpha)


@pytest.mark.parametrize(("n", "w"), sorted(TAILS))
def test_the_signed_rank_cdf_matches_the_printed_tail_probabilities(n, w):
    assert stats.signed_rank_cdf(n)[w] == pytest.approx(TAILS[(n, w)], abs=1e-4)


def test_the_signed_rank_cdf_of_three_pairs_by_hand():
    # 8 equally likely sign patterns of ranks 1, 2, 3: sums 0, 1, 2, 3, 3, 4, 5, 6
    assert stats.signed_rank_cdf(3) == pytest.approx([k / 8 for k in (1, 2, 3, 5, 6, 7, 8)])


def test_walsh_averages_are_every_pair_mean_with_each_value_itself():
    assert stats.walsh_averages([1.0, 2.0, 10.0]) == [1.0, 1.5, 2.0, 5.5, 6.0, 10.0]


def test_hodges_lehmann_of_small_samples_by_hand():
    # Walsh averages of 1, 2, 10: 1, 1.5, 2, 5.5, 6, 10: median 3.75
    assert stats.hodges_lehmann([1.0, 2.0, 10.0]) == 3.75
    # 1, 2, 3, 4, 100: fifteen Walsh averages, the eighth smallest is 3 (the mean is 22)
    assert stats.hodges_lehmann([1.0, 2.0, 3.0, 4.0, 100.0]) == 3.0
    assert stats.hodges_lehmann([5.0]) == 5.0


def test_the_signed_rank_interval_takes_the_tables_order_statistics():
    # four values: all the same sign has probability 1/16 > 5%: no bound at all
    assert stats.signed_rank_interval([1.0, 2.0, 3.0, 4.0], 0.05) is None
    # five: c = 1 (P(W+ <= 0) = 1/32): the smallest and largest Walsh averages
    assert stats.signed_rank_interval([5.0, 6.0, 7.0, 8.0, 9.0], 0.05) == (5.0, 9.0)
    # 1..8 at 2.5%: critical value 3, so c = 4: the 4th smallest Walsh average (1, 1.5, 2,
    # 2, ...) and, by symmetry, the 4th largest (8, 7.5, 7, 7, ...)
    assert stats.signed_rank_interval([float(v) for v in range(1, 9)], 0.025) == (2.0, 7.0)


def test_mad_to_sigma_is_one_over_the_normal_quartile():
    quartile = statistics.NormalDist().inv_cdf(0.75)
    assert abs(stats.MAD_TO_SIGMA - 1 / quartile) < 1e-4
    assert abs(stats.MEDIAN_SE_FACTOR - math.sqrt(math.pi / 2)) < 1e-4


def test_the_median_absolute_deviation_by_hand():
    # median 2; distances 1, 1, 0, 0, 2, 4, 7: median 1
    assert stats.median_absolute_deviation([1, 1, 2, 2, 4, 6, 9]) == 1
    assert stats.robust_sigma([1, 1, 2, 2, 4, 6, 9]) == pytest.approx(1.4826)
    # one wild value moves it by one rank only
    assert stats.robust_sigma([10, 10, 10, 10, 10_000]) == 0


def test_the_median_standard_error_by_hand():
    # median 100, distances 0, 1, 1, .5, .5: MAD 0.5; 1.2533 * 1.4826 * 0.5 / sqrt(5)
    se = stats.median_standard_error([100, 101, 99, 100.5, 99.5])
    assert se == pytest.approx(1.2533 * 1.4826 * 0.5 / math.sqrt(5))
    assert stats.median_standard_error([100.0]) == 0.0


def test_the_median_standard_error_matches_simulated_medians():
    rng = random.Random(7)
    medians = [statistics.median(rng.gauss(0, 1) for _ in range(41)) for _ in range(2000)]
    samples = [[rng.gauss(0, 1) for _ in range(41)] for _ in range(200)]
    predicted = statistics.median(stats.median_standard_error(s) for s in samples)
    assert predicted == pytest.approx(statistics.stdev(medians), rel=0.12)


def test_the_trimmed_mean_by_hand():
    assert stats.trimmed_mean([1, 2, 3, 4, 100], 1) == 3
    assert stats.trimmed_mean(range(20), 2) == 9.5  # scipy.stats.trim_mean(range(20), 0.1)
    assert stats.trimmed_mean([3, 1, 2], 0) == 2
    with pytest.raises(ValueError, match="leaves none"):
        stats.trimmed_mean([1, 2], 1)


def test_the_quantile_interpolates_like_numpy():
    assert stats.quantile([1, 2, 3, 4], 0.1) == pytest.approx(1.3)  # numpy.quantile: 1.3
    assert stats.quantile([15, 20, 35, 40, 50], 0.4) == pytest.approx(29.0)  # numpy: 29.0
    assert stats.quantile([15, 20, 35, 40, 50], 1.0) == 50
    assert stats.quantile([7.0], 0.9) == 7.0
