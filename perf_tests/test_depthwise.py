"""Depthwise conv2d (seed 001): correctness fuzzing, seed-shape perf checks, worst-speedup search.

* Fuzz (always runs): Hypothesis over depthwise problems, forward and both gradients against the
  fp64 ``F.conv2d`` oracle, with ``@example`` s for the seed's 8 shapes. On CUDA the candidate is
  our kernel; on a CPU it is ``kernels.depthwise.reference`` (and shapes are scaled to batch 1).
* Perf (``--convperf``): ``convperf.check`` on the 8 shapes x {fp32, fp16} x {nchw, nhwc} x
  {forward, input_grad, weight_grad}. The CPU runs fp32 only (PyTorch's fp16 CPU conv is not a
  meaningful target and is very slow) at batch 1.
* Search (``--convperf``): a ``hypothesis.target``-guided search for the worst speedup
  (``convperf_cliffs``): pinned cliffs re-checked first; under ``convperf_speedup_floor`` the
  shape is shrunk and fails unless pinned (``--convperf-update-baselines=cliffs``).
* Report: ``depthwise.md`` in the report directory (and printed): the seed's columns (ours,
  reference, speedup) plus % of roofline at the measured copy bandwidth and the backend PyTorch chose.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from perf_tests.conftest import depthwise_candidate
from perf_tests.depthwise_goals import AGGREGATE_GOALS, AggregateGoal, RowTimes
from perf_tests.device_kind import collection_device_kind
from perf_tests.shapes import (
    CPU_BATCH,
    DEPTHWISE_SEED_SHAPES,
    depthwise_problems,
    depthwise_seed_problem,
    measured_shapes,
    scaled_for,
    seed_label,
    short_id,
)
from pytest_convperf import (
    CliffSearch,
    Comparison,
    Conv2dProblem,
    DeviceInfo,
    ReportSections,
    assert_conv_close,
)

Candidate = Callable[..., torch.Tensor]
PHASES = ("forward", "input_grad", "weight_grad")

# ~30 examples under Hypothesis' own default; a convperf profile (dev/ci/nightly) sets its own count.
_DEFAULT = settings.default.max_examples if settings.default is not None else 100
FUZZ_EXAMPLES = 30 if _DEFAULT == 100 else _DEFAULT
FUZZ_SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    # the device fixture is the same for every example
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FUZZ_PROBLEMS = depthwise_problems(
    kernel_sizes=(1, 2, 3, 4, 5, 6, 7),
    strides=(1, 2),
    dilations=(1, 2),
    max_channels=24,
    max_batch=3,
    min_batch=0,
    max_out_size=20,
    max_elements=2**15,
)


def _seed_examples(test: Callable[..., None]) -> Callable[..., None]:
    for shape in DEPTHWISE_SEED_SHAPES:
        test = example(problem=depthwise_seed_problem(*shape), seed=0)(test)
    return test


@FUZZ_SETTINGS
@given(problem=FUZZ_PROBLEMS, seed=st.integers(0, 2**31 - 1))
@_seed_examples
def test_fuzz_forward_and_grads(problem: Conv2dProblem, seed: int, convperf_device: DeviceInfo) -> None:
    """Output and input/weight/bias gradients match the fp64 oracle within the dtype's tolerance."""
    problem = scaled_for(problem, convperf_device.kind)
    candidate = depthwise_candidate(convperf_device.kind)
    assert_conv_close(candidate, problem, seed=seed, backward=True, device=convperf_device.torch_device)


# ---- report -------------------------------------------------------------------------------------------


DEPTHWISE_TITLE = "Depthwise conv2d (seed 001): ours vs F.conv2d"


