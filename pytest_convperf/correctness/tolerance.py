"""How far from the fp64 oracle a result may be (docs/design.md §6): the a-priori tolerance, the
worst-case bound a reference must stay within, and the rule that judges a candidate against the
stock implementation's own error.

Three tiers, one module (used by :mod:`pytest_convperf.correctness.oracle` per conv and by the
end-to-end model checks in ``perf_tests``):

1. **A-priori tolerance** ``|out - ref| <= atol + rtol * |ref|`` with ``atol = a * sqrt(K) * scale``
   (:func:`tolerance`): K is the reduction length of the tensor, scale the product of the largest
   magnitudes that enter it. It models a blocked/pairwise reduction, whose error grows like
   sqrt(K). A candidate within it passes.
2. **Worst-case bound** (:func:`worst_case_atol`): a single long *recursive* (sequential) sum is a
   valid fp32 implementation too (cuDNN's weight gradient over N*Ho*Wo = 65536 terms on an H100
   missed the a-priori tolerance by 3.3x, rel_l2 1.26e-5 = u*sqrt(K)/sqrt(2) exactly). Its error
   grows like K, not sqrt(K). Only a reference outside this bound is a defect.
3. **Reference rule** (:func:`judge_against_reference`, flash-attention's test rule): when the
   stock implementation itself misses the a-priori tolerance, the candidate passes if its error
   against the fp64 oracle is at most :data:`REFERENCE_FACTOR` x the stock error.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from pytest_convperf.core.results import ErrorStats

# dtype -> (rtol, a); atol = a * sqrt(K) * scale. docs/design.md §6.
TOLERANCES: dict[str, tuple[float, float]] = {
    "fp64": (1e-7, 1e-12),
    "fp32": (1e-5, 2e-6),
    "fp16": (2e-3, 1e-3),
    "bf16": (1.6e-2, 8e-3),
}

# Unit roundoff u of the *accumulation* of each dtype. 16-bit convs accumulate in fp32 in every
# library the checks meet (PyTorch asks cuDNN for a float compute type for half and bfloat16
# inputs; oneDNN and PyTorch's CPU kernels accumulate in float), and the one rounding of the
# 16-bit result is what the a-priori rtol covers. So for 16-bit dtypes the worst-case bound below
# is never wider than the a-priori tolerance: the two tiers coincide there.
ACCUMULATION_ROUNDOFF: dict[str, float] = {
    "fp64": 2.0**-53,
    "fp32": 2.0**-24,
    "fp16": 2.0**-24,
    "bf16": 2.0**-24,
}

# Flash-attention's rule (Dao-AILab/flash-attention tests/test_flash_attn.py:
# ``(out - out_ref).abs().max() <= 2 * (out_pt - out_ref).abs().max()``, out_ref in higher
# precision, out_pt the stock implementation in the tested precision).
REFERENCE_FACTOR = 2.0

WITHIN_TOLERANCE = "within the a-priori tolerance"


def tolerance(dtype: str, reduction: int, scale: float) -> tuple[float, float]:
    """``(atol, rtol)`` for a tensor of ``dtype`` reduced over ``reduction`` terms of size ``scale``."""
    rtol, a = TOLERANCES[dtype]
    atol = a * math.sqrt(max(1, reduction)) * max(scale, 1e-30)
    return atol, rtol


def gamma(k: int, u: float) -> float:
    """Higham's ``gamma_k = k*u / (1 - k*u)`` (ASNA 2nd ed., Lemma 3.1); infinite once ``k*u >= 1``."""
    ku = max(1, k) * u
    return ku / (1.0 - ku) if ku < 1.0 else math.inf


def worst_case_atol(dtype: str, reduction: int, scale: float) -> float:
    """The widest absolute error a correct implementation may make: ``max(atol, gamma_K * scale)``.

    ``gamma_K * scale`` with ``u`` from :data:`ACCUMULATION_ROUNDOFF` and the same K and scale as
    :func:`tolerance`. Why this form: recursive summation of K terms has the deterministic bound
    ``|E| <= u * sum_i |T_i| <= gamma_(K-1) * sum_i |t_i|`` over its partial sums T_i (Higham,
    "Accuracy and Stability of Numerical Algorithms", 2nd ed. 2002, §4.2 eqs. (4.3)-(4.4); for
    inner products §3.1 eq. (3.5)). That bound, ~K^2*u*scale, would accept any reference. The
    checks' inputs are random and zero-mean, so the rounding errors are independent and mean zero
    (the model of Higham & Mary, "A New Approach to Probabilistic Rounding Error Analysis", SIAM
    J. Sci. Comput. 41(5), 2019): they add like a random walk, ``|E| ~ u * sqrt(sum_i T_i^2)``,
    while the partial sums T_i themselves grow like ``sqrt(i) * sigma``; together
    ``|E| ~ u * K * sigma / sqrt(2)`` for the *worst order* (one sequential sum), against
    ``u * sqrt(K) * sigma`` for a blocked one. ``scale`` (the product of the largest magnitudes)
    is many times sigma, so ``gamma_K * scale`` covers the sequential sum's largest element errors
    (measured on an H100: cuDNN fp32 weight gradients at 0.28x to 0.43x of it for K = 12544 to
    65536) while a wrong element (a missed term, a wrong index) is of order ``scale`` and misses it.
    """
    atol, _ = tolerance(dtype, reduction, scale)
    return max(atol, gamma(reduction, ACCUMULATION_ROUNDOFF[dtype]) * max(scale, 1e-30))


