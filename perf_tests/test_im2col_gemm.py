"""im2col+GEMM conv (dense, LSQ int8, unstructured and structured sparse): fuzz and perf (seed 002).

* Fuzz (always runs): every variant against its own fp64 oracle (the float conv for dense, the
  fake-quantized conv for LSQ, the pruned conv for sparse), forward and backward, on small
  Hypothesis problems. The candidate is ``ops`` on a GPU and ``reference`` on a CPU.
* Perf (``--convperf``): seed 002's LeNet-like layers (6 -> 16 channels, 14 x 14, "same"
  padding; kernel 3/5/7; batch 4/8/64/256) and EDSR's 3x3 64-channel shapes, forward and
  backward, timed paired against ``F.conv2d``; quality drift (rel. L2, SQNR) of the quantized and
  sparse variants against the float conv goes into the row; ``im2col_gemm.md`` in the report
  directory has seed 002's table. On a CPU the grid is cut (see ``CPU_GRID``) and EDSR shapes are
  scaled down so the file stays within about two minutes; the table says so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from kernels.im2col_gemm import ops, oracles, reference
from kernels.im2col_gemm.chunking import DEFAULT_WORKSPACE_BYTES
from kernels.im2col_gemm.variants import TWO_FOUR_SPARSE, two_four_path
from kernels.quant import lsq_init_step, quality
from perf_tests.fuzz import small_problems
from perf_tests.variant_tables import MB, Table, device_note, fmt, goal_status, peak_mb, table_fixture
from pytest_convperf import Conv2dProblem, DeviceInfo, assert_conv_close, stable_seed

Fn = Callable[..., torch.Tensor]
KERNELS = (3, 5, 7)
BATCHES = (4, 8, 64, 256)
# CPU: the seed grid's corners only (each check times ~2 s of paired rounds on a CPU).
CPU_GRID = {(3, 8), (7, 64)}
EDSR = (
    Conv2dProblem(n=16, c_in=64, h=48, w=48, c_out=64, kernel=(3, 3), padding=(1, 1)),
    Conv2dProblem(n=1, c_in=64, h=256, w=256, c_out=64, kernel=(3, 3), padding=(1, 1)),
)
# EDSR shapes on a CPU: same channels and kernel, smaller images (gemm runs both, others the first).
CPU_EDSR_SCALE: dict[str, dict[str, int]] = {
    EDSR[0].id: {"n": 2, "h": 16, "w": 16},
    EDSR[1].id: {"n": 1, "h": 32, "w": 32},
}


@dataclass(frozen=True)
class Variant:
    """A family member: its ops and reference functions (keywords bound) and its fp64 oracle."""

    name: str
    ops_fn: Fn
    ref_fn: Fn
    oracle: Fn | None
    lsq: bool = False

    def bind(self, problem: Conv2dProblem, device: str) -> tuple[Fn, Fn | None]:
        """Candidate for ``device`` and oracle, with LSQ steps taken from the check's own inputs."""
        fn = self.ops_fn if device.startswith("cuda") else self.ref_fn
        if not self.lsq:
            return fn, self.oracle
        steps = lsq_steps(problem)
        assert self.oracle is not None
        return functools.partial(fn, **steps), functools.partial(self.oracle, **steps)


def lsq_steps(problem: Conv2dProblem) -> dict[str, float]:
    """LSQ's initial steps for the inputs the checks use (seeded by the problem id), as floats."""
    x, w, _ = problem.make_inputs(stable_seed(problem))
    return {"act_step": lsq_init_step(x, 8), "weight_step": lsq_init_step(w, 8)}


