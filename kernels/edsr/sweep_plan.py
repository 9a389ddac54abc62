"""The EDSR sweep's cases: the depthwise-separable block conv (3x3 depthwise, then 1x1 pointwise)
fused in one kernel (``fused``, kernels/edsr; ``fused_v2``: its prefetched chunk staging,
``CONVPERF_EDSR_VARIANT=v2``) against the same two convs unfused on our depthwise kernel
(``unfused``) and on cuDNN (``cudnn_unfused``), forward and backward, at C = 16, 32, 64.

The row's problem is the block's depthwise conv; the pointwise weight is drawn per device beside
it. A new variant adds its rows to :func:`cases`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.depthwise import ops as depthwise_ops
from kernels.edsr import ops
from kernels.sweep_calls import ConvFn, conv_case
from kernels.sweep_case import Case
from pytest_convperf import Conv2dProblem

FAMILY = "edsr"
CHANNELS = (16, 32, 64)  # what the fused kernel is built for
SIZES = ((16, 48), (4, 96))  # (batch, H = W): the suite's body resolution, and 4x the pixels per image
PHASES = ("forward", "backward")


def block_problem(n: int, c: int, hw: int) -> Conv2dProblem:
    return Conv2dProblem(n=n, c_in=c, h=hw, w=hw, c_out=c, kernel=(3, 3), padding=(1, 1), groups=c)


def _pointwise(c: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's 1x1 weight and bias, drawn once per (C, device): never inside the timed call."""
    if (c, device) not in _POINTWISE:
        g = torch.Generator().manual_seed(c)
        w = torch.randn(c, c, 1, 1, generator=g) / c**0.5
        _POINTWISE[(c, device)] = (w.to(device), torch.randn(c, generator=g).to(device))
    return _POINTWISE[(c, device)]


_POINTWISE: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}


def _block(dw: ConvFn) -> ConvFn:
    def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *args: object) -> torch.Tensor:
        pw_w, pw_b = _pointwise(x.shape[1], x.device)
        return F.conv2d(dw(x, w, b, *args), pw_w, pw_b)

    return run


def fused(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *args: object) -> torch.Tensor:
    pw_w, pw_b = _pointwise(x.shape[1], x.device)
    assert b is not None  # block problems have a depthwise bias
    return ops.sep_conv(x, w, b, pw_w, pw_b)


VARIANTS: dict[str, ConvFn] = {
    "fused": fused,
    "unfused": _block(depthwise_ops.forward),
    "cudnn_unfused": _block(F.conv2d),
}


# The fused kernel's run-time variants (CONVPERF_EDSR_VARIANT): "fused" runs v1 (the measured kernel),
# "fused_v2" the prefetched chunk staging (docs/tuning-log.md, EDSR).
FUSED_ENV = {"fused": {"CONVPERF_EDSR_VARIANT": "v1"}, "fused_v2": {"CONVPERF_EDSR_VARIANT": "v2"}}


def cases() -> list[Case]:
    rows = [(name, fn, FUSED_ENV.get(name)) for name, fn in VARIANTS.items()]
    rows.insert(1, ("fused_v2", fused, FUSED_ENV["fused_v2"]))
    return [
        conv_case(FAMILY, name, fn, block_problem(n, c, hw), phase, env=env)
        for n, hw in SIZES
        for c in CHANNELS
        for name, fn, env in rows
        for phase in PHASES
    ]
