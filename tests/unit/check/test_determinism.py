"""Determinism (issue 18 item 6): two runs must agree bit for bit; a varying reduction order fails,
naming the output, the element and both values."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from pytest_convperf.check.calls import phase_call
from pytest_convperf.check.determinism import bitwise_difference, nondeterminism
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.case import make_grad_out
from pytest_convperf.correctness.integrity import Finding
from pytest_convperf.correctness.oracle import stable_seed
from tests.rows import check_row

P = Conv2dProblem(n=4, c_in=8, h=8, w=8, c_out=8, padding=(1, 1))


class _ShuffledWeightGrad(torch.autograd.Function):
    """conv2d whose weight gradient sums the batch's partials in a random order (like atomics)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *args: Any
    ) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.args = args
        return F.conv2d(x, w, b, *args)

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Any:
        x, w = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.args
        parts = [
            torch.nn.grad.conv2d_weight(
                x[i : i + 1], w.shape, gy[i : i + 1], stride, padding, dilation, groups
            )
            for i in range(x.shape[0])
        ]
        gw = torch.zeros_like(w)
        for i in torch.randperm(len(parts)).tolist():
            gw = gw + parts[i]
        return (None, gw, None, *([None] * len(ctx.args)))


def shuffled(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *args: Any) -> torch.Tensor:
    return _ShuffledWeightGrad.apply(x, w, b, *args)


def _twice(candidate: Any, phase: str, seed: int) -> Finding | None:
    """``nondeterminism`` on the phase call a check builds (``calls.phase_call``)."""
    grad_out = None if phase == "forward" else make_grad_out(P, seed, "cpu")
    call = phase_call(candidate, P.make_inputs(seed, "cpu"), P, phase, grad_out)
    return nondeterminism(call, P, phase, seed)


def test_a_deterministic_weight_grad_passes() -> None:
    seed = stable_seed(P)
    assert _twice(F.conv2d, "weight_grad", seed) is None
    assert _twice(F.conv2d, "forward", seed) is None


def test_a_varying_summation_order_fails_showing_where() -> None:
    seed = stable_seed(P)
    torch.manual_seed(0)
    found = None
    for _ in range(10):  # two random orders can coincide; ten tries cannot all (4! orders)
        found = _twice(shuffled, "weight_grad", seed)
        if found is not None:
            break
    assert found is not None and found.tag == "NONDETERMINISTIC"
    assert "weight_grad of" in found.message and "differ bitwise; first at index [" in found.message


def test_bitwise_means_bitwise() -> None:
    a = torch.tensor([0.0, float("nan"), 1.0])
    assert bitwise_difference(a, a.clone()) is None  # the same NaN agrees
    diff = bitwise_difference(a, torch.tensor([-0.0, float("nan"), 1.0]), ["grad_weight"])
    assert diff is not None and diff.startswith(
        "grad_weight: 1 of 3 elements differ bitwise; first at index [0]"
    )
    assert bitwise_difference((a, None), (a, None)) is None
    assert bitwise_difference((a,), (a.double(),)) is not None


def test_the_report_shows_deterministic_checks() -> None:
    from pytest_convperf.reports.cells import cells
    from pytest_convperf.reports.report import terminal_lines
    from pytest_convperf.reports.report_row import ReportRow

    row = check_row({"key": "k", "module": "m", "verdict": "PASS", "facts": {"deterministic": True}})
    assert cells(ReportRow.from_row(row))["check"] == "m::k (deterministic)"
    assert cells(ReportRow.from_row(dataclasses.replace(row, facts={})))["check"] == "m::k"
    assert any("m::k (deterministic)" in line for line in terminal_lines([row]))
