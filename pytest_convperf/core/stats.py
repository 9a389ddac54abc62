"""Statistics for timing: median CI by order statistics, paired log-ratio summary, t quantiles.

Pure math on floats (no torch, no scipy). Timing samples are skewed and have outliers (a
preempted launch, a clock ramp), so the median with a distribution-free confidence interval is
the primary statistic: the CI is ``[x_(j), x_(n-j+1)]`` with ``j`` chosen from the exact
Binomial(n, 1/2) distribution, which holds for any continuous distribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

_NORMAL = NormalDist()


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence (mean of the two middle values for even n)."""
    if not values:
        raise ValueError("median of an empty sequence: no samples were kept")
    xs = sorted(values)
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else 0.5 * (xs[mid - 1] + xs[mid])


@lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """0-based ranks ``(lo, hi)`` of the order statistics bounding the median's CI.

    The largest ``j`` with ``2 * P(Binom(n, 1/2) < j) <= 1 - confidence`` gives the interval
    ``[x_(j), x_(n-j+1)]`` (1-based). With too few samples for the requested confidence
    (n < 6 at 95 %) the interval is the whole range.
    """
    if n < 1:
        raise ValueError("a median CI needs at least one sample")
    alpha = 1.0 - confidence
    # Binomial(n, 1/2) CDF in log space: exact and overflow-free up to any n we use.
    log_half_n = -n * math.log(2.0)
    cdf = 0.0
    j = 0
    for k in range(n // 2 + 1):
        log_pmf = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + log_half_n
        if 2.0 * (cdf + math.exp(log_pmf)) > alpha:
            break
        cdf += math.exp(log_pmf)
        j = k + 1
    if j == 0:
        return (0, n - 1)
    return (j - 1, n - j)


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median (order statistics)."""
    xs = sorted(values)
    lo, hi = median_ci_ranks(len(xs), confidence)
    return (xs[lo], xs[hi])


def se_from_ci(ci: tuple[float, float], confidence: float = 0.95) -> float:
    """Standard error implied by a symmetric-normal reading of a CI: width / (2 z)."""
    z = _NORMAL.inv_cdf(0.5 + confidence / 2.0)
    return (ci[1] - ci[0]) / (2.0 * z)


@dataclass(frozen=True)
class MedianSummary:
    """Median of a sample with its 95 % CI, the implied standard error and the CI half-width.

    ``halfwidth`` is the larger distance from the median to a CI end (the order-statistic
    interval is not symmetric).
    """

    n: int
    median: float
    ci: tuple[float, float]
    se: float

    @property
    def halfwidth(self) -> float:
        return max(self.median - self.ci[0], self.ci[1] - self.median)


def summarize(values: Sequence[float], confidence: float = 0.95) -> MedianSummary:
    """Median, CI and standard error of ``values`` (use log-times or log-ratios for timings)."""
    ci = median_ci(values, confidence)
    return MedianSummary(n=len(values), median=median(values), ci=ci, se=se_from_ci(ci, confidence))


def log_ratios(candidate: Sequence[float], reference: Sequence[float]) -> list[float]:
    """Per-round ln(t_candidate / t_reference); rounds are paired by position."""
    if len(candidate) != len(reference):
        raise ValueError(f"paired samples differ in length: {len(candidate)} vs {len(reference)}")
    for t in (*candidate, *reference):
        if not t > 0.0 or math.isinf(t):
            raise ValueError(f"a timing sample must be a positive finite number of seconds, got {t!r}")
    return [math.log(c / r) for c, r in zip(candidate, reference)]


# Fewer whole AB/BA pairs than this and the CI comes from the rounds themselves (the
# order-statistic CI of 6 pairs is their whole range already).
MIN_CROSSOVER_UNITS = 6


def crossover_units(log_ratios: Sequence[float], rounds: Sequence[int]) -> list[float]:
    """The mean log ratio of each whole AB/BA pair of rounds: round 2k (candidate first) with 2k+1.

    ``rounds`` are the round indices of ``log_ratios`` (kept rounds; a pair with a dropped round is
    left out). The call that goes first in a round is slower, whichever side it is: on the 2-core
    CPU box by 1.5-2.5 % at load average under 4 and 2-8 % above. Alternating cancels that on
    average, but every round's log ratio carries it as +-delta, so the rounds form two humps
    2 delta apart and their median sits in the sparse valley between them, moving with the load.
    The mean over a pair holds each side once in each place: delta cancels in every unit, whatever
    its size that moment (a 2x2 crossover's per-unit contrast).
    """
    at = dict(zip(rounds, log_ratios))
    return [0.5 * (at[r] + at[r + 1]) for r in rounds if r % 2 == 0 and r + 1 in at]


def paired_summary(
    log_ratios: Sequence[float], rounds: Sequence[int] | None = None, confidence: float = 0.95
) -> MedianSummary:
    """Median and CI of the time ratio from paired alternating rounds: over their crossover units
    (:func:`crossover_units`), or over the rounds when under :data:`MIN_CROSSOVER_UNITS` pairs are
    whole. ``rounds``: the round index of each log ratio (default 0, 1, 2, ...)."""
    units = crossover_units(log_ratios, range(len(log_ratios)) if rounds is None else rounds)
    return summarize(units if len(units) >= MIN_CROSSOVER_UNITS else log_ratios, confidence)


def relative_spread(values: Sequence[float]) -> float:
    """(max - min) / median: the run-to-run spread used by the self-benchmark."""
    return (max(values) - min(values)) / median(values)


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation / mean (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    mean = math.fsum(values) / len(values)
    var = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(var) / mean


# ---- Student t ---------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t distribution with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(df):
        return _NORMAL.cdf(t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@lru_cache(maxsize=4096)  # pure, and called with a few (p, df) pairs per check
def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t (e.g. ``t_quantile(0.95, 20)`` = 1.7247).

    Starts from the Cornish-Fisher expansion around the normal quantile and polishes with
    Newton steps on the exact CDF, so it is accurate to ~1e-10 for any df > 0.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"t quantile needs 0 < p < 1, got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    z = _NORMAL.inv_cdf(p)
    if math.isinf(df) or df > 1e7:
        return z
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    t = z + g1 / df + g2 / df**2 + g3 / df**3
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(50):
        pdf = math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))
        step = (t_cdf(t, df) - p) / pdf
        t -= step
        if abs(step) < 1e-12 * max(1.0, abs(t)):
            break
    return t
