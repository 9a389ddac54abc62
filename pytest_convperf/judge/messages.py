"""The text of every baseline decision (``verdict`` and ``few_rounds``), built apart from the rule:
the rule picks a verdict from numbers, these functions say it. Pure: no torch, no pytest."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pytest_convperf.core.results import ratio_text
from pytest_convperf.judge.changes import describe_changes, moved_side, us_line
from pytest_convperf.judge.cycles import CLOCK_MOVE
from pytest_convperf.judge.decision import MIN_CI_ROUNDS, pct, percent, shift_read

if TYPE_CHECKING:
    from pytest_convperf.core.results import Comparison
    from pytest_convperf.judge.changes import Changes
    from pytest_convperf.judge.decision import Policy, Stage
    from pytest_convperf.judge.entry import Entry


# A reference that moved less than this is ordinary noise: not worth a word in the message.
SHOWN_SHIFT = 0.01


def correctness_drift(name: str, max_abs: float, stored: float, atol: float, factor: float) -> str:
    bits = math.log2(max_abs / stored) if stored > 0 else math.inf
    return (
        f"correctness drift: {name}: max_abs {max_abs:.3g} is over {factor:g}x the stored {stored:.3g} "
        f"(still within atol={atol:.3g}, but about {bits:.1f} bits lost); "
        "if intended, record it with --convperf-update-baselines=failed --convperf-reason=..."
    )


def quality_drift(lost: list[str]) -> str:
    return (
        f"quality drift: accuracy against the float conv was lost: {'; '.join(lost)}. "
        "If intended, record it with --convperf-update-baselines=failed --convperf-reason=..."
    )


def inconclusive(reason: str) -> str:
    return f"inconclusive: {reason}"


def new_check(comparison: Comparison, strict: bool) -> str:
    speed = f"speedup {comparison.speedup:.3f}x (time_ratio {comparison.time_ratio:.4g})"
    msg = f"NEW: no baseline entry; {speed}. Record it with --convperf-update-baselines"
    return msg + (" (--convperf-strict fails checks without a baseline)" if strict else "")


def screen_numbers(
    screen: Stage, entry: Entry, comparison: Comparison, policy: Policy, noise: float, shift: float = 0.0
) -> str:
    """The screen's slowdown, its 95 % CI, both sides' times, the tolerance and the noise (and the
    machine's shift where the reference moved, ``decision.reference_shift``)."""
    lo, hi = screen.delta_ci()
    moved = (
        f", machine shift {percent(abs(math.expm1(shift)))} ({shift_read(comparison, entry)} moved; a "
        "confirm counts it)"
        if abs(shift) >= SHOWN_SHIFT
        else ""
    )
    return (
        f"delta {pct(math.expm1(screen.d))}{in_cycles(screen)} (95 % CI {pct(lo)} .. {pct(hi)}) vs baseline "
        f"time_ratio {ratio_text(entry.time_ratio)}; {us_line(entry, comparison)}; "
        f"tolerance {percent(policy.tolerance)}, noise {percent(noise, 2)}{moved}"
    )


def in_cycles(stage: Stage) -> str:
    """Where the SM clocks moved (``judge.cycles``): the delta judged is in cycles; say so, with the
    delta in time and both sides' clocks beside it."""
    if stage.clock is None:
        return ""
    return (
        f" in cycles (time x SM clock: judged in cycles, the clocks moved over {percent(CLOCK_MOVE, 0)}; "
        f"in time {pct(math.expm1(stage.time_d))}; {stage.clock.text()})"
    )


def confirm_numbers(conf: Stage, second: Comparison, entry: Entry, q: float) -> str:
    lo, hi = conf.delta_ci(q)
    return (
        f"confirm ({second.n_rounds} rounds): delta {pct(math.expm1(conf.d))}{in_cycles(conf)} "
        f"(99.9 % CI {pct(lo)} .. {pct(hi)}); {us_line(entry, second)}"
    )


def stale(timing: Changes, diff: Changes, entry: Entry, comparison: Comparison, numbers: str) -> str:
    return (
        f"STALE: {describe_changes(timing, diff)}; {moved_side(entry, comparison)}: {numbers}. "
        "Re-record with --convperf-update-baselines"
    )


def too_noisy(
    mde: float, policy: Policy, rounds: int | None, n_rounds: int, noise: float, shift: float, read: str
) -> str:
    """The ADVISORY of a check that cannot gate; ``read``: what the machine's ``shift`` was read
    from (``decision.shift_read``)."""
    if rounds:
        how = f"about {rounds} paired rounds (now {n_rounds}) would make it gateable"
    elif abs(shift) >= SHOWN_SHIFT:
        how = (
            f"no number of rounds suffices: the machine moved ({read} {pct(math.expm1(shift))} "
            "since the entry); judge it when the machine is back, or against REF in one session "
            "(--convperf-against)"
        )
    else:
        how = (
            f"no number of rounds suffices: the between-run noise {percent(noise, 2)} alone exceeds it; "
            "calibrate on a quieter machine"
        )
    # Beyond a doubling a "detectable slowdown" means nothing: say the check cannot gate at all.
    catches = f"catches only a {percent(mde)} slowdown" if mde <= 1.0 else "cannot catch even a 2x slowdown"
    return f"ADVISORY: too noisy to gate: {catches} (gate needs {percent(policy.max_mde, 0)}); {how}"


def passed(message: str, advisory: str | None) -> str:
    return f"{advisory}; {message}" if advisory is not None else f"PASS: {message}"


def fail_unconfirmed(numbers: str) -> str:
    return f"FAIL (screen, unconfirmed): slower than the baseline: {numbers}"


def confirm_unusable(reason: str | None, numbers: str) -> str:
    return f"inconclusive: the confirm measurement was unusable ({reason}); screen said {numbers}"


def fail_confirmed(
    policy: Policy, conf_numbers: str, n_rounds: int, numbers: str, noisy_mde: float | None
) -> str:
    return (
        f"FAIL (confirmed): slower than the baseline by more than {percent(policy.tolerance)}: "
        f"{conf_numbers}; screen ({n_rounds} rounds): {numbers}. If intended, record it with "
        "--convperf-update-baselines --convperf-reason=..."
        + (
            f" (a noisy check: it catches only slowdowns over {percent(noisy_mde)})"
            if noisy_mde is not None and noisy_mde <= 1.0
            else " (a noisy check: it cannot catch a slowdown under 2x)"
            if noisy_mde is not None
            else ""
        )
    )


def suspect_cleared(conf_numbers: str) -> str:
    return f"suspect cleared by the confirm measurement: {conf_numbers}"


def improved_unconfirmed(policy: Policy, numbers: str) -> str:
    return (
        f"IMPROVED (screen, unconfirmed): faster than the baseline beyond {percent(policy.tolerance)}: "
        f"{numbers}. Ratchet it with --convperf-update-baselines=improved (recorded only once confirmed)"
    )


def improvement_unusable(reason: str | None, numbers: str) -> str:
    return (
        f"improvement not confirmed: the confirm measurement was unusable ({reason}); screen said {numbers}"
    )


def improvement_not_confirmed(conf_numbers: str, n_rounds: int, numbers: str) -> str:
    return f"improvement not confirmed: {conf_numbers}; screen ({n_rounds} rounds): {numbers}"


def improved_confirmed(policy: Policy, conf_numbers: str, n_rounds: int, numbers: str) -> str:
    return (
        f"IMPROVED (confirmed): faster than the baseline beyond {percent(policy.tolerance)}: "
        f"{conf_numbers}; screen ({n_rounds} rounds): {numbers}. "
        "Ratchet it with --convperf-update-baselines=improved"
    )


# ---- few rounds (judge.few_rounds) -------------------------------------------------------------


def few_rounds_shown(comparison: Comparison, entry: Entry, least: float) -> str:
    return (
        f"{len(comparison.log_ratios)} rounds, the least slow {pct(math.expm1(least))} vs baseline "
        f"time_ratio {ratio_text(entry.time_ratio)} ({us_line(entry, comparison)})"
    )


def few_rounds_unconfirmed(first: str) -> str:
    return f"FAIL (few rounds, unconfirmed): far slower than the baseline in every round: screen ({first})"


def few_rounds_not_repeated(reason: str | None, first: str, second: str) -> str:
    return (
        f"inconclusive: too few rounds for a CI ({reason}); the confirm did not repeat the slowdown: "
        f"screen ({first}); confirm ({second})"
    )


def few_rounds_confirmed(first: str, second: str) -> str:
    return (
        "FAIL (few rounds, confirmed): slower than the baseline by far more than its noise in every "
        f"round, too slow for the {MIN_CI_ROUNDS}+ rounds of a CI: screen ({first}); confirm ({second}). "
        "If intended, record it with --convperf-update-baselines --convperf-reason=..."
    )
