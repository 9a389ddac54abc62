"""W3's channels_last weight grad (``wgrad_nhwc_vec`` in depthwise.cu), run on the CPU emulator.

A thread owns one 16-byte vector of channels (fp32 4, fp16/bf16 8), walks strips of output rows down
columns, keeps its kernel-row group's tap sums and the bias sum in registers, and the blocks of a
channel block (splits x kernel-row groups) reduce through W2's last-block step. Checked here: the
fp64 oracle over drawn geometries (k 3/5/7, stride 1/2, padding, odd sizes, 1-10 channel vectors,
1-3 samples, with and without the bias, one split and many), the dispatch (W3 where C is a multiple
of the vector width and the tensors are 16-byte aligned, W2's generic kernel elsewhere and under
``w2``), one launch per call, bitwise determinism over block orders, and the Python mirror of the
plan. The sanitizer cases and the planted controls are in ``test_sanitized_kernels.py``.
"""

from __future__ import annotations

import pytest
import torch
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
KERNEL = "wgrad_nhwc_vec<"


def _inputs(n: int, c: int, h: int, w: int, k: int, s: int, p: int, dtype: torch.dtype,
            seed: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:  # fmt: skip
    """channels_last x and dy of a depthwise k x k, stride s, padding p conv, and its geometry."""
    g = geometry((n, c, h, w), (k, k), (s, s), (p, p), (1, 1))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=gen).to(dtype).contiguous(memory_format=torch.channels_last)
    dy = torch.randn(n, c, g[4], g[5], generator=gen).to(dtype).contiguous(memory_format=torch.channels_last)
    return x, dy, g


def _oracle(x: torch.Tensor, dy: torch.Tensor, k: int, s: int, p: int) -> tuple[torch.Tensor, torch.Tensor]:
    c = x.shape[1]
    dw = nn_grad.conv2d_weight(x.double(), (c, 1, k, k), dy.double(), s, p, 1, c)  # type: ignore[no-untyped-call]
    return dw, dy.double().sum(dim=(0, 2, 3))


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(
    k=st.sampled_from((3, 5, 7)),
    s=st.sampled_from((1, 2)),
    h=st.integers(1, 19),
    w=st.integers(1, 13),
    pad=st.integers(0, 4),
    dtype=st.sampled_from(tuple(DTYPES)),
    vectors=st.integers(1, 10),
    n=st.integers(1, 3),
    bias=st.booleans(),
    sms=st.sampled_from((1, 3, 64)),
)
def test_wgrad_nhwc_vec_matches_oracle(
    emulated_lib: Emulation,
    k: int,
    s: int,
    h: int,
    w: int,
    pad: int,
    dtype: str,
    vectors: int,
    n: int,
    bias: bool,
    sms: int,
) -> None:
    """dw (and the fused db) against fp64 over halos on every side, maps smaller than the filter's
    reach, partial strips (h up to 19: 1-3 strips of 8 rows), partial channel blocks (1-10 vectors
    in blocks of 8) and 1 to many splits (the emulator's SMs: 1, 3, 64)."""
    pad = min(pad, k - 1)
    h, w = max(h, k - 2 * pad), max(w, k - 2 * pad)
    t = DTYPES[dtype]
    c = vectors * VECTOR[t]
    x, dy, g = _inputs(n, c, h, w, k, s, pad, t, seed=h * 131 + w * 7 + k * 3 + s)
    emu = EmulatedDepthwise(emulated_lib, "v2", "w3")
    before = emu.launches()
    dw, db = emu.weight_grad(dy, x, (k, k), (s, s), (pad, pad), (1, 1), True, bias=bias, sms=sms)
    assert emu.launches() - before == 1, f"{emu.launches() - before} launches"
    assert emu.last_kernel().startswith(KERNEL), emu.last_kernel()
    want_dw, want_db = _oracle(x, dy, k, s, pad)
    what = f"{dtype} k{k} s{s} {n}x{c}x{h}x{w} pad {pad} sms {sms}"
    terms = g[0] * g[4] * g[5]
    assert_close_fp64(dw, want_dw, terms, what + " dw")
    if bias:
        assert db is not None
        assert_close_fp64(db, want_db, terms, what + " db")


