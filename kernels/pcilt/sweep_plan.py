"""The PCILT sweep's cases (inference, forward only): the seed layer at 2, 4 and 8 bits with the
tiled kernel (v1 and v2, ``CONVPERF_PCILT_VARIANT``) and the naive one, 8 bits with whole 256-entry
tables (the nibble tables' baseline), float tables at 4 bits, and the depthwise problems with 4-bit
inputs packed per call and packed once (``prepacked``) on the depthwise kernel, against the dense
tiled kernel (``dense=True``, the kernel it replaced) and our own fp32 depthwise kernel (the goal's
reference: >= 1.5x). A new variant adds its rows to :func:`cases`."""

from __future__ import annotations

import torch

from kernels.depthwise import ops as depthwise_ops
from kernels.depthwise import sweep_plan as depthwise_plan
from kernels.model.calibration import predicted_us
from kernels.pcilt import ops
from kernels.pcilt.tables import default_act_step
from kernels.sweep_calls import ConvFn, conv_case
from kernels.sweep_case import Case
from pytest_convperf import Conv2dProblem

FAMILY = "pcilt"
SEED_CASE = Conv2dProblem(n=1, c_in=64, h=224, w=224, c_out=128, kernel=(3, 3), padding=(1, 1))
DEPTHWISE = (
    Conv2dProblem(n=16, c_in=32, h=112, w=112, c_out=32, kernel=(3, 3), padding=(1, 1), groups=32),
    Conv2dProblem(n=16, c_in=144, h=56, w=56, c_out=144, kernel=(3, 3), padding=(1, 1), groups=144),
)


def fixed_step(fn: ConvFn, bits: int, **options: object) -> ConvFn:
    """``fn`` at ``bits`` with the activation step of its inputs taken once (as the suite binds it),
    so the timed call does not re-derive it."""
    steps: dict[int, float] = {}

    def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *args: object) -> torch.Tensor:
        if id(x) not in steps:  # once per input: the timed calls only read it
            steps[id(x)] = default_act_step(x, bits)
        step = steps[id(x)]
        return fn(x, w, b, *args, bits=bits, act_step=step, **options)

    return run


def depthwise_bytes(problem: Conv2dProblem, *, packed: bool) -> int:
    """Bytes one depthwise call reads and writes once (its tensors' sizes): PCILT on 4-bit codes packed
    8 to a word with its k*k*16 int32 table entries a channel (``packed``), or the fp32 kernel on x and
    w; both read the bias and write the fp32 output. ``tests/kernels/test_pcilt.py`` counts the same
    on the real call."""
    n, c, h, w = problem.n, problem.c_in, problem.h, problem.w
    kh, kw = problem.kernel
    ho, wo = problem.out_h, problem.out_w
    out = n * c * ho * wo * 4 + (c * 4 if problem.bias else 0)
    if packed:
        return out + n * c * h * -(-w // 8) * 4 + c * kh * kw * 16 * 4
    return out + n * c * h * w * 4 + c * kh * kw * 4


def depthwise_predicted_us(problem: Conv2dProblem) -> float:
    """The depthwise PCILT kernel on packed codes, predicted before a GPU measures it: the fp32 v2
    kernel's calibrated time scaled by the bytes each moves (both memory-bound: the 9 shared-memory
    lookups an output are ~8 us of LDS issue on the larger shape, under its ~11 us of HBM traffic)."""
    k = problem.kernel[0]
    fp32_us = predicted_us((problem.n, problem.c_in, problem.h, k), "fp32", "forward", "v2")
    return fp32_us * depthwise_bytes(problem, packed=True) / depthwise_bytes(problem, packed=False)


# The v2 tiled kernel on the seed case, predicted before any GPU run (docs/tuning-log.md, PCILT v2):
# shared-memory lookups bound (one LDS a lookup, two with 8-bit nibble tables, at one warp-wide LDS a
# clock per SM), about 10x / 10x / 5.7x the naive kernel's first-window 6263 / 6472 / 6620 us.
TILED_V2_PREDICTED_US = {2: 620.0, 4: 650.0, 8: 1150.0}


def cases() -> list[Case]:
    out: list[Case] = []
    v1, v2 = ({ops.TILED_VARIANT_ENV: v} for v in ("v1", "v2"))
    for bits in (2, 4, 8):
        tiled = fixed_step(ops.forward, bits)
        out.append(conv_case(FAMILY, f"tiled-{bits}bit", tiled, SEED_CASE, "forward", env=v1))
        guess = TILED_V2_PREDICTED_US[bits]
        out.append(
            conv_case(FAMILY, f"tiled-v2-{bits}bit", tiled, SEED_CASE, "forward", env=v2, predicted_us=guess)
        )
        out.append(
            conv_case(FAMILY, f"naive-{bits}bit", fixed_step(ops.naive_forward, bits), SEED_CASE, "forward")
        )
    whole = fixed_step(ops.forward, 8, whole_tables=True)  # the nibble tables' baseline
    out.append(conv_case(FAMILY, "tiled-8bit-whole-tables", whole, SEED_CASE, "forward"))
    float_tables = fixed_step(ops.forward, 4, integer=False)
    out.append(conv_case(FAMILY, "tiled-4bit-float-tables", float_tables, SEED_CASE, "forward"))
    for problem in DEPTHWISE:
        guess = depthwise_predicted_us(problem)
        out.append(conv_case(FAMILY, "depthwise-4bit", fixed_step(ops.forward, 4), problem, "forward"))
        prepacked = fixed_step(ops.prepacked_forward, 4)
        out.append(
            conv_case(FAMILY, "depthwise-4bit-prepacked", prepacked, problem, "forward", predicted_us=guess)
        )
        dense = fixed_step(ops.prepacked_forward, 4, dense=True)
        out.append(conv_case(FAMILY, "dense-4bit-prepacked", dense, problem, "forward"))
        env = {depthwise_plan.VARIANT_ENV: "v2"}
        out.append(conv_case(FAMILY, "fp32-depthwise-v2", depthwise_ops.forward, problem, "forward", env=env))
    return out
