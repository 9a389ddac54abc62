"""Conv2dProblem: one conv2d call described by value.

The spec is plain Python (no torch at import time) so the plugin can load, build ids and
validate shapes on machines where importing torch would be slow or impossible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    import torch

Kind = Literal["dense", "grouped", "depthwise", "pointwise"]

DTYPES: dict[str, str] = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8}
LAYOUTS = ("nchw", "nhwc")
# Names a user may write for each dtype: torch's names (``torch.float32`` prints as "torch.float32")
# and NumPy-style aliases. All map to the short canonical name used in ids and baseline keys.
DTYPE_ALIASES: dict[str, str] = {
    **{short: short for short in DTYPES},
    **{long: short for short, long in DTYPES.items()},
    "float": "fp32",
    "half": "fp16",
    "double": "fp64",
}


def canonical_dtype(value: object) -> str:
    """``fp32``/``fp16``/``bf16``/``fp64`` for a short name, a torch dtype or one of its names.

    ``torch.float32``, ``"float32"``, ``"float"`` and ``"torch.float32"`` all give ``"fp32"``.
    A torch dtype is recognised by its ``str`` (``"torch.float16"``), so torch is not imported.
    """
    text = str(value) if type(value).__module__ == "torch" else value
    if isinstance(text, str):
        key = text.strip().lower().removeprefix("torch.")
        if key in DTYPE_ALIASES:
            return DTYPE_ALIASES[key]
    accepted = ", ".join(sorted(DTYPE_ALIASES))
    raise ValueError(
        f"dtype={value!r} must be one of {sorted(DTYPES)}, one of the aliases {accepted}, "
        "or the matching torch dtype such as torch.float32"
    )


Pair = tuple[int, int]


def _pair(value: int | tuple[int, int] | list[int], name: str) -> Pair:
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} must be an int or a pair of ints, not a bool")
    if isinstance(value, int):
        return (value, value)
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return (int(value[0]), int(value[1]))
    raise ValueError(f"{name}={value!r} must be an int or a pair of ints")


class ConvInputs(NamedTuple):
    """Tensors for one call: ``candidate(input, weight, bias, *problem.conv_args())``."""

    input: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None


@dataclass(frozen=True, kw_only=True)
class Conv2dProblem:
    """A conv2d problem: shapes, hyper-parameters, dtype and memory layout.

    ``kernel``, ``stride``, ``padding`` and ``dilation`` accept an int or an (h, w) pair and are
    stored as pairs. ``dtype`` is one of ``fp32``, ``fp16``, ``bf16``, ``fp64``, or a torch dtype or
    name for one (``torch.float32``, ``"float32"``, ``"half"``...), stored as the short name; ``layout`` is
    ``nchw`` (contiguous) or ``nhwc`` (channels_last). Invalid combinations raise ``ValueError``
    naming the field and the rule.
    """

    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    kernel: Pair = field(default=(3, 3))
    stride: Pair = field(default=(1, 1))
    padding: Pair = field(default=(0, 0))
    dilation: Pair = field(default=(1, 1))
    groups: int = 1
    bias: bool = True
    dtype: str = "fp32"
    layout: str = "nchw"

    def __post_init__(self) -> None:
        for name in ("kernel", "stride", "padding", "dilation"):
            object.__setattr__(self, name, _pair(getattr(self, name), name))
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        for name in ("n", "c_in", "h", "w", "c_out", "groups"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name}={value!r} must be an int")
        self._validate()

    def _validate(self) -> None:
        if self.n < 0:
            raise ValueError(f"n={self.n} must be >= 0 (0 gives an empty batch)")
        for name in ("c_in", "c_out", "h", "w", "groups"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        for name, low in (("kernel", 1), ("stride", 1), ("dilation", 1), ("padding", 0)):
            pair = getattr(self, name)
            if min(pair) < low:
                raise ValueError(f"{name}={pair} must be >= {low} in both dimensions")
        if self.c_in % self.groups:
            raise ValueError(f"groups={self.groups} does not divide c_in={self.c_in}")
        if self.c_out % self.groups:
            raise ValueError(f"groups={self.groups} does not divide c_out={self.c_out}")
        for axis, size, k, d, p in (
            ("h", self.h, self.kernel[0], self.dilation[0], self.padding[0]),
            ("w", self.w, self.kernel[1], self.dilation[1], self.padding[1]),
        ):
            span = d * (k - 1) + 1
            if size + 2 * p < span:
                raise ValueError(
                    f"{axis}={size} with padding {p} is smaller than the dilated kernel span {span} "
                    f"(kernel {k}, dilation {d}): the output would be empty; "
                    f"use {axis} >= {span - 2 * p} or more padding"
                )
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout={self.layout!r} must be one of {list(LAYOUTS)}")

    # ---- derived shape -------------------------------------------------------------------
    @property
    def out_h(self) -> int:
        return (self.h + 2 * self.padding[0] - self.dilation[0] * (self.kernel[0] - 1) - 1) // self.stride[
            0
        ] + 1

    @property
    def out_w(self) -> int:
        return (self.w + 2 * self.padding[1] - self.dilation[1] * (self.kernel[1] - 1) - 1) // self.stride[
            1
        ] + 1

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c_in, self.h, self.w)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.c_out, self.c_in // self.groups, self.kernel[0], self.kernel[1])

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c_out, self.out_h, self.out_w)

    @property
    def kind(self) -> Kind:
        if self.groups == 1:
            if self.kernel == (1, 1):
                return "pointwise"
            return "dense"
        if self.groups == self.c_in:
            return "depthwise"
        return "grouped"

    @property
    def multiplier(self) -> int:
        """Output channels per group input channel (the depthwise channel multiplier)."""
        return self.c_out // self.groups

    @property
    def element_size(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def reduction_length(self) -> int:
        """K of the forward (and input-grad) reduction: C_in/g * kh * kw."""
        return (self.c_in // self.groups) * self.kernel[0] * self.kernel[1]

    @property
    def flops(self) -> int:
        """Forward FLOPs, counting a multiply-add as two (bias adds ignored)."""
        n, c_out, ho, wo = self.output_shape
        return 2 * n * c_out * ho * wo * self.reduction_length

    @property
    def min_bytes(self) -> int:
        """Fewest bytes a forward pass must move: read input and weight (and bias) once, write output."""
        numel = _prod(self.input_shape) + _prod(self.weight_shape) + _prod(self.output_shape)
        if self.bias:
            numel += self.c_out
        return numel * self.element_size

    def conv_args(self) -> tuple[Pair, Pair, Pair, int]:
        """``(stride, padding, dilation, groups)``, the trailing positional args of ``F.conv2d``."""
        return (self.stride, self.padding, self.dilation, self.groups)

    # ---- identity ------------------------------------------------------------------------
    @property
    def id(self) -> str:
        """Canonical id, e.g. ``n16-ci32-h112-w112-co32-k3x3-s1-p1-d1-g32-fp32-nchw``.

        Pairs with equal halves print once (``s1``), others as ``s2x1``; ``-nobias`` is added
        only when the problem has no bias. ``Conv2dProblem.from_id(p.id) == p``.
        """
        parts = [
            f"n{self.n}",
            f"ci{self.c_in}",
            f"h{self.h}",
            f"w{self.w}",
            f"co{self.c_out}",
            f"k{self.kernel[0]}x{self.kernel[1]}",
            f"s{_fmt_pair(self.stride)}",
            f"p{_fmt_pair(self.padding)}",
            f"d{_fmt_pair(self.dilation)}",
            f"g{self.groups}",
            self.dtype,
            self.layout,
        ]
        if not self.bias:
            parts.append("nobias")
        return "-".join(parts)

    def __str__(self) -> str:
        return self.id

    @classmethod
    def from_id(cls, text: str) -> Conv2dProblem:
        match = _ID_RE.fullmatch(text)
        if match is None:
            raise ValueError(
                f"{text!r} is not a Conv2dProblem id; expected the form "
                "n16-ci32-h112-w112-co32-k3x3-s1-p1-d1-g32-fp32-nchw[-nobias]"
            )
        g = match.groupdict()
        return cls(
            n=int(g["n"]),
            c_in=int(g["ci"]),
            h=int(g["h"]),
            w=int(g["w"]),
            c_out=int(g["co"]),
            kernel=(int(g["kh"]), int(g["kw"])),
            stride=_parse_pair(g["s"]),
            padding=_parse_pair(g["p"]),
            dilation=_parse_pair(g["d"]),
            groups=int(g["g"]),
            dtype=g["dtype"],
            layout=g["layout"],
            bias=g["nobias"] is None,
        )

    def replace(self, **changes: Any) -> Conv2dProblem:
        """A copy with some fields changed (validated like a new problem)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Conv2dProblem(**values)

    # ---- data ----------------------------------------------------------------------------
    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, DTYPES[self.dtype])  # type: ignore[no-any-return]

    def make_inputs(self, seed: int, device: str | torch.device = "cpu") -> ConvInputs:
        """Seeded random-normal input, weight and bias in the problem's dtype and layout.

        Data is drawn in fp32 on the CPU from ``torch.Generator().manual_seed(seed)`` and then
        cast and moved, so the same seed gives the same values on every device. Weights are
        scaled by 1/sqrt(K) to keep outputs O(1) in low precision.
        """
        import torch

        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(self.input_shape, generator=gen)
        w = torch.randn(self.weight_shape, generator=gen) / max(1.0, self.reduction_length) ** 0.5
        b = torch.randn(self.c_out, generator=gen) if self.bias else None
        dtype = self.torch_dtype()
        fmt = torch.channels_last if self.layout == "nhwc" else torch.contiguous_format
        x = x.to(device=device, dtype=dtype).contiguous(memory_format=fmt)
        w = w.to(device=device, dtype=dtype).contiguous(memory_format=fmt)
        bias = b.to(device=device, dtype=dtype) if b is not None else None
        return ConvInputs(x, w, bias)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def _fmt_pair(pair: Pair) -> str:
    return str(pair[0]) if pair[0] == pair[1] else f"{pair[0]}x{pair[1]}"