VARIANTS = {
    v.name: v
    for v in (
        Variant("gemm", ops.forward, reference.forward, None),
        Variant("implicit", ops.implicit_forward, reference.forward, None),
        Variant("quantized", ops.lsq_forward, reference.lsq_forward, oracles.lsq_oracle, lsq=True),
        Variant(
            "sparse",
            functools.partial(ops.sparse_forward, density=0.5),
            functools.partial(reference.sparse_forward, density=0.5),
            functools.partial(oracles.pruned_oracle, kind="unstructured", density=0.5),
        ),
        Variant(
            "sparse_struct",
            functools.partial(ops.structured_forward, pattern="filter", density=0.5),
            functools.partial(reference.structured_forward, pattern="filter", density=0.5),
            functools.partial(oracles.pruned_oracle, kind="filter", density=0.5),
        ),
        Variant(
            "sparse_2to4",
            functools.partial(ops.structured_forward, pattern="2:4"),
            functools.partial(reference.structured_forward, pattern="2:4"),
            functools.partial(oracles.pruned_oracle, kind="2:4"),
        ),
    )
}
SEED_VARIANTS = ("gemm", "quantized", "sparse", "sparse_struct")

SEED_TABLE = Table(
    "Seed 002: LeNet-like layer (6 -> 16 channels, 14 x 14, same padding), sorted by avg_forward",
    (
        "name",
        "batch_size",
        "avg_forward",
        "avg_backward",
        "avg_forward_mem",
        "avg_backward_mem",
        "kernel_size",
        "rel_l2",
        "sqnr_db",
        "fwd vs F.conv2d",
        "bwd vs F.conv2d",
    ),
    [
        "avg_* in seconds (median of paired rounds), *_mem in MiB (peak of one call), speedups = "
        "t(F.conv2d) / t(variant) measured in the same rounds; rel_l2/sqnr_db: drift from the float conv."
    ],
)
EDSR_TABLE = Table(
    "EDSR 3x3 64-channel shapes (goals on an H100, cuDNN fp32 with TF32 off: gemm >= 0.7x fwd and bwd, "
    "implicit >= 1.0x fwd)",
    (
        "variant",
        "problem",
        "fwd s",
        "fwd vs F.conv2d",
        "bwd s",
        "bwd vs F.conv2d",
        "fwd MiB",
        "rel_l2",
        "sqnr_db",
        "goal (H100, fwd and bwd)",
        "goal met",
    ),
)
GEMM_GOAL = 0.7  # gemm vs cuDNN fp32 (TF32 off) on the EDSR shapes, forward and backward
# implicit (one Triton launch, no column buffer) vs cuDNN fp32 on the EDSR shapes, forward (its
# backward is gemm's)
IMPLICIT_GOAL = 1.0
EDSR_GOALS = {"gemm": GEMM_GOAL, "implicit": IMPLICIT_GOAL}
FLOAT_EXACT = ("gemm", "implicit")  # the float conv itself: no quantization or pruning drift
INT8_GOAL = 2.0  # LSQ int8 vs cuDNN fp16 NCHW on the seed problem (issue 28); channels_last reported
INT8_TABLE = Table(
    "LSQ int8 (CONVPERF_LSQ_VARIANT: v2 implicit int8 GEMM, v1 im2col + cuBLASLt _int_mm) vs cuDNN fp16",
    ("variant", "problem", "speedup", "goal (H100)", "goal met"),
    [
        "Goals are reported, not asserted; speedup = t(cuDNN fp16) / t(int8), median of paired rounds; "
        "the goal is on NCHW, channels_last (nhwc) is reported against cuDNN fp16 channels_last."
    ],
)
# 2:4 structured sparse vs our own dense fp16 im2col+GEMM where C_out >= 256 (issue 28); CSR has no goal
SPARSE_GOAL = 1.1
SPARSE_TABLE = Table(
    "2:4 structured sparse im2col+GEMM vs our own dense fp16 im2col+GEMM (C_out >= 256)",
    ("variant", "problem", "GEMM that ran", "speedup", "goal (H100)", "goal met"),
    [
        "Goals are reported, not asserted; speedup = t(dense gemm fp16) / t(sparse_2to4), median of paired "
        "rounds, both our kernels; correctness against the pruned oracle."
    ],
)
tables = table_fixture(
    "im2col_gemm.md",
    "im2col + GEMM conv2d (pytest-convperf)",
    SEED_TABLE,
    EDSR_TABLE,
    INT8_TABLE,
    SPARSE_TABLE,
)