@dataclass
class DepthwiseTable:
    """Rows collected during the module, written as ``depthwise.md`` at module end."""

    device: str = ""
    scaled: bool = False
    rows: list[tuple[str, ...]] = field(default_factory=list)
    worst: list[str] = field(default_factory=list)
    spec: str = "no spec peak"

    def add(self, problem: Conv2dProblem, phase: str, comparison: Comparison) -> None:
        ours = comparison.candidate.median_us
        ref = comparison.reference.median_us
        floors = (comparison.facts.get("roofline_floor_us"), comparison.facts.get("roofline_spec_floor_us"))
        roof, spec = (
            f"{100 * floor / ours:.0f} %" if isinstance(floor, (int, float)) and ours > 0 else "-"
            for floor in floors
        )
        self.spec = str(comparison.facts.get("roofline_spec") or self.spec)
        backend = str(comparison.facts.get("reference_backend") or "-")
        self.rows.append(
            (seed_label(problem), problem.dtype, problem.layout, phase, f"{ours:.1f}", f"{ref:.1f}",
             f"{comparison.speedup:.2f}x", roof, spec, backend)
        )  # fmt: skip

    def markdown(self) -> list[str]:
        lines = [f"Device: {self.device}."]
        if self.scaled:
            lines.append(
                f"CPU run: shapes scaled to batch {CPU_BATCH} (the seed uses 16); fp32 only; the candidate "
                "is kernels.depthwise.reference (PyTorch ops), the reference PyTorch's CPU conv."
            )
        lines += [
            "% of roofline = time to move the bytes that must move (read input/dy/weight, write the "
            "result once) / our median time, at the measured copy bandwidth (copy BW) and at the "
            f"datasheet peak ({self.spec}). Times are medians in microseconds.",
            "",
            "| shape | dtype | layout | phase | ours (us) | reference (us) | speedup "
            "| % of roofline (copy BW) | % of roofline (spec) | backend |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        if self.worst:
            lines += ["", "## Worst speedup found by the targeted search", "", *self.worst]
        return lines


@pytest.fixture(scope="module")
def dw_table(convperf_report: ReportSections) -> Iterator[DepthwiseTable]:
    """Collects the module's perf rows; adds them to ``depthwise.md`` (and prints them) at module end."""
    table = DepthwiseTable()
    yield table
    if not table.rows and not table.worst:
        return
    text = "\n".join(table.markdown())
    convperf_report.section("depthwise.md", text, title=DEPTHWISE_TITLE)
    print(f"\n{text}\nconvperf depthwise table: depthwise.md in the report directory")


# ---- perf checks on the seed shapes -------------------------------------------------------------------

ForwardRows = dict[tuple[tuple[int, int, int, int], str, str], RowTimes]


@pytest.fixture(scope="module")
def forward_rows() -> ForwardRows:
    """Forward rows measured in this module, by (shape, dtype, layout): ``test_seed_shape`` adds its
    rows, the aggregate goals read them and measure only the rows a run did not."""
    return {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``shape``: the seed shapes as this run measures them, so a CPU run's ids say ``1x32x112-k3``."""
    if metafunc.function.__name__ == "test_seed_shape":
        metafunc.parametrize("shape", measured_shapes(collection_device_kind(metafunc.config)), ids=short_id)


@pytest.mark.convperf
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_seed_shape(
    shape: tuple[int, int, int, int],
    dtype: str,
    layout: str,
    phase: str,
    convperf: object,
    convperf_device: DeviceInfo,
    dw_table: DepthwiseTable,
    forward_rows: ForwardRows,
) -> None:
    """Correct, and not slower than the stored baseline, on one seed shape (scaled on a CPU)."""
    if not convperf_device.is_cuda and dtype != "fp32":
        pytest.skip(
            "the CPU run is fp32 only: PyTorch's fp16 CPU conv is not a meaningful (and a very slow) target"
        )
    problem = scaled_for(depthwise_seed_problem(*shape, dtype=dtype, layout=layout), convperf_device.kind)
    candidate = depthwise_candidate(convperf_device.kind)
    # The weight gradient sums per-slice partials in a fixed order (no atomics): bitwise reproducible.
    deterministic = phase == "weight_grad"
    comparison = convperf.check(candidate, problem, phase=phase, deterministic=deterministic)  # type: ignore[attr-defined]
    dw_table.device = convperf_device.name
    dw_table.scaled = not convperf_device.is_cuda
    dw_table.add(problem, phase, comparison)
    if phase == "forward":
        forward_rows[shape, dtype, layout] = RowTimes(
            comparison.candidate.median_us, comparison.reference.median_us
        )


# ---- targeted search for the worst speedup ------------------------------------------------------------

SEARCH_PROBLEMS = depthwise_problems(
    dtypes=("fp32",),
    kernel_sizes=(1, 3, 5, 7),
    square_kernels=True,
    strides=(1, 2),
    dilations=(1,),
    bias=(False,),
    max_channels=256,
    max_batch=16,
    max_out_size=64,
    max_elements=2**22,
)


@pytest.mark.convperf
def test_worst_speedup_search(
    convperf_cliffs: CliffSearch, convperf_device: DeviceInfo, dw_table: DepthwiseTable
) -> None:
    """Re-check the pinned cliffs; steer Hypothesis towards the slowest forward speedup, shrink a shape
    under the ``convperf_speedup_floor`` to the simplest one, report it and check it is correct."""
    candidate = depthwise_candidate(convperf_device.kind)
    result = convperf_cliffs.search(
        "depthwise",
        candidate,
        SEARCH_PROBLEMS,
        max_examples=20 if convperf_device.is_cuda else 8,
        prepare=lambda problem: scaled_for(problem, convperf_device.kind),
    )
    dw_table.device = convperf_device.name
    dw_table.worst = [f"- {result.line()}"]
    print(dw_table.worst[0])
    assert_conv_close(candidate, result.worst, device=convperf_device.torch_device)
    convperf_cliffs.enforce(result)  # ini convperf_speedup_floor (default off); pinned cliffs' re-checks


# ---- issue 29's goals (GPU only) ------------------------------------------------------------------------

_LARGEST = DEPTHWISE_SEED_SHAPES[:2]  # 16x32x112-k3 and 16x144x56-k3: the most bytes


@dataclass(frozen=True)
class Goal:
    """One per-row goal of issue 29: ``spec`` (share of the HBM spec) or ``speedup`` over the reference."""

    name: str
    shape: tuple[int, int, int, int]
    dtype: str
    phase: str
    kind: str
    at_least: float

    def id(self) -> str:
        n, c, hw, k = self.shape
        return f"{self.name}-{n}x{c}x{hw}-k{k}"


GOALS = [
    *(Goal("fp32-forward-hbm", s, "fp32", "forward", "spec", 0.80) for s in _LARGEST),
    *(Goal("fp32-input-grad-hbm", s, "fp32", "input_grad", "spec", 0.70) for s in _LARGEST),
    *(Goal("fp16-forward-vs-cudnn", s, "fp16", "forward", "speedup", 1.0) for s in DEPTHWISE_SEED_SHAPES),
    *(
        Goal("fp32-weight-grad-vs-native", s, "fp32", "weight_grad", "speedup", 2.0 if s[3] == 3 else 3.0)
        for s in DEPTHWISE_SEED_SHAPES
    ),
]


@pytest.mark.convperf
@pytest.mark.parametrize("goal", GOALS, ids=Goal.id)
def test_issue29_goal(goal: Goal, convperf: object, convperf_device: DeviceInfo) -> None:
    """Issue 29's per-row goals on the full-size seed shapes (NCHW). The goals over all seed shapes
    (geomeans, the best PyTorch path) are ``test_issue29_aggregate_goal``; the whole-model goals are
    read from the report's tables; the host-cost goal is ``test_depthwise_host.py`` (CPU)."""
    if not convperf_device.is_cuda:
        pytest.skip(
            "issue 29's goals are GPU goals: a CPU run times the PyTorch reference twin, not our kernels"
        )
    problem = depthwise_seed_problem(*goal.shape, dtype=goal.dtype)
    comparison = convperf.check(  # type: ignore[attr-defined]
        depthwise_candidate(convperf_device.kind),
        problem,
        phase=goal.phase,
        deterministic=goal.phase == "weight_grad",
    )
    if goal.kind == "spec":
        floor = comparison.facts.get("roofline_spec_floor_us")
        assert isinstance(floor, (int, float)), "no HBM spec for this GPU: the goal cannot be judged"
        got = floor / comparison.candidate.median_us
    else:
        got = comparison.speedup
    assert got >= goal.at_least, f"{goal.id()}: {got:.2f} (goal >= {goal.at_least})"


@pytest.mark.convperf
@pytest.mark.parametrize("goal", AGGREGATE_GOALS, ids=lambda g: g.name)
def test_issue29_aggregate_goal(
    goal: AggregateGoal, convperf: object, convperf_device: DeviceInfo, forward_rows: ForwardRows
) -> None:
    """Issue 29's goals over the 8 full-size seed shapes, forward: fp32 against the best PyTorch path
    (the faster of native NCHW and cuDNN channels_last) on every shape; fp16 NCHW and NHWC (fp32,
    fp16) geomeans against cuDNN. From rows measured in this run (``test_seed_shape``'s, else here)."""
    if not convperf_device.is_cuda:
        pytest.skip(
            "issue 29's goals are GPU goals: a CPU run times the PyTorch reference twin, not our kernels"
        )
    rows: dict[tuple[tuple[int, int, int, int], str], RowTimes] = {}
    for shape, layout in goal.rows_needed(DEPTHWISE_SEED_SHAPES):
        key = (shape, goal.dtype, layout)
        if key not in forward_rows:
            problem = depthwise_seed_problem(*shape, dtype=goal.dtype, layout=layout)
            comparison = convperf.check(depthwise_candidate(convperf_device.kind), problem, phase="forward")  # type: ignore[attr-defined]
            forward_rows[key] = RowTimes(comparison.candidate.median_us, comparison.reference.median_us)
        rows[shape, layout] = forward_rows[key]
    value, account = goal.judge(rows)
    assert value >= goal.at_least, f"{goal.name}: {account} (goal >= {goal.at_least}x)"
