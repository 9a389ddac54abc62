"""EDSR x2 baseline (seed 000): standard vs depthwise-separable residual blocks, and our kernels in it.

* Both variants: forward and backward time, peak memory of a training step, parameter counts,
  and the profiler's kernel table (top kernels by device time on a GPU, operators by self CPU
  time on a CPU) written to ``edsr.md`` in the report directory. Absolute times: advisory; the
  separable/standard time ratio is measured paired and tracked like a check.
* The separable blocks' depthwise conv (16 x 64 x 48 x 48, k3) through ``convperf.check``
  (correctness + paired ratio against ``F.conv2d`` + baseline gate), forward and backward.
* The fused dw+pw block kernel against the unfused PyTorch block (goal on an H100: >= 2.0x, issue 29).
* The separable model running our depthwise kernel or the fused block kernel against the same
  model on stock PyTorch: outputs checked against fp64, time ratios gated.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import torch

from perf_tests import models as mb
from perf_tests import swap
from perf_tests.edsr_models import EDSR, Block, ResBlock, SeparableConv2d, count_parameters
from perf_tests.paired import (
    ACCURACY_HEADER,
    GOAL_RATIO_HEADER,
    accuracy_lines,
    check_model_pair,
    pair_rule,
    ratio_line,
)
from perf_tests.variant_tables import goal_status
from pytest_convperf import (
    Conv2dProblem,
    ConvperfFixture,
    DeviceInfo,
    KernelRow,
    MeasureOne,
    MemoryUsage,
    ReportSections,
    StartTrace,
    TrackMemory,
    check_pair,
    ieee_fp32,
    judge_against_stock,
    tf32_enabled,
)

pytestmark = pytest.mark.convperf

SEED_PARAMS = {"standard": 1_332_931, "separable": 304_835}
FEATS = 64
# EDSR training patches: 16 x 3 x 48 x 48 LR images on a GPU; one small image on a CPU.
GPU_INPUT = (16, 3, 48, 48)
CPU_INPUT = (1, 3, 16, 16)
# Whole-network fp32 vs fp64 (33 convs in series): within this fixed tolerance, or no worse than
# 2x the stock fp32 model's own error (tolerance.judge_against_stock; on an H100 the stock grad_input
# missed the fixed tolerance: max_abs 9.19e-4 vs atol 3.46e-4, rel_l2 1.04e-5).
RTOL = 1e-3
ATOL = 1e-4  # times max |expected|
FUSED_GOAL = 2.0  # issue 29: the fused dw+pw block >= 2.0x over the unfused PyTorch block
NO_GOAL = ("-", "-")  # the goal cells of a row without a speedup goal


def input_shape(device: torch.device) -> tuple[int, int, int, int]:
    return GPU_INPUT if mb.full_size(device) else CPU_INPUT


def depthwise_problem(device: torch.device) -> Conv2dProblem:
    """The depthwise conv of a separable block at the model's body resolution."""
    n, _, h, w = input_shape(device)
    return Conv2dProblem(n=n, c_in=FEATS, h=h, w=w, c_out=FEATS, kernel=(3, 3), padding=(1, 1), groups=FEATS)


@dataclass
class EdsrReport:
    """Rows collected during the module; written as ``edsr.md`` when it ends."""

    variants: dict[str, list[str]] = field(default_factory=dict)
    kernels: dict[str, list[str]] = field(default_factory=dict)
    ratios: list[str] = field(default_factory=list)
    accuracy: list[str] = field(default_factory=list)


def kernel_table(rows: list[KernelRow], cuda: bool, limit: int = 10) -> list[str]:
    """Markdown table of the top ``limit`` rows, as in the seed's profiler output."""
    what = "Self CUDA" if cuda else "Self CPU"
    lines = [f"|Name|{what} total|{what} %|{what} avg|# of Calls|", "|:---|---:|---:|---:|---:|"]
    for r in rows[:limit]:
        name = r.name.replace("|", "\\|")
        lines.append(f"|`{name[:90]}`|{r.total_us / 1e3:.3f} ms|{r.share:.2%}|{r.mean_us:.3f} us|{r.calls}|")
    return lines


