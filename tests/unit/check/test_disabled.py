"""Disabled mode (``check/disabled.py``): without ``--convperf`` a check still fails a wrong candidate,
and skips a right one saying why nothing was timed. (The fixture in a plain ``pytest`` session:
``tests/integration/test_disabled_mode.py``.)"""

from __future__ import annotations

import pytest
import torch.nn.functional as F

from pytest_convperf.check.disabled import TIMING_DISABLED, correctness_only
from pytest_convperf.core.device import DeviceInfo
from pytest_convperf.core.problem import Conv2dProblem

P = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=3, padding=1)
CPU = DeviceInfo(kind="cpu", torch_device="cpu", name="cpu", slug="cpu-1t", threads=1)


def _run(candidate, phase: str = "forward") -> None:  # type: ignore[no-untyped-def]
    correctness_only(candidate, P, CPU, "t.py::c", reference=None, phase=phase, oracle=None)


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_a_right_candidate_is_skipped_saying_timing_is_off(phase: str) -> None:
    with pytest.raises(pytest.skip.Exception, match=f"correctness passed \\({P.id}, {phase}\\)") as info:
        _run(F.conv2d, phase)
    assert TIMING_DISABLED in str(info.value)


def test_a_wrong_candidate_fails_the_test() -> None:
    def off_by_one(x, w, b, *args):  # type: ignore[no-untyped-def]
        return F.conv2d(x, w, b, *args) + 1

    # A skip escaping would skip this test, not fail it: catch both, and require the failure.
    with pytest.raises((pytest.fail.Exception, pytest.skip.Exception)) as info:
        _run(off_by_one)
    assert info.type is pytest.fail.Exception, info.value


def test_an_unknown_phase_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match=r"phase='sideways' is not one of"):
        _run(F.conv2d, "sideways")
