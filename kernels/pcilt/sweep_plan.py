"""The PCILT family's sweep: the tiled lookup kernel against the naive one per bit width on seed
003's case, and depthwise PCILT on packed 4-bit inputs on the two large depthwise seed shapes.

Steps and tables are built outside the timed call (tables are cached per weight version). No
absolute predictions yet: ``docs/tuning-log.md`` predicts the tiled/naive ratio per bit width.
"""

from __future__ import annotations

import functools

import torch

from kernels.pcilt import ops
from kernels.pcilt.tables import default_act_step
from kernels.sweep_case import Call, Case
from pytest_convperf.problem import Conv2dProblem

FAMILY = "pcilt"
SEED_CASE = Conv2dProblem(n=1, c_in=64, h=224, w=224, c_out=128, kernel=(3, 3), padding=(1, 1))
DEPTHWISE = (
    Conv2dProblem(n=16, c_in=32, h=112, w=112, c_out=32, kernel=(3, 3), padding=(1, 1), groups=32),
    Conv2dProblem(n=16, c_in=144, h=56, w=56, c_out=144, kernel=(3, 3), padding=(1, 1), groups=144),
)


def _call(problem: Conv2dProblem, bits: int, kind: str, device: str) -> Call:
    x, w, b = problem.make_inputs(seed=0, device=device)
    step = default_act_step(x, bits)
    naive, prepacked = kind == "naive", kind == "prepacked"

    def call() -> object:
        with torch.no_grad():
            args = problem.conv_args()
            return ops.forward(x, w, b, *args, bits=bits, act_step=step, naive=naive, prepacked=prepacked)

    return call


def cases() -> list[Case]:
    out = []
    for bits in (2, 4, 8):
        for kind in ("tiled", "naive"):
            make = functools.partial(_call, SEED_CASE, bits, kind)
            out.append(Case(FAMILY, f"{kind}_{bits}bit", SEED_CASE.id, "forward", SEED_CASE.min_bytes, make))
    for p in DEPTHWISE:
        make = functools.partial(_call, p, 4, "prepacked")
        out.append(Case(FAMILY, "depthwise_prepacked_4bit", p.id, "forward", p.min_bytes, make))
    return out
