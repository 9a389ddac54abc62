"""EDSR (Lim et al., CVPR-W 2017) with standard or depthwise-separable residual blocks.

Follows the reference code (sanghyun-son/EDSR-PyTorch ``src/model/edsr.py``, ``common.py``):
MeanShift -> head conv 3->F -> B ResBlocks (conv-ReLU-conv, bias, ``res_scale``) -> [post-body
conv F->F] -> global skip -> Upsampler (conv F->4F + PixelShuffle(2) per x2; conv F->9F +
PixelShuffle(3) for x3) -> conv F->3 -> MeanShift.

Definitions (the counts are tabled in docs/design.md §16):

* ``post_body_conv=False`` (default) is the model of the seed: 1,332,931 parameters (standard)
  and 304,835 (separable) at x2. ``post_body_conv=True`` is the reference definition (1,369,859;
  its post-body conv is separable too in the separable model: 309,635).
* A separable conv is a depthwise 3x3 (bias) followed by a pointwise 1x1 (bias) with no
  activation between them; it replaces each 3x3 conv of the residual blocks (and the post-body
  conv). Head, upsampler and tail stay dense, as in the seed.
* Parameter counts are of *trainable* parameters: the two MeanShift layers are frozen 1x1 convs
  (``requires_grad=False``, 12 values each) exactly as in the reference code, so
  ``parameters()`` holds 24 more values than the counts above. :func:`count_parameters` counts
  trainable ones by default.

The separable blocks can run their depthwise conv on our kernel (``depthwise="ours"``), or the
whole separable conv on the fused dw+pw kernel of this family (``depthwise="fused"``: on a GPU
``kernels.edsr.ops.sep_conv``, on a CPU ``kernels.edsr.reference.sep_conv``). The choice can be
switched on a built model with :meth:`EDSR.set_depthwise` without touching its weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from perf_tests import swap

Block = Literal["standard", "separable"]
Depthwise = Literal["torch", "ours", "fused"]
DEPTHWISE_CHOICES: tuple[str, ...] = ("torch", "ours", "fused")

RGB_MEAN = (0.4488, 0.4371, 0.4040)
RGB_STD = (1.0, 1.0, 1.0)

SepConvFn = Callable[..., torch.Tensor]


def fused_sep_conv(device: torch.device) -> SepConvFn:
    """The fused dw+pw implementation for ``device``: CUDA op on a GPU, PyTorch twin on a CPU."""
    if device.type == "cuda":
        from kernels.edsr import ops

        return ops.sep_conv
    from kernels.edsr import reference

    return reference.sep_conv


class MeanShift(nn.Conv2d):
    """Fixed 1x1 conv that subtracts (sign -1) or adds (sign +1) the dataset RGB mean; frozen."""

    def __init__(self, rgb_range: float = 255.0, sign: int = -1) -> None:
        super().__init__(3, 3, kernel_size=1)
        std = torch.tensor(RGB_STD)
        with torch.no_grad():
            self.weight.copy_(torch.eye(3).view(3, 3, 1, 1) / std.view(3, 1, 1, 1))
            assert self.bias is not None  # nn.Conv2d's default bias=True
            self.bias.copy_(sign * rgb_range * torch.tensor(RGB_MEAN) / std)
        for p in self.parameters():
            p.requires_grad = False


class SeparableConv2d(nn.Module):
    """Depthwise 3x3 (bias) then pointwise 1x1 (bias), no activation between; keeps the width."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.pw = nn.Conv2d(channels, channels, 1)
        self.depthwise: Depthwise = "torch"

    def _dw(self, x: torch.Tensor) -> torch.Tensor:
        fn = swap.resolve("ours" if self.depthwise == "ours" else "torch")(x.device)
        return fn(x, self.dw.weight, self.dw.bias, (1, 1), (1, 1), (1, 1), self.dw.groups)

    def forward(
        self,
        x: torch.Tensor,
        *,
        relu: bool = False,
        residual: torch.Tensor | None = None,
        res_scale: float = 1.0,
    ) -> torch.Tensor:
        """``[residual + res_scale *] [relu](pw(dw(x)))``; the fused path does it in one kernel."""
        if self.depthwise == "fused":
            return fused_sep_conv(x.device)(
                x, self.dw.weight, self.dw.bias, self.pw.weight, self.pw.bias, residual, res_scale, relu
            )
        out: torch.Tensor = self.pw(self._dw(x))
        if relu:
            out = F.relu(out)
        if residual is not None:
            out = residual + res_scale * out
        return out


