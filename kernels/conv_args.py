"""``F.conv2d``'s arguments, parsed once for every family: the pairs, the padding strings, the output
size, the checks that name the problem (``ValueError``), and the family-neutral entry point.

Each family adds only its own rules on top: the depthwise shape (``kernels.depthwise.reference``),
im2col's and PCILT's dtypes and groups (:func:`normalize`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
REFERENCE_DTYPES = (*FLOAT_DTYPES, torch.float64)

IntPair = int | Sequence[int]
Padding = IntPair | str


class ConvArgs(NamedTuple):
    """Normalized ``(kernel, stride, padding, dilation, groups)``; every spatial value a pair."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int


def pair(value: IntPair, name: str) -> tuple[int, int]:
    """``3 -> (3, 3)``; ``(2, 1)`` and ``[2]`` are pairs; else a ``ValueError`` naming ``name``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) in (1, 2):
        items = tuple(value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return (int(items[0]), int(items[-1]))
    raise ValueError(f"{name}={value!r} must be an int or a pair of ints")


def out_size(size: int, k: int, s: int, p: int, d: int) -> int:
    """Output length of one spatial dimension of a conv (the ``F.conv2d`` formula)."""
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def output_hw(
    hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> tuple[int, int]:
    """Output height and width of a conv2d."""
    return (
        out_size(hw[0], kernel[0], stride[0], padding[0], dilation[0]),
        out_size(hw[1], kernel[1], stride[1], padding[1], dilation[1]),
    )


class Spatial(NamedTuple):
    """Parsed stride, padding and dilation. ``pad_input``: for ``padding='same'`` with an even dilated
    kernel span, the asymmetric ``F.pad`` (left, right, top, bottom) the input needs first (then
    ``padding`` is (0, 0)), as ``F.conv2d`` pads one more on the bottom/right; else None."""

    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    pad_input: tuple[int, int, int, int] | None


def spatial(stride: IntPair, padding: Padding, dilation: IntPair, kernel: tuple[int, int]) -> Spatial:
    """Check and pair ``stride``, ``padding`` (ints, pairs, ``'valid'``, ``'same'``) and ``dilation``."""
    s, d = pair(stride, "stride"), pair(dilation, "dilation")
    if min(s) < 1:
        raise ValueError(f"stride={stride!r} must be >= 1")
    if min(d) < 1:
        raise ValueError(f"dilation={dilation!r} must be >= 1")
    if not isinstance(padding, str):
        p = pair(padding, "padding")
        if min(p) < 0:
            raise ValueError(f"padding={padding!r} must be >= 0")
        return Spatial(s, p, d, None)
    if padding == "valid":
        return Spatial(s, (0, 0), d, None)
    if padding != "same":
        raise ValueError(f"padding={padding!r} must be an int, a pair, 'valid' or 'same'")
    if s != (1, 1):
        raise ValueError("padding='same' is not supported for strided convolutions (as in F.conv2d)")
    span_h, span_w = d[0] * (kernel[0] - 1), d[1] * (kernel[1] - 1)
    top, left = span_h // 2, span_w // 2
    if span_h % 2 or span_w % 2:
        return Spatial(s, (0, 0), d, (left, span_w - left, top, span_h - top))
    return Spatial(s, (top, left), d, None)


def check_output(
    hw: tuple[int, int], kernel: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int]
) -> None:
    """``ValueError`` when the dilated kernel does not fit the padded input (an empty output)."""
    span = (dilation[0] * (kernel[0] - 1) + 1, dilation[1] * (kernel[1] - 1) + 1)
    if hw[0] + 2 * padding[0] < span[0] or hw[1] + 2 * padding[1] < span[1]:
        raise ValueError(
            f"input {hw} with padding {padding} is smaller than the dilated kernel {span}; "
            "the output would be empty"
        )


def batched(input: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The 4-D input (a batch of one for a 3-D one) and whether it was 3-D."""
    if input.dim() not in (3, 4):
        raise ValueError(f"input must be 3-D (C, H, W) or 4-D (N, C, H, W), got shape {tuple(input.shape)}")
    unbatched = input.dim() == 3
    return (input.unsqueeze(0) if unbatched else input), unbatched


