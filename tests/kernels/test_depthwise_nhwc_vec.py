"""The v3 NHWC depthwise kernel (``fwd_nhwc_vec`` in depthwise.cu), run on the CPU emulator.

A thread owns one 16-byte vector of channels (fp32 4, fp16/bf16 8) and walks a strip of output rows
down one column, feeding each input row it loads to every output row that uses it. Checked here
against the fp64 oracle over many geometries (k 3/5/7, stride 1/2, padding 0..k, odd sizes, strip
heights 1-8, 1-10 channel vectors: 1, 2, 4 and 8 vectors per block and a partial channel group), with
the flipped filter of the input grad, and the run-time dispatch: v3 takes it where C is a multiple of
the vector width and the tensors are 16-byte aligned, the row kernel everywhere else and under v2.
The sanitizer cases and the planted controls are in ``test_sanitized_kernels.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.nn import grad as nn_grad

from kernels.depthwise.seed import DEPTHWISE_SEED_SHAPES
from kernels.model import calibration
from kernels.model.static import Shape
from tests.kernels.cuda_emulation import EmulatedDepthwise, Emulation, geometry
from tests.kernels.emulated_families import assert_close_fp64, misaligned

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
VECTOR = {torch.float32: 4, torch.float16: 8, torch.bfloat16: 8}
STRIPS = (1, 2, 3, 8)  # forced output rows per thread; 8 is kNhwcVecStrip, what every call runs


def _oracle(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, s: int, p: int, flip: bool
) -> torch.Tensor:
    wd = w.double().flip(2, 3) if flip else w.double()
    return F.conv2d(x.double(), wd, None if b is None else b.double(), s, p, 1, x.shape[1])


def _inputs(n: int, c: int, h: int, w: int, k: int, dtype: torch.dtype, seed: int, bias: bool = True):  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=gen).to(dtype).contiguous(memory_format=torch.channels_last)
    wt = torch.randn(c, 1, k, k, generator=gen).to(dtype)
    b = torch.randn(c, generator=gen).to(dtype) if bias else None
    return x, wt, b


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(
    k=st.sampled_from((3, 5, 7)),
    s=st.sampled_from((1, 2)),
    h=st.integers(1, 13),
    w=st.integers(1, 13),
    pad=st.integers(0, 7),
    dtype=st.sampled_from(tuple(DTYPES)),
    vectors=st.integers(1, 10),
    n=st.integers(1, 2),
    strip=st.sampled_from(STRIPS),
    bias=st.booleans(),
    flip=st.booleans(),
)
def test_nhwc_vec_matches_oracle(emulated_lib: Emulation, k: int, s: int, h: int, w: int, pad: int,
                                 dtype: str, vectors: int, n: int, strip: int, bias: bool,
                                 flip: bool) -> None:  # fmt: skip
    """Strip heights 1, 2, 3 and 8 (the one calls run), halos on every side, maps smaller than the
    filter's reach, partial strips and partial channel groups."""
    pad = min(pad, k)
    h, w = max(h, k - 2 * pad), max(w, k - 2 * pad)
    t = DTYPES[dtype]
    c = vectors * VECTOR[t]
    x, wt, b = _inputs(n, c, h, w, k, t, seed=h * 131 + w * 7 + k, bias=bias)
    emu = EmulatedDepthwise(emulated_lib, "v3")
    y = emu.forward_nhwc_vec(x, wt, b, s, pad, strip, flip)
    assert emu.last_kernel().startswith("fwd_nhwc_vec<"), emu.last_kernel()
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert_close_fp64(
        y, _oracle(x, wt, b, s, pad, flip), k * k + 1, f"{dtype} k{k} s{s} {h}x{w} pad {pad} c{c}"
    )


@pytest.mark.parametrize(
    ("variant", "c", "misalign", "kernel"),
    [
        ("v3", 16, False, "fwd_nhwc_vec<"),
        ("v3", 18, False, "fwd_rows_nhwc<"),  # C not a multiple of 4 (fp32) / 8 (fp16, bf16)
        ("v3", 16, True, "fwd_rows_nhwc<"),  # x not 16-byte aligned
        ("v2", 16, False, "fwd_rows_nhwc<"),  # the measured default
        ("v1", 16, False, "fwd_rows_nhwc<"),
    ],
)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_variant_picks_the_vector_kernel_where_it_applies(
    emulated_lib: Emulation, variant: str, c: int, misalign: bool, kernel: str, dtype: str
) -> None:
    """The forward and the stride-1 input grad through the public entry points: the kernel that ran,
    and its result against the oracle."""
    t = DTYPES[dtype]
    k, s, p = 3, 1, 1
    x, wt, b = _inputs(2, c, 9, 7, k, t, seed=c)
    if misalign:
        x = misaligned(x)
        assert x.data_ptr() % 16 != 0
    emu = EmulatedDepthwise(emulated_lib, variant)
    y = emu.forward(x, wt, b, (s, s), (p, p), (1, 1), True)
    assert emu.last_kernel().startswith(kernel), f"forward ran {emu.last_kernel()}"
    assert_close_fp64(y, _oracle(x, wt, b, s, p, False), k * k + 1, f"{variant} forward")
    if misalign:
        return  # the input grad allocates its own aligned dy
    dy = torch.randn(2, c, 9, 7).to(t).contiguous(memory_format=torch.channels_last)
    dx = emu.input_grad(dy, wt, (9, 7), (s, s), (p, p), (1, 1), True)
    assert emu.last_kernel().startswith(kernel), f"input grad ran {emu.last_kernel()}"
    want = nn_grad.conv2d_input((2, c, 9, 7), wt.double(), dy.double(), s, p, 1, c)  # type: ignore[no-untyped-call]
    assert_close_fp64(dx, want, k * k, f"{variant} input grad")


