"""A suspect's confirm measured in the machine state its entry was recorded in (issue 36).

On a CPU the reference is the machine's witness: its code does not change between sessions, so
its time moving with the candidate's says the machine moved (contention on a shared VM, memory
traffic, frequency), and the rule widens the confirm's interval by that shift
(``judge.decision.reference_shift``). That is honest but blind: on the 2-core box a 25 % slower
candidate confirmed while a neighbour ran read "the reference +22 % since the entry" and stayed
ADVISORY, though a few seconds later the machine was back. nvbench does the same for a GPU whose
clock throttled: it pauses and measures again rather than report the throttled sample.

So where the confirm's reference moved beyond the tolerance since the entry, the confirm waits
(:data:`PAUSES_S`, within :data:`BUDGET_S`) and measures again, up to ``1 + len(PAUSES_S)``
times, and the judgement uses the try whose reference is closest to the entry's (the reference
timed alone, ``measure.witness``, where the entry has one). The choice looks at the reference only,
never at the candidate or the ratio, so it matches the machine's state
and picks no verdict; every try's shift is in the comparison's facts (``machine_tries``,
``reference_shifts``), and where no try came back the rule still widens by the closest one.
GPUs are not retried here: their witness is the SM clock (``judge.cycles``), not the reference.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_convperf.core.results import Comparison
from pytest_convperf.judge.decision import Policy, reference_shift
from pytest_convperf.judge.entry import Entry

# Waits before the 2nd, 3rd and 4th try (seconds): a neighbour's test on the box lasts seconds to
# a minute; more than three more tries only adds time where it lasts longer.
PAUSES_S = (2.0, 5.0, 10.0)
# Seconds of waiting and measuring again one confirm may spend after its first try.
BUDGET_S = 60.0


@dataclass(frozen=True)
class MatchedConfirm:
    """``confirm`` measured again while the machine is away from ``entry``'s state (see the module)."""

    entry: Entry | None
    policy: Policy
    sleep: Callable[[float], None] = field(default=time.sleep)
    clock: Callable[[], float] = field(default=time.monotonic)

    def moved(self, comparison: Comparison) -> float:
        """The machine's shift this comparison saw since the entry (0 where it is no witness)."""
        return reference_shift(comparison, self.entry, self.policy) if self.entry is not None else 0.0

    def wrap(self, confirm: Callable[[int], Comparison]) -> Callable[[int], Comparison]:
        """``confirm`` with the retries: what the judgement calls instead."""
        if self.entry is None or not self.policy.witness:
            return confirm

        def matched(n_rounds: int) -> Comparison:
            tries = [confirm(n_rounds)]
            shifts = [self.moved(tries[0])]
            start = self.clock()
            for pause in PAUSES_S:
                if abs(shifts[-1]) <= self.policy.tolerance:
                    break
                if self.clock() - start + pause > BUDGET_S:
                    break
                self.sleep(pause)
                tries.append(confirm(n_rounds))
                shifts.append(self.moved(tries[-1]))
            if len(tries) == 1:
                return tries[0]
            best = min(range(len(tries)), key=lambda i: abs(shifts[i]))
            return tries[best].with_facts(
                {"machine_tries": len(tries), "reference_shifts": [round(s, 4) for s in shifts]}
            )

        return matched