def _parse_pair(text: str) -> Pair:
    a, _, b = text.partition("x")
    return (int(a), int(b or a))


_PAIR = r"\d+(?:x\d+)?"
_ID_RE = re.compile(
    rf"n(?P<n>\d+)-ci(?P<ci>\d+)-h(?P<h>\d+)-w(?P<w>\d+)-co(?P<co>\d+)-k(?P<kh>\d+)x(?P<kw>\d+)"
    rf"-s(?P<s>{_PAIR})-p(?P<p>{_PAIR})-d(?P<d>{_PAIR})-g(?P<g>\d+)"
    rf"-(?P<dtype>fp32|fp16|bf16|fp64)-(?P<layout>nchw|nhwc)(?P<nobias>-nobias)?"
)


def require_problem(value: object, where: str) -> Conv2dProblem:
    """``value`` when it is a :class:`Conv2dProblem`; else a ``TypeError`` naming what it got and
    how to build one (a shape such as ``(8, 32, 56, 56)`` is not enough: a conv needs c_out, kernel...)."""
    __tracebackhide__ = True  # pytest shows the user's call, not this frame
    if isinstance(value, Conv2dProblem):
        return value
    raise TypeError(
        f"{where} takes a Conv2dProblem, not {type(value).__name__} {value!r}; build one: "
        "Conv2dProblem(n=8, c_in=32, h=56, w=56, c_out=64, kernel=3, padding=1) "
        "(or Conv2dProblem.from_id('n8-ci32-h56-w56-co64-k3x3-s1-p1-d1-g1-fp32-nchw'))"
    )
