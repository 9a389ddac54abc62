"""Disabled mode (issue 24.5): without --convperf a test using the ``convperf`` fixture runs each
check's correctness once (no timing, no baseline), as pytest-benchmark runs a benchmark body once
under ``--benchmark-disable``; a plain ``pytest`` still catches a wrong kernel."""

from __future__ import annotations

import pytest

SUITE = """
import torch.nn.functional as F
from pytest_convperf import Conv2dProblem

P = Conv2dProblem(n=1, c_in=2, h=6, w=6, c_out=3, kernel=3)


def wrong(x, w, b=None, *args):
    return F.conv2d(x, w, b, *args) * 1.01


def test_wrong(convperf):
    convperf.check(wrong, P)


def test_right(convperf):
    convperf.check(F.conv2d, P, phase="backward")


def test_measure_only(convperf):
    convperf.measure(F.conv2d, P)
"""


def test_plain_pytest_catches_a_wrong_kernel(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(*cpu_plugin_args, "-rs")
    result.assert_outcomes(failed=1, skipped=2)
    out = result.stdout.str()
    assert "test_wrong" in out and "ConvMismatch" not in out  # the report's message, not a traceback
    result.stdout.fnmatch_lines(
        [
            "candidate test_suite:wrong is wrong on n1-ci2-h6-w6-co3-k3x3-s1-p0-d1-g1-fp32-nchw*",
            "*correctness passed (n1-ci2-h6-w6-co3-k3x3-s1-p0-d1-g1-fp32-nchw, backward); timing and "
            "baselines run only with --convperf (disabled mode)*",
            "*timing and baselines run only with --convperf (disabled mode)*",
        ]
    )
    assert not (pytester.path / "baselines").exists()
