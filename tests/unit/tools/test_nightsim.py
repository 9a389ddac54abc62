"""The night simulation in CI size (docs/statistics.md has the 1,000-night figures): the real path
(fake timer -> measure_pair -> decide -> multiplicity.control) holds false alarms down, catches a
10 % regression, and does show false alarms when the stored noise is far too small (negative control)."""

from __future__ import annotations

import pytest

pytest.importorskip("numpy")

from tools.nightsim import Scenario, run_nights

SMALL = Scenario(checks=100, nights_per_suite=5)
NIGHTS = 10


def test_unchanged_nights_have_no_false_fail() -> None:
    tally = run_nights(NIGHTS, SMALL, alphas=(0.01,), seed=1)
    assert tally.family == SMALL.checks
    # The per-check rule alone ("none") has false nights now and then: 8 of 100 nights at seed 5
    # with the median over rounds, 10 of 100 over AB/BA pairs (stats.paired_summary); the
    # multiplicity controls none.
    assert tally.false_nights["holm@0.01"] == tally.false_nights["bh@0.01"] == 0
    assert tally.false_nights["none"] <= 1


def test_a_ten_percent_regression_fails_on_its_first_night() -> None:
    tally = run_nights(NIGHTS, SMALL, slowdown=0.10, alphas=(0.01,), seed=2)
    assert tally.regressed_nights == NIGHTS
    assert tally.detected["none"] >= 8 and tally.detected["holm@0.01"] <= tally.detected["none"]
    assert tally.false_nights["holm@0.01"] == 0


def test_noise_stored_five_times_too_small_shows_false_alarms() -> None:
    broken = Scenario(checks=100, nights_per_suite=5, misestimated=1.0, noise_factor=5.0, max_drift=0.019)
    tally = run_nights(NIGHTS, broken, alphas=(0.01,), seed=3)
    assert tally.false_nights["none"] > 0 and tally.false_fails["none"] >= tally.false_nights["none"]
