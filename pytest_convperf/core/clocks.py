"""One NVML clock reading (:class:`ClockSample`), the names of its clocks-event reason bits, and
what a measurement's clocks did (:func:`clock_facts`).

What the timers report after each round (``Timer.clocks``) and what a measurement keeps or drops
rounds by (``measure.run.kept_rounds``); read by ``core.device``'s NVML sampler. Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from pytest_convperf.core import stats

# NVML clocks-event (throttle) reason bits that mean the hardware slowed the SM clock down:
# HW slowdown, SW thermal, HW thermal, HW power brake. SW power cap is recorded, not dropped:
# it is the normal state of a busy GPU at its power limit.
HW_SLOWDOWN_REASONS = 0x8 | 0x20 | 0x40 | 0x80
_REASON_NAMES = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}


def reason_names(mask: int) -> list[str]:
    """Names of the NVML clocks-event reason bits set in ``mask``."""
    return [name for bit, name in _REASON_NAMES.items() if mask & bit]


@dataclass(frozen=True)
class ClockSample:
    """One NVML reading: SM clock (MHz), throttle reason bits, temperature (C), power (W).

    ``reasons`` is None when NVML could not report them (the read failed or the API is missing):
    unknown, not "no slowdown". Such a round is kept (the SM clock floor still applies to it) and
    the run's clock facts count it under ``reasons_unknown_rounds``.
    """

    sm_mhz: float | None
    reasons: int | None = 0
    temp_c: float | None = None
    power_w: float | None = None

    @property
    def hw_slowdown(self) -> bool:
        return bool(self.reasons is not None and self.reasons & HW_SLOWDOWN_REASONS)

    def to_dict(self) -> ClockSampleDict:
        return ClockSampleDict(
            sm_mhz=self.sm_mhz,
            reasons=reason_names(self.reasons) if self.reasons is not None else None,
            temp_c=self.temp_c,
            power_w=self.power_w,
        )


class ClockSampleDict(TypedDict):
    """One reading as a fact (:meth:`ClockSample.to_dict`): the reason bits by name."""

    sm_mhz: float | None
    reasons: list[str] | None
    temp_c: float | None
    power_w: float | None


def clock_facts(clocks: Sequence[ClockSample | None], kept: Sequence[int]) -> dict[str, Any] | str:
    """What the clocks did over a measurement's rounds (``kept``: the rounds it kept), for its facts."""
    seen = [c for c in clocks if c is not None and c.sm_mhz]
    if not seen:
        return "clocks unknown"
    mhz = [c.sm_mhz for c in seen if c.sm_mhz is not None]
    reasons = 0
    for c in seen:
        reasons |= c.reasons or 0
    unknown = sum(1 for c in seen if c.reasons is None)
    temps = [c.temp_c for c in seen if c.temp_c is not None]
    power = [c.power_w for c in seen if c.power_w is not None]
    kept_mhz = [clocks[i].sm_mhz for i in kept if clocks[i] is not None and clocks[i].sm_mhz]  # type: ignore[union-attr]
    # Untyped: measure/run.py's ``TimedRounds.clocks`` (not this module's) takes it as that dict.
    return {
        "sm_mhz_median": stats.median(mhz),
        "sm_mhz_min": min(mhz),
        "sm_mhz_max": max(mhz),
        "sm_mhz_kept_median": stats.median(kept_mhz) if kept_mhz else None,  # type: ignore[arg-type]
        "reasons_seen": reason_names(reasons),
        "reasons_unknown_rounds": unknown,  # NVML could not report throttle reasons for these rounds
        "temp_c_max": max(temps) if temps else None,
        "power_w_median": stats.median(power) if power else None,
    }


@dataclass(frozen=True)
class SideClocks:
    """The SM clock (MHz) each side of a paired comparison ran at: the median of the readings taken
    right before that side's slot in the rounds used (``Measurement.sm_mhz``). Stored in a baseline
    entry (``sm_mhz: {candidate, reference}``) so a later session can judge in cycles where the
    clocks moved (``judge.cycles``)."""

    candidate: float
    reference: float

    @property
    def log_ratio(self) -> float:
        """ln(candidate clock / reference clock): what turns a time ratio into a cycle ratio."""
        return math.log(self.candidate / self.reference)

    def to_yaml(self) -> dict[str, float]:
        return {"candidate": round(self.candidate, 1), "reference": round(self.reference, 1)}


def side_clocks(candidate_mhz: float | None, reference_mhz: float | None) -> SideClocks | None:
    """Both sides' clocks, or None where either is unknown (a CPU, no NVML, or no reading)."""
    if not candidate_mhz or not reference_mhz or candidate_mhz <= 0 or reference_mhz <= 0:
        return None
    return SideClocks(float(candidate_mhz), float(reference_mhz))