def normalize(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: IntPair,
    padding: Padding,
    dilation: IntPair,
    groups: int,
    *,
    dtypes: tuple[torch.dtype, ...] = REFERENCE_DTYPES,
) -> tuple[torch.Tensor, ConvArgs, bool]:
    """Validate ``F.conv2d`` arguments; return the 4-D input, the pairs, and whether it was 3-D."""
    x, unbatched = batched(input)
    if weight.dim() != 4:
        raise ValueError(f"weight must be 4-D (C_out, C_in/groups, kh, kw), got shape {tuple(weight.shape)}")
    if input.dtype not in dtypes or weight.dtype != input.dtype:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise ValueError(
            f"input dtype {input.dtype} and weight dtype {weight.dtype} must match and be one of {names}"
        )
    if input.device != weight.device or (bias is not None and bias.device != input.device):
        raise ValueError("input, weight and bias must be on the same device")
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups={groups!r} must be an int >= 1")
    c_in = x.shape[1]
    c_out, cg, kh, kw = weight.shape
    if c_in % groups or c_out % groups:
        raise ValueError(f"groups={groups} must divide C_in={c_in} and C_out={c_out}")
    if cg * groups != c_in:
        raise ValueError(
            f"weight has {cg} input channels per group but input has C_in={c_in} with groups={groups}; "
            f"expected weight.shape[1] == {c_in // groups}"
        )
    if bias is not None and tuple(bias.shape) != (c_out,):
        raise ValueError(f"bias must have shape ({c_out},), got {tuple(bias.shape)}")
    s, p, d, pad_input = spatial(stride, padding, dilation, (kh, kw))
    if pad_input is not None:
        raise ValueError(
            "padding='same' with an even dilated kernel span needs asymmetric padding, which this "
            "kernel does not support; pad the input with F.pad and use padding=0"
        )
    check_output((x.shape[2], x.shape[3]), (kh, kw), p, d)
    return x, ConvArgs((kh, kw), s, p, d, groups), unbatched


@dataclass(frozen=True)
class ConvShape:
    """The sizes of the conv of a 4-D input ``[n, c, h, w]`` by a weight ``[cout, cg, kh, kw]``."""

    n: int
    c: int
    h: int
    w: int
    cout: int
    groups: int
    cg: int  # input channels per group
    cog: int  # output channels per group
    kh: int
    kw: int
    ho: int
    wo: int


def conv_shape(x: torch.Tensor, weight: torch.Tensor, a: ConvArgs) -> ConvShape:
    """The :class:`ConvShape` of the conv of 4-D ``x`` by ``weight`` with normalized arguments ``a``."""
    n, c, h, w = x.shape
    cout = weight.shape[0]
    kh, kw = a.kernel
    ho, wo = output_hw((h, w), a.kernel, a.stride, a.padding, a.dilation)
    return ConvShape(n, c, h, w, cout, a.groups, c // a.groups, cout // a.groups, kh, kw, ho, wo)


def geometry(x: torch.Tensor, weight: torch.Tensor, a: ConvArgs) -> tuple[int, int, int, int]:
    """``(Ho, Wo, K, C_out/groups)`` of the conv of 4-D ``x`` (``K = C_in/groups * kh * kw``)."""
    s = conv_shape(x, weight, a)
    return s.ho, s.wo, s.cg * s.kh * s.kw, s.cog


# ``body(x, weight, bias, args, **options)``: the conv on a batched input and normalized arguments.
ConvBody = Callable[..., torch.Tensor]


def with_bias(out: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``out`` plus the per-channel ``bias`` (the bias step of the variants whose GEMM has none)."""
    return out if bias is None else out + bias.view(1, -1, 1, 1)


def conv2d_entry(
    body: ConvBody, *, check: Callable[[torch.Tensor], None] | None = None, takes_bias: bool = True
) -> Callable[..., torch.Tensor]:
    """The one ``F.conv2d``-style entry point of the family's functions, around ``body``.

    The entry takes ``(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
    **options)`` (without ``bias`` when ``takes_bias`` is False), validates and normalizes them
    (:func:`normalize`: an unbatched input gets a batch of one, removed again from the result),
    runs ``check`` on the batched input, then ``body(x, weight, bias, args, **options)`` (``body``'s
    keyword-only parameters are the options, with their defaults). Name and docstring are ``body``'s.
    """

    def run(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: IntPair,
            padding: Padding, dilation: IntPair, groups: int,
            options: dict[str, Any]) -> torch.Tensor:  # fmt: skip
        x, a, unbatched = normalize(input, weight, bias, stride, padding, dilation, groups)
        if check is not None:
            check(x)
        out = body(x, weight, bias, a, **options) if takes_bias else body(x, weight, a, **options)
        return out.squeeze(0) if unbatched else out

    if takes_bias:

        def entry(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  stride: IntPair = 1, padding: Padding = 0, dilation: IntPair = 1, groups: int = 1,
                  **options: Any) -> torch.Tensor:  # fmt: skip
            return run(input, weight, bias, stride, padding, dilation, groups, options)

    else:

        def entry(input: torch.Tensor, weight: torch.Tensor, stride: IntPair = 1,  # type: ignore[misc]
                  padding: Padding = 0, dilation: IntPair = 1, groups: int = 1,
                  **options: Any) -> torch.Tensor:  # fmt: skip
            return run(input, weight, None, stride, padding, dilation, groups, options)

    entry.__name__ = entry.__qualname__ = body.__name__.lstrip("_")
    entry.__doc__ = body.__doc__
    entry.__module__ = body.__module__
    return entry
