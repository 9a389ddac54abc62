"""The depthwise sweep's cases: every variant on the seed shapes (kernels/depthwise/seed.py).

``v2`` (the default kernel) in fp32/fp16 x NCHW/NHWC x forward/input_grad; ``v1`` (the first tiled
kernel, ``CONVPERF_DEPTHWISE_VARIANT=v1``) where the switch changes the kernel: the NCHW tiled forward
and input gradient; ``v3`` (issue 29) on the NCHW rows (batched 16-byte staging) and the NHWC rows
(``fwd_nhwc_vec``: 16-byte channel vectors walking down a column), so one process times old (v2)
against new (v3) in both layouts; ``v4`` (U x U outputs per thread from a register window, grids sized
to the GPU; ``kernels/model/plan_v4.py``) on the NCHW rows (its NHWC kernel is v3's). The weight grad
rows run ``w2`` (one launch, staged NCHW tiles, the generic NHWC kernel) and on NCHW ``w1`` (two
launches, the measured baseline), on NHWC ``w3`` (the default: ``wgrad_nhwc_vec``, channel vectors
walking strips; on NCHW it is w2), switched by ``CONVPERF_DEPTHWISE_WGRAD``, so one process times the
new NHWC weight grad against the old. Every row but v1 and the w2 NHWC weight grads carries the
calibrated model's prediction (``kernels/model/calibration.py``, a cold call), written before a GPU
measures it. A new variant adds its rows to :func:`cases`.
"""

from __future__ import annotations

from kernels.depthwise import ops
from kernels.depthwise.seed import DEPTHWISE_SEED_SHAPES, depthwise_seed_problem
from kernels.model.calibration import predicted_us
from kernels.sweep_calls import conv_case
from kernels.sweep_case import Case

FAMILY = "depthwise"
VARIANT_ENV = "CONVPERF_DEPTHWISE_VARIANT"
WGRAD_ENV = "CONVPERF_DEPTHWISE_WGRAD"
DTYPES = ("fp32", "fp16")
LAYOUTS = ("nchw", "nhwc")
PHASES = ("forward", "input_grad", "weight_grad")


def _variants(layout: str, phase: str) -> list[tuple[str, dict[str, str], bool]]:
    """(variant, its environment, whether the model predicts it) of one (layout, phase)."""
    if phase == "weight_grad":
        if layout == "nchw":  # w3 runs w2's staged NCHW kernel there
            return [(v, {WGRAD_ENV: v}, True) for v in ("w2", "w1")]
        # w3 against the path it replaces; w1's NHWC rows (the measured baseline, recorded by the suite)
        # give way so the sweep keeps its 631 rows and its phase of the GPU window
        return [(v, {WGRAD_ENV: v}, v == "w3") for v in ("w3", "w2")]
    if layout == "nchw":  # where the switch picks the tiled kernel
        return [(v, {VARIANT_ENV: v}, v != "v1") for v in ("v2", "v1", "v3", "v4")]
    return [(v, {VARIANT_ENV: v}, True) for v in ("v2", "v3")]  # the row kernel, fwd_nhwc_vec (v4's too)


def cases() -> list[Case]:
    out: list[Case] = []
    for shape in DEPTHWISE_SEED_SHAPES:
        for dtype in DTYPES:
            for layout in LAYOUTS:
                problem = depthwise_seed_problem(*shape, dtype=dtype, layout=layout)
                for phase in PHASES:
                    for variant, env, predicted in _variants(layout, phase):
                        guess = predicted_us(shape, dtype, phase, variant, layout) if predicted else None
                        out.append(
                            conv_case(
                                FAMILY, variant, ops.forward, problem, phase, env=env, predicted_us=guess
                            )
                        )
    return out
