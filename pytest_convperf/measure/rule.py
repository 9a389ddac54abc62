"""What to time and when to stop: :class:`StopRule` (rounds, caps, warm-up and clock-drop
parameters), :class:`Workload` (a callable and its input rotation for graph mode) and :class:`TimedCallError`.
The rounds themselves are run by :mod:`pytest_convperf.measure.run` and summarised by
:mod:`pytest_convperf.measure.rounds`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_convperf.measure.protocol import Timer


class TimedCallError(RuntimeError):
    """A timed callable (or the device under it) raised during warm-up or rounds."""


class TimingTrick(TimedCallError):
    """A timed call did its work where the timer cannot see it (another thread or process, more
    threads), returned an output that is not computed yet, or changed the timer's clock. The
    message opens with the trick's name (``LAZY OUTPUT:``, ``CLOCK CHANGED:``, ...): a check records
    it as its integrity finding."""


@dataclass(frozen=True)
class StopRule:
    """Warm-up and stopping parameters. Defaults are docs/design.md §5's numbers.

    ``target`` is the CI half-width of the median log ratio to reach (None: 0.005, or 0.01
    when the faster side's median is under ``short_kernel_s``). ``max_rounds``/``max_time_s``
    are the caps; ``plateau_rounds`` stops a run whose CI half-width did not shrink 10 % over
    that many rounds. ``graph_threshold_s``: mode ``auto`` switches to CUDA graphs below it.
    """

    min_rounds: int = 21
    max_rounds: int = 2000
    max_time_s: float = 5.0
    target: float | None = None
    short_kernel_s: float = 10e-6
    warmup_min_calls: int = 3
    warmup_window: int = 5
    warmup_tolerance: float = 0.01
    warmup_cap_s: float = 2.0
    clock_floor: float = 0.9
    max_dropped: float = 0.25
    plateau_rounds: int = 200
    graph_threshold_s: float = 20e-6
    graph_replay_s: float = 1e-3
    graph_calls: tuple[int, int] = (10, 500)

    @classmethod
    def for_timer(cls, timer: Timer, **overrides: Any) -> StopRule:
        """Defaults for a timer: the CPU gets a 2 s cap (1 s warm-up cap) so the suite stays fast."""
        base = cls(max_time_s=2.0, warmup_cap_s=1.0) if timer.kind == "cpu" else cls()
        return replace(base, **overrides) if overrides else base

    def check_timeout_s(self, confirm_factor: int = 3, margin: float = 3.0) -> float:
        """Default seconds one check may take before it counts as hung (``--convperf-check-timeout``).

        One measurement ends by its warm-up cap plus the 4 x ``max_time_s`` hard cap of its rounds
        (plus one call past each); a check makes a screen and a confirm of ``confirm_factor`` x the
        time caps. ``margin`` x that worst case leaves room for correctness, the facts measured once,
        and a loaded machine: CPU (2 s caps) 3 x (9 + 25) = 102 s, GPU (5 s) 3 x (22 + 62) = 252 s.
        """
        one = self.warmup_cap_s + 4 * self.max_time_s
        confirm = self.warmup_cap_s + 4 * self.max_time_s * confirm_factor
        return margin * (one + confirm)

    def scaled(self, factor: float, rounds_done: int = 0) -> StopRule:
        """The rule for a confirm measurement: ``factor`` x the rounds (and caps) of a first one."""
        min_rounds = max(self.min_rounds, math.ceil(factor * max(rounds_done, self.min_rounds)))
        return replace(
            self,
            min_rounds=min_rounds,
            max_rounds=max(self.max_rounds, min_rounds),
            max_time_s=self.max_time_s * factor,
        )

    def for_rounds(self, n_rounds: int, rounds_done: int) -> StopRule:
        """The rule for a confirm measurement of ``n_rounds`` rounds after a first one of ``rounds_done``.

        The time cap grows in proportion, so the confirmation is not cut short by it. A first run
        that its time cap stopped under ``min_rounds`` is scaled from ``min_rounds`` instead, so a
        slow workload still gets a confirmation of the same proportion.
        """
        return self.scaled(n_rounds / max(1, rounds_done), rounds_done)


@dataclass(frozen=True)
class Workload:
    """A callable to time, and how to rotate its inputs for graph mode.

    ``rotation(k)`` returns ``k`` zero-argument calls on ``k`` distinct input sets of
    ``bytes_per_call`` bytes each (so a CUDA graph can cycle over more than 2 x L2);
    without it, graph mode replays the same inputs and reports L2 as warm. ``refresh(round)``
    runs before every round, untimed (:attr:`pytest_convperf.measure.protocol.Job.before`).
    """

    name: str
    call: Callable[[], object]
    rotation: Callable[[int], Sequence[Callable[[], object]]] | None = None
    bytes_per_call: int = 0
    refresh: Callable[[int], object] | None = None

    @classmethod
    def of(cls, name: str, item: Workload | Callable[[], object]) -> Workload:
        """``item`` itself when it is a workload, else a workload of the callable named ``name``."""
        return item if isinstance(item, Workload) else cls(name, item)
