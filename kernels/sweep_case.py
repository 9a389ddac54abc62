"""One row of a kernel sweep: one variant of a family on one problem, timed with fixed repetitions.

A GPU window is too short for the adaptive pytest suite when many variants must be compared, so
``python -m kernels.sweep`` times every :class:`Case` a family lists with a fixed number of cold
repetitions. Each family lists its cases in ``kernels/<family>/sweep_plan.py`` as
``def cases() -> list[Case]``; the sweep adds the anchors (a same-size copy, cuDNN) per problem.
Variants are chosen at run time inside one build (as ``CONVPERF_DEPTHWISE_VARIANT`` does), so one
process times the old kernel against the new.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# A zero-argument call that runs the variant once on inputs built beforehand (outside the timing).
Call = Callable[[], object]


@dataclass(frozen=True)
class Case:
    family: str
    variant: str  # the run-time variant's name, e.g. "v2"
    problem_id: str  # Conv2dProblem.id of the problem it runs
    phase: str  # forward | input_grad | weight_grad | backward
    bytes_moved: int  # the minimum bytes the call must move: the base of "% of the HBM spec"
    make_call: Callable[[str], Call]  # device ("cuda" or "cpu") -> a prepared call
    predicted_us: float | None = None  # the family's cost model, written before the GPU measures
