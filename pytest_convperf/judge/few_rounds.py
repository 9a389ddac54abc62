"""The verdict of a comparison with too few rounds for a CI: a candidate so slow that fewer than
``MIN_CI_ROUNDS`` rounds fit in the time caps (issue 15: such a huge regression used to skip).
Pure: no torch, no pytest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_convperf.core.env import changes_since, us_line
from pytest_convperf.core.results import Comparison, Decision, Verdict, ratio_text
from pytest_convperf.core.stats import t_quantile
from pytest_convperf.judge.decision import MIN_CI_ROUNDS, Policy, entry_noise, pct

if TYPE_CHECKING:
    from pytest_convperf.core.entry import Entry


def few_rounds(
    comparison: Comparison,
    entry: Entry | None,
    policy: Policy,
    *,
    env: Mapping[str, str],
    backend: str | None,
    confirm: Callable[[int], Comparison] | None,
) -> Decision | None:
    """A FAIL for a regression far beyond the noise that only a few rounds measured, else None.

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
    sigma = noise * math.sqrt(2 + 1 / max(1, entry.ref_runs))
    tol = math.log1p(policy.tolerance)

    def least(c: Comparison) -> float:
        return min(c.log_ratios) - math.log(entry.time_ratio)

    def p_value(d: float) -> float:
        """One-sided p of "the excess is within the tolerance" (normal, as the quantiles above):
        the night-wide controller judges this FAIL with the others by it."""
        return 0.5 * math.erfc((d - tol) / sigma / math.sqrt(2))

    def shown(c: Comparison) -> str:
        return (
            f"{len(c.log_ratios)} rounds, the least slow {pct(math.expm1(least(c)))} vs baseline "
            f"time_ratio {ratio_text(entry.time_ratio)} ({us_line(entry, c)})"
        )

    if least(comparison) - t_quantile(policy.screen_q, math.inf) * sigma <= tol:
        return None
    first = f"screen ({shown(comparison)})"
    common: dict[str, Any] = {"tolerance": policy.tolerance, "noise": noise, "sigma": sigma}
    if confirm is None:
        return Decision(
            Verdict.FAIL,
            "fail",
            f"FAIL (few rounds, unconfirmed): far slower than the baseline in every round: {first}",
            stage="few-rounds",
            delta=math.expm1(least(comparison)),
            p_value=p_value(least(comparison)),
            **common,
        )
    second = confirm(policy.confirm_factor * len(comparison.log_ratios))
    if second.dropped_rounds or not second.log_ratios:
        return None
    d = least(second)
    if d - t_quantile(policy.confirm_q, math.inf) * sigma <= tol:
        return Decision(
            Verdict.INCONCLUSIVE,
            "skip",
            f"inconclusive: too few rounds for a CI ({comparison.inconclusive}); the confirm did not "
            f"repeat the slowdown: {first}; confirm ({shown(second)})",
            stage="few-rounds",
            confirm=second,
            **common,
        )
    return Decision(
        Verdict.FAIL,
        "fail",
        f"FAIL (few rounds, confirmed): slower than the baseline by far more than its noise in every "
        f"round, too slow for the {MIN_CI_ROUNDS}+ rounds of a CI: {first}; confirm ({shown(second)}). "
        "If intended, "
        "record it with --convperf-update-baselines --convperf-reason=...",
        stage="few-rounds",
        delta=math.expm1(d),
        confirm=second,
        p_value=p_value(d),
        **common,
    )
