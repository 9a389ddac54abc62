"""The A/B decision: is the candidate at A (the working tree) faster or slower than at REF?

Pure (no torch, no pytest). ``decide_ab(first, confirm, policy)`` takes one paired comparison of
A (as the comparison's candidate) against REF (as its reference), i.e. per round
ln(t_A / t_REF), and applies the rule's tests (:mod:`pytest_convperf.judge.verdict`) to d = the median
log ratio, with no stored baseline:

* sigma^2 = se^2 + floor^2: ``floor`` is the A/B noise floor (the between-run SD of an A/B ratio
  of two identical sides, :data:`CPU_AB_NOISE_FLOOR`, measured; ``--convperf-noise-floor``
  overrides it);
* screen at one-sided ``screen_q`` (95 %) against +-ln(1 + tolerance); a suspect is re-timed with
  ``confirm_factor`` x the rounds and must agree at ``confirm_q`` (99.95 %): then SLOWER or FASTER;
* nothing detected: SAME when the screen could have seen a ``max_mde`` change with 80 % power,
  else INCONCLUSIVE (too noisy to call it the same), as ADVISORY does for the baseline rule;
* too many rounds dropped for clocks, or a suspect the confirmation does not repeat: INCONCLUSIVE.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from pytest_convperf.core import json_fields as jf
from pytest_convperf.core.json_fields import JsonObject
from pytest_convperf.core.results import Comparison
from pytest_convperf.judge.decision import POWER_Z, Policy, Stage
from pytest_convperf.judge.verdict import GPU_NOISE_FLOOR, default_policy

FASTER, SLOWER, SAME, INCONCLUSIVE = "FASTER", "SLOWER", "SAME", "INCONCLUSIVE"

# Between-run SD of ln(t_A / t_REF) for two identical sides timed in one process (the depthwise
# reference at n1-c16-h24-w24, one thread, tools/ab_scratch.py self) on the shared 2-core box under
# heavy load: 2.1 % over 10 runs (1.1 % over the first 5); a real 20 % step gave 0.7 % over 10.
# The stored-baseline comparison of the same check spread 4.0 % (measured before the allocator
# fix of issue 24), two interleaved processes 8.3 %: docs/ab.md.
CPU_AB_NOISE_FLOOR = 0.02
GPU_AB_NOISE_FLOOR = GPU_NOISE_FLOOR


def ab_policy(
    device_type: str, *, tolerance: float | None = None, noise_floor: float | None = None
) -> Policy:
    """The baseline rule's policy for ``device_type`` with the A/B noise floor (or ``noise_floor``)."""
    base = default_policy(device_type, tolerance=tolerance)
    default = GPU_AB_NOISE_FLOOR if device_type == "cuda" else CPU_AB_NOISE_FLOOR
    return Policy(base.tolerance, noise_floor if noise_floor is not None else default, base.max_mde)


class ABResultDict(TypedDict):
    """An A/B result as a row's ``facts["ab"]["result"]`` holds it (:meth:`ABResult.to_dict`)."""

    verdict: str
    ratio: float
    ci: list[float]
    message: str
    stage: str
    n_rounds: int
    tolerance: float
    noise: float
    mde: float | None


@dataclass(frozen=True)
class ABResult:
    """One check's A/B: ``ratio`` = t_A / t_REF (> 1: A is slower) with its 95 % CI (noise included)."""

    verdict: str
    ratio: float
    ci: tuple[float, float]
    message: str
    stage: str
    n_rounds: int
    tolerance: float
    noise: float
    mde: float | None = None

    @property
    def change(self) -> float:
        """Relative change of A's time over REF's (0.2 = 20 % slower)."""
        return self.ratio - 1.0

    def to_dict(self) -> ABResultDict:
        return ABResultDict(
            verdict=self.verdict,
            ratio=self.ratio,
            ci=list(self.ci),
            message=self.message,
            stage=self.stage,
            n_rounds=self.n_rounds,
            tolerance=self.tolerance,
            noise=self.noise,
            mde=self.mde,
        )

    @classmethod
    def from_dict(cls, data: JsonObject) -> ABResult:
        """The result of :meth:`to_dict`, read back from a row; a field of the wrong type is a
        ``ValueError`` naming it."""
        return cls(
            verdict=jf.text(data, "verdict"),
            ratio=jf.number(data, "ratio"),
            ci=jf.pair(data, "ci"),
            message=jf.text(data, "message"),
            stage=jf.text(data, "stage"),
            n_rounds=jf.integer(data, "n_rounds"),
            tolerance=jf.number(data, "tolerance"),
            noise=jf.number(data, "noise"),
            mde=jf.opt_number(data, "mde"),
        )


