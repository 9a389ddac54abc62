"""The tolerance tiers: the worst-case bound a reference must meet, and the rule that judges a
candidate against the reference's own error (flash-attention's), on the H100's numbers."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from perf_tests.paired import accuracy_lines
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.case import make_grad_out
from pytest_convperf.correctness.correctness_report import ConvMismatch, ReferenceDefect
from pytest_convperf.correctness.oracle import assert_conv_close, check_conv
from pytest_convperf.correctness.tolerance import (
    REFERENCE_FACTOR,
    WITHIN_TOLERANCE,
    error_stats,
    gamma,
    judge_against_reference,
    judge_against_stock,
    tolerance,
    worst_case_atol,
)

U32 = 2.0**-24


def with_errors(n: int, *, spread: float, max_abs: float, rel_l2: float, seed: int) -> Any:
    """(expected, actual): ``actual`` off ``expected`` by noise of relative L2 norm ``rel_l2`` and
    one element off by ``max_abs`` (where expected is 0, so rtol does not hide it): the error
    pattern of a long sequential fp32 sum (small everywhere, a few elements far out)."""
    gen = torch.Generator().manual_seed(seed)
    expected = torch.randn(n, generator=gen, dtype=torch.float64) * spread
    expected[0] = 0.0
    noise = torch.randn(n, generator=gen, dtype=torch.float64)
    noise *= rel_l2 * float(torch.linalg.vector_norm(expected)) / float(torch.linalg.vector_norm(noise))
    noise = noise.clamp(-0.5 * max_abs, 0.5 * max_abs)
    noise[0] = max_abs
    return expected, expected + noise


# The four cuDNN fp32 weight gradients of the H100 run (suite-b/im2col.log): K = N*Ho*Wo, the
# a-priori atol and the reference's max_abs as logged.
H100_WEIGHT_GRADS = [
    ("n64-ci6-h14", 64 * 14 * 14, 0.00411, 0.00531),
    ("n256-ci6-h14", 256 * 14 * 14, 0.0109, 0.0205),
    ("n16-ci64-h48", 16 * 48 * 48, 0.0119, 0.0267),
    ("n1-ci64-h256", 256 * 256, 0.0141, 0.0462),
]


@pytest.mark.parametrize(
    ("name", "k", "atol", "max_abs"), H100_WEIGHT_GRADS, ids=[r[0] for r in H100_WEIGHT_GRADS]
)
def test_h100_cudnn_weight_grads_miss_the_a_priori_tolerance_but_not_the_worst_case_bound(
    name: str, k: int, atol: float, max_abs: float
) -> None:
    scale = atol / (2e-6 * math.sqrt(k))  # the logged atol is a * sqrt(K) * scale
    assert tolerance("fp32", k, scale)[0] == pytest.approx(atol)
    bound = worst_case_atol("fp32", k, scale)
    assert bound == pytest.approx(k * U32 / (1 - k * U32) * scale)
    assert atol < max_abs < 0.5 * bound  # off the a-priori tolerance, well within the bound


def test_worst_case_bound_is_never_tighter_than_the_a_priori_tolerance() -> None:
    for dtype in ("fp64", "fp32", "fp16", "bf16"):
        for k in (1, 9, 100, 1000, 10**5):
            assert worst_case_atol(dtype, k, 3.0) >= tolerance(dtype, k, 3.0)[0]
    # 16-bit convs accumulate in fp32: the worst case adds nothing to their a-priori tolerance.
    assert worst_case_atol("bf16", 65536, 1.0) == tolerance("bf16", 65536, 1.0)[0]
    assert gamma(2**24, U32) == math.inf


def _judge(
    expected: torch.Tensor, actual: torch.Tensor, reference: torch.Tensor, atol: float, **kw: Any
) -> Any:
    apriori = error_stats("grad_weight", actual, expected, atol=atol, rtol=1e-5)
    ref = error_stats("grad_weight", reference, expected, atol=atol, rtol=1e-5)
    return judge_against_reference(actual, expected, apriori=apriori, reference=ref, **kw)


def test_the_h100_weight_gradient_case_candidate_within_2x_passes_and_says_so() -> None:
    # n1-ci64-h256-w256-co64-k3x3 grad_weight: 36864 elements, values ~ 300, cuDNN max_abs 0.0462
    # vs atol 0.0141, rel_l2 1.26e-5; the worst-case bound there is 0.108.
    k, atol = 65536, 0.0141
    ceiling = worst_case_atol("fp32", k, atol / (2e-6 * math.sqrt(k)))
    expected, reference = with_errors(36864, spread=150.0, max_abs=0.0462, rel_l2=1.26e-5, seed=0)
    clean, off = with_errors(36864, spread=150.0, max_abs=0.08, rel_l2=2e-5, seed=1)
    candidate = expected + (off - clean)  # off the a-priori atol (0.0141), within 2 x 0.0462
    ruling = _judge(expected, candidate, reference, atol, ceiling=ceiling)
    assert not ruling.apriori.ok and ruling.ok and ruling.by_reference
    assert ruling.rule.startswith(f"within {REFERENCE_FACTOR:g}x the reference's own error")
    assert ruling.stats.atol == pytest.approx(2 * ruling.reference.max_abs) and ruling.stats.rtol == 0


@pytest.mark.parametrize(
    ("max_abs", "rel_l2", "why"),
    [
        (0.1, 2e-5, "worse than 2x"),  # worst element over 2 x 0.0462
        (0.08, 4e-5, "worse than 2x"),  # off everywhere: rel_l2 over 2 x 1.26e-5
        (0.09, 2e-5, "over the worst-case bound"),  # within 2x but over a (tighter) ceiling of 0.085
    ],
)
def test_a_candidate_clearly_worse_than_the_reference_fails(max_abs: float, rel_l2: float, why: str) -> None:
    expected, reference = with_errors(36864, spread=150.0, max_abs=0.0462, rel_l2=1.26e-5, seed=0)
    clean, off = with_errors(36864, spread=150.0, max_abs=max_abs, rel_l2=rel_l2, seed=1)
    candidate = expected + (off - clean)
    ruling = _judge(expected, candidate, reference, 0.0141, ceiling=0.085)
    assert not ruling.ok and not ruling.by_reference
    assert why in ruling.rule, ruling.rule
    assert ruling.stats is ruling.apriori  # what a failure records: the a-priori errors


def test_within_the_a_priori_tolerance_needs_no_reference_and_nan_never_passes() -> None:
    expected, reference = with_errors(1000, spread=10.0, max_abs=1.0, rel_l2=1e-3, seed=0)
    assert _judge(expected, expected.clone(), reference, 1e-3).rule == WITHIN_TOLERANCE
    bad = expected.clone()
    bad[5] = math.nan
    ruling = _judge(expected, bad, reference, 1e-3)
    assert not ruling.ok and "NaN/Inf never pass" in ruling.rule


# ---- the rule inside check_conv: references emulating a long sequential fp32 sum -----------------

# K = N*Ho*Wo = 16384 for the weight gradient: the worst-case bound is 3.8x the a-priori atol.
SEQ = Conv2dProblem(n=16, c_in=2, h=32, w=32, c_out=2, kernel=3, padding=1)
SEED = 4


def _with_weight_grad(name: str, change: Any, problem: Conv2dProblem = SEQ) -> Any:
    """``F.conv2d`` whose weight gradient is ``change(x, grad_out, weight_grad)``, through a hook
    on the weight: the check's ``grad_out`` is ``make_grad_out(problem, seed)``, as in the check."""

    def conv(x: torch.Tensor, w: torch.Tensor, b: Any, s: Any, p: Any, d: Any, g: int) -> torch.Tensor:
        if w.requires_grad:
            gy = make_grad_out(problem, SEED, "cpu")
            w.register_hook(lambda gw: change(x.detach(), gy, gw))
        return F.conv2d(x, w, b, s, p, d, g)

    conv.__qualname__ = name
    return conv


