"""Argument handling shared by every entry point of the family (``F.conv2d`` conventions)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from kernels.im2col_gemm.chunking import out_size

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
REFERENCE_DTYPES = (*FLOAT_DTYPES, torch.float64)


class ConvArgs(NamedTuple):
    """Normalized ``(kernel, stride, padding, dilation, groups)``; every spatial value a pair."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int


def pair(value: int | Sequence[int], name: str) -> tuple[int, int]:
    """``3 -> (3, 3)``; ``(2, 1)`` stays; anything else is a ``ValueError`` naming ``name``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        a, b = value
        if isinstance(a, int) and isinstance(b, int):
            return (int(a), int(b))
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 1:
        return pair(value[0], name)
    raise ValueError(f"{name}={value!r} must be an int or a pair of ints")


def normalize(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int | Sequence[int],
    padding: int | str | Sequence[int],
    dilation: int | Sequence[int],
    groups: int,
    *,
    dtypes: tuple[torch.dtype, ...] = REFERENCE_DTYPES,
) -> tuple[torch.Tensor, ConvArgs, bool]:
    """Validate ``F.conv2d`` arguments; return the 4-D input, the pairs, and whether it was 3-D."""
    if input.dim() not in (3, 4):
        raise ValueError(f"input must be 3-D (C, H, W) or 4-D (N, C, H, W), got shape {tuple(input.shape)}")
    if weight.dim() != 4:
        raise ValueError(f"weight must be 4-D (C_out, C_in/groups, kh, kw), got shape {tuple(weight.shape)}")
    if input.dtype not in dtypes or weight.dtype != input.dtype:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise ValueError(
            f"input dtype {input.dtype} and weight dtype {weight.dtype} must match and be one of {names}"
        )
    if input.device != weight.device or (bias is not None and bias.device != input.device):
        raise ValueError("input, weight and bias must be on the same device")
    unbatched = input.dim() == 3
    x = input.unsqueeze(0) if unbatched else input
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
    s, d = pair(stride, "stride"), pair(dilation, "dilation")
    if min(s) < 1 or min(d) < 1:
        raise ValueError(f"stride={s} and dilation={d} must be >= 1")
    if isinstance(padding, str):
        if padding == "valid":
            p = (0, 0)
        elif padding == "same":
            if s != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
            spans = (d[0] * (kh - 1), d[1] * (kw - 1))
            if spans[0] % 2 or spans[1] % 2:
                raise ValueError(
                    "padding='same' with an even dilated kernel span needs asymmetric padding, which this "
                    "kernel does not support; pad the input with F.pad and use padding=0"
                )
            p = (spans[0] // 2, spans[1] // 2)
        else:
            raise ValueError(f"padding={padding!r} must be an int, a pair, 'same' or 'valid'")
    else:
        p = pair(padding, "padding")
    if min(p) < 0:
        raise ValueError(f"padding={p} must be >= 0")
    ho = out_size(x.shape[2], kh, s[0], p[0], d[0])
    wo = out_size(x.shape[3], kw, s[1], p[1], d[1])
    if ho < 1 or wo < 1:
        raise ValueError(
            f"the dilated kernel ({kh}x{kw}, dilation {d}) is larger than the padded input "
            f"{tuple(x.shape[2:])} with padding {p}: the output would be empty"
        )
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
    ho = out_size(h, kh, a.stride[0], a.padding[0], a.dilation[0])
    wo = out_size(w, kw, a.stride[1], a.padding[1], a.dilation[1])
    return ConvShape(n, c, h, w, cout, a.groups, c // a.groups, cout // a.groups, kh, kw, ho, wo)


def geometry(x: torch.Tensor, weight: torch.Tensor, a: ConvArgs) -> tuple[int, int, int, int]:
    """``(Ho, Wo, K, C_out/groups)`` of the conv of 4-D ``x`` (``K = C_in/groups * kh * kw``)."""
    s = conv_shape(x, weight, a)
    return s.ho, s.wo, s.cg * s.kh * s.kw, s.cog


IntPair = int | Sequence[int]
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
            padding: IntPair | str, dilation: IntPair, groups: int,
            options: dict[str, Any]) -> torch.Tensor:  # fmt: skip
        x, a, unbatched = normalize(input, weight, bias, stride, padding, dilation, groups)
        if check is not None:
            check(x)
        out = body(x, weight, bias, a, **options) if takes_bias else body(x, weight, a, **options)
        return out.squeeze(0) if unbatched else out

    if takes_bias:

        def entry(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  stride: IntPair = 1, padding: IntPair | str = 0, dilation: IntPair = 1, groups: int = 1,
                  **options: Any) -> torch.Tensor:  # fmt: skip
            return run(input, weight, bias, stride, padding, dilation, groups, options)

    else:

        def entry(input: torch.Tensor, weight: torch.Tensor, stride: IntPair = 1,  # type: ignore[misc]
                  padding: IntPair | str = 0, dilation: IntPair = 1, groups: int = 1,
                  **options: Any) -> torch.Tensor:  # fmt: skip
            return run(input, weight, None, stride, padding, dilation, groups, options)

    entry.__name__ = entry.__qualname__ = body.__name__.lstrip("_")
    entry.__doc__ = body.__doc__
    entry.__module__ = body.__module__
    return entry
