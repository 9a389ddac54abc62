"""Judging in cycles where the SM clocks moved (issue 36 item 4; nvbench judges in cycle space).

A GPU kernel's time follows its SM clock: a side that ran at a lower clock reads slower with no code
change. Each side's clock is read right before its slot every round (``Measurement.sm_mhz``) and an
entry stores the clocks it was recorded at (``Entry.sm_mhz``), so the ratio in cycles (time x SM
clock) is ``time_ratio x f_cand / f_ref``, and its change since the entry differs from the time
ratio's by ``ln(f_cand / f_ref) - ln(f_cand0 / f_ref0)``. Where that exceeds :data:`CLOCK_MOVE`,
the decision judges the cycle ratio and every message shows both; below it, or where a clock is
unknown (a CPU, no NVML, an entry recorded before entries stored clocks), it judges time as before.

Why a threshold, and why 2 %: cycles are right for a kernel bound by its SM clock, not for one
bound by memory (whose time does not follow the SM clock), so time stays the measure while clocks
agree. NVML reports the SM clock in steps of about 15 MHz (0.8 % at 1980 MHz): 2 % is over two
steps, so the medians' sampling jitter never switches the space, and it is the GPU tolerance, so
a clock difference the rule ignores cannot alone move a ratio past it. Pure: no torch, no pytest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_convperf.core.clocks import SideClocks, side_clocks

if TYPE_CHECKING:
    from pytest_convperf.core.results import Comparison
    from pytest_convperf.judge.entry import Entry

# The cycle ratio differs from the time ratio by more than this: judged in cycles (see above).
CLOCK_MOVE = 0.02


@dataclass(frozen=True)
class ClockMove:
    """The clocks of a comparison (``now``) and of its entry (``then``) where they moved apart."""

    now: SideClocks
    then: SideClocks

    @property
    def log_shift(self) -> float:
        """ln(cycle ratio change / time ratio change): add to a time slowdown to get the cycles'."""
        return self.now.log_ratio - self.then.log_ratio

    def text(self) -> str:
        return (
            f"SM clock candidate {self.then.candidate:.0f} -> {self.now.candidate:.0f} MHz, "
            f"reference {self.then.reference:.0f} -> {self.now.reference:.0f} MHz"
        )


def clock_move(comparison: Comparison, entry: Entry) -> ClockMove | None:
    """The clocks where judging in cycles differs from time by more than :data:`CLOCK_MOVE`, else None."""
    now = side_clocks(comparison.candidate.sm_mhz, comparison.reference.sm_mhz)
    if now is None or entry.sm_mhz is None:
        return None
    move = ClockMove(now, entry.sm_mhz)
    return move if abs(move.log_shift) > math.log1p(CLOCK_MOVE) else None