def _off_weight_grad(times_atol: float) -> Any:
    """A conv whose weight gradient is off by ``times_atol`` x the a-priori atol on one element."""

    def change(x: torch.Tensor, gy: torch.Tensor, gw: torch.Tensor) -> torch.Tensor:
        scale = float(gy.abs().max()) * float(x.abs().max())
        atol, _ = tolerance("fp32", SEQ.n * SEQ.out_h * SEQ.out_w, scale)
        off = gw.clone()
        off[0, 0, 1, 1] += times_atol * atol
        return off

    return _with_weight_grad(f"off_weight_grad_{times_atol:g}", change)


def test_a_reference_off_the_a_priori_tolerance_within_the_bound_is_no_defect() -> None:
    report = assert_conv_close(F.conv2d, SEQ, reference=_off_weight_grad(3.0), backward=True, seed=SEED)
    assert report.ok and report.reference_ok and not report.reference_within_tolerance
    assert "misses the a-priori tolerance but stays within the worst-case bound" in report.message()


def test_a_candidate_within_2x_of_such_a_reference_passes_by_the_reference_rule() -> None:
    report = assert_conv_close(
        _off_weight_grad(3.5), SEQ, reference=_off_weight_grad(3.0), backward=True, seed=SEED
    )
    assert report.ok and "grad_weight" in report.candidate_rules
    assert "passed by the reference rule: within 2x the reference's own fp32 error" in report.message()
    # What the check records and gates on passes its own tolerance (verdict.decide requires it).
    assert all(e.ok for e in report.candidate_errors)


@pytest.mark.parametrize(("times", "why"), [(7.0, "worse than 2x"), (5.0, "over the worst-case bound")])
def test_a_candidate_clearly_worse_than_such_a_reference_fails(times: float, why: str) -> None:
    reference = _off_weight_grad(3.0 if times > 6 else 2.7)
    with pytest.raises(ConvMismatch) as info:
        assert_conv_close(_off_weight_grad(times), SEQ, reference=reference, backward=True, seed=SEED)
    message = str(info.value)
    assert "grad_weight: FAIL" in message and f"not passed by the reference rule: {why}" in message, message