@pytest.mark.parametrize(("hw", "k", "pad"), [(6, 3, 3), (9, 5, 4), (7, 7, 6)])
def test_v3_input_grad_with_a_crop(emulated_lib: Emulation, hw: int, k: int, pad: int) -> None:
    """Padding > k - 1: the stride-1 input grad runs the vector kernel with negative padding."""
    c = 8
    gen = torch.Generator().manual_seed(hw)
    g = geometry((2, c, hw, hw), (k, k), (1, 1), (pad, pad), (1, 1))
    dy = torch.randn(2, c, g[4], g[5], generator=gen).contiguous(memory_format=torch.channels_last)
    wt = torch.randn(c, 1, k, k, generator=gen)
    emu = EmulatedDepthwise(emulated_lib, "v3")
    dx = emu.input_grad(dy, wt, (hw, hw), (1, 1), (pad, pad), (1, 1), True)
    assert emu.last_kernel().startswith("fwd_nhwc_vec<"), emu.last_kernel()
    want = nn_grad.conv2d_input((2, c, hw, hw), wt.double(), dy.double(), 1, pad, 1, c)  # type: ignore[no-untyped-call]
    assert_close_fp64(dx, want, k * k, f"crop k{k} pad {pad}")


@pytest.mark.parametrize("shape", DEPTHWISE_SEED_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cost_model_mirrors_the_nhwc_vec_plan(
    emulated_lib: Emulation, shape: tuple[int, int, int, int], dtype: torch.dtype
) -> None:
    """``calibration.nhwc_vec_plan`` (the model's copy) picks the block width and strip height that
    ``depthwise.cu`` picks, on every seed shape."""
    n, c, hw, k = shape
    g = geometry((n, c, hw, hw), (k, k), (1, 1), (k // 2, k // 2), (1, 1))
    want = EmulatedDepthwise(emulated_lib).nhwc_vec_plan(dtype, g)
    plan = calibration.nhwc_vec_plan(Shape(n, c, hw, k, 1, 4 if dtype == torch.float32 else 2))
    assert (plan.ct, plan.strip) == want


@pytest.mark.parametrize(
    ("dtype", "c", "hw", "k", "ct"),
    [
        ("fp32", 40, 17, 3, 8),  # 48 positions: 8-wide blocks, two channel groups (the second partial)
        ("fp32", 72, 7, 3, 32),  # 7 positions: 32-wide blocks (a 7x7 map), 18 vectors of 32 lanes
        ("fp16", 96, 9, 5, 16),  # 18 positions: 16-wide
        ("bf16", 512, 5, 7, 16),  # 16-bit k7: at most 16 wide (shared memory), 4 channel groups
    ],
)
def test_block_width_follows_the_positions(
    emulated_lib: Emulation, dtype: str, c: int, hw: int, k: int, ct: int
) -> None:
    """Few positions per sample widen the block along C (up to its shared-memory limit) instead of
    leaving rows of it idle; the plan and the result, through the public forward entry."""
    t = DTYPES[dtype]
    g = geometry((2, c, hw, hw), (k, k), (1, 1), (k // 2, k // 2), (1, 1))
    emu = EmulatedDepthwise(emulated_lib, "v3")
    assert emu.nhwc_vec_plan(t, g) == (ct, 8)
    x, wt, b = _inputs(2, c, hw, hw, k, t, seed=c + k)
    y = emu.forward(x, wt, b, (1, 1), (k // 2, k // 2), (1, 1), True)
    assert emu.last_kernel().startswith("fwd_nhwc_vec<"), emu.last_kernel()
    assert_close_fp64(y, _oracle(x, wt, b, 1, k // 2, False), k * k + 1, f"{dtype} c{c} {hw}x{hw} k{k}")
