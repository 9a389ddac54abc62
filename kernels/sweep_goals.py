"""The 13 kernel goals of docs/tuning-log.md as sweep rows: which rows decide each, and its reading.

A GPU window's tuning call measures these rows first (:func:`kernels.sweep.order_by_goals`), so a
sweep cut short still decides the goals; after the window, ``scripts/window_harvest.py`` reads every
goal from the sweep's CSVs (:func:`read_goal`): the measured statistic, the same statistic with the
candidate's cost-model prediction (the CSV's ``predicted_us``) in place of its measured time, and
whether the goal is met. Goals are read, never asserted: a goal the sweep did not reach reads
"not measured".

Each goal pairs candidate variants with a reference on the same problem and phase: another variant
(``unfused``, ``naive-2bit``), a cuDNN anchor (``cudnn-<dtype>-<layout>``, the problem re-typed as
:func:`kernels.sweep.anchor_cases` did), ``best-pytorch-fp32`` (the faster of the two fp32 anchors)
or ``spec`` (the share of the datasheet bandwidth, the CSV's ``pct_hbm_spec``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_convperf import Conv2dProblem

SPEC = "spec"
BEST_FP32 = "best-pytorch-fp32"
# The two largest depthwise seed shapes (what the bandwidth goals name).
LARGEST = (
    "n16-ci144-h56-w56-co144-k3x3-s1-p1-d1-g144-fp32-nchw",
    "n16-ci32-h112-w112-co32-k3x3-s1-p1-d1-g32-fp32-nchw",
)


@dataclass(frozen=True)
class Pair:
    candidate: str  # a variant of the family's sweep plan
    reference: str  # a variant, a cudnn-<dtype>-<layout> anchor, BEST_FP32 or SPEC
    threshold: float  # the goal for this pair's ratio (reference / candidate, or share of spec)


@dataclass(frozen=True)
class Goal:
    number: int
    title: str
    family: str
    phase: str
    pairs: tuple[Pair, ...]
    problems: tuple[str, ...] = ()  # substrings of the problem id; empty: every problem
    reduce: str = "min"  # min: every row at its threshold; geomean: the geomean at the threshold
    floor: float | None = None  # with geomean: no single ratio under it
    # Thresholds that depend on the kernel size ("k3x3" -> 2.0) replace the pair's.
    per_kernel: tuple[tuple[str, float], ...] = ()

    def wants(self, family: str, variant: str, problem: str, phase: str) -> bool:
        """Whether a planned row decides this goal (a candidate, or a reference it is compared with)."""
        if family != self.family or (phase != self.phase and variant != "copy"):
            return False
        if self.problems and not any(p in problem for p in self.problems):
            return False
        names = {p.candidate for p in self.pairs} | {p.reference for p in self.pairs}
        if BEST_FP32 in names:
            names |= {"cudnn-fp32-nchw", "cudnn-fp32-nhwc"}
        return variant in names or (variant == "copy" and SPEC in names)

    def threshold(self, pair: Pair, problem: str) -> float:
        return next((t for k, t in self.per_kernel if k in problem), pair.threshold)


def _dw(number: int, title: str, phase: str, pairs: Sequence[Pair], **kw: object) -> Goal:
    return Goal(number, title, "depthwise", phase, tuple(pairs), **kw)  # type: ignore[arg-type]


_FP32 = ("-fp32-",)
_WGRAD_K = (("k3x3", 2.0), ("k5x5", 3.0))
GOALS: tuple[Goal, ...] = (
    # The default (v2): the goal the first window measured (2.11x), measured again beside the others.
    _dw(1, "depthwise fp32 NCHW forward (v2) vs PyTorch, geomean of the 8 seed shapes >= 1.5x", "forward",
        [Pair("v2", "cudnn-fp32-nchw", 1.5)], problems=("-fp32-nchw",), reduce="geomean"),
    # v4 (register windows, grids sized to the GPU): the variant docs/tuning-log.md step 7 predicts.
    _dw(2, "depthwise fp32 NCHW forward (v4), two largest shapes >= 80 % of the HBM spec", "forward",
        [Pair("v4", SPEC, 0.80)], problems=LARGEST),
    _dw(3, "depthwise fp32 NCHW input grad, two largest shapes >= 70 % of the HBM spec", "input_grad",
        [Pair("v4", SPEC, 0.70)], problems=LARGEST),
    _dw(4, "depthwise fp32 NCHW forward vs the best PyTorch path, worst seed shape >= 1.0x", "forward",
        [Pair("v4", BEST_FP32, 1.0)], problems=_FP32),  # v4 runs NCHW only; the anchors of both layouts
    _dw(5, "depthwise fp16 NCHW forward vs cuDNN, geomean >= 1.2x, none < 1.0x", "forward",
        [Pair("v4", "cudnn-fp16-nchw", 1.2)], problems=("-fp16-nchw",), reduce="geomean", floor=1.0),
    _dw(6, "depthwise NHWC forward vs cuDNN (v3 fwd_nhwc_vec), geomean >= 1.0x fp32 and fp16", "forward",
        [Pair("v3", "cudnn-fp32-nhwc", 1.0), Pair("v3", "cudnn-fp16-nhwc", 1.0)], problems=("-nhwc",),
        reduce="geomean"),
    _dw(7, "depthwise fp32 weight grad vs PyTorch (w2 NCHW, w3 NHWC), >= 2x every k3, >= 3x every k5",
        "weight_grad", [Pair("w2", "cudnn-fp32-nchw", 2.0), Pair("w3", "cudnn-fp32-nhwc", 2.0)],
        problems=_FP32, per_kernel=_WGRAD_K),
    Goal(8, "im2col+GEMM int8 LSQ v2 forward vs cuDNN fp16 NCHW >= 2.0x", "im2col_gemm", "forward",
         (Pair("lsq_v2", "cudnn-fp16-nchw", 2.0),), problems=("-fp16-nchw",)),
    Goal(9, "im2col+GEMM fp32 implicit forward vs cuDNN fp32 on the EDSR shapes >= 1.0x", "im2col_gemm",
         "forward", (Pair("implicit", "cudnn-fp32-nchw", 1.0),), problems=("-ci64-",)),
    Goal(10, "im2col+GEMM sparse_2to4 fp16 forward vs the dense gemm >= 1.1x", "im2col_gemm", "forward",
         (Pair("sparse_2to4", "gemm", 1.1),), problems=("-fp16-nchw",)),
    Goal(11, "PCILT tiled v2 vs the naive lookup: >= 5x at 2 and 4 bits, >= 2x at 8 bits", "pcilt",
         "forward", (Pair("tiled-v2-2bit", "naive-2bit", 5.0), Pair("tiled-v2-4bit", "naive-4bit", 5.0),
                     Pair("tiled-v2-8bit", "naive-8bit", 2.0))),
    Goal(12, "PCILT depthwise on packed 4-bit codes vs the fp32 depthwise v2 kernel >= 1.5x", "pcilt",
         "forward", (Pair("depthwise-4bit-prepacked", "fp32-depthwise-v2", 1.5),)),
    Goal(13, "EDSR fused dw+pw block v2 forward vs the stock (cuDNN) unfused block >= 2.0x", "edsr",
         "forward", (Pair("fused_v2", "cudnn_unfused", 2.0),), problems=("n16-ci64-h48",)),
)  # fmt: skip


def goal_rank(family: str, variant: str, problem: str, phase: str) -> int | None:
    """The number of the first goal a planned row decides, None when it decides none."""
    return next((g.number for g in GOALS if g.wants(family, variant, problem, phase)), None)


# ---- reading a goal from the sweep's rows ----------------------------------------------------


@dataclass(frozen=True)
class GoalReading:
    goal: Goal
    rows: int  # candidate rows with a measured time and a reference
    measured: float | None  # the goal's statistic (min of ratio / threshold, or the geomean)
    predicted: float | None  # the same with the cost model's time for the candidate
    met: bool | None  # None: not measured

    def cell(self, value: float | None) -> str:
        if value is None:
            return "-"
        return f"{value:.2f} of goal" if self.goal.reduce == "min" else f"{value:.2f}x"


def _anchor_problem(problem: str, anchor: str) -> str:
    _, dtype, layout = anchor.split("-")
    return Conv2dProblem.from_id(problem).replace(dtype=dtype, layout=layout).id


def _median(
    rows: Mapping[tuple[str, str, str], Mapping[str, str]], key: tuple[str, str, str]
) -> float | None:
    row = rows.get(key)
    return float(row["median_us"]) if row and row.get("median_us") else None


def _reference_us(
    rows: Mapping[tuple[str, str, str], Mapping[str, str]], reference: str, problem: str, phase: str
) -> float | None:
    if reference == BEST_FP32:
        times = [_reference_us(rows, a, problem, phase) for a in ("cudnn-fp32-nchw", "cudnn-fp32-nhwc")]
        found = [t for t in times if t is not None]
        return min(found) if found else None
    if reference.startswith("cudnn-") and reference.count("-") == 2:
        return _median(rows, (reference, _anchor_problem(problem, reference), phase))
    return _median(rows, (reference, problem, phase))


def read_goal(goal: Goal, csv_rows: Iterable[Mapping[str, str]]) -> GoalReading:
    """The goal's reading from the rows of its family's sweep CSV."""
    rows = {(r["variant"], r["problem"], r["phase"]): r for r in csv_rows if r.get("family") == goal.family}
    measured: list[float] = []
    predicted: list[float | None] = []
    for (variant, problem, phase), row in rows.items():
        for pair in goal.pairs:
            if variant != pair.candidate or phase != goal.phase or not row.get("median_us"):
                continue
            if goal.problems and not any(p in problem for p in goal.problems):
                continue
            cand = float(row["median_us"])
            model = float(row["predicted_us"]) if row.get("predicted_us") else None
            limit = goal.threshold(pair, problem)
            if pair.reference == SPEC:
                if not row.get("pct_hbm_spec"):
                    continue
                share = float(row["pct_hbm_spec"]) / 100
                ratio, model_ratio = share, (share * cand / model if model else None)
            else:
                ref = _reference_us(rows, pair.reference, problem, phase)
                if ref is None:
                    continue
                ratio, model_ratio = ref / cand, (ref / model if model else None)
            scale = 1.0 if goal.reduce == "geomean" else 1.0 / limit
            measured.append(ratio * scale)
            predicted.append(None if model_ratio is None else model_ratio * scale)
    if not measured:
        return GoalReading(goal, 0, None, None, None)
    value, model_value = _reduce(goal, measured), _reduce_opt(goal, predicted)
    if goal.reduce == "geomean":
        limit = goal.pairs[0].threshold
        met = value >= limit and (goal.floor is None or min(measured) >= goal.floor)
    else:
        met = value >= 1.0
    return GoalReading(goal, len(measured), value, model_value, met)


def _reduce(goal: Goal, values: Sequence[float]) -> float:
    if goal.reduce == "geomean":
        return math.exp(sum(math.log(v) for v in values) / len(values))
    return min(values)


def _reduce_opt(goal: Goal, values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return _reduce(goal, known) if known and len(known) == len(values) else None