@pytest.fixture(scope="module")
def edsr_report(convperf_report: ReportSections, convperf_device: DeviceInfo) -> Iterator[EdsrReport]:
    """Collects the module's tables; adds them to ``edsr.md`` in the report directory at module end."""
    rep = EdsrReport()
    yield rep
    device = torch.device(convperf_device.torch_device)
    n, c, h, w = input_shape(device)
    lines = [
        f"Input: batch {n} x {c} x {h} x {w} (LR), x2 output; 16 residual blocks, 64 features, no post-body "
        "conv (the seed's definition). Parameter counts are trainable parameters (MeanShift frozen, "
        f"excluded). Absolute times are advisory. {mb.device_line(device)}; {mb.framework()}; "
        f"TF32 for cuDNN convs: {tf32_enabled() if device.type == 'cuda' else 'n/a'}.",
        "",
        "|Variant|Params|Forward|Backward|Peak memory (fwd+bwd step)|",
        "|:---|---:|---:|---:|---:|",
        *[rep.variants[k][0] for k in sorted(rep.variants)],
    ]
    for name in sorted(rep.kernels):
        lines += [
            "",
            f"## Kernel table: EDSR {name} residual blocks (one forward + backward step)",
            "",
            *rep.kernels[name],
        ]
    if rep.ratios:
        lines += [
            "",
            "## Our kernels vs stock PyTorch (paired rounds, gated on the stored time ratio)",
            "",
            "fp32 pinned to IEEE (TF32 off) on both sides (except separable vs standard: PyTorch's "
            "default TF32 setting, what users get). On a CPU 'our' kernels are their PyTorch-ops "
            "twins (kernels.depthwise.reference, kernels.edsr.reference), so CPU ratios say nothing "
            "about the CUDA kernels. The fused block's backward is the autograd formula of the "
            "reference composition (aten convolution_backward), not a fused kernel.",
            "",
            *GOAL_RATIO_HEADER,
            *rep.ratios,
        ]
    if rep.accuracy:
        lines += [
            "",
            "## Accuracy against an fp64 copy of the model",
            "",
            f"Fixed tolerance: atol {ATOL} x max |expected|, rtol {RTOL}. A tensor outside it passes when "
            "ours is no worse than 2x the stock fp32 model's own error on both max_abs and rel_l2 "
            "(flash-attention's rule): a long fp32 reduction in the stock model is valid fp32 too.",
            "",
            *ACCURACY_HEADER,
            *rep.accuracy,
        ]
    if rep.variants or rep.kernels or rep.ratios or rep.accuracy:
        title = "EDSR x2: standard vs depthwise-separable residual blocks"
        convperf_report.section("edsr.md", "\n".join(lines), title=title)
        print("\nconvperf EDSR tables: edsr.md in the report directory")


@pytest.fixture
def device(convperf_device: DeviceInfo) -> Iterator[torch.device]:
    """The torch device in use, cuDNN benchmark mode on for timing (restored afterwards)."""
    with mb.benchmark_device(convperf_device) as dev:
        yield dev


def _input(device: torch.device) -> torch.Tensor:
    # EDSR takes images in [0, rgb_range] (255).
    return mb.seeded_input(input_shape(device), device).clamp(-3, 3).add(3).mul(255 / 6)


@pytest.mark.parametrize("block", ["standard", "separable"])
def test_edsr_variant(
    block: Block,
    device: torch.device,
    convperf_measure_one: MeasureOne,
    gpu_memory: TrackMemory,
    profiler_trace: StartTrace,
    edsr_report: EdsrReport,
) -> None:
    """Forward/backward time, peak memory and the kernel table of one EDSR variant (seed 000)."""
    torch.manual_seed(0)
    model = EDSR(block=block).to(device)
    params = count_parameters(model)
    assert params == SEED_PARAMS[block]
    x = _input(device)
    calls = mb.phase_callables(model, x)
    fwd = convperf_measure_one(calls["forward"], **mb.rule_for(device))
    bwd = convperf_measure_one(calls["backward"], **mb.rule_for(device))
    del calls
    model.zero_grad(set_to_none=True)
    with gpu_memory() as mem:
        model(x).sum().backward()
    with profiler_trace(f"edsr-{block}") as trace:
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()
    assert trace.kernels, "the profiler saw no kernels/operators in an EDSR training step"
    edsr_report.variants[block] = [
        f"|{block}|{params:,}|{mb.fmt_time(fwd, 'ms')}|{mb.fmt_time(bwd, 'ms')}|{_memory_cell(mem)}|"
    ]
    edsr_report.kernels[block] = [
        *kernel_table(trace.kernels, device.type == "cuda"),
        "",
        f"Trace: `{trace.path}`",
    ]


def _memory_cell(mem: MemoryUsage) -> str:
    mib = mem.peak_bytes / 2**20
    if mem.source.startswith("cpu"):
        return f"{mib:.1f} MiB (growth of the process's peak RSS: coarse, often 0 on a CPU)"
    return f"{mib:.1f} MiB ({mem.source})"


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_separable_vs_standard_edsr(
    phase: str, device: torch.device, convperf: ConvperfFixture, edsr_report: EdsrReport
) -> None:
    """The seed's question, paired: wall-clock of the separable EDSR over the standard one (stock PyTorch).

    Different functions (different weights), so no correctness check; the ratio is tracked against
    its baseline like any other, so a PyTorch/cuDNN change that moves one variant shows up.
    """
    torch.manual_seed(0)
    separable = EDSR(block="separable").to(device)
    standard = EDSR(block="standard").to(device)
    x = _input(device)
    shape = "x".join(map(str, x.shape))
    comparison = check_model_pair(
        convperf,
        name=f"edsr-separable-vs-standard-{shape}",
        phase=phase,
        candidate=separable,
        reference=standard,
        x=x,
        facts={"candidate": "separable EDSR", "reference": "standard EDSR"},
        ieee=False,
    )
    edsr_report.ratios.append(
        ratio_line(
            f"separable EDSR (ours = separable) vs standard EDSR, both stock PyTorch, {phase}",
            comparison,
            NO_GOAL,
        )
    )


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_edsr_depthwise_check(phase: str, device: torch.device, convperf: ConvperfFixture) -> None:
    """Our depthwise kernel on the separable EDSR's depthwise conv, checked like any conv."""
    convperf.check(swap.our_depthwise(device), depthwise_problem(device), phase=phase)


