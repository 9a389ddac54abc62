"""Issue 15 item 4: a candidate that writes its inputs in place cannot corrupt the reference's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pytest_convperf.check.calls import InputSets
from pytest_convperf.core.problem import Conv2dProblem

P = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=3, padding=1)


def test_each_side_times_its_own_inputs() -> None:
    seen: list[float] = []

    def zeroing(x, w, b, *args):  # type: ignore[no-untyped-def]
        x.zero_()
        return F.conv2d(x, w, b, *args)

    def reference(x, w, b, *args):  # type: ignore[no-untyped-def]
        seen.append(float(x.abs().sum()))
        return F.conv2d(x, w, b, *args)

    sets = InputSets(zeroing, reference, P, "forward", 1, "cpu", P.make_inputs(1, "cpu"))
    for side in (0, 1):
        for call in sets.rotation(side)(3):
            call()
    assert len(seen) == 3 and all(s > 0 for s in seen)  # the reference never saw the zeros
    # The reference's inputs are copies of the same values, built when a set is.
    for i, original in enumerate(P.make_inputs(1 + i, "cpu") for i in range(3)):
        assert torch.equal(sets.reference_inputs[i].input, original.input)
