"""The data of a baseline decision (docs/design.md §7): its thresholds (:class:`Policy`), one statistical
look at the slowdown (:class:`Stage`), the outcome (``core.results.Decision``, plain data every
layer reads from a row) and the message helpers
that :mod:`pytest_convperf.judge.verdict` and :mod:`pytest_convperf.judge.few_rounds` share. Pure: no torch,
no pytest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_convperf.core.stats import t_cdf, t_quantile

if TYPE_CHECKING:
    from pytest_convperf.core.entry import Entry

SCREEN_Q = 0.95
CONFIRM_Q = 0.9995
CONFIRM_FACTOR = 3
DRIFT_FACTOR = 4.0
# Fewer kept rounds than this have no 95 % CI of the median (``timing.rounds`` makes them INCONCLUSIVE).
MIN_CI_ROUNDS = 6


@dataclass(frozen=True)
class Policy:
    """Thresholds of the decision; :func:`default_policy` fills them per device type."""

    tolerance: float
    noise_floor: float
    max_mde: float
    strict: bool = False
    screen_q: float = SCREEN_Q
    confirm_q: float = CONFIRM_Q
    confirm_factor: int = CONFIRM_FACTOR
    drift_factor: float = DRIFT_FACTOR


@dataclass(frozen=True)
class Stage:
    """One statistical look at d: the screen (first measurement) or the confirmation."""

    name: str
    d: float
    sigma: float
    df: float
    q: float
    n_rounds: int

    @property
    def t(self) -> float:
        return t_quantile(self.q, self.df)

    @property
    def lower(self) -> float:
        return self.d - self.t * self.sigma

    @property
    def upper(self) -> float:
        return self.d + self.t * self.sigma

    def delta_ci(self, q: float = SCREEN_Q) -> tuple[float, float]:
        """Two-sided ``2q - 1`` interval of the slowdown as a fraction (0.05 = 5 % slower)."""
        half = t_quantile(q + (1 - q) / 2, self.df) * self.sigma
        return (math.expm1(self.d - half), math.expm1(self.d + half))

    def p_value(self, tolerance: float) -> float:
        """One-sided p of H0 "slowdown <= tolerance": ``P(T >= (d - ln(1 + tol)) / sigma)``, T ~ t(df).

        The stage rejects H0 at its own quantile exactly when this is under ``1 - q`` (``lower >
        ln(1 + tol)``), so a night-wide controller (``multiplicity``) can replace ``1 - q``.
        """
        t = (self.d - math.log1p(tolerance)) / self.sigma
        # The lower tail of -t keeps precision where 1 - cdf(t) would round to 0.
        return t_cdf(-t, self.df)


def entry_noise(entry: Entry, policy: Policy) -> tuple[float, float]:
    """(noise used, its degrees of freedom): the stored noise, floored; a floor counts as known."""
    noise = max(entry.noise, policy.noise_floor)
    runs = entry.noise_runs or 0
    df = float(runs - 1) if runs >= 2 and entry.noise > policy.noise_floor else math.inf
    return noise, df


def pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def percent(x: float, digits: int = 1) -> str:
    return f"{x * 100:.{digits}f} %"