def test_fused_block_vs_unfused_pytorch_block(
    device: torch.device, convperf: ConvperfFixture, edsr_report: EdsrReport
) -> None:
    """The fused dw+pw block (2 kernels) against the stock separable block (goal >= 2.0x on an H100)."""
    torch.manual_seed(0)
    stock = ResBlock(FEATS, "separable").to(device)
    fused = copy.deepcopy(stock)
    for conv in (fused.conv1, fused.conv2):
        assert isinstance(conv, SeparableConv2d)
        conv.depthwise = "fused"
    n, _, h, w = input_shape(device)
    x = mb.seeded_input((n, FEATS, h, w), device)
    with torch.no_grad(), ieee_fp32():
        expected = {"block_output": copy.deepcopy(stock).double()(x.double())}
        rulings = judge_against_stock(
            {"block_output": fused(x)}, {"block_output": stock(x)}, expected, rtol=RTOL, atol_factor=ATOL
        )
    shape = "x".join(map(str, x.shape))
    edsr_report.accuracy += accuracy_lines(f"fused dw+pw block, {shape}", rulings)
    assert all(r.ok for r in rulings), f"fused block differs from the fp64 block: {[r.rule for r in rulings]}"
    errors = [r.stats for r in rulings]
    if device.type != "cuda":
        edsr_report.ratios.append(
            f"|fused dw+pw block, {shape}, forward|-|-|-|-|>= {FUSED_GOAL}x|"
            f"{goal_status(None, FUSED_GOAL, measured=False)}|"
        )
        pytest.skip(
            "timing needs a GPU: on a CPU the fused block is the same two F.conv2d calls as the "
            "stock block (the fused kernel needs CUDA), so the ratio is ~1 by construction; "
            "the composition's correctness was checked above"
        )

    def run_fused() -> object:
        with torch.no_grad():
            return fused(x)

    def run_stock() -> object:
        with torch.no_grad():
            return stock(x)

    comparison = check_pair(
        convperf,
        name=f"edsr-block-{shape}",
        phase="forward",
        candidate=run_fused,
        reference=run_stock,
        errors=errors,
        facts={"goal_speedup": FUSED_GOAL},
        rule=pair_rule(device),
    )
    goal = (f">= {FUSED_GOAL}x", goal_status(comparison.speedup, FUSED_GOAL, measured=True))
    edsr_report.ratios.append(ratio_line(f"fused dw+pw block, {shape}, forward", comparison, goal))


@pytest.mark.parametrize("phase", ["forward", "backward"])
@pytest.mark.parametrize("impl", ["ours", "fused"])
def test_separable_edsr_on_our_kernels(
    impl: str, phase: str, device: torch.device, convperf: ConvperfFixture, edsr_report: EdsrReport
) -> None:
    """The separable EDSR on our depthwise (``ours``) or fused block kernel vs the stock model."""
    torch.manual_seed(0)
    stock = EDSR(block="separable").to(device)
    ours = copy.deepcopy(stock).set_depthwise(impl)
    x = _input(device)
    g = mb.seeded_input(stock(x).shape, device, seed=1)
    oracle = copy.deepcopy(stock).double()

    def out_and_grad(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        xi = x.detach().to(dtype).clone().requires_grad_(True)
        y = model(xi)
        y.backward(g.to(dtype))
        assert xi.grad is not None
        return {"output": y.detach(), "grad_input": xi.grad}

    with ieee_fp32():
        expected = out_and_grad(oracle, torch.float64)
        got = out_and_grad(ours, torch.float32)
        base = out_and_grad(stock, torch.float32)
    rulings = judge_against_stock(got, base, expected, rtol=RTOL, atol_factor=ATOL)
    edsr_report.accuracy += accuracy_lines(f"separable EDSR on {impl}, {phase}", rulings)
    bad = [f"{r.apriori.name}: {r.rule}" for r in rulings if not r.ok]
    assert not bad, f"EDSR on {impl} kernels differs from fp64 more than the stock fp32 model: {bad}"
    errors = [r.stats for r in rulings]
    if impl == "fused" and device.type != "cuda":
        pytest.skip(
            "timing needs a GPU: on a CPU the fused block is the same two F.conv2d calls as the "
            "stock block (the fused kernel needs CUDA), so the ratio is ~1 by construction; "
            "the composition's correctness was checked above"
        )
    shape = "x".join(map(str, x.shape))
    comparison = check_model_pair(
        convperf,
        name=f"edsr-separable-{impl}-{shape}",
        phase=phase,
        candidate=ours,
        reference=stock,
        x=x,
        errors=errors,
        facts={"depthwise": impl},
    )
    label = {"ours": "our depthwise kernel", "fused": "fused dw+pw block kernel"}[impl]
    edsr_report.ratios.append(ratio_line(f"separable EDSR on {label}, {phase}", comparison, NO_GOAL))
