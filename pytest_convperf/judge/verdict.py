"""The baseline decision of docs/design.md §7, as pure functions of measurements and a stored entry.

:func:`screen` judges the first measurement: a :class:`Decision`, or a suspect (:class:`Suspect`,
``few_rounds.FewRoundsSuspect``) that needs a confirm measurement; the caller measures it
(``judge.policy.decision_of``) and :func:`settle` judges the pair. :func:`decide` is the decision
without a confirm (a suspect is settled on its screen alone). Nothing here measures.

In log space, ``d = median ln(t_cand / t_ref) - ln(baseline ratio)``. Its standard deviation
``sigma`` combines the run's own standard error with the between-run noise of the entry: the
new run and the stored run each carry that noise once, so ``sigma^2 = se^2 + noise^2 (1 + 1/ref_runs)``
(``1/k`` instead of 1 for a confirm that is the mean of k fresh processes)
(the noise is floored, 0.4 % on a GPU). A check is a suspect when the one-sided 95 % lower bound
of ``d`` exceeds ``ln(1 + tolerance)``; it FAILs only when a fresh measurement with three times
the rounds still exceeds it at 99.95 %. Checks too noisy to ever catch a ``max_mde`` regression
are ADVISORY instead of PASS; a confirmed regression still FAILs (the 99.95 % confirm quantile
holds the false-alarm rate whatever the MDE), so a noisy check is never a blind one.
Nothing here imports torch or pytest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pytest_convperf.core.results import Comparison, ErrorStats, Verdict
from pytest_convperf.judge import messages
from pytest_convperf.judge.changes import Changes, changes_since
from pytest_convperf.judge.decision import (
    POWER_Z,
    Policy,
    Stage,
    confirm_mde,
    entry_noise,
    reference_shift,
    shift_read,
    stage_of,
)
from pytest_convperf.judge.few_rounds import FewRoundsSuspect, screen_few, settle_few
from pytest_convperf.judge.outcome import Decision, Outcome
from pytest_convperf.judge.quality import quality_drift

if TYPE_CHECKING:
    from pytest_convperf.judge.entry import Entry

__all__ = ["Suspect", "decide", "default_policy", "screen", "settle"]

GPU_TOLERANCE = 0.02
CPU_TOLERANCE = 0.05
GPU_NOISE_FLOOR = 0.004
# Between-run SD of the median log ratio of an unchanged CPU candidate. With the harness's
# allocator bias in (issue 24) calibrate measured 3.4 / 3.9 / 5.1 % (the floor was 4 %); with it
# gone, F.conv2d against itself (tools/self_measure.py, 18 measurements, one thread) spread 1.9 %
# on the 2-core box at load 3-7 and 2.6 % beside two busy loops (docs/statistics.md §5).
# calibrate stores the noise a machine really has; the floor only keeps an entry from claiming less.
CPU_NOISE_FLOOR = 0.02
GPU_MAX_MDE = 0.10
# Relative to the CPU tolerance: a CPU check is gateable when it can catch a 25 % regression.
CPU_MAX_MDE = 0.25
# Error growth far below the tolerance (under 1 % of atol) is rounding noise, not drift.
DRIFT_FLOOR = 0.01


def default_policy(device_type: str, *, tolerance: float | None = None, strict: bool = False) -> Policy:
    """GPU: 2 % tolerance, 0.4 % noise floor, ADVISORY above a 10 % MDE; CPU: 5 %, measured floor, 25 %."""
    if device_type == "cuda":
        return Policy(
            tolerance if tolerance is not None else GPU_TOLERANCE, GPU_NOISE_FLOOR, GPU_MAX_MDE, strict
        )
    return Policy(
        tolerance if tolerance is not None else CPU_TOLERANCE,
        CPU_NOISE_FLOOR,
        CPU_MAX_MDE,
        strict,
        witness=True,
    )


# ---- the rule ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """The numbers a speed decision reports: the slowdown of the stage that decided, its CI and
    sigma, and what the entry and policy said (noise, tolerance, what a confirm could catch)."""

    tolerance: float
    noise: float
    delta: float
    delta_ci: tuple[float, float]
    sigma: float
    env_diff: Changes = field(default_factory=dict)
    mde: float | None = None
    rounds_needed: int | None = None
    p_value: float | None = None

    def of_stage(self, stage: Stage, *, p_value: float | None = None) -> Reading:
        """This reading with ``stage``'s slowdown (the confirm's, once it decided)."""
        return replace(
            self, delta=math.expm1(stage.d), delta_ci=stage.delta_ci(), sigma=stage.sigma, p_value=p_value
        )

    def decision(
        self,
        verdict: Verdict,
        outcome: Outcome,
        message: str,
        *,
        stage: str,
        confirm: Comparison | None = None,
        notes: tuple[str, ...] = (),
    ) -> Decision:
        return Decision(
            verdict,
            outcome,
            message,
            stage=stage,
            tolerance=self.tolerance,
            noise=self.noise,
            delta=self.delta,
            delta_ci=self.delta_ci,
            sigma=self.sigma,
            mde=self.mde,
            rounds_needed=self.rounds_needed,
            env_diff=self.env_diff,
            notes=notes,
            confirm=confirm,
            p_value=self.p_value,
        )


@dataclass(frozen=True)
class Suspect:
    """A screen whose 95 % interval lies beyond the tolerance, slower (``slower``) or faster: the
    caller measures ``rounds`` paired rounds again and :func:`settle` decides."""

    slower: bool
    comparison: Comparison
    entry: Entry
    policy: Policy
    screen: Stage
    reading: Reading
    numbers: str
    # The ADVISORY text of a check too noisy to gate (None: gateable): its passes say it.
    advisory: str | None

    @property
    def rounds(self) -> int:
        return self.policy.confirm_factor * self.comparison.n_rounds

    def passed(
        self,
        message: str,
        reading: Reading | None = None,
        *,
        stage: str = "screen",
        confirm: Comparison | None = None,
        notes: tuple[str, ...] = (),
    ) -> Decision:
        """PASS, or ADVISORY for a noisy check that detected nothing (detections still count)."""
        verdict = Verdict.ADVISORY if self.advisory is not None else Verdict.PASS
        return (reading or self.reading).decision(
            verdict,
            "pass",
            messages.passed(message, self.advisory),
            stage="mde" if self.advisory is not None else stage,
            confirm=confirm,
            notes=notes,
        )


def _correctness(errors: Sequence[ErrorStats], entry: Entry | None, policy: Policy) -> Decision | None:
    """Correctness drift against the stored errors. A tolerance breach never gets here: the check
    fails on its correctness report before timing, so ``errors`` out of tolerance are a caller bug."""
    broken = [e.name for e in errors if not e.ok]
    if broken:
        raise ValueError(
            f"decide() judges outputs that passed their tolerance, but {', '.join(broken)} did not: "
            "fail the check on its correctness report first (as ConvperfFixture.check does)"
        )
    if entry is None:
        return None
    for err in errors:
        stored = entry.stored_max_abs(err.name, single=len(errors) == 1)
        if stored is None:
            continue
        limit = policy.drift_factor * stored
        if err.max_abs > limit and err.max_abs > DRIFT_FLOOR * err.atol:
            return Decision(
                Verdict.CORRECTNESS_FAIL,
                "fail",
                messages.correctness_drift(err.name, err.max_abs, stored, err.atol, policy.drift_factor),
                stage="drift",
                tolerance=policy.tolerance,
            )
    return None


def screen(
    comparison: Comparison,
    entry: Entry | None,
    policy: Policy,
    *,
    errors: Sequence[ErrorStats] = (),
    env: Mapping[str, str] | None = None,
    backend: str | None = None,
    quality: Mapping[str, float] | None = None,
) -> Decision | Suspect | FewRoundsSuspect:
    """Judge one check's first measurement against its stored entry (``None`` when there is none).

    A suspect is returned for the caller to confirm (:func:`settle`). ``quality``
    (``rel_l2``/``sqnr_db`` against the float conv) is gated against the entry's stored
    ``quality``: a loss fails as CORRECTNESS_FAIL (stage ``quality``), never ADVISORY.
    """
    env = dict(env or {})
    bad = _correctness(errors, entry, policy)
    if bad is not None:
        return bad
    lost = quality_drift(quality, entry)
    if lost:
        return Decision(
            Verdict.CORRECTNESS_FAIL,
            "fail",
            messages.quality_drift(lost),
            stage="quality",
            tolerance=policy.tolerance,
        )
    if comparison.inconclusive:
        few = screen_few(comparison, entry, policy, env=env, backend=backend)
        return few or _inconclusive(comparison, policy)
    if entry is None:
        return Decision(
            Verdict.NEW,
            "fail" if policy.strict else "pass",
            messages.new_check(comparison, policy.strict),
            stage="strict" if policy.strict else None,
            tolerance=policy.tolerance,
        )

    # Timings of two modes (cold vs CUDA graph) or flush kinds, or of two environments: never judged.
    timing, diff = changes_since(entry, comparison, env=env, backend=backend)
    # The screen leaves the machine's shift out: widened by it, a slowed candidate on a moved
    # machine was never confirmed (the reference +52 %: ADVISORY at the screen, test_control_slowed);
    # a suspect only costs a confirm, and the confirm counts the shift its own rounds saw.
    first = stage_of("screen", comparison, entry, policy, policy.screen_q, shift=False)
    noise, _ = entry_noise(entry, policy)
    shift = reference_shift(comparison, entry, policy)
    numbers = messages.screen_numbers(first, entry, comparison, policy, noise, shift)
    reading = Reading(policy.tolerance, noise, math.expm1(first.d), first.delta_ci(), first.sigma, diff)
    if diff or timing:
        return replace(reading, env_diff={**timing, **diff}).decision(
            Verdict.STALE,
            "pass",
            messages.stale(timing, diff, entry, comparison, numbers),
            stage="mode" if timing else "env",
        )

    mde, rounds = confirm_mde(first, comparison, entry, policy)
    reading = replace(reading, mde=mde, rounds_needed=rounds)
    advisory = (
        messages.too_noisy(
            mde, policy, rounds, comparison.n_rounds, noise, shift, shift_read(comparison, entry)
        )
        if mde > policy.max_mde
        else None
    )
    tol = math.log1p(policy.tolerance)
    if first.lower > tol or first.upper < -tol:
        return Suspect(first.lower > tol, comparison, entry, policy, first, reading, numbers, advisory)
    return Suspect(False, comparison, entry, policy, first, reading, numbers, advisory).passed(numbers)


def _inconclusive(comparison: Comparison, policy: Policy) -> Decision:
    return Decision(
        Verdict.INCONCLUSIVE,
        "skip",
        messages.inconclusive(comparison.inconclusive or ""),
        tolerance=policy.tolerance,
    )


def settle(suspect: Suspect | FewRoundsSuspect, second: Comparison | None) -> Decision:
    """The verdict of a suspect once the caller measured its confirm, ``second`` (``suspect.rounds``
    paired rounds); ``None`` where there is no confirm: the screen alone decides ("unconfirmed").

    A slower suspect FAILs only when the confirm exceeds the tolerance at ``confirm_q`` (99.95 %);
    a faster one is IMPROVED only when confirmed likewise (a lucky screen recorded with =improved
    would make the unchanged candidate fail against it afterwards).
    """
    if isinstance(suspect, FewRoundsSuspect):
        return settle_few(suspect, second) or _inconclusive(suspect.comparison, suspect.policy)
    policy, entry, numbers, n = suspect.policy, suspect.entry, suspect.numbers, suspect.comparison.n_rounds
    if second is None:
        if suspect.slower:
            return replace(suspect.reading, p_value=suspect.screen.p_value(policy.tolerance)).decision(
                Verdict.FAIL, "fail", messages.fail_unconfirmed(numbers), stage="screen"
            )
        return suspect.reading.decision(
            Verdict.IMPROVED, "pass", messages.improved_unconfirmed(policy, numbers), stage="screen"
        )
    if second.inconclusive:
        if suspect.slower:
            return Decision(
                Verdict.INCONCLUSIVE,
                "skip",
                messages.confirm_unusable(second.inconclusive, numbers),
                stage="confirm",
                tolerance=policy.tolerance,
                noise=suspect.reading.noise,
                env_diff=suspect.reading.env_diff,
                confirm=second,
            )
        return suspect.passed(
            messages.improvement_unusable(second.inconclusive, numbers), notes=("improvement not confirmed",)
        )
    conf = stage_of("confirm", second, entry, policy, policy.confirm_q)
    conf_numbers = messages.confirm_numbers(conf, second, entry, policy.confirm_q)
    tol = math.log1p(policy.tolerance)
    if suspect.slower:
        reading = suspect.reading.of_stage(conf, p_value=conf.p_value(policy.tolerance))
        if conf.lower > tol:
            noisy = suspect.reading.mde if suspect.advisory is not None else None
            return reading.decision(
                Verdict.FAIL,
                "fail",
                messages.fail_confirmed(policy, conf_numbers, n, numbers, noisy),
                stage="confirm",
                confirm=second,
            )
        # A confirm that could not have caught a max_mde slowdown (the machine moved while it ran)
        # clears nothing: the check is ADVISORY, not PASS, whatever the screen could catch.
        conf_mde = math.expm1(tol + (conf.t + POWER_Z) * conf.sigma)
        if suspect.advisory is None and conf_mde > policy.max_mde:
            shift = reference_shift(second, entry, policy)
            read = shift_read(second, entry)
            blind = messages.too_noisy(
                conf_mde, policy, None, second.n_rounds, suspect.reading.noise, shift, read
            )
            suspect = replace(suspect, advisory=blind)
        return suspect.passed(
            messages.suspect_cleared(conf_numbers),
            reading,
            stage="confirm",
            confirm=second,
            notes=("suspect cleared",),
        )
    if conf.upper >= -tol:
        return suspect.passed(
            messages.improvement_not_confirmed(conf_numbers, n, numbers),
            confirm=second,
            notes=("improvement not confirmed",),
        )
    return suspect.reading.of_stage(conf).decision(
        Verdict.IMPROVED,
        "pass",
        messages.improved_confirmed(policy, conf_numbers, n, numbers),
        stage="confirm",
        confirm=second,
    )


def decide(
    comparison: Comparison,
    entry: Entry | None,
    policy: Policy,
    *,
    errors: Sequence[ErrorStats] = (),
    env: Mapping[str, str] | None = None,
    backend: str | None = None,
    quality: Mapping[str, float] | None = None,
) -> Decision:
    """:func:`screen` without a confirm: a suspect is settled on the screen alone (stage ``screen``,
    "unconfirmed"). With a confirm measurement, use ``judge.policy.decision_of``."""
    first = screen(comparison, entry, policy, errors=errors, env=env, backend=backend, quality=quality)
    return first if isinstance(first, Decision) else settle(first, None)