def error_stats(
    name: str, actual: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float
) -> ErrorStats:
    """Compare ``actual`` with the fp64 ``expected`` (same shape) under ``atol + rtol*|expected|``.

    ``max_rel`` is ``max |err| / (|expected| + atol)`` so near-zero expected values do not blow it up.
    """
    if tuple(actual.shape) != tuple(expected.shape):
        raise ValueError(
            f"{name}: shape {tuple(actual.shape)} does not match the oracle's {tuple(expected.shape)}"
        )
    a = actual.detach().to(device=expected.device, dtype=torch.float64)
    e = expected.detach().to(torch.float64)
    numel = e.numel()
    if numel == 0:
        return ErrorStats(name, 0.0, 0.0, 0.0, atol, rtol, (), 0.0, 0.0, 0, 0, 0)
    finite_expected = torch.isfinite(e)
    nonfinite = int((~torch.isfinite(a) & finite_expected).sum())
    err = (a - e).abs()
    err = torch.where(torch.isfinite(err), err, torch.full_like(err, math.inf))
    bound = atol + rtol * e.abs()
    excess = err - bound
    violations = int((excess > 0).sum())
    finite_err = torch.where(torch.isfinite(err), err, torch.zeros_like(err))
    max_abs = float(finite_err.max())
    max_rel = float((finite_err / (e.abs() + atol)).max())
    norm = float(torch.linalg.vector_norm(e))
    diff_norm = float(torch.linalg.vector_norm(torch.where(torch.isfinite(a), a - e, torch.zeros_like(e))))
    rel_l2 = diff_norm / norm if norm > 0 else diff_norm
    flat = int(torch.argmax(excess if violations or nonfinite else err).item())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(e.shape)))
    return ErrorStats(
        name=name,
        max_abs=max_abs,
        max_rel=max_rel,
        rel_l2=rel_l2,
        atol=atol,
        rtol=rtol,
        worst_index=index,
        worst_value=float(a.reshape(-1)[flat]),
        worst_expected=float(e.reshape(-1)[flat]),
        nonfinite=nonfinite,
        violations=violations,
        numel=numel,
    )


@dataclass(frozen=True)
class Ruling:
    """How one tensor of a candidate was judged.

    ``stats``: its errors under the rule that decided (``stats.ok`` is the verdict; what a check
    records and gates on); ``apriori``: its errors under the a-priori tolerance; ``reference``: the
    stock implementation's errors under the same tolerance (None when no reference was judged);
    ``rule``: which rule passed it, or why none did.
    """

    stats: ErrorStats
    apriori: ErrorStats
    reference: ErrorStats | None
    rule: str

    @property
    def ok(self) -> bool:
        return self.stats.ok

    @property
    def by_reference(self) -> bool:
        """Passed only because the stock implementation is no better (tier 3)."""
        return self.ok and not self.apriori.ok


def judge_against_reference(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    apriori: ErrorStats,
    reference: ErrorStats,
    ceiling: float = math.inf,
    factor: float = REFERENCE_FACTOR,
    against: str = "the reference's own error",
) -> Ruling:
    """The candidate passes within the a-priori tolerance, or when it is no worse than ``factor``
    x the reference's own error against the same fp64 ``expected`` (``against`` names it in the
    rule's text).

    "No worse" on both measures, each ``<= factor x`` the reference's: ``max_abs`` (the worst
    element; flash-attention's measure) and ``rel_l2`` (the whole tensor: a candidate off
    everywhere by a little less than the reference's single worst element still fails). NaN/Inf
    never pass. ``ceiling`` caps the allowed ``max_abs`` (the worst-case bound of
    :func:`worst_case_atol` per conv; none for whole models). The recorded stats of a tensor passed
    this way use ``atol = min(factor x reference max_abs, ceiling)`` and ``rtol = 0``, so their
    ``ok`` is exactly the max_abs half of the rule.
    """
    if apriori.ok:
        return Ruling(apriori, apriori, reference, WITHIN_TOLERANCE)
    name = apriori.name
    limit = min(factor * reference.max_abs, ceiling)
    relaxed = error_stats(name, actual, expected, atol=max(limit, sys.float_info.min), rtol=0.0)
    l2_limit = factor * reference.rel_l2
    measures = (
        f"max_abs {apriori.max_abs:.3g} vs {reference.max_abs:.3g}, "
        f"rel_l2 {apriori.rel_l2:.3g} vs {reference.rel_l2:.3g}"
    )
    if apriori.nonfinite:
        return Ruling(apriori, apriori, reference, f"{apriori.nonfinite} NaN/Inf never pass")
    if relaxed.ok and apriori.rel_l2 <= l2_limit:
        rule = f"within {factor:g}x {against} ({measures})"
        return Ruling(relaxed, apriori, reference, rule)
    if apriori.max_abs > factor * reference.max_abs or apriori.rel_l2 > l2_limit:
        why = f"worse than {factor:g}x {against} ({measures})"
    else:
        why = f"over the worst-case bound {ceiling:.3g} ({measures})"
    return Ruling(apriori, apriori, reference, why)


def judge_against_stock(
    got: Mapping[str, torch.Tensor],
    stock: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    *,
    rtol: float,
    atol_factor: float,
) -> list[Ruling]:
    """Each tensor of a whole model (``got``) against the fp64 ``expected``: within the fixed
    tolerance ``atol_factor * max|expected| + rtol * |expected|``, or no worse than
    :data:`REFERENCE_FACTOR` x the stock fp32 model's own error (:func:`judge_against_reference`,
    no ceiling: a whole network has no K). The end-to-end model checks' rule."""
    rulings = []
    for name, exp in expected.items():
        atol = atol_factor * float(exp.abs().max())
        ours = error_stats(name, got[name], exp, atol=atol, rtol=rtol)
        base = error_stats(name, stock[name], exp, atol=atol, rtol=rtol)
        rulings.append(
            judge_against_reference(
                got[name], exp, apriori=ours, reference=base, against="stock fp32's own error"
            )
        )
    return rulings