def _device(convperf_device: DeviceInfo) -> str:
    return str(convperf_device.torch_device)


# ---- fuzz ------------------------------------------------------------------------------------------
FUZZ = small_problems()


@pytest.mark.parametrize("name", list(VARIANTS))
@settings(max_examples=15, deadline=None)
@given(problem=FUZZ)
def test_fuzz_variant_matches_its_oracle(name: str, problem: Conv2dProblem) -> None:
    """Forward and backward of each variant against its own fp64 oracle (GPU: ops; CPU: reference)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    candidate, oracle = VARIANTS[name].bind(problem, device)
    assert_conv_close(candidate, problem, oracle=oracle, backward=True, device=device)


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (fp16/bf16 paths of the CUDA im2col)"
)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@settings(max_examples=15, deadline=None)
@given(problem=FUZZ)
def test_fuzz_dense_low_precision(dtype: str, problem: Conv2dProblem) -> None:
    """fp16/bf16 im2col + cuBLAS GEMM against the fp64 oracle with the dtype's tolerance row."""
    assert_conv_close(ops.forward, problem.replace(dtype=dtype), backward=True, device="cuda")


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (PyTorch's 2:4 kernels take fp16/bf16 on sm_80+)"
)
@settings(max_examples=15, deadline=None)
@given(problem=FUZZ)
def test_fuzz_sparse_2to4_fp16(problem: Conv2dProblem) -> None:
    """fp16 ``sparse_2to4`` (the real semi-structured GEMM on an sm_80+ GPU) against its pruned oracle."""
    p = problem.replace(dtype="fp16")
    candidate, oracle = VARIANTS["sparse_2to4"].bind(p, "cuda")
    assert_conv_close(candidate, p, oracle=oracle, backward=True, device="cuda")


