"""Disabled mode (no ``--convperf``): a check's correctness once, then the test skips.

A plain ``pytest`` run must still catch a wrong kernel, as pytest-benchmark runs a benchmark body
once under ``--benchmark-disable``; nothing is timed and no baseline is read or written. The
``convperf`` fixture of such a run is a :class:`DisabledConvperf` (the mode is chosen once, when the
fixture is made: ``plugin.convperf``): its ``check`` is :func:`correctness_only`, its ``measure``
and ``judge`` skip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_convperf.check.calls import correctness_settings
from pytest_convperf.check.context import check_phase
from pytest_convperf.check.faults import device_errors
from pytest_convperf.check.fixture import ConvperfFixture
from pytest_convperf.core.problem import require_problem
from pytest_convperf.correctness.oracle import check_conv, stable_seed

if TYPE_CHECKING:
    from pytest_convperf.check.context import Candidate
    from pytest_convperf.core.device import DeviceInfo
    from pytest_convperf.core.problem import Conv2dProblem
    from pytest_convperf.core.results import Comparison

TIMING_DISABLED = "timing and baselines run only with --convperf (disabled mode)"


def correctness_only(
    candidate: Candidate,
    problem: Conv2dProblem,
    device: DeviceInfo,
    nodeid: str,
    *,
    reference: Candidate | None,
    phase: str,
    oracle: Candidate | None,
) -> NoReturn:
    """The check's correctness once (fails the test on a wrong candidate), then skip the test."""
    check_phase(phase)
    with device_errors(device, nodeid, problem.id), correctness_settings():
        report = check_conv(
            candidate,
            problem,
            reference=reference,
            seed=stable_seed(problem),
            device=device.torch_device,
            backward=phase != "forward",
            oracle=oracle,
        )
    if not report.ok or not report.reference_ok:
        pytest.fail(report.message(), pytrace=False)
    pytest.skip(f"correctness passed ({problem.id}, {phase}); {TIMING_DISABLED}")


class DisabledConvperf(ConvperfFixture):
    """The ``convperf`` fixture without ``--convperf``: ``check`` checks correctness once (a wrong
    candidate fails the test) and skips; ``measure`` and ``judge`` skip. They take
    :class:`ConvperfFixture`'s arguments; what disabled mode does not use is ignored."""

    def measure(self, candidate: Candidate, problem: Conv2dProblem, **options: Any) -> Comparison:
        require_problem(problem, "convperf.measure")
        pytest.skip(TIMING_DISABLED)

    def check(
        self,
        candidate: Candidate,
        problem: Conv2dProblem,
        *,
        reference: Candidate | None = None,
        phase: str = "forward",
        oracle: Candidate | None = None,
        **options: Any,
    ) -> Comparison:
        problem = require_problem(problem, "convperf.check")
        correctness_only(
            candidate, problem, self.device, self.nodeid, reference=reference, phase=phase, oracle=oracle
        )

    def judge(self, comparison: Comparison, *, name: str, phase: str, **options: Any) -> Comparison:
        check_phase(phase)
        pytest.skip(TIMING_DISABLED)
