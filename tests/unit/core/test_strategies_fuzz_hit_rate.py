"""Default fuzz runs find bugs that need two edge features at once (issue 16, item 6).

``tools/fuzz_hit_rate.py`` measures, for planted bugs that fire only on a combination (dilation 2 x
even kernel, stride 2 x odd size, padding x input smaller than the kernel, ...), the share of
independent default runs of 100 examples that hit each. Seeds are fixed, so the check is
deterministic for a given Hypothesis version.
"""

from __future__ import annotations

import pytest

from pytest_convperf.core.strategies import conv2d_problems
from tools.fuzz_hit_rate import PLANTED_BUGS, hit_rates

RUNS = 20


@pytest.fixture(scope="module")
def default_rates() -> dict[str, float]:
    return hit_rates(RUNS, examples=100)


@pytest.mark.parametrize("bug", [bug.name for bug in PLANTED_BUGS])
def test_default_runs_hit_each_planted_bug(default_rates: dict[str, float], bug: str) -> None:
    # The strategy before issue 16 hit dilation2_x_even_kernel in 55 % of runs and
    # padding_x_input_smaller_than_kernel in 8 %.
    assert default_rates[bug] >= 0.95, f"{bug}: hit in {default_rates[bug]:.0%} of {RUNS} runs"


def test_the_measure_reports_a_miss_when_the_strategy_cannot_reach_the_bug() -> None:
    # Negative control: without dilation 2 the dilation bug is never hit, the others still are.
    rates = hit_rates(3, examples=100, strategy=conv2d_problems(dilations=(1, 3)))
    assert rates["dilation2_x_even_kernel"] == 0.0
    assert rates["stride2_x_odd_size"] > 0.0