# ---- perf ------------------------------------------------------------------------------------------
def lenet(kernel: int, batch: int) -> Conv2dProblem:
    """Seed 002's LeNet-like conv layer (LeNet's second conv, "same" padding so every k fits)."""
    return Conv2dProblem(
        n=batch, c_in=6, h=14, w=14, c_out=16, kernel=(kernel, kernel), padding=(kernel // 2, kernel // 2)
    )


def _quality(candidate: Fn, problem: Conv2dProblem, device: str, name: str) -> dict[str, float]:
    if name in FLOAT_EXACT:
        return {}
    x, w, b = problem.make_inputs(stable_seed(problem), device)
    with torch.no_grad():
        return quality(candidate(x, w, b, *problem.conv_args()), F.conv2d(x, w, b, *problem.conv_args()))


def _memory(gpu_memory: Any, candidate: Fn, problem: Conv2dProblem, device: str) -> tuple[float, float]:
    x, w, b = problem.make_inputs(stable_seed(problem), device)
    x.requires_grad_(True)
    w.requires_grad_(True)
    with torch.no_grad():
        fwd = peak_mb(gpu_memory, lambda: candidate(x, w, b, *problem.conv_args()))
    out = candidate(x, w, b, *problem.conv_args())
    grad = torch.ones_like(out)
    bwd = peak_mb(gpu_memory, lambda: torch.autograd.grad(out, [x, w], grad))
    return fwd, bwd


def _run_checks(
    convperf: Any, candidate: Fn, oracle: Fn | None, problem: Conv2dProblem, metrics: dict[str, float]
) -> tuple[Any, Any]:
    fwd = convperf.check(candidate, problem, oracle=oracle, extra_metrics=metrics)
    bwd = convperf.check(candidate, problem, oracle=oracle, phase="backward", extra_metrics=metrics)
    return fwd, bwd


@pytest.mark.convperf
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name", SEED_VARIANTS)
def test_seed_lenet(
    name: str,
    kernel: int,
    batch: int,
    convperf: Any,
    convperf_device: DeviceInfo,
    gpu_memory: Any,
    tables: dict[str, Table],
) -> None:
    """One row of seed 002's table: forward and backward checks, memory, quality drift."""
    device = _device(convperf_device)
    if not device.startswith("cuda") and (kernel, batch) not in CPU_GRID:
        pytest.skip(f"CPU run keeps the grid's corners {sorted(CPU_GRID)} (kernel, batch) to stay ~2 min")
    problem = lenet(kernel, batch)
    candidate, oracle = VARIANTS[name].bind(problem, device)
    metrics = _quality(candidate, problem, device, name)
    fwd, bwd = _run_checks(convperf, candidate, oracle, problem, metrics)
    fwd_mem, bwd_mem = _memory(gpu_memory, candidate, problem, device)
    table = tables[SEED_TABLE.title]
    if not table.notes[-1].startswith("Device"):
        table.notes.append(device_note(torch.device(device)))
    table.rows.append(
        [
            f"lenet_{name}",
            str(batch),
            fmt(fwd.candidate.median),
            fmt(bwd.candidate.median),
            fmt(fwd_mem),
            fmt(bwd_mem),
            str(kernel),
            fmt(metrics.get("rel_l2")),
            fmt(metrics.get("sqnr_db")),
            fmt(fwd.speedup, 3),
            fmt(bwd.speedup, 3),
        ]
    )
    table.rows.sort(key=lambda r: float(r[2]))


@pytest.mark.convperf
@pytest.mark.parametrize("problem", EDSR, ids=str)
@pytest.mark.parametrize("name", ["gemm", "implicit", "quantized", "sparse_2to4"])
def test_edsr(
    name: str,
    problem: Conv2dProblem,
    convperf: Any,
    convperf_device: DeviceInfo,
    gpu_memory: Any,
    tables: dict[str, Table],
) -> None:
    """EDSR's 3x3 64-channel convs: forward and backward against F.conv2d (cuDNN fp32, TF32 off)."""
    device = _device(convperf_device)
    gpu = device.startswith("cuda")
    if not gpu and name not in FLOAT_EXACT and problem != EDSR[0]:
        pytest.skip("CPU run: the variants time the first EDSR shape only, to stay ~2 min")
    p = problem if gpu else problem.replace(**CPU_EDSR_SCALE[problem.id])
    if name == "sparse_2to4" and gpu:
        p = p.replace(dtype="fp16")  # PyTorch's 2:4 kernels take fp16/bf16
    candidate, oracle = VARIANTS[name].bind(p, device)
    metrics = _quality(candidate, p, device, name)
    x, w, b = p.make_inputs(stable_seed(p), device)
    label = name
    if name == "sparse_2to4":  # say which GEMM ran: fp32 or CPU is a masked dense GEMM, not 2:4
        path = two_four_path(w)
        label = f"{name} ({path})"
        metrics["semi_structured_gemm"] = float(path == TWO_FOUR_SPARSE)  # into the row's facts
    fwd, bwd = _run_checks(convperf, candidate, oracle, p, metrics)
    with torch.no_grad():
        mem = peak_mb(gpu_memory, lambda: candidate(x, w, b, *p.conv_args()))
    table = tables[EDSR_TABLE.title]
    if not gpu and not table.notes:
        table.notes.append(
            f"CPU: EDSR shapes scaled ({CPU_EDSR_SCALE}; full size needs a GPU); on a CPU sparse_2to4 is a "
            "masked dense GEMM (PyTorch's 2:4 kernels need an sm_80+ GPU and fp16/bf16)."
        )
        table.notes.append(device_note(torch.device(device)))
    table.rows.append(
        [
            label,
            p.id,
            fmt(fwd.candidate.median),
            fmt(fwd.speedup, 3),
            fmt(bwd.candidate.median),
            fmt(bwd.speedup, 3),
            fmt(mem),
            fmt(metrics.get("rel_l2")),
            fmt(metrics.get("sqnr_db")),
            f">= {EDSR_GOALS[name]}x ({'fwd' if name == 'implicit' else 'fwd and bwd'})"
            if name in EDSR_GOALS
            else "-",
            goal_status(
                fwd.speedup if name == "implicit" else min(fwd.speedup, bwd.speedup),
                EDSR_GOALS.get(name),
                measured=gpu,
            ),
        ]
    )
    if name == "gemm" and gpu:  # beyond inputs and output, only the (bounded) column buffer
        columns = p.c_in * 9 * p.out_h * p.out_w * p.element_size * p.n
        bound = min(columns, DEFAULT_WORKSPACE_BYTES) + p.min_bytes
        assert mem * MB <= 1.25 * bound + 16 * MB, (
            f"peak {mem:.1f} MiB exceeds columns + tensors {bound / MB:.1f} MiB"
        )


@pytest.mark.convperf
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_int8_vs_cudnn_fp16(layout: str, convperf: Any, tables: dict[str, Table]) -> None:
    """LSQ int8 (the variant ``CONVPERF_LSQ_VARIANT`` picks) against cuDNN fp16 in the same layout on the
    seed problem (goal on an H100: >= 2.0x in NCHW; channels_last reported)."""
    problem = Conv2dProblem(
        n=16, c_in=256, h=48, w=48, c_out=256, kernel=(3, 3), padding=(1, 1), dtype="fp16", layout=layout
    )
    goal = INT8_GOAL if layout == "nchw" else None
    name = f"quantized {ops.lsq_variant()}"
    table = tables[INT8_TABLE.title]
    if not torch.cuda.is_available():
        table.rows.append([name, problem.id, "-", f">= {INT8_GOAL}x" if goal else "-",
                           goal_status(None, goal, measured=False)])  # fmt: skip
        pytest.skip("the int8-vs-cuDNN-fp16 goal needs a GPU (int8 tensor cores)")
    candidate, oracle = VARIANTS["quantized"].bind(problem, "cuda")
    metrics = _quality(candidate, problem, "cuda", "quantized")
    cmp = convperf.check(candidate, problem, oracle=oracle, extra_metrics=metrics)
    table.rows.append(
        [
            name,
            problem.id,
            f"{fmt(cmp.speedup, 3)}x",
            f">= {INT8_GOAL}x" if goal else "-",
            goal_status(cmp.speedup, goal, measured=True),
        ]
    )


@pytest.mark.convperf
@pytest.mark.parametrize("c_out", [256, 512])
def test_sparse_2to4_vs_dense_fp16(c_out: int, convperf: Any, tables: dict[str, Table]) -> None:
    """``sparse_2to4`` against our own dense fp16 ``gemm`` on the seed geometry with ``c_out`` output
    channels (goal on an H100: >= 1.1x where C_out >= 256); a CPU has no 2:4 GEMM, so it is not timed."""
    problem = Conv2dProblem(
        n=16, c_in=256, h=48, w=48, c_out=c_out, kernel=(3, 3), padding=(1, 1), dtype="fp16"
    )
    table = tables[SPARSE_TABLE.title]
    if not torch.cuda.is_available():
        table.rows.append(
            [
                "sparse_2to4",
                problem.id,
                "-",
                "-",
                f">= {SPARSE_GOAL}x",
                goal_status(None, SPARSE_GOAL, measured=False),
            ]
        )
        pytest.skip("the 2:4 goal needs a GPU (PyTorch's semi-structured GEMM: sm_80+, fp16/bf16)")
    candidate, oracle = VARIANTS["sparse_2to4"].bind(problem, "cuda")
    dense, _ = VARIANTS["gemm"].bind(problem, "cuda")
    _, w, _ = problem.make_inputs(stable_seed(problem), "cuda")
    path = two_four_path(w)
    cmp = convperf.check(
        candidate,
        problem,
        reference=dense,
        oracle=oracle,
        extra_metrics={"semi_structured_gemm": float(path == TWO_FOUR_SPARSE)},
    )
    sparse_ran = path == TWO_FOUR_SPARSE
    table.rows.append(
        [
            "sparse_2to4",
            problem.id,
            path,
            f"{fmt(cmp.speedup, 3)}x",
            f">= {SPARSE_GOAL}x",
            goal_status(cmp.speedup, SPARSE_GOAL, measured=sparse_ran, why=f"{path} ran"),
        ]
    )