def _conv3x3(c_in: int, c_out: int) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, 3, padding=1)


class ResBlock(nn.Module):
    """conv-ReLU-conv with a scaled skip: ``x + res_scale * body(x)``; standard or separable."""

    def __init__(self, channels: int, block: Block = "standard", res_scale: float = 1.0) -> None:
        super().__init__()
        self.block = block
        self.res_scale = res_scale
        self.conv1: nn.Module
        self.conv2: nn.Module
        if block == "standard":
            self.conv1, self.conv2 = _conv3x3(channels, channels), _conv3x3(channels, channels)
        elif block == "separable":
            self.conv1, self.conv2 = SeparableConv2d(channels), SeparableConv2d(channels)
        else:
            raise ValueError(f"block={block!r} must be 'standard' or 'separable'")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.conv1, SeparableConv2d) and isinstance(self.conv2, SeparableConv2d):
            h = self.conv1(x, relu=True)
            return cast(torch.Tensor, self.conv2(h, residual=x, res_scale=self.res_scale))
        h = F.relu(self.conv1(x))
        body: torch.Tensor = self.conv2(h)
        return x + self.res_scale * body


class Upsampler(nn.Sequential):
    """conv F->4F + PixelShuffle(2) per factor 2 (scale 2^k), or conv F->9F + PixelShuffle(3)."""

    def __init__(self, scale: int, channels: int) -> None:
        layers: list[nn.Module] = []
        if scale >= 2 and (scale & (scale - 1)) == 0:
            for _ in range(int(math.log2(scale))):
                layers += [_conv3x3(channels, 4 * channels), nn.PixelShuffle(2)]
        elif scale == 3:
            layers += [_conv3x3(channels, 9 * channels), nn.PixelShuffle(3)]
        else:
            raise ValueError(f"scale={scale} must be 3 or a power of 2 (2, 4, 8, ...)")
        super().__init__(*layers)


class EDSR(nn.Module):
    """EDSR super-resolution network; the defaults are the x2 baseline (16 blocks, 64 features)."""

    def __init__(
        self,
        *,
        scale: int = 2,
        n_resblocks: int = 16,
        n_feats: int = 64,
        res_scale: float = 1.0,
        block: Block = "standard",
        post_body_conv: bool = False,
        depthwise: Depthwise = "torch",
        rgb_range: float = 255.0,
        n_colors: int = 3,
    ) -> None:
        super().__init__()
        self.block = block
        self.sub_mean = MeanShift(rgb_range, sign=-1)
        self.add_mean = MeanShift(rgb_range, sign=1)
        self.head = _conv3x3(n_colors, n_feats)
        body: list[nn.Module] = [ResBlock(n_feats, block, res_scale) for _ in range(n_resblocks)]
        if post_body_conv:
            body.append(_conv3x3(n_feats, n_feats) if block == "standard" else SeparableConv2d(n_feats))
        self.body = nn.Sequential(*body)
        self.tail = nn.Sequential(Upsampler(scale, n_feats), _conv3x3(n_feats, n_colors))
        self.set_depthwise(depthwise)

    def set_depthwise(self, depthwise: str) -> EDSR:
        """Run the separable convs with ``torch`` (stock), ``ours`` (our depthwise kernel, then a
        stock pointwise conv) or ``fused`` (our fused dw+pw kernel). Weights are untouched."""
        if depthwise not in DEPTHWISE_CHOICES:
            raise ValueError(f"depthwise={depthwise!r} must be one of {DEPTHWISE_CHOICES}")
        if depthwise != "torch" and self.block != "separable":
            raise ValueError(
                f"depthwise={depthwise!r} needs block='separable'; the standard EDSR has no depthwise conv"
            )
        for module in self.modules():
            if isinstance(module, SeparableConv2d):
                module.depthwise = cast(Depthwise, depthwise)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.sub_mean(x))
        res = self.body(x) + x
        return cast(torch.Tensor, self.add_mean(self.tail(res)))


def count_parameters(model: nn.Module, *, trainable_only: bool = True) -> int:
    """Number of parameter values; trainable only by default (the convention of the EDSR paper)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
