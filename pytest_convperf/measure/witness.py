"""The machine's witness on a CPU: the reference timed alone, just before and just after a paired
measurement (issue 36).

Between sessions the reference's code does not change, so its time moving says the machine moved,
and the judge widens a confirm by that move (``judge.decision.reference_shift``). But in a paired
round the reference runs beside the candidate and shares its caches and memory traffic: on the
2-core box ``F.conv2d`` reads +3.6 % (+1 .. +9 %) beside a depthwise candidate slowed 25 % by
redoing work, against beside the unslowed one (quiet box, 6 blocks of 200 pairs). Judged by the
paired reference, a real slowdown lends part of itself to "the machine moved" and is widened away
(``test_control_slowed``'s ADVISORY: the reference +11 .. +41 % since the entry). Timed alone the
reference shares nothing with the candidate, so its move is the machine's only.

It is timed twice, before and after the pair, so a neighbour that arrives while the pair runs is
seen; the witness is the geometric mean of the two medians. CPU timers only: a GPU's witness is its
SM clock (``judge.cycles``), and the fake timer replays the plugin's own tests' rounds, which a
witness would consume.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pytest_convperf.measure.protocol import Timer
from pytest_convperf.measure.rounds import measure_one
from pytest_convperf.measure.rule import StopRule, Workload

if TYPE_CHECKING:
    from pytest_convperf.core.results import Comparison

# The facts a witness adds to a comparison (``Witness.to_facts``).
WITNESS_FACTS = ("witness_us", "witness_looks_us")
# One look's caps: the reference's median to about 1 % on the 2-core box (11+ calls) at a cost
# under a tenth of a CPU check's 2 s rounds; the pair before it left the reference warm.
MIN_ROUNDS, MAX_ROUNDS, MAX_TIME_S, WARMUP_CAP_S = 11, 400, 0.15, 0.1


@dataclass(frozen=True)
class Witness:
    """The reference's median alone (us) before and after one paired measurement."""

    before_us: float
    after_us: float

    @property
    def us(self) -> float:
        """The witness: the geometric mean of the two looks."""
        return math.sqrt(self.before_us * self.after_us)

    def to_facts(self) -> dict[str, float | list[float]]:
        """The comparison's facts: ``witness_us`` (what the judge reads) and both looks."""
        return {
            "witness_us": round(self.us, 3),
            "witness_looks_us": [round(self.before_us, 3), round(self.after_us, 3)],
        }


def applies(timer: Timer) -> bool:
    """A witness is timed on a CPU timer only (the module says why)."""
    return timer.kind == "cpu"


def capped(rule: StopRule) -> StopRule:
    """``rule`` with one look's caps."""
    return replace(
        rule, min_rounds=MIN_ROUNDS, max_rounds=MAX_ROUNDS, max_time_s=MAX_TIME_S, warmup_cap_s=WARMUP_CAP_S
    )


def look(timer: Timer, reference: Workload, rule: StopRule) -> float:
    """The reference's median alone (us), under ``rule`` with the witness's caps; 0 where it could
    not be measured (no witness then: the judge falls back to the paired reference)."""
    measured = measure_one(timer, reference, mode="cold", rule=capped(rule))
    us = measured.median_us
    return us if measured.inconclusive is None and us > 0 and math.isfinite(us) else 0.0


def as_witness(value: object) -> float | None:
    """``value`` as a witness time (us): a finite number > 0, else None. Facts and history records
    may come from a file, so a bad value reads as no witness rather than one an entry would refuse."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and math.isfinite(value):
        return float(value)
    return None


def witness_us(facts: object) -> float | None:
    """The witness a comparison's facts hold (``witness_us``), None where there is none."""
    return as_witness(facts.get("witness_us")) if isinstance(facts, dict) else None


def every_witness(comparisons: Sequence[Comparison]) -> list[float] | None:
    """The witnesses of comparisons pooled as one (k processes), None unless every one has one: a
    pool of some would stand for those that had none."""
    looks = [witness_us(c.facts) for c in comparisons]
    known = [w for w in looks if w is not None]
    return known if known and len(known) == len(looks) else None
