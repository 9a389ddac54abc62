"""Issue 15, verdicts, through whole sessions: a candidate too slow for a CI still FAILs."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import Suite, assert_speed_fails


def test_huge_regression_too_slow_for_a_ci_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines=new", "-k", "test_a").assert_outcomes(passed=1)
    # 10 s per call (the reference takes 1 ms): under 6 rounds fit in the fake timer's 4 x 5 s cap.
    suite.set_ratio(10_000.0)
    result = suite.run("-k", "test_a")
    # A speed FAIL is decided with the night's others (issue 18): the session fails, naming it.
    assert_speed_fails(result, 1)
    result.stdout.fnmatch_lines(["*FAIL (few rounds, confirmed)*"])


WRONG = """
import pytest
import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem

P = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=3, padding=1)


def as_fp64(x, w, b, *args):
    return F.conv2d(x.double(), w.double(), b.double(), *args)


def cropped(x, w, b, *args):
    return F.conv2d(x, w, b, *args)[..., :-1, :]


@pytest.mark.convperf
@pytest.mark.parametrize("phase", ["forward", "backward"])
@pytest.mark.parametrize("candidate", [as_fp64, cropped], ids=["fp64", "cropped"])
def test_wrong(convperf, candidate, phase):
    convperf.check(candidate, P, phase=phase)
"""


def test_wrong_dtype_or_shape_is_a_recorded_correctness_failure_on_every_path(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    pytester.makepyfile(test_wrong=WRONG)
    result = suite.run("test_wrong.py")
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(["*CORRECTNESS_FAIL (4)*"])
    out = result.stdout.str()
    assert out.count("output has dtype torch.float64, expected torch.float32") >= 2
    assert out.count("output has shape (1, 4, 7, 8), expected (1, 4, 8, 8)") >= 2
    assert "Mismatch in shape" not in out and "ValueError" not in out