@pytest.mark.parametrize(
    ("wgrad", "vectors_extra", "misalign", "kernel"),
    [
        ("w3", 0, None, KERNEL),
        ("w3", 2, None, "wgrad_partial<"),  # C not a multiple of the vector width
        ("w3", 0, "x", "wgrad_partial<"),  # x not 16-byte aligned
        ("w3", 0, "dy", "wgrad_partial<"),  # dy not 16-byte aligned
        ("w2", 0, None, "wgrad_partial<"),  # the A/B baseline: W2's generic NHWC kernel
    ],
)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_w3_picks_the_vector_kernel_where_it_applies(
    emulated_lib: Emulation, wgrad: str, vectors_extra: int, misalign: str | None, kernel: str, dtype: str
) -> None:
    """Through the public entry: the kernel that ran, one launch, more than one split (W3's plan
    serves W2's generic kernel when it falls back: same splits, its counters), dw and db right."""
    t = DTYPES[dtype]
    k, s, p = 3, 1, 1
    c = 3 * VECTOR[t] + vectors_extra
    x, dy, g = _inputs(2, c, 11, 9, k, s, p, t, seed=c)
    want_dw, want_db = _oracle(x, dy, k, s, p)
    if misalign == "x":
        x = misaligned(x)
    elif misalign == "dy":
        dy = misaligned(dy)
    emu = EmulatedDepthwise(emulated_lib, "v2", wgrad)
    assert emu.wgrad_plan(g, True, dtype=t)[0] > 1, "one split: the cross-block reduction is not exercised"
    before = emu.launches()
    dw, db = emu.weight_grad(dy, x, (k, k), (s, s), (p, p), (1, 1), True, bias=True)
    assert emu.launches() - before == 1, f"{emu.launches() - before} launches"
    assert emu.last_kernel().startswith(kernel), f"{wgrad} ran {emu.last_kernel()}"
    assert db is not None
    assert_close_fp64(dw, want_dw, 2 * 11 * 9, f"{wgrad} dw")
    assert_close_fp64(db, want_db, 2 * 11 * 9, f"{wgrad} db")


# (n, c, hw, k, s, dtype): every kernel-row grouping (fp32 k3 and k5 1 group, k7 3; 16-bit k5 3, k7 7)
DETERMINISM_CASES = [
    (3, 12, 17, 3, 1, torch.float32),
    (4, 40, 33, 5, 2, torch.float32),
    (2, 8, 12, 7, 1, torch.float32),
    (2, 24, 11, 5, 1, torch.bfloat16),
    (2, 16, 25, 7, 2, torch.float16),
]


@pytest.mark.parametrize(("n", "c", "hw", "k", "s", "dtype"), DETERMINISM_CASES)
def test_wgrad_nhwc_vec_is_bitwise_deterministic(
    emulated_lib: Emulation, n: int, c: int, hw: int, k: int, s: int, dtype: torch.dtype
) -> None:
    """The blocks of a launch run in a different order each time (a different block of each channel
    block, of any kernel-row group, arrives last and sums the splits): dw and db stay bitwise equal."""
    x, dy, g = _inputs(n, c, hw, hw, k, s, k // 2, dtype, seed=c + k)
    emu = EmulatedDepthwise(emulated_lib, "v2", "w3")
    assert emu.wgrad_plan(g, True, dtype=dtype)[0] > 1, "one split: the block order could not matter"
    runs = []
    try:
        for seed in (0, 1, 2, 3):
            emu.block_order(seed)
            dw, db = emu.weight_grad(dy, x, (k, k), (s, s), (k // 2, k // 2), (1, 1), True, bias=True)
            assert emu.last_kernel().startswith(KERNEL), emu.last_kernel()
            assert db is not None
            runs.append((dw, db))
    finally:
        emu.block_order(0)
    for dw, db in runs[1:]:
        assert torch.equal(dw, runs[0][0]) and torch.equal(db, runs[0][1])
    want_dw, _ = _oracle(x, dy, k, s, k // 2)
    assert_close_fp64(runs[0][0], want_dw, n * g[4] * g[5], "dw")


@pytest.mark.parametrize("shape", DEPTHWISE_SEED_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("sms", [132, 3])
def test_cost_model_mirrors_the_wgrad_nhwc_plan(
    emulated_lib: Emulation, shape: tuple[int, int, int, int], dtype: torch.dtype, sms: int
) -> None:
    """``calibration.wgrad_nhwc_plan`` (the model's copy) picks the splits and workspace that
    ``weight_grad_plan`` picks for W3 channels_last, on every seed shape."""
    n, c, hw, k = shape
    g = geometry((n, c, hw, hw), (k, k), (1, 1), (k // 2, k // 2), (1, 1))
    splits, floats, counters = EmulatedDepthwise(emulated_lib, "v2", "w3").wgrad_plan(g, True, sms, dtype)
    plan = calibration.wgrad_nhwc_plan(Shape(n, c, hw, k, 1, 4 if dtype == torch.float32 else 2), sms)
    assert plan.splits == splits
    if splits > 1:  # the partials of every split and slot; the generic kernel's 32-channel counters
        assert (floats, counters) == (splits * c * (k * k + 1), -(-c // 32))
    else:
        assert (floats, counters) == (0, 0)
