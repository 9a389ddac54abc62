"""The verdict of a comparison with too few rounds for a CI: a candidate so slow that fewer than
``MIN_CI_ROUNDS`` rounds fit in the time caps (issue 15: such a huge regression used to skip).
Pure: no torch, no pytest; the confirm, when there is one, is measured by the caller between
:func:`screen_few` and :func:`settle_few`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_convperf.core.results import Comparison, Verdict
from pytest_convperf.core.stats import t_quantile
from pytest_convperf.judge import messages
from pytest_convperf.judge.changes import changes_since
from pytest_convperf.judge.decision import MIN_CI_ROUNDS, Policy, entry_noise
from pytest_convperf.judge.outcome import Decision

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pytest_convperf.judge.entry import Entry


@dataclass(frozen=True)
class FewRoundsSuspect:
    """A few-rounds screen that showed a regression far beyond the noise: confirm ``rounds`` rounds."""

    comparison: Comparison
    entry: Entry
    policy: Policy
    noise: float
    sigma: float

    @property
    def rounds(self) -> int:
        return self.policy.confirm_factor * len(self.comparison.log_ratios)

    def least(self, c: Comparison) -> float:
        """The least slow round's excess over the baseline, in log space."""
        return min(c.log_ratios) - math.log(self.entry.time_ratio)

    def p_value(self, d: float) -> float:
        """One-sided p of "the excess is within the tolerance" (normal, as the quantiles here):
        the night-wide controller judges this FAIL with the others by it."""
        return 0.5 * math.erfc((d - math.log1p(self.policy.tolerance)) / self.sigma / math.sqrt(2))

    def decision(
        self,
        verdict: Verdict,
        message: str,
        *,
        delta: float | None = None,
        confirm: Comparison | None = None,
        p_value: float | None = None,
    ) -> Decision:
        return Decision(
            verdict,
            "fail" if verdict is Verdict.FAIL else "skip",
            message,
            stage="few-rounds",
            tolerance=self.policy.tolerance,
            noise=self.noise,
            sigma=self.sigma,
            delta=delta,
            confirm=confirm,
            p_value=p_value,
        )


def screen_few(
    comparison: Comparison,
    entry: Entry | None,
    policy: Policy,
    *,
    env: Mapping[str, str],
    backend: str | None,
) -> FewRoundsSuspect | None:
    """A suspect for a regression far beyond the noise that only a few rounds measured, else None.

    A candidate so slow that fewer than 6 rounds fit in the time caps has no CI of its median, but
    every round it has may still show what it is. The statistic is the least slow round's excess
    over the baseline, ``min ln(ratio) - ln(stored ratio)``; its SD counts the stored and the new
    run's between-run noise and one round's own scatter, each bounded by the entry's (floored)
    noise, so ``sigma = noise * sqrt(2 + 1/ref_runs)``. The screen suspects at ``screen_q``; a
    confirm run (3x the rounds, with the time caps grown in proportion) must show it again at
    ``confirm_q``. Rounds dropped for clocks, a missing baseline or a changed env/mode: None.
    """
    if entry is None or comparison.dropped_rounds or not 0 < comparison.n_rounds < MIN_CI_ROUNDS:
        return None
    timing, diff = changes_since(entry, comparison, env=env, backend=backend)
    if timing or diff:
        return None
    noise, _ = entry_noise(entry, policy)
    suspect = FewRoundsSuspect(
        comparison, entry, policy, noise, noise * math.sqrt(2 + 1 / max(1, entry.ref_runs))
    )
    tol = math.log1p(policy.tolerance)
    if suspect.least(comparison) - t_quantile(policy.screen_q, math.inf) * suspect.sigma <= tol:
        return None
    return suspect


def settle_few(suspect: FewRoundsSuspect, second: Comparison | None) -> Decision | None:
    """The few-rounds verdict once the caller measured the confirm (``None``: there is none, the
    screen alone FAILs). None where the confirm has no usable rounds (the comparison's own
    INCONCLUSIVE stands)."""
    entry, comparison = suspect.entry, suspect.comparison
    first = messages.few_rounds_shown(comparison, entry, suspect.least(comparison))
    if second is None:
        d = suspect.least(comparison)
        return suspect.decision(
            Verdict.FAIL,
            messages.few_rounds_unconfirmed(first),
            delta=math.expm1(d),
            p_value=suspect.p_value(d),
        )
    if second.dropped_rounds or not second.log_ratios:
        return None
    d = suspect.least(second)
    shown = messages.few_rounds_shown(second, entry, d)
    tol = math.log1p(suspect.policy.tolerance)
    if d - t_quantile(suspect.policy.confirm_q, math.inf) * suspect.sigma <= tol:
        return suspect.decision(
            Verdict.INCONCLUSIVE,
            messages.few_rounds_not_repeated(comparison.inconclusive, first, shown),
            confirm=second,
        )
    return suspect.decision(
        Verdict.FAIL,
        messages.few_rounds_confirmed(first, shown),
        delta=math.expm1(d),
        confirm=second,
        p_value=suspect.p_value(d),
    )
