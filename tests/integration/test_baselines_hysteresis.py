"""Hysteresis: an update leaves an entry whose new ratio lies inside its noise band as it is."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import Suite


def test_inside_the_noise_band_is_left_alone_outside_is_rewritten(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines", "-k", "test_a").assert_outcomes(passed=1)
    key = suite.key()
    suite.edit(key, noise=0.03)
    before = suite.file.read_bytes()
    suite.set_ratio(0.5 * 1.02)  # +2 %: inside the 3 % band
    result = suite.run("--convperf-update-baselines=all", "-k", "test_a")
    result.assert_outcomes(passed=1)
    assert suite.file.read_bytes() == before
    update_md = (pytester.path / "convperf-update.md").read_text()
    assert "Left as they are (inside their noise band)" in update_md and "within the noise band" in update_md
    suite.set_ratio(0.5 * 0.96)  # -4 %: outside the band, faster, so no reason needed
    suite.run("--convperf-update-baselines=all", "-k", "test_a").assert_outcomes(passed=1)
    assert suite.entries()[key]["time_ratio"] == pytest.approx(0.48)
    assert suite.entries()[key]["noise"] == 0.03  # noise belongs to the machine: kept
