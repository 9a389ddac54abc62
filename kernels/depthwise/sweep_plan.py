"""The depthwise family's sweep rows (``kernels.sweep_case.Case``): the NCHW tiled variants on the seed.

v2 (the default) and v3 (batched 16-byte staging) on the 8 seed shapes x fp32/fp16 x forward/input
grad, each with the calibrated model's prediction (``calibration.py``, a cold call) written before a
GPU measures it. The variant is chosen at run time: each call sets ``CONVPERF_DEPTHWISE_VARIANT``,
which the binding reads on every call (a host-side dict write; the GPU time is unaffected).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from kernels.depthwise import calibration
from kernels.depthwise.model import Shape
from kernels.depthwise.seed import DEPTHWISE_SEED_SHAPES
from kernels.sweep_case import Call, Case
from pytest_convperf.problem import Conv2dProblem

VARIANTS = ("v2", "v3")
PHASES = ("forward", "input_grad")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def _problem(n: int, c: int, hw: int, k: int, dtype: str) -> Conv2dProblem:
    return Conv2dProblem(
        n=n, c_in=c, h=hw, w=hw, c_out=c, kernel=(k, k), padding=(k // 2, k // 2), groups=c, dtype=dtype
    )


def _maker(
    variant: str, phase: str, n: int, c: int, hw: int, k: int, dtype: torch.dtype
) -> Callable[[str], Call]:
    def make_call(device: str) -> Call:
        if device != "cuda":
            raise ValueError(f"the depthwise {variant} kernels run on CUDA only, not on {device!r}")
        from kernels.depthwise import ops

        ops.ensure_loaded()
        lib = getattr(torch.ops, ops.NAMESPACE)
        x = torch.randn(n, c, hw, hw, device=device, dtype=dtype)
        w = torch.randn(c, 1, k, k, device=device, dtype=dtype)
        geometry = ([1, 1], [k // 2, k // 2], [1, 1])

        def call() -> object:
            os.environ["CONVPERF_DEPTHWISE_VARIANT"] = variant
            if phase == "forward":
                return lib.forward(x, w, None, *geometry)
            return lib.input_grad(x, w, [hw, hw], *geometry)  # dy has x's shape (stride 1, same padding)

        return call

    return make_call


def cases() -> list[Case]:
    out = []
    for n, c, hw, k in DEPTHWISE_SEED_SHAPES:
        for dtype, torch_dtype in DTYPES.items():
            shape = Shape(n, c, hw, k, 1, torch_dtype.itemsize)
            for phase in PHASES:
                for variant in VARIANTS:
                    launch = calibration.launch_of(shape, "nchw", phase, variant)
                    out.append(
                        Case(
                            family="depthwise",
                            variant=variant,
                            problem_id=_problem(n, c, hw, k, dtype).id,
                            phase=phase,
                            bytes_moved=shape.bytes,
                            make_call=_maker(variant, phase, n, c, hw, k, torch_dtype),
                            predicted_us=calibration.predict_launch(launch, "cold") * 1e6,
                        )
                    )
    return out
