"""The fp64 oracle's side of one check (docs/design.md §6): for one (problem, seed), the inputs,
the oracle's float64 output (and gradients) on the *same already-rounded* inputs, and each tensor's
a-priori tolerance and worst-case bound (:mod:`pytest_convperf.correctness.tolerance`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pytest_convperf.core.problem import Conv2dProblem, ConvInputs
from pytest_convperf.core.results import ErrorStats
from pytest_convperf.correctness.tolerance import error_stats, tolerance, worst_case_atol

# A conv2d implementation with ``F.conv2d``'s signature: candidate, reference or oracle.
Candidate = Callable[..., torch.Tensor]

GRAD_NAMES = ("grad_input", "grad_weight", "grad_bias")


def _max_abs(t: torch.Tensor | None) -> float:
    if t is None or t.numel() == 0:
        return 0.0
    return float(t.detach().abs().max().to(torch.float64))


@dataclass
class Case:
    """Inputs and fp64 oracle values for one (problem, seed)."""

    inputs: ConvInputs
    grad_out: torch.Tensor | None
    expected: dict[str, torch.Tensor]
    tolerances: dict[str, tuple[float, float]]
    # The worst-case atol of each tensor (tolerance.worst_case_atol): what the reference must meet.
    ceilings: dict[str, float]

    def errors(self, results: Mapping[str, torch.Tensor], *, worst_case: bool = False) -> list[ErrorStats]:
        """The errors of each expected tensor in ``results`` (a candidate's or the reference's, by
        name) under the a-priori tolerances, or under the worst-case bounds (``worst_case``)."""
        stats = []
        for name, expected in self.expected.items():
            atol, rtol = self.tolerances[name]
            if worst_case:
                atol = self.ceilings[name]
            stats.append(error_stats(name, results[name], expected, atol=atol, rtol=rtol))
        return stats


def build_case(
    problem: Conv2dProblem,
    inputs: ConvInputs,
    seed: int,
    device: str | torch.device,
    backward: bool,
    oracle: Candidate | None = None,
) -> Case:
    """The oracle's values on ``inputs`` (``oracle``, else ``F.conv2d``, in float64; with
    ``backward``, the gradients for the ``grad_out`` of ``seed``) and each tensor's tolerances."""
    x64 = inputs.input.detach().double().requires_grad_(backward)
    w64 = inputs.weight.detach().double().requires_grad_(backward)
    b64 = inputs.bias.detach().double().requires_grad_(backward) if inputs.bias is not None else None
    out64 = (oracle if oracle is not None else F.conv2d)(x64, w64, b64, *problem.conv_args())
    x_max, w_max = _max_abs(inputs.input), _max_abs(inputs.weight)
    b_max = _max_abs(inputs.bias)
    expected = {"output": out64.detach()}
    # name -> (reduction length K, scale: the product of the largest magnitudes entering it)
    sizes = {"output": (problem.reduction_length + 1, x_max * w_max + b_max)}
    grad_out: torch.Tensor | None = None
    if backward:
        grad_out = gy = make_grad_out(problem, seed, device)
        wrt = [x64, w64] + ([b64] if b64 is not None else [])
        grads = torch.autograd.grad(out64, wrt, gy.double(), allow_unused=True)
        g_max = _max_abs(gy)
        spatial = problem.n * problem.out_h * problem.out_w
        k_input = problem.multiplier * problem.kernel[0] * problem.kernel[1]
        expected["grad_input"] = grads[0]
        sizes["grad_input"] = (k_input, g_max * w_max)
        expected["grad_weight"] = grads[1]
        sizes["grad_weight"] = (spatial, g_max * x_max)
        if b64 is not None:
            expected["grad_bias"] = grads[2]
            sizes["grad_bias"] = (spatial, g_max)
    tolerances = {name: tolerance(problem.dtype, k, scale) for name, (k, scale) in sizes.items()}
    ceilings = {name: worst_case_atol(problem.dtype, k, scale) for name, (k, scale) in sizes.items()}
    return Case(inputs, grad_out, expected, tolerances, ceilings)


def make_grad_out(problem: Conv2dProblem, seed: int, device: str | torch.device) -> torch.Tensor:
    """The output gradient of a check's gradient phases (seeded by ``seed + 1``, in the problem's
    layout): correctness checks the gradients with it and timing differentiates with it."""
    gen = torch.Generator().manual_seed(seed + 1)
    gy = torch.randn(problem.output_shape, generator=gen).to(device=device, dtype=problem.torch_dtype())
    return gy.contiguous(memory_format=torch.channels_last) if problem.layout == "nhwc" else gy
