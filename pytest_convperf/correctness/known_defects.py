"""Reference paths known to crash upstream, and how the plugin computes them instead.

PyTorch's CPU conv (oneDNN) corrupts memory on the weight gradient of a strided 1x1 conv in
channels_last (fp32, bf16): a bias gradient of 2e37, then a segfault or an abort inside
``torch.autograd.grad`` (oneDNN issue 6035, "1x1 backward weights writing past a workspace,
nhwc"; seen on torch 2.13.0+cpu and 2.14.1). The fuzz strategies reach it (pointwise, NHWC,
stride (2, 1) or (1, 3)), and one crash ends the whole session. Where the default reference
(``F.conv2d``) would take such a path, it is computed on contiguous NCHW copies instead (the same
math on another oneDNN kernel), its output given back in the problem's layout, and the report
names the reference as such, with the upstream issue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from pytest_convperf.core.problem import Conv2dProblem

Candidate = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class KnownDefect:
    """One upstream defect: where it is (``applies``) and what the plugin does about it."""

    issue: str
    url: str
    what: str

    def applies(self, problem: Conv2dProblem, device: str, weight_grad: bool) -> bool:
        """The reference would run the defective path on this problem (CPU, NHWC, strided 1x1,
        a weight gradient in a precision oneDNN computes: anything but fp64)."""
        return (
            weight_grad
            and str(device).startswith("cpu")
            and problem.layout == "nhwc"
            and problem.kernel == (1, 1)
            and problem.stride != (1, 1)
            and problem.dtype != "fp64"
        )


ONEDNN_6035 = KnownDefect(
    issue="oneDNN issue 6035",
    url="https://github.com/oneapi-src/oneDNN/issues/6035",
    what="PyTorch's CPU weight gradient of a strided 1x1 conv in channels_last writes past its "
    "workspace (segfault/abort)",
)
DEFECTS: tuple[KnownDefect, ...] = (ONEDNN_6035,)


def conv2d_on_nchw_copies(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *args: Any
) -> torch.Tensor:
    """``F.conv2d`` on contiguous NCHW copies, its output back in the input's memory format."""
    out = F.conv2d(x.contiguous(), weight.contiguous(), bias, *args)
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        return out.contiguous(memory_format=torch.channels_last)
    return out


def defect_for(
    reference: Candidate, problem: Conv2dProblem, device: str, *, weight_grad: bool
) -> KnownDefect | None:
    """The known defect the default reference would hit on this problem, or None.

    Only the default reference is replaced: a reference the user passed is theirs to call."""
    if reference is not F.conv2d:
        return None
    return next((d for d in DEFECTS if d.applies(problem, device, weight_grad)), None)


def safe_reference(
    reference: Candidate, problem: Conv2dProblem, device: str, *, weight_grad: bool
) -> tuple[Candidate, str | None]:
    """The reference to call and, when a known defect made it another path, the note naming it."""
    defect = defect_for(reference, problem, device, weight_grad=weight_grad)
    if defect is None:
        return reference, None
    return conv2d_on_nchw_copies, (f"computed on NCHW copies: {defect.what} ({defect.issue}, {defect.url})")