def _stage(name: str, comparison: Comparison, policy: Policy, q: float) -> Stage:
    """d, sigma and Welch-Satterthwaite df (the floor counts as known: infinite df)."""
    se = comparison.se
    var = se * se + policy.noise_floor**2
    se_df = max(1, comparison.n_rounds - 1)
    df = var * var / (se**4 / se_df) if se > 0 else math.inf
    return Stage(name, comparison.median_log_ratio, math.sqrt(var), df, q, comparison.n_rounds)


def _result(verdict: str, stage: Stage, policy: Policy, message: str, mde: float | None = None) -> ABResult:
    low, high = stage.delta_ci(policy.screen_q)
    return ABResult(
        verdict=verdict,
        ratio=math.exp(stage.d),
        ci=(1.0 + low, 1.0 + high),
        message=message,
        stage=stage.name,
        n_rounds=stage.n_rounds,
        tolerance=policy.tolerance,
        noise=policy.noise_floor,
        mde=mde,
    )


def _direction(stage: Stage, bound: float) -> str | None:
    if stage.lower > bound:
        return SLOWER
    if stage.upper < -bound:
        return FASTER
    return None


def decide_ab(first: Comparison, confirm: Callable[[int], Comparison], policy: Policy) -> ABResult:
    """FASTER / SLOWER / SAME / INCONCLUSIVE for A (``first.candidate``) against REF (its reference)."""
    bound = math.log1p(policy.tolerance)
    screen = _stage("screen", first, policy, policy.screen_q)
    tol = f"{policy.tolerance:.1%}"
    if first.inconclusive:
        return _result(INCONCLUSIVE, screen, policy, f"timing inconclusive: {first.inconclusive}")
    suspect = _direction(screen, bound)
    if suspect is None:
        mde = math.expm1(bound + (screen.t + POWER_Z) * screen.sigma)
        if mde <= policy.max_mde:
            return _result(
                SAME, screen, policy, f"no change beyond {tol} (a {mde:.1%} change would be seen)", mde
            )
        return _result(
            INCONCLUSIVE,
            screen,
            policy,
            f"no change seen, but too noisy to call it the same: only a {mde:.1%} change would be seen "
            f"(needs <= {policy.max_mde:.0%}); run on a quieter machine or with more rounds",
            mde,
        )
    again = confirm(policy.confirm_factor * first.n_rounds)
    stage = _stage("confirm", again, policy, policy.confirm_q)
    if again.inconclusive:
        return _result(INCONCLUSIVE, stage, policy, f"confirm run inconclusive: {again.inconclusive}")
    if _direction(stage, bound) == suspect:
        word = "slower" if suspect == SLOWER else "faster"
        return _result(
            suspect,
            stage,
            policy,
            f"A is {word} than REF beyond {tol}: t_A/t_REF {math.exp(stage.d):.3f} "
            f"(screen and a {stage.n_rounds}-round confirm agree)",
        )
    return _result(
        INCONCLUSIVE,
        stage,
        policy,
        f"the screen saw A {suspect.lower()} (t_A/t_REF {math.exp(screen.d):.3f}) but the "
        f"{stage.n_rounds}-round confirm did not repeat it at {policy.confirm_q:.2%}",
    )