def test_a_reference_outside_the_worst_case_bound_is_a_defect() -> None:
    with pytest.raises(ReferenceDefect, match=r"REFERENCE DEFECT.*worst-case bound"):
        assert_conv_close(F.conv2d, SEQ, reference=_off_weight_grad(8.0), backward=True, seed=SEED)


def _sequential_weight_grad(x: torch.Tensor, gy: torch.Tensor, kernel: int, padding: int) -> torch.Tensor:
    """The weight gradient as ONE recursive fp32 sum over N*Ho*Wo, in order (groups=1, stride 1)."""
    cols = F.unfold(x, kernel, padding=padding)  # (N, C*k*k, L)
    n, ckk, length = cols.shape
    acc = torch.zeros(gy.shape[1], ckk, dtype=torch.float32)
    for i in range(n):
        for j in range(length):
            acc += gy[i, :, j // gy.shape[3], j % gy.shape[3], None] * cols[i, None, :, j]
    return acc.reshape(gy.shape[1], x.shape[1], kernel, kernel)


SMALL = Conv2dProblem(n=4, c_in=2, h=32, w=32, c_out=2, kernel=3, padding=1)  # K=4096: a short loop
sequential = _with_weight_grad("sequential", lambda x, gy, gw: _sequential_weight_grad(x, gy, 3, 1), SMALL)


def test_a_real_sequential_fp32_sum_is_within_the_worst_case_bound() -> None:
    # Measured here (CPU, K=16384): max_abs 8.1e-4 (a-priori atol 4.7e-3, bound 1.8e-2), rel_l2
    # 2.3e-6 (u*sqrt(K)/sqrt(2) = 5.4e-6). Here K=4096 keeps the Python loop short.
    report = check_conv(F.conv2d, SMALL, reference=sequential, backward=True, seed=SEED)
    assert report.ok and report.reference_ok, report.message()
    (gw,) = [e for e in report.reference_bounds if e.name == "grad_weight"]
    (apriori,) = [e for e in report.reference_errors if e.name == "grad_weight"]
    assert gw.max_abs < gw.atol and apriori.atol <= gw.atol


# ---- whole models (perf_tests/test_edsr.py, test_models.py): judge_against_stock ----------------


@pytest.mark.parametrize(
    ("case", "atol", "spread", "stock_abs", "stock_l2", "ours_abs", "ours_l2", "passes"),
    [
        # EDSR grad_input on the H100: stock max_abs 9.19e-4 (fixed atol 3.46e-4), rel_l2 1.04e-5.
        ("edsr-ours-like-stock", 3.46e-4, 0.5, 9.19e-4, 1.04e-5, 1.2e-3, 1.5e-5, True),
        ("edsr-ours-3x-worse", 3.46e-4, 0.5, 9.19e-4, 1.04e-5, 2.8e-3, 1.5e-5, False),
        # MobileNetV2 grad_input: values ~1e-11, stock max_abs 1.21e-12 (atol 1.93e-14), rel_l2 2.5e-4.
        ("mobilenet-ours-like-stock", 1.93e-14, 3e-11, 1.21e-12, 2.5e-4, 1.5e-12, 3e-4, True),
        ("mobilenet-ours-off-everywhere", 1.93e-14, 3e-11, 1.21e-12, 2.5e-4, 1.5e-12, 1e-3, False),
    ],
)
def test_a_model_passes_within_2x_the_stock_models_error_and_fails_beyond(
    case: str,
    atol: float,
    spread: float,
    stock_abs: float,
    stock_l2: float,
    ours_abs: float,
    ours_l2: float,
    passes: bool,
) -> None:
    n = 20000
    expected, stock = with_errors(n, spread=spread, max_abs=stock_abs, rel_l2=stock_l2, seed=0)
    clean, off = with_errors(n, spread=spread, max_abs=ours_abs, rel_l2=ours_l2, seed=1)
    ours = expected + (off - clean)
    expected[1] = atol / 1e-4  # max |expected| sets the fixed atol (1e-4 x max), as logged
    ours[1], stock[1] = expected[1], expected[1]
    (ruling,) = judge_against_stock(
        {"grad_input": ours}, {"grad_input": stock}, {"grad_input": expected}, rtol=1e-3, atol_factor=1e-4
    )
    assert ruling.reference is not None and not ruling.reference.ok  # the stock misses the fixed one
    assert ruling.apriori.atol == pytest.approx(atol)
    assert not ruling.apriori.ok and ruling.ok is passes, ruling.rule
    assert ("within 2x stock fp32's own error" if passes else "worse than 2x") in ruling.rule
    assert ruling.stats.ok is passes  # what the gate sees: ok only when the rule passed it
    row = accuracy_lines(case, [ruling])[0]
    assert row.endswith("|2x stock's own error|" if passes else "|FAIL|"), row
