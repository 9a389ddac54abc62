"""Hypothesis strategies that build valid conv2d problems by construction (DESIGN §8).

No ``assume``/``filter``: every draw is turned into a valid problem. The order is kind and
channels, then kernel, stride and dilation, then the *output* size, then padding, and the input
size is derived from those (``H = (Ho-1)*s + d*(k-1) + 1 - 2p + r`` with ``0 <= r < s``), so the
output is never empty and the element budget is respected up front.

Tensor data is not drawn here: draw a seed (:func:`seeds`) and call ``problem.make_inputs``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pytest_convperf.problem import DTYPES, LAYOUTS, Conv2dProblem, Kind

# Sizes around tile and warp edges, where index bugs live.
EDGE_SIZES: tuple[int, ...] = (1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65)
KINDS: tuple[Kind, ...] = ("dense", "grouped", "depthwise", "pointwise")
DEFAULT_MAX_ELEMENTS = 2**22


def _check_choices(name: str, values: Sequence[object], allowed: Sequence[object] | None = None) -> None:
    if len(values) == 0:
        raise InvalidArgument(f"{name} must not be empty")
    if allowed is not None:
        bad = [v for v in values if v not in allowed]
        if bad:
            raise InvalidArgument(f"{name} has {bad!r}; allowed are {list(allowed)}")


def _check_positive(name: str, values: Sequence[int], low: int = 1) -> None:
    _check_choices(name, values)
    bad = [v for v in values if not isinstance(v, int) or v < low]
    if bad:
        raise InvalidArgument(f"{name} has {bad!r}; each must be an int >= {low}")


def _sizes(cap: int, low: int = 1) -> st.SearchStrategy[int]:
    """Tile-edge sizes and plain integers in ``[low, cap]``, edges favoured."""
    edges = [s for s in EDGE_SIZES if low <= s <= cap]
    plain = st.integers(low, cap)
    return st.one_of(st.sampled_from(edges), plain) if edges else plain


def conv2d_problems(
    *,
    kinds: Sequence[Kind] = KINDS,
    dtypes: Sequence[str] = ("fp32",),
    layouts: Sequence[str] = ("nchw",),
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    kernel_sizes: Sequence[int] = (1, 2, 3, 4, 5, 6, 7),
    square_kernels: bool = False,
    strides: Sequence[int] = (1, 2, 3),
    dilations: Sequence[int] = (1, 2, 3),
    bias: Sequence[bool] = (True, False),
    max_channels: int = 65,
    max_multiplier: int = 3,
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
    (default: up to the dilated kernel span minus one, beyond "same").
    """
    _check_choices("kinds", kinds, KINDS)
    _check_choices("dtypes", dtypes, tuple(DTYPES))
    _check_choices("layouts", layouts, LAYOUTS)
    _check_choices("bias", bias, (True, False))
    _check_positive("kernel_sizes", kernel_sizes)
    _check_positive("strides", strides)
    _check_positive("dilations", dilations)
    for name, value, low in (
        ("max_channels", max_channels, 1),
        ("max_multiplier", max_multiplier, 1),
        ("max_groups", max_groups, 2),
        ("max_batch", max_batch, 1),
        ("min_batch", min_batch, 0),
        ("max_out_size", max_out_size, 1),
    ):
        if value < low:
            raise InvalidArgument(f"{name}={value} must be >= {low}")
    if min_batch > max_batch:
        raise InvalidArgument(f"min_batch={min_batch} exceeds max_batch={max_batch}")
    if "dense" in kinds and max(kernel_sizes) < 2:
        raise InvalidArgument("dense problems need a kernel size > 1 in kernel_sizes (1x1 is pointwise)")
    if "grouped" in kinds and max_channels < 4:
        raise InvalidArgument("grouped problems need max_channels >= 4 (2 groups of 2 channels)")
    span = max(dilations) * (max(kernel_sizes) - 1) + 1
    worst_c = max(max_channels, max_channels * max_multiplier)
    if max_elements < worst_c * (span + max(strides)) ** 2:
        raise InvalidArgument(
            f"max_elements={max_elements} is too small for a single image with {worst_c} channels and a "
            f"dilated kernel span of {span}; raise it or lower max_channels/kernel_sizes/dilations"
        )
    return _build(
        kinds=tuple(kinds),
        dtypes=tuple(dtypes),
        layouts=tuple(layouts),
        max_elements=max_elements,
        kernel_sizes=tuple(sorted(set(kernel_sizes))),
        square_kernels=square_kernels,
        strides=tuple(sorted(set(strides))),
        dilations=tuple(sorted(set(dilations))),
        bias=tuple(bias),
        max_channels=max_channels,
        max_multiplier=max_multiplier,
        max_groups=max_groups,
        max_batch=max_batch,
        min_batch=min_batch,
        max_out_size=max_out_size,
        max_padding=max_padding,
    )


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
    c_in, c_out, groups = _channels(draw, kind, max_channels, max_multiplier, max_groups)

    if kind == "pointwise":
        kernel, dilation = (1, 1), (1, 1)
    else:
        # A 1x1 dense conv is pointwise: keep "dense" to kernels with a spatial extent.
        wide = tuple(k for k in kernel_sizes if k > 1) if kind == "dense" else kernel_sizes
        if square_kernels:
            kh = kw = draw(st.sampled_from(wide))
        else:
            kh = draw(st.sampled_from(kernel_sizes))
            kw = draw(st.sampled_from(wide if kh == 1 else kernel_sizes))
        kernel = (kh, kw)
        dilation = (draw(st.sampled_from(dilations)), draw(st.sampled_from(dilations)))
    stride = (draw(st.sampled_from(strides)), draw(st.sampled_from(strides)))

    # The budget bounds every per-image tensor; split it over the two spatial axes.
    c_max = max(c_in, c_out)
    side = max(1, math.isqrt(max_elements // c_max))
    dims = []
    for axis in range(2):
        k, s, d = kernel[axis], stride[axis], dilation[axis]
        span = d * (k - 1) + 1
        # Input side with p = 0 and the largest remainder: (Ho-1)*s + span + s - 1 <= side.
        out_cap = max(1, min(max_out_size, (side - span - s + 1) // s + 1))
        out = draw(_sizes(out_cap))
        # Padding may not make the input empty: (out-1)*s + span - 2p >= 1.
        pad_cap = ((out - 1) * s + span - 1) // 2
        pad_cap = min(pad_cap, span - 1 if max_padding is None else max_padding)
        pad = draw(st.integers(0, max(0, pad_cap)))
        rem = draw(st.integers(0, s - 1))
        dims.append(((out - 1) * s + span - 2 * pad + rem, out, pad))
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


def _channels(
    draw: st.DrawFn, kind: Kind, max_channels: int, max_multiplier: int, max_groups: int
) -> tuple[int, int, int]:
    """``(c_in, c_out, groups)`` valid for ``kind``."""
    if kind in ("dense", "pointwise"):
        return draw(_sizes(max_channels)), draw(_sizes(max_channels)), 1
    if kind == "depthwise":
        # groups == c_in == 1 would be a dense conv: depthwise needs >= 2 channels.
        c_in = draw(_sizes(max(2, max_channels), low=2))
        return c_in, c_in * draw(st.integers(1, max_multiplier)), c_in
    # grouped: >= 2 groups of >= 2 input channels each (1 per group would be depthwise).
    groups = draw(st.integers(2, max(2, min(max_groups, max_channels // 2))))
    per_group_cap = max(2, max_channels // groups)
    c_in = groups * draw(st.integers(2, per_group_cap))
    c_out = groups * draw(st.integers(1, per_group_cap))
    return c_in, c_out, groups


def seeds() -> st.SearchStrategy[int]:
    """Seeds for ``Conv2dProblem.make_inputs`` (tensor data comes from a seed, not from draws)."""
    return st.integers(0, 2**31 - 1)


PROFILES = ("convperf-dev", "convperf-ci", "convperf-nightly")


def register_profiles() -> None:
    """Register ``convperf-dev``, ``convperf-ci`` (derandomized) and ``convperf-nightly``.

    The first example of a session pays for CUDA context, cuDNN handles and kernel JIT, so no
    profile has a deadline; ``too_slow`` is suppressed for the same reason.
    """
    slow = [HealthCheck.too_slow, HealthCheck.data_too_large]
    settings.register_profile("convperf-dev", max_examples=25, deadline=None, suppress_health_check=slow)
    settings.register_profile(
        "convperf-ci",
        max_examples=60,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=True,
        suppress_health_check=slow,
    )
    settings.register_profile(
        "convperf-nightly", max_examples=2000, deadline=None, print_blob=True, suppress_health_check=slow
    )
