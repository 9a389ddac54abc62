"""No false alarm: an unchanged CPU candidate, checked again and again against its own fresh baseline,
never FAILs (real CPU timing on a shared machine, the CPU noise floor and the confirm stage)."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import CpuSuite

pytest.importorskip("kernels.depthwise.reference")
REPEATS = 3


def test_unchanged_candidate_never_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = CpuSuite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=1)
    seen = []
    for _ in range(REPEATS):
        result = suite.run()
        seen += suite.verdicts(result)
        result.assert_outcomes(passed=1)
    assert len(seen) == REPEATS and "FAIL" not in seen, seen
