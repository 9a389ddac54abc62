"""The real depthwise CUDA source, run on the CPU through ``cuda_emulation``, against the fp64 oracle.

Covers every kernel path (NCHW tile, NHWC rows, direct fallbacks, flipped-tile input grad, one-pass
and per-tap weight grads with their two-stage reduction) for fp32/fp16/bf16 without a GPU. It
checks index math and algorithms only: speed, coalescing and real-hardware races are GPU matters.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.nn import grad as nn_grad

from kernels.depthwise.seed import DEPTHWISE_SEED_SHAPES, EFFICIENTNET_B0_STRIDE2
from kernels.model import plan_v4
from kernels.model import static as model
from perf_tests.shapes import depthwise_problems
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.oracle import assert_conv_close
from tests.kernels.cuda_emulation import (
    VARIANTS,
    EmulatedDepthwise,
    Emulation,
    depthwise_candidate,
    emulation,
    family_source,
    geometry,
)
from tests.kernels.emulated_families import assert_close_fp64

PROBLEMS = depthwise_problems(
    kernel_sizes=(1, 2, 3, 4, 5, 7),
    strides=(1, 2, 3),
    dilations=(1, 2),
    max_channels=5,
    max_batch=2,
    min_batch=0,
    max_out_size=11,
    max_elements=2**12,
)


@pytest.fixture(params=sorted(VARIANTS))
def emulated(request: pytest.FixtureRequest, emulated_lib: Emulation) -> Iterator[EmulatedDepthwise]:
    """Every test runs on each NCHW tiled variant (v1 with the W1 weight grad: the A/B baselines; v2
    and v3 with W2)."""
    yield EmulatedDepthwise(emulated_lib, request.param)


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(problem=PROBLEMS, seed=st.integers(0, 2**16))
def test_emulated_kernels_match_oracle(
    emulated: EmulatedDepthwise, problem: Conv2dProblem, seed: int
) -> None:
    assert_conv_close(depthwise_candidate(emulated), problem, seed=seed, backward=True, device="cpu")


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize(("n", "c", "hw", "k"), [(2, 3, 20, 3), (1, 6, 7, 5), (2, 2, 33, 7), (1, 40, 5, 3)])
def test_emulated_seed_like_shapes(
    emulated: EmulatedDepthwise, layout: str, n: int, c: int, hw: int, k: int
) -> None:
    """Fast paths on shapes like the seed's (stride 1, same padding), many planes per block included."""
    pad = (k // 2, k // 2)
    problem = Conv2dProblem(
        n=n, c_in=c, h=hw, w=hw, c_out=c, kernel=(k, k), padding=pad, groups=c, layout=layout
    )
    assert_conv_close(depthwise_candidate(emulated), problem, backward=True, device="cpu")


def test_emulator_sees_unwritten_outputs(emulated: EmulatedDepthwise) -> None:
    """Outputs start as NaN, so an element a kernel forgets to write cannot pass."""
    x = torch.randn(0, 3, 5, 5)
    y = emulated.forward(x, torch.randn(3, 1, 3, 3), None, (1, 1), (1, 1), (1, 1), False)
    assert y.shape == (0, 3, 5, 5)
    x = torch.randn(1, 3, 5, 5)
    y = emulated.forward(x, torch.randn(3, 1, 3, 3), None, (1, 1), (1, 1), (1, 1), False)
    assert not torch.isnan(y).any()


@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(
    k=st.sampled_from((1, 3, 5, 7)),
    s=st.sampled_from((1, 2)),
    w4=st.integers(1, 9),
    h=st.integers(1, 12),
    pad=st.integers(0, 7),
    dtype=st.sampled_from(("fp32", "fp16", "bf16")),
)
def test_emulated_vector_staging(emulated: EmulatedDepthwise, k: int, s: int, w4: int, h: int, pad: int,
                                 dtype: str) -> None:  # fmt: skip
    """NCHW tile path with W % 4 == 0 (4-wide vector staging), halos on both sides, both strides."""
    w = 4 * w4
    h = max(h, k - 2 * pad)
    w = max(w, 4 * -(-(k - 2 * pad) // 4))
    problem = Conv2dProblem(n=2, c_in=3, h=h, w=w, c_out=3, kernel=(k, k), stride=(s, s), padding=(pad, pad),
                            groups=3, dtype=dtype)  # fmt: skip
    assert_conv_close(depthwise_candidate(emulated), problem, backward=True, device="cpu")


@pytest.mark.parametrize("shape", [*DEPTHWISE_SEED_SHAPES, (2, 3, 9, 3), (1, 5, 30, 7), (4, 8, 64, 5)])
@pytest.mark.parametrize("s", [1, 2])
def test_cost_model_mirrors_the_v2_planner(
    emulated_lib: Emulation, shape: tuple[int, int, int, int], s: int
) -> None:
    """``kernels.model.static.plan_v2`` (the cost model's copy) picks what ``depthwise.cu`` picks."""
    n, c, hw, k = shape
    g = geometry((n, c, hw, hw), (k, k), (s, s), (k // 2, k // 2), (1, 1))
    out = EmulatedDepthwise(emulated_lib).plan_v2(g)
    assert out is not None, f"depthwise.cu found no v2 tile for {shape}, stride {s}"
    plan = model.plan_v2(model.Shape(n, c, hw, k, s))
    tiles = plan.tiles
    mode = {"scalar": 0, "rows4": 1, "planes4": 2}[plan.mode]
    assert (plan.tw, plan.trows, plan.pl, plan.in_rows, plan.in_cols, mode) == tuple(
        out[i] for i in (0, 1, 2, 5, 6, 7)
    )
    assert tiles == out[3] * out[4]


@pytest.mark.parametrize(("hw", "k", "pad"), [(7, 3, 3), (14, 5, 4), (12, 3, 2)])
def test_emulated_input_grad_with_a_crop(emulated: EmulatedDepthwise, hw: int, k: int, pad: int) -> None:
    """Padding > k - 1: the stride-1 input grad runs the tiled kernel with negative padding (a crop)."""
    problem = Conv2dProblem(n=2, c_in=5, h=hw, w=hw, c_out=5, kernel=(k, k), padding=(pad, pad), groups=5)
    assert_conv_close(depthwise_candidate(emulated), problem, backward=True, device="cpu")


@pytest.mark.parametrize(
    ("hw", "s", "dtype", "mode"),
    [(84, 2, "fp32", "rows4"), (128, 2, "fp16", "rows4"), (50, 2, "fp32", "planes4"),
     (49, 2, "bf16", "scalar"), (24, 1, "fp16", "rows4"), (14, 1, "fp16", "planes4")],
)  # fmt: skip
def test_emulated_v3_batched_staging(emulated_lib: Emulation, hw: int, s: int, dtype: str, mode: str) -> None:
    """v3 keeps a batch of staging loads in flight per round (16-byte chunks, 8 elements in fp16/bf16):
    these shapes take its each staging mode, the first four through more than one round."""
    plan = model.plan_v3(model.Shape(1, 2, hw, 3, s, 2 if dtype != "fp32" else 4))
    assert plan.mode == mode
    assert model.staging_rounds(plan) > 1 or s == 1
    problem = Conv2dProblem(n=1, c_in=2, h=hw, w=hw, c_out=2, kernel=(3, 3), stride=(s, s), padding=(1, 1),
                            groups=2, dtype=dtype)  # fmt: skip
    assert_conv_close(
        depthwise_candidate(EmulatedDepthwise(emulated_lib, "v3")), problem, backward=s == 1, device="cpu"
    )


# Weight-grad geometries: the staged NCHW kernel (k 3-7, strides 1 and 2, odd sizes) and the generic
# one (1x1, NHWC, dilation); W2 takes more than one split per channel on each with the emulator's 3
# SMs, so its last-block reduction runs.
WGRAD_CASES = {
    "tile-k3": ((4, 2, 40, 40), 3, 1, 1, 1, False),
    "tile-k5-s2-odd": ((5, 2, 47, 43), 5, 2, 2, 1, False),
    "tile-k7": ((6, 2, 40, 36), 7, 1, 3, 1, False),
    "generic-k1": ((8, 1, 30, 30), 1, 1, 0, 1, False),
    "generic-nhwc": ((2, 35, 9, 7), 3, 1, 1, 1, True),
    "generic-dilation": ((8, 2, 30, 30), 3, 1, 2, 2, False),
}


def _wgrad_inputs(
    case: str, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...], list[int]]:
    shape, k, s, p, d, cl = WGRAD_CASES[case]
    g = geometry(shape, (k, k), (s, s), (p, p), (d, d))
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(shape, generator=gen).to(dtype)
    dy = torch.randn(g[0], g[1], g[4], g[5], generator=gen).to(dtype)
    if cl:
        x, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, dy))
    return x, dy, (k, s, p, d), g


def _oracle(x: torch.Tensor, dy: torch.Tensor, ksp: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    k, s, p, d = ksp
    c = x.shape[1]
    dw = nn_grad.conv2d_weight(x.double(), (c, 1, k, k), dy.double(), s, p, d, c)  # type: ignore[no-untyped-call]
    return dw, dy.double().sum(dim=(0, 2, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", list(WGRAD_CASES))
def test_emulated_weight_grad_w2_is_one_launch_with_the_bias(
    emulated_lib: Emulation, case: str, dtype: torch.dtype
) -> None:
    """W2: dw and the fused db in one launch (W1: two, and the bias a separate sum), both right."""
    x, dy, (k, s, p, d), g = _wgrad_inputs(case, dtype)
    cl = WGRAD_CASES[case][5]
    want_dw, want_db = _oracle(x, dy, (k, s, p, d))
    terms = g[0] * g[4] * g[5]
    for wgrad, launches in (("w1", 2), ("w2", 1)):
        emu = EmulatedDepthwise(emulated_lib, "v2", wgrad)
        splits = emu.wgrad_plan(g, cl)[0]
        assert splits > 1 or wgrad == "w1", f"{case}: one split, the cross-block reduction is not exercised"
        before = emu.launches()
        dw, db = emu.weight_grad(dy, x, (k, k), (s, s), (p, p), (d, d), cl, bias=True)
        assert emu.launches() - before == launches, f"{wgrad}: {emu.launches() - before} launches"
        if wgrad == "w2":
            kernel = "wgrad_tile_nchw<" if case.startswith("tile") else "wgrad_partial<"
            assert emu.last_kernel().startswith(kernel), f"{case}: ran {emu.last_kernel()}"
        assert db is not None
        assert_close_fp64(dw, want_dw, terms, f"{case} {wgrad} dw")
        assert_close_fp64(db, want_db, terms, f"{case} {wgrad} db")


@pytest.mark.parametrize("case", list(WGRAD_CASES))
def test_emulated_weight_grad_w2_is_bitwise_deterministic(emulated_lib: Emulation, case: str) -> None:
    """The blocks of a launch run in a different order each time (a different block of each channel
    finishes last and sums the splits): dw and db stay bitwise the same."""
    x, dy, (k, s, p, d), _ = _wgrad_inputs(case)
    cl = WGRAD_CASES[case][5]
    emu = EmulatedDepthwise(emulated_lib, "v2", "w2")
    runs = []
    try:
        for seed in (0, 1, 2, 3):
            emu.block_order(seed)
            runs.append(emu.weight_grad(dy, x, (k, k), (s, s), (p, p), (d, d), cl, bias=True))
    finally:
        emu.block_order(0)
    for dw, db in runs[1:]:
        assert torch.equal(dw, runs[0][0]) and db is not None and torch.equal(db, runs[0][1])  # type: ignore[arg-type]


def test_determinism_and_counter_checks_catch_planted_defects() -> None:
    """Controls of the two tests above, on a mutated depthwise.cu: the last block sums the splits
    starting at its own (an order that depends on which block finishes last), and never resets its
    channel's counter. Both must be seen: results that change with the block order, and the
    emulator's counter check (rc 1000)."""
    cu = family_source("depthwise")
    text = cu.read_text()
    old = "for (int s = 0; s < splits; ++s) sum += vp[(static_cast<int64_t>(s) * C + c) * slots + t];"
    new = (
        "for (int s0 = 0; s0 < splits; ++s0) { const int s = (s0 + static_cast<int>(blockIdx.y)) % splits; "
        "sum += vp[(static_cast<int64_t>(s) * C + c) * slots + t]; }"
    )
    reset = "if (threadIdx.x == 0) counters[counter] = 0u;"
    assert text.count(old) == 1 and text.count(reset) == 1, "the planted defects' anchors moved"
    try:
        lib = emulation("depthwise", text=text.replace(old, new).replace(reset, ""))
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    emu = EmulatedDepthwise(lib, "v2", "w2")
    x, dy, (k, *_), g = _wgrad_inputs("tile-k3")
    dws = []
    try:
        for seed in (1, 2, 3, 4):
            emu.block_order(seed)
            dw = torch.full((g[1], 1, k, k), float("nan"))
            rc = lib.call("dw_weight_grad", [dy, x, dw, None], [0, 0, 3, 2, *g])
            assert rc == 1000, f"the counter check missed a counter left nonzero (rc {rc})"
            dws.append(dw)
    finally:
        emu.block_order(0)
    assert any(not torch.equal(dw, dws[0]) for dw in dws[1:]), "block order never changed the sum"


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(
    k=st.sampled_from((1, 3, 5, 7)),
    h=st.integers(1, 17),
    w=st.integers(1, 17),
    pad=st.integers(0, 4),
    channels_last=st.booleans(),
    dtype=st.sampled_from((torch.float32, torch.bfloat16)),
)
def test_emulated_stride2_input_grad_runs_the_parity_kernel(
    emulated_lib: Emulation, k: int, h: int, w: int, pad: int, channels_last: bool, dtype: torch.dtype
) -> None:
    """Stride 2: the four-phase kernel (v2, v3; v1 keeps dgrad_direct) against the fp64 input grad,
    odd and even sizes, every padding up to 4, k 1-7, NCHW and NHWC."""
    h, w = max(h, k - 2 * pad), max(w, k - 2 * pad)
    g = geometry((2, 3, h, w), (k, k), (2, 2), (pad, pad), (1, 1))
    gen = torch.Generator().manual_seed(h * 100 + w)
    dy = torch.randn(2, 3, g[4], g[5], generator=gen).to(dtype)
    wt = torch.randn(3, 1, k, k, generator=gen).to(dtype)
    if channels_last:
        dy = dy.contiguous(memory_format=torch.channels_last)
    want = nn_grad.conv2d_input((2, 3, h, w), wt.double(), dy.double(), 2, pad, 1, 3)  # type: ignore[no-untyped-call]
    for variant, kernel in (("v2", "dgrad_s2"), ("v3", "dgrad_s2"), ("v1", "dgrad_direct")):
        emu = EmulatedDepthwise(emulated_lib, variant)
        dx = emu.input_grad(dy, wt, (h, w), (2, 2), (pad, pad), (1, 1), channels_last)
        assert emu.last_kernel().startswith(kernel + "<"), f"{variant} ran {emu.last_kernel()}"
        assert_close_fp64(dx, want, k * k, f"{variant} stride-2 input grad k{k} {h}x{w} pad {pad}")


@pytest.mark.parametrize("s", [1, 2])
@pytest.mark.parametrize(
    "shape", [*DEPTHWISE_SEED_SHAPES, *EFFICIENTNET_B0_STRIDE2, (2, 3, 9, 3), (1, 5, 30, 7), (2, 5, 300, 3)]
)
def test_v4_planner_mirrors_depthwise_cu(
    emulated_lib: Emulation, shape: tuple[int, int, int, int], s: int
) -> None:
    """``kernels.model.plan_v4`` (the planner the tests and the model read) is ``plan_tile_v4``."""
    n, c, hw, k = shape
    g = geometry((n, c, hw, hw), (k, k), (s, s), (k // 2, k // 2), (1, 1))
    out = EmulatedDepthwise(emulated_lib).plan_v4(g)
    assert out == plan_v4.as_row(plan_v4.plan_v4(model.Shape(n, c, hw, k, s)))


# v4 geometries (planned for 1 SM, so small problems reach every U), each named by what it reaches:
# U (4, 2, 1; 2 and 1 are stride 2 only), 16-byte or scalar staging (scalar: stride 2 only; stride 1
# without 16-byte chunks runs v3, U None), U = 4's vector store, several planes a block with a partial
# last block, a crop (negative padding in the input grad), fp16 (8-element chunks).
# (shape, k, stride, padding, dtype, U)
V4_CASES: dict[str, tuple[tuple[int, int, int, int], int, int, int, str, int | None]] = {
    "u4-vec-store": ((2, 3, 64, 64), 3, 1, 1, "fp32", 4),
    "u4-k7-fp16": ((1, 2, 48, 48), 7, 1, 3, "fp16", 4),
    "u4-k5-planes": ((5, 3, 12, 12), 5, 1, 2, "fp32", 4),
    "u4-s2": ((8, 6, 48, 48), 3, 2, 1, "fp32", 4),
    "u2-s2-k5": ((6, 4, 40, 40), 5, 2, 2, "fp32", 2),
    "u2-s2-fp16": ((8, 8, 32, 32), 3, 2, 1, "fp16", 2),
    "u1-s2-odd-scalar-fp16": ((2, 5, 15, 13), 5, 2, 2, "fp16", 1),
    "pad-0": ((1, 2, 24, 24), 3, 1, 0, "fp32", 4),
    "crop": ((2, 2, 16, 16), 3, 1, 3, "fp32", 4),
    "s1-scalar-runs-v3": ((1, 2, 50, 45), 5, 1, 2, "fp32", None),
}


@pytest.mark.parametrize("case", list(V4_CASES))
def test_emulated_v4_geometries(emulated_lib: Emulation, case: str) -> None:
    shape, k, s, pad, dtype, u = V4_CASES[case]
    n, c, h, w = shape
    problem = Conv2dProblem(n=n, c_in=c, h=h, w=w, c_out=c, kernel=(k, k), stride=(s, s), padding=(pad, pad),
                            groups=c, dtype=dtype, bias=True)  # fmt: skip
    emu = EmulatedDepthwise(emulated_lib, "v4")
    emu.plan_sms(1)
    try:
        plan = emu.plan_v4(geometry(shape, (k, k), (s, s), (pad, pad), (1, 1)))
        assert plan is not None and (u is None or plan[0] == u), f"{case}: planned {plan}"
        assert_conv_close(depthwise_candidate(emu), problem, backward=s == 1, device="cpu")
        x = torch.randn(shape).to(torch.float16 if dtype == "fp16" else torch.float32)
        emu.forward(x, torch.randn(c, 1, k, k).to(x.dtype), None, (s, s), (pad, pad), (1, 1), False)
        kernel = "fwd_tile_nchw_v4<" if u else "fwd_tile_nchw_v3<"
        assert emu.last_kernel().startswith(kernel), emu.last_kernel()
    finally:
        emu.plan_sms(0)


def test_v4_cases_reach_every_u() -> None:
    assert {case[5] for case in V4_CASES.values()} == {1, 2, 4, None}


@pytest.mark.parametrize(("dtype", "k"), [(torch.bfloat16, 3), (torch.float32, 1)])
def test_v4_hands_bf16_and_1x1_to_v3(emulated_lib: Emulation, dtype: torch.dtype, k: int) -> None:
    """v4 is built for fp32/fp16 with k 3/5/7: other calls with CONVPERF_DEPTHWISE_VARIANT=v4 run v3."""
    emu = EmulatedDepthwise(emulated_lib, "v4")
    x = torch.randn(2, 3, 16, 16).to(dtype)
    w = torch.randn(3, 1, k, k).to(dtype)
    y = emu.forward(x, w, None, (1, 1), (k // 2, k // 2), (1, 1), False)
    assert emu.last_kernel().startswith("fwd_tile_nchw_v3<"), emu.last_kernel()
    want = torch.nn.functional.conv2d(x.double(), w.double(), None, 1, k // 2, 1, 3)
    assert_close_fp64(y, want, k * k, f"v4 -> v3 {dtype} k{k}")
