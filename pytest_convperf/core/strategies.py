"""Hypothesis strategies that build valid conv2d problems by construction (docs/design.md §8).

No ``assume``/``filter``: every draw is turned into a valid problem. The order is kind and
channels, then kernel, stride and dilation, then the *output* size, then padding, and the input
size is derived from those (``H = (Ho-1)*s + d*(k-1) + 1 - 2p + r`` with ``0 <= r < s``), so the
output is never empty and the element budget is respected up front. Before any of that, one
switch per edge feature (odd channels, even kernel, non-square pairs, small output, odd input,
padding) is drawn, so combinations of edge features are as common as single ones; the hit rates on
bugs planted at such combinations are measured by ``tools/fuzz_hit_rate.py``.

Tensor data is not drawn here: draw a seed (:func:`seeds`) and call ``problem.make_inputs``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pytest_convperf.core.problem import LAYOUTS, Conv2dProblem, Kind

# The Hypothesis profiles live in their own module; these names stay importable from here.
from pytest_convperf.core.strategy_args import canonical_dtype_arg, check_choices, check_positive, one_or_many

# Sizes around tile and warp edges, where index bugs live.
EDGE_SIZES: tuple[int, ...] = (1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65)
KINDS: tuple[Kind, ...] = ("dense", "grouped", "depthwise", "pointwise")
DEFAULT_MAX_ELEMENTS = 2**22
# Defaults of the knobs that shrink to fit a small max_elements when left unset.
DEFAULT_KERNEL_SIZES: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7)
DEFAULT_DILATIONS: tuple[int, ...] = (1, 2, 3)
DEFAULT_MAX_CHANNELS = 65
DEFAULT_MAX_MULTIPLIER = 3


def _edges(cap: int, low: int = 1) -> list[int]:
    return [s for s in EDGE_SIZES if low <= s <= cap]


def _sizes(cap: int, low: int = 1) -> st.SearchStrategy[int]:
    """Tile-edge sizes and plain integers in ``[low, cap]``, edges favoured."""
    edges = _edges(cap, low)
    plain = st.integers(low, cap)
    return st.one_of(st.sampled_from(edges), plain) if edges else plain


def conv2d_problems(
    *,
    kinds: Sequence[Kind] = KINDS,
    dtypes: Sequence[str] = ("fp32",),
    layouts: Sequence[str] = ("nchw",),
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    kernel_sizes: Sequence[int] | None = None,
    square_kernels: bool = False,
    strides: Sequence[int] = (1, 2, 3),
    dilations: Sequence[int] | None = None,
    bias: Sequence[bool] = (True, False),
    max_channels: int | None = None,
    max_multiplier: int | None = None,
    max_groups: int = 8,
    max_batch: int = 17,
    min_batch: int = 1,
    max_out_size: int = 65,
    max_padding: int | None = None,
) -> st.SearchStrategy[Conv2dProblem]:
    """Valid :class:`Conv2dProblem` s of the given kinds, dtypes and layouts.

    Every tensor (input, weight, output) has at most ``max_elements`` elements. Kernels are
    non-square unless ``square_kernels``; depthwise problems have channel multipliers in
    ``1..max_multiplier``; ``min_batch=0`` adds empty batches. ``max_padding`` caps padding
    (default: up to the dilated kernel span minus one, beyond "same"). ``dtypes`` accept the
    aliases of :func:`~pytest_convperf.core.problem.canonical_dtype` (``"float32"``, ``torch.half``...).

    ``kernel_sizes`` (default 1..7), ``dilations`` (1..3), ``max_channels`` (65) and
    ``max_multiplier`` (3) shrink to fit a small ``max_elements`` when left unset; only values
    given explicitly that cannot fit raise ``InvalidArgument``.

    Edge features (dilation > 1, even or non-square kernels, strides, odd sizes, padding on small
    inputs, odd channel counts) are switched on together per problem, so a bug that needs two of
    them at once is reached about as often as a bug that needs one.
    """
    # One value where a sequence is expected (dtypes=torch.float32, kinds="dense") means that value.
    kinds, dtypes, layouts, bias = (one_or_many(v) for v in (kinds, dtypes, layouts, bias))  # type: ignore[assignment]
    check_choices("kinds", kinds, KINDS)
    check_choices("dtypes", dtypes)
    canon_dtypes = tuple(dict.fromkeys(canonical_dtype_arg(d) for d in dtypes))
    check_choices("layouts", layouts, LAYOUTS)
    check_choices("bias", bias, (True, False))
    explicit = {
        name
        for name, value in (
            ("kernel_sizes", kernel_sizes),
            ("dilations", dilations),
            ("max_channels", max_channels),
            ("max_multiplier", max_multiplier),
        )
        if value is not None
    }
    if kernel_sizes is not None:
        check_positive("kernel_sizes", kernel_sizes)
    if dilations is not None:
        check_positive("dilations", dilations)
    check_positive("strides", strides)
    for name, value, low in (
        ("max_channels", max_channels, 1),
        ("max_multiplier", max_multiplier, 1),
        ("max_groups", max_groups, 2),
        ("max_batch", max_batch, 1),
        ("min_batch", min_batch, 0),
        ("max_out_size", max_out_size, 1),
    ):
        if value is not None and value < low:
            raise InvalidArgument(f"{name}={value} must be >= {low}")
    if min_batch > max_batch:
        raise InvalidArgument(f"min_batch={min_batch} exceeds max_batch={max_batch}")
    fit = _fit_to_budget(
        max_elements,
        kinds=tuple(kinds),
        strides=tuple(strides),
        kernel_sizes=kernel_sizes,
        dilations=dilations,
        max_channels=max_channels,
        max_multiplier=max_multiplier,
        explicit=explicit,
    )
    if "dense" in kinds and max(fit.kernel_sizes) < 2:
        raise InvalidArgument("dense problems need a kernel size > 1 in kernel_sizes (1x1 is pointwise)")
    if "grouped" in kinds and fit.max_channels < 4:
        raise InvalidArgument("grouped problems need max_channels >= 4 (2 groups of 2 channels)")
    return _build(
        kinds=tuple(kinds),
        dtypes=canon_dtypes,
        layouts=tuple(layouts),
        max_elements=max_elements,
        kernel_sizes=fit.kernel_sizes,
        square_kernels=square_kernels,
        strides=tuple(sorted(set(strides))),
        dilations=fit.dilations,
        bias=tuple(bias),
        max_channels=fit.max_channels,
        max_multiplier=fit.max_multiplier,
        max_groups=max_groups,
        max_batch=max_batch,
        min_batch=min_batch,
        max_out_size=max_out_size,
        max_padding=max_padding,
    )


class _Fit(NamedTuple):
    kernel_sizes: tuple[int, ...]
    dilations: tuple[int, ...]
    max_channels: int
    max_multiplier: int


def _fit_to_budget(
    max_elements: int,
    *,
    kinds: tuple[Kind, ...],
    strides: tuple[int, ...],
    kernel_sizes: Sequence[int] | None,
    dilations: Sequence[int] | None,
    max_channels: int | None,
    max_multiplier: int | None,
    explicit: set[str],
) -> _Fit:
    """Shrink the unset knobs until one image and the weight of the widest problem fit ``max_elements``.

    The widest problem has the most channels and the largest dilated span at the largest stride.
    Channels shrink first (down to 4, what grouped problems need), then the channel multiplier,
    then the largest dilation, then the largest kernel: small budgets keep every feature, smaller.
    """
    ks = sorted(set(kernel_sizes if kernel_sizes is not None else DEFAULT_KERNEL_SIZES))
    ds = sorted(set(dilations if dilations is not None else DEFAULT_DILATIONS))
    mult = max_multiplier if max_multiplier is not None else DEFAULT_MAX_MULTIPLIER
    chan = max_channels if max_channels is not None else DEFAULT_MAX_CHANNELS
    depthwise = "depthwise" in kinds

    def need(chan: int, mult: int) -> int:
        span = ds[-1] * (ks[-1] - 1) + 1
        widest = max(chan, chan * mult if depthwise else chan)
        # The weight is bounded too: chan x chan x k x k for a dense kernel (4 x 4 x 6 x 6 = 576
        # elements drawn under max_elements=512 before it counted), chan x mult x k x k depthwise.
        per_out = chan if set(kinds) - {"depthwise"} else 1
        taps = 1 if set(kinds) == {"pointwise"} else ks[-1] ** 2
        return max(widest * (span + max(strides)) ** 2, widest * per_out * taps)

    while need(chan, mult) > max_elements:
        if "max_channels" not in explicit and chan > 4:
            chan = max(4, chan // 2)
        elif "max_multiplier" not in explicit and depthwise and mult > 1:
            mult -= 1
        elif "dilations" not in explicit and len(ds) > 1:
            ds.pop()
        elif "kernel_sizes" not in explicit and len(ks) > 2:
            ks.pop()
        else:
            fixed = sorted(explicit) or ["strides"]
            raise InvalidArgument(
                f"max_elements={max_elements} is too small for a single image with {chan} channels "
                f"(multiplier {mult}), kernel {ks[-1]}, dilation {ds[-1]} and stride {max(strides)}, "
                f"which needs {need(chan, mult)} elements; raise max_elements or lower "
                f"{', '.join(fixed)}"
            )
    return _Fit(tuple(ks), tuple(ds), chan, mult)


def _pick(draw: st.DrawFn, preferred: Sequence[int], fallback: Sequence[int]) -> int:
    """A value from ``preferred`` when there is one, else from ``fallback``."""
    return draw(st.sampled_from(preferred if preferred else fallback))


def _pair_of(draw: st.DrawFn, values: tuple[int, ...], plain: int, mixed: float) -> tuple[int, int]:
    """A stride or dilation pair: ``plain`` on both axes, one edge value on both, or two different
    values, the last with weight ``mixed`` (0 for square problems) against 1 for each of the others.

    An edge value on both axes (say dilation 2x2) is drawn about a quarter of the time in square
    problems instead of a ninth of a ninth. Shrinking goes to the plain pair.
    """
    mode = draw(st.sampled_from(("plain", "same", *("mixed",) * round(2 * mixed))))
    edges = [v for v in values if v != plain]
    if mode == "plain" or not edges:
        return (plain, plain) if plain in values else (values[0], values[0])
    if mode == "same":
        v = _pick(draw, edges, values)
        return (v, v)
    a = draw(st.sampled_from(values))
    return a, _pick(draw, [v for v in values if v != a], values)


@st.composite
def _build(
    draw: st.DrawFn,
    *,
    kinds: tuple[Kind, ...],
    dtypes: tuple[str, ...],
    layouts: tuple[str, ...],
    max_elements: int,
    kernel_sizes: tuple[int, ...],
    square_kernels: bool,
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    bias: tuple[bool, ...],
    max_channels: int,
    max_multiplier: int,
    max_groups: int,
    max_batch: int,
    min_batch: int,
    max_out_size: int,
    max_padding: int | None,
) -> Conv2dProblem:
    kind = draw(st.sampled_from(kinds))
    # Feature switches first: each edge feature is on in about half the problems, independently,
    # so any two meet in about a quarter. Booleans shrink to False, the plain problem.
    channel_edges = draw(st.booleans())
    even_kernel = draw(st.booleans())
    # Off: every pair is square (kernel 3x3, stride 2x2...). On: kernel, stride and dilation may
    # differ between the axes, together, so a bug that swaps h and w meets them together.
    nonsquare = draw(st.booleans())
    small_output = draw(st.booleans())
    odd_size = draw(st.booleans())
    padding_mode = draw(st.sampled_from(("any", "none", "max")))

    c_in, c_out, groups = _channels(draw, kind, max_channels, max_multiplier, max_groups, channel_edges)

    if kind == "pointwise":
        kernel, dilation = (1, 1), (1, 1)
    else:
        # A 1x1 dense conv is pointwise: keep "dense" to kernels with a spatial extent.
        wide = tuple(k for k in kernel_sizes if k > 1) if kind == "dense" else kernel_sizes
        pool = [k for k in wide if k % 2 == 0] if even_kernel else list(wide)
        kh = _pick(draw, pool, wide)
        if nonsquare and not square_kernels:
            # kw from all sizes: with kh == 1 a 1xN dense kernel is still dense (not pointwise).
            kw = _pick(draw, [k for k in kernel_sizes if k != kh and (k % 2 == 0 or not even_kernel)], [kh])
        else:
            kw = kh
        kernel = (kh, kw)
        # Non-square dilation is rarer in real networks than non-square strides: half the weight.
        dilation = _pair_of(draw, dilations, plain=1, mixed=0.5 * nonsquare)
    stride = _pair_of(draw, strides, plain=1, mixed=1.0 * nonsquare)

    # The budget bounds every per-image tensor; split it over the two spatial axes.
    c_max = max(c_in, c_out)
    side = max(1, math.isqrt(max_elements // c_max))
    dims = []
    for axis in range(2):
        k, s, d = kernel[axis], stride[axis], dilation[axis]
        span = d * (k - 1) + 1
        # Input side with p = 0 and the largest remainder: (Ho-1)*s + span + s - 1 <= side.
        out_cap = max(1, min(max_out_size, (side - span - s + 1) // s + 1))
        out = draw(st.integers(1, min(3, out_cap))) if small_output else draw(_sizes(out_cap))
        # Padding may not make the input empty: (out-1)*s + span - 2p >= 1.
        pad_cap = ((out - 1) * s + span - 1) // 2
        pad_cap = max(0, min(pad_cap, span - 1 if max_padding is None else max_padding))
        if padding_mode == "none":
            pad = 0
        elif padding_mode == "max":
            pad = pad_cap
        else:
            pad = draw(st.integers(0, pad_cap))
        base = (out - 1) * s + span - 2 * pad
        # Rows past the last window (0 <= r < s); odd_size picks the r that makes the side odd.
        odd_rems = [r for r in range(s) if (base + r) % 2 == 1]
        rem = _pick(draw, odd_rems, range(s)) if odd_size else draw(st.integers(0, s - 1))
        dims.append((base + rem, out, pad))
    (h, out_h, pad_h), (w, out_w, pad_w) = dims

    per_image = max(c_in * h * w, c_out * out_h * out_w)
    weight_numel = c_out * (c_in // groups) * kernel[0] * kernel[1]
    batch_cap = max(min_batch, min(max_batch, max_elements // max(per_image, 1)))
    if weight_numel > max_elements:  # cannot happen with the validated knobs; keep the promise
        raise InvalidArgument(f"weight of {weight_numel} elements exceeds max_elements={max_elements}")
    n = draw(st.one_of(st.just(max(min_batch, 1) if batch_cap >= 1 else 0), _sizes(batch_cap, min_batch)))

    return Conv2dProblem(
        n=n,
        c_in=c_in,
        h=h,
        w=w,
        c_out=c_out,
        kernel=kernel,
        stride=stride,
        padding=(pad_h, pad_w),
        dilation=dilation,
        groups=groups,
        bias=draw(st.sampled_from(bias)),
        dtype=draw(st.sampled_from(dtypes)),
        layout=draw(st.sampled_from(layouts)),
    )


def _odd(values: Sequence[int]) -> list[int]:
    return [v for v in values if v % 2 == 1]


def _channels(
    draw: st.DrawFn, kind: Kind, max_channels: int, max_multiplier: int, max_groups: int, edges: bool
) -> tuple[int, int, int]:
    """``(c_in, c_out, groups)`` valid for ``kind``.

    ``edges`` makes the channel counts (per group) odd, off the multiples of 2, 4 and 8 that
    vectorised loads assume, and gives depthwise problems a channel multiplier > 1.
    """
    if kind in ("dense", "pointwise"):
        if edges:
            return (
                _pick(draw, _odd(_edges(max_channels)), [1]),
                _pick(draw, _odd(_edges(max_channels)), [1]),
                1,
            )
        return draw(_sizes(max_channels)), draw(_sizes(max_channels)), 1
    if kind == "depthwise":
        # groups == c_in == 1 would be a dense conv: depthwise needs >= 2 channels.
        cap = max(2, max_channels)
        if edges:
            c_in = _pick(draw, _odd(_edges(cap, 2)), [cap])
            return c_in, c_in * draw(st.integers(min(2, max_multiplier), max_multiplier)), c_in
        c_in = draw(_sizes(cap, low=2))
        return c_in, c_in * draw(st.integers(1, max_multiplier)), c_in
    # grouped: >= 2 groups of >= 2 input channels each (1 per group would be depthwise).
    groups = draw(st.integers(2, max(2, min(max_groups, max_channels // 2))))
    per_group_cap = max(2, max_channels // groups)
    if edges:
        per_in = _pick(draw, _odd(range(3, per_group_cap + 1)), range(2, per_group_cap + 1))
        per_out = _pick(draw, _odd(range(1, per_group_cap + 1)), [1])
    else:
        per_in = draw(st.integers(2, per_group_cap))
        per_out = draw(st.integers(1, per_group_cap))
    return groups * per_in, groups * per_out, groups


def seeds() -> st.SearchStrategy[int]:
    """Seeds for ``Conv2dProblem.make_inputs`` (tensor data comes from a seed, not from draws)."""
    return st.integers(0, 2**31 - 1)


__all__ = ["conv2d_problems", "seeds"]
