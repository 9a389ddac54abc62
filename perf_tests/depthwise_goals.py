"""Issue 29's aggregate goals over the depthwise seed shapes: the arithmetic, apart from the timing.

A per-row goal (``test_depthwise.GOALS``) judges one measured row. These judge a set of rows: the
geomean of speedups over the seed shapes, or the worst per-shape ratio against the best PyTorch path
(the faster of the native NCHW kernel and cuDNN on channels_last). The rows come from
``convperf.check`` comparisons measured in the same run; nothing here is a stored number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Shape = tuple[int, int, int, int]  # (N, C, H = W, k), as DEPTHWISE_SEED_SHAPES


@dataclass(frozen=True)
class RowTimes:
    """One measured row's medians: our kernel and the row's PyTorch reference."""

    candidate_us: float
    reference_us: float


@dataclass(frozen=True)
class AggregateGoal:
    """``geomean`` of the rows' speedups, or ``worst`` of ours against the best PyTorch path (the
    faster reference of the NCHW and the NHWC row of a shape), forward phase, >= ``at_least``."""

    name: str
    dtype: str
    layout: str  # the rows whose candidate is judged
    kind: str  # "geomean" | "best-path-worst"
    at_least: float

    def rows_needed(self, shapes: Sequence[Shape]) -> list[tuple[Shape, str]]:
        """(shape, layout) of every row the goal reads."""
        layouts = ("nchw", "nhwc") if self.kind == "best-path-worst" else (self.layout,)
        return [(s, lay) for s in shapes for lay in layouts]

    def judge(self, rows: Mapping[tuple[Shape, str], RowTimes]) -> tuple[float, str]:
        """(the aggregate, a one-line account of it) from the measured rows."""
        shapes = sorted({s for s, _ in rows}, key=lambda s: -s[0] * s[1] * s[2] * s[2])
        label = {s: f"{s[0]}x{s[1]}x{s[2]}-k{s[3]}" for s in shapes}
        if self.kind == "geomean":
            ratios = {
                s: rows[s, self.layout].reference_us / rows[s, self.layout].candidate_us for s in shapes
            }
            value = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
            worst = min(ratios, key=ratios.__getitem__)
            return (
                value,
                f"geomean {value:.2f}x over {len(ratios)} shapes "
                f"(lowest {label[worst]} {ratios[worst]:.2f}x)",
            )
        if self.kind == "best-path-worst":
            ratios = {
                s: min(rows[s, "nchw"].reference_us, rows[s, "nhwc"].reference_us)
                / rows[s, self.layout].candidate_us
                for s in shapes
            }
            worst = min(ratios, key=ratios.__getitem__)
            account = f"worst {label[worst]} {ratios[worst]:.2f}x against the faster PyTorch layout"
            return ratios[worst], account
        raise ValueError(f"AggregateGoal.kind={self.kind!r} must be 'geomean' or 'best-path-worst'")


AGGREGATE_GOALS = (
    AggregateGoal("fp32-forward-vs-best-pytorch", "fp32", "nchw", "best-path-worst", 1.0),
    AggregateGoal("fp16-nchw-forward-vs-cudnn-geomean", "fp16", "nchw", "geomean", 1.2),
    AggregateGoal("fp32-nhwc-forward-vs-cudnn-geomean", "fp32", "nhwc", "geomean", 1.0),
    AggregateGoal("fp16-nhwc-forward-vs-cudnn-geomean", "fp16", "nhwc", "geomean", 1.0),
)
