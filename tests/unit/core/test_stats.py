"""Statistics used by timing: order-statistic median CI, paired log ratios, Student t."""

from __future__ import annotations

import math
import random

import pytest

from pytest_convperf.core import stats


def test_median_odd_even_and_empty() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    with pytest.raises(ValueError, match="no samples"):
        stats.median([])


@pytest.mark.parametrize(
    ("n", "ranks"),
    [(5, (0, 4)), (6, (0, 5)), (21, (5, 15)), (100, (39, 60))],  # 1-based: n=21 -> 6th..16th
)
def test_median_ci_ranks_match_binomial_tables(n: int, ranks: tuple[int, int]) -> None:
    assert stats.median_ci_ranks(n) == ranks


def test_median_ci_coverage_is_at_least_95_percent() -> None:
    # Distribution-free: coverage of the true median of a skewed (lognormal) law, n = 21.
    rng = random.Random(1)
    true_median = 1.0
    hits = 0
    trials = 2000
    for _ in range(trials):
        xs = [rng.lognormvariate(0.0, 0.5) for _ in range(21)]
        lo, hi = stats.median_ci(xs)
        hits += lo <= true_median <= hi
    assert hits / trials >= 0.94  # exact coverage is 97.3 % for n = 21; allow sampling error


def test_summarize_se_and_halfwidth() -> None:
    s = stats.summarize([1.0] * 30)
    assert s.median == 1.0 and s.ci == (1.0, 1.0) and s.se == 0.0 and s.halfwidth == 0.0
    s = stats.summarize([float(i) for i in range(1, 101)])
    assert s.ci == (40.0, 61.0)
    assert s.se == pytest.approx((61.0 - 40.0) / (2 * 1.959964), rel=1e-5)
    assert s.halfwidth == pytest.approx(max(50.5 - 40.0, 61.0 - 50.5))


def test_log_ratios_pairs_and_rejects_bad_samples() -> None:
    assert stats.log_ratios([2.0, 1.0], [1.0, 2.0]) == pytest.approx([math.log(2), -math.log(2)])
    with pytest.raises(ValueError, match="differ in length"):
        stats.log_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive finite"):
        stats.log_ratios([0.0], [1.0])
    with pytest.raises(ValueError, match="positive finite"):
        stats.log_ratios([math.nan], [1.0])


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.95, 20, 1.724718),
        (0.975, 5, 2.570582),
        (0.9995, 3, 12.923979),
        (0.9995, 100, 3.390491),
        (0.975, 1, 12.706205),
        (0.975, 2, 4.302653),
        (0.05, 10, -1.812461),
    ],
)
def test_t_quantile_matches_tables(p: float, df: int, expected: float) -> None:
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=2e-6)


def test_t_quantile_inverts_cdf_and_tends_to_normal() -> None:
    for df in (3, 7.5, 40):
        for p in (0.6, 0.9, 0.999):
            assert stats.t_cdf(stats.t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)
    assert stats.t_quantile(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError, match="0 < p < 1"):
        stats.t_quantile(1.0, 5)
    with pytest.raises(ValueError, match="degrees of freedom"):
        stats.t_quantile(0.5, 0)


def test_spread_and_cv() -> None:
    assert stats.relative_spread([1.0, 1.1, 0.9]) == pytest.approx(0.2)
    assert stats.coefficient_of_variation([2.0]) == 0.0
    assert stats.coefficient_of_variation([1.0, 3.0]) == pytest.approx(math.sqrt(2) / 2)


def test_crossover_units_average_each_whole_ab_ba_pair() -> None:
    # Rounds 0..5 with round 3 dropped: pairs (0, 1) and (4, 5) are whole, (2, 3) is not.
    units = stats.crossover_units([0.04, -0.02, 0.5, 0.06, -0.04], [0, 1, 2, 4, 5])
    assert units == pytest.approx([0.01, 0.01])


def test_paired_summary_cancels_an_order_effect_and_falls_back_under_six_pairs() -> None:
    # The first call of a round 5 % slower (even rounds: candidate first): two humps, true ratio 1.
    rng = random.Random(7)
    lr = [(0.05 if k % 2 == 0 else -0.05) + rng.gauss(0.0, 0.01) for k in range(200)]
    s = stats.paired_summary(lr)
    assert abs(s.median) < 0.003 and s.halfwidth < 0.004
    assert stats.summarize(lr).halfwidth > 3 * s.halfwidth  # the rounds' median sits between humps
    few = [0.01, 0.03, 0.02, 0.05, 0.04, 0.0, 0.06]  # 3 whole pairs: the rounds themselves
    assert stats.paired_summary(few) == stats.summarize(few)
