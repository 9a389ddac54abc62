"""The data of a baseline decision (docs/design.md §7): its thresholds (:class:`Policy`), one statistical
look at the slowdown (:class:`Stage`, made by :func:`stage_of`; what a confirm could catch:
:func:`confirm_mde`), the outcome (``judge.outcome.Decision``, plain data every
layer reads from a row) and the message helpers
that :mod:`pytest_convperf.judge.verdict` and :mod:`pytest_convperf.judge.few_rounds` share. Pure: no torch,
no pytest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

from pytest_convperf.core.stats import t_cdf, t_quantile
from pytest_convperf.judge.cycles import ClockMove, clock_move
from pytest_convperf.measure.witness import witness_us

if TYPE_CHECKING:
    from pytest_convperf.core.results import Comparison
    from pytest_convperf.judge.entry import Entry

SCREEN_Q = 0.95
CONFIRM_Q = 0.9995
CONFIRM_FACTOR = 3
DRIFT_FACTOR = 4.0
# Fewer kept rounds than this have no 95 % CI of the median (``timing.rounds`` makes them INCONCLUSIVE).
MIN_CI_ROUNDS = 6
# The power at which a gateable check catches a ``max_mde`` slowdown: 80 %.
POWER_Z = NormalDist().inv_cdf(0.80)


@dataclass(frozen=True)
class LearnedNoise:
    """The machine's between-session noise learned from its judged sessions (``night.machine_noise``):
    ``sigma`` in ln ratio, from ``pairs`` consecutive check-session pairs, with ``df`` degrees of freedom."""

    sigma: float
    pairs: int
    df: float

    def text(self) -> str:
        pairs = f"{self.pairs:,} check-session pairs"
        return f"machine noise {self.sigma * 100:.2f} % ({pairs}, df {self.df:.0f})"


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
    # The reference's own shift since the entry counts as between-session noise (``reference_shift``):
    # on a CPU, where no clock reading says the machine moved (a GPU's clocks do, ``core.clocks``).
    witness: bool = False
    # The machine's learned between-session noise: used where above the floor and the entry's own.
    learned: LearnedNoise | None = None


@dataclass(frozen=True)
class Stage:
    """One statistical look at d: the screen (first measurement) or the confirmation. ``clock``: the
    SM clocks where they moved (``judge.cycles``): ``d`` is then the slowdown in cycles."""

    name: str
    d: float
    sigma: float
    df: float
    q: float
    n_rounds: int
    clock: ClockMove | None = None

    @property
    def time_d(self) -> float:
        """The slowdown in time (``d`` less the clocks' share where judged in cycles)."""
        return self.d - (self.clock.log_shift if self.clock is not None else 0.0)

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
    """(noise used, its degrees of freedom): the largest of the stored noise (df: its calibration runs
    - 1), the machine's learned noise (its df) and the floor (a floor counts as known: df infinite)."""
    noise = max(entry.noise, policy.noise_floor)
    runs = entry.noise_runs or 0
    df = float(runs - 1) if runs >= 2 and entry.noise > policy.noise_floor else math.inf
    learned = policy.learned
    if learned is not None and learned.sigma > noise:
        return learned.sigma, learned.df
    return noise, df


def shift_read(comparison: Comparison, entry: Entry) -> str:
    """What ``reference_shift`` read, as a message names it: the witness where both have one."""
    alone = entry.us_witness is not None and witness_us(comparison.facts) is not None
    return "the reference timed alone" if alone else "the reference"


def reference_shift(comparison: Comparison, entry: Entry, policy: Policy) -> float:
    """``ln(reference now / reference then)`` where ``policy.witness`` and the candidate moved the
    same way, else 0.

    The reference's code does not change between sessions (a changed environment or backend is
    STALE before this), so its time moving with the candidate's says the machine moved: contention,
    frequency or memory traffic slow (or speed) both sides. The ratio cancels a shift that moves
    both alike, but not all of one: on the shared CI VM, fresh processes seconds apart read the
    reference +10 % and the candidate +42 % (ratio +29 %, confirmed in the same drifted state). A
    code change moves the candidate alone, and a reference that moved against the candidate (or
    alone) is no machine-wide move, so both count nothing here. The shift's square joins the
    between-session variance: an unmoved machine costs nothing, a moved one widens the interval by
    what it measurably moved.

    The reference read is the witness, timed alone (``measure.witness``), where the entry and the
    comparison both have one: the paired reference shares the candidate's caches and memory
    traffic, so a real slowdown moves it too and would be charged to the machine. Else the paired
    reference, as entries recorded before the witness are read.
    """
    if not policy.witness or entry.us_reference <= 0 or entry.us_candidate <= 0:
        return 0.0
    ref, cand = comparison.reference.median_us, comparison.candidate.median_us
    if ref <= 0 or cand <= 0:
        return 0.0
    alone, then = witness_us(comparison.facts), entry.us_witness
    if alone is not None and then is not None:
        rho = math.log(alone / then)
    else:
        rho = math.log(ref / entry.us_reference)
    return rho if rho * math.log(cand / entry.us_candidate) > 0 else 0.0


def stage_of(
    name: str, comparison: Comparison, entry: Entry, policy: Policy, q: float, *, shift: bool = True
) -> Stage:
    """The look ``name`` at ``comparison``'s slowdown over ``entry``'s stored ratio, at quantile ``q``;
    ``shift``: count the machine's measured shift (``reference_shift``) as noise. The screen does not
    (``verdict.screen``): it only picks what to confirm, and the confirm, which alone FAILs, counts
    the shift its own measurement saw."""
    noise, noise_df = entry_noise(entry, policy)
    # Where the sides' SM clocks moved apart since the entry, the slowdown in cycles (time x clock).
    clock = clock_move(comparison, entry)
    d = comparison.median_log_ratio - math.log(entry.time_ratio) + (clock.log_shift if clock else 0.0)
    se = comparison.se
    # A confirm measured in k fresh processes (fresh_confirm.across_processes) averages k offsets.
    processes = max(1, int(comparison.facts.get("processes", 1)))
    noise_var = noise * noise * (1 / processes + 1 / max(1, entry.ref_runs))
    # The machine's measured shift widens sigma as a known amount (no df of its own: it bounds an
    # offset this session has, it does not estimate a spread).
    moved = reference_shift(comparison, entry, policy) if shift else 0.0
    var = se * se + noise_var + moved**2
    # Welch-Satterthwaite: the t quantile widens while the noise comes from few calibration runs.
    se_df = max(1, comparison.n_rounds - 1)
    denom = se**4 / se_df + (0.0 if math.isinf(noise_df) else noise_var**2 / noise_df)
    df = var * var / denom if denom > 0 else math.inf
    return Stage(name, d, math.sqrt(var), df, q, comparison.n_rounds, clock)


def confirm_mde(
    screen: Stage, comparison: Comparison, entry: Entry, policy: Policy
) -> tuple[float, int | None]:
    """Smallest slowdown the confirm stage catches with 80 % power; screen rounds that reach max_mde."""
    noise, _ = entry_noise(entry, policy)
    noise_var = noise * noise * (1 + 1 / max(1, entry.ref_runs))
    noise_var += reference_shift(comparison, entry, policy) ** 2
    se2 = comparison.se**2 / policy.confirm_factor
    sigma2 = math.sqrt(se2 + noise_var)
    k = t_quantile(policy.confirm_q, screen.df) + POWER_Z
    mde = math.expm1(math.log1p(policy.tolerance) + k * sigma2)
    target = (math.log1p(policy.max_mde) - math.log1p(policy.tolerance)) / k
    se_target2 = target * target - noise_var
    if se_target2 <= 0 or comparison.se <= 0:
        return mde, None
    n = comparison.n_rounds * comparison.se**2 / (policy.confirm_factor * se_target2)
    return mde, max(comparison.n_rounds, math.ceil(n))


def pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def percent(x: float, digits: int = 1) -> str:
    return f"{x * 100:.{digits}f} %"
