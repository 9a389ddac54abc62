"""The paired timing of a pair (``check/paired_timing.py``): one measurement inside the sides'
context, and the confirm of a first one (its mode kept, ``n_rounds`` rounds, ``confirm_of_rounds``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from pytest_convperf.check.paired_timing import PairedTiming
from pytest_convperf.core.results import Comparison
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.protocol import Job
from pytest_convperf.measure.rule import StopRule, Workload


class ModeTimer(FakeTimer):
    """A fake timer whose jobs carry the mode asked for (the fake's own say ``fake``), so that a
    confirm's mode, taken from the first measurement, can be seen."""

    def job(self, name: str, call: Callable[[], object], mode: str) -> Job:
        return Job(name, call, flush=False, mode=mode, l2="n/a")


def _timing(config: pytest.Config, entered: list[str], mode: str = "auto") -> PairedTiming:
    timer = ModeTimer({"candidate": 5e-4, "reference": 1e-3})

    @contextmanager
    def sides() -> Iterator[tuple[Workload, Workload, dict[str, object]]]:
        entered.append("in")
        yield Workload("candidate", lambda: None), Workload("reference", lambda: None), {"side": 1}
        entered.append("out")

    rule = StopRule.for_timer(timer, min_rounds=6, max_rounds=6)
    # Stored "graph": auto reuses it; the fake has no graphs, so it times cold (a 500 us call).
    return PairedTiming(config, timer, sides, rule, mode, {"extra": 2}, stored_mode="graph")


def test_a_measurement_runs_inside_the_sides_with_their_facts_and_the_timings(
    pytestconfig: pytest.Config,
) -> None:
    entered: list[str] = []
    first = _timing(pytestconfig, entered).measure()
    assert entered == ["in", "out"]
    assert first.time_ratio == 0.5 and first.n_rounds == 6
    assert first.facts["side"] == 1 and first.facts["extra"] == 2
    assert first.facts["auto_mode"].startswith("graph: as stored")  # the stored mode, reused
    assert "confirm_of_rounds" not in first.facts


def test_the_confirm_of_a_first_measurement_keeps_its_mode_and_times_the_rounds_asked(
    pytestconfig: pytest.Config,
) -> None:
    entered: list[str] = []
    timing = _timing(pytestconfig, entered)
    first = timing.measure()
    confirm = timing.confirm_of(first)
    again: Comparison = confirm(18)
    assert entered == ["in", "out", "in", "out"]
    assert again.n_rounds == 18 and again.facts["confirm_of_rounds"] == 6
    # The confirm reuses the first's mode as timed (cold), not the entry's (graph): never mixed.
    assert again.candidate.mode == first.candidate.mode == "cold"
    assert again.facts["auto_mode"].startswith("cold: as stored")


def test_checked_sees_every_comparison(pytestconfig: pytest.Config) -> None:
    seen: list[int] = []

    def checked(comparison: Comparison) -> Comparison:
        seen.append(comparison.n_rounds)
        return comparison.with_facts({"checked": True})

    timing = _timing(pytestconfig, [])
    timing = PairedTiming(timing.config, timing.timer, timing.sides, timing.rule, "cold", {}, checked=checked)
    first = timing.measure()
    assert first.facts["checked"] is True and timing.confirm_of(first)(12).facts["checked"] is True
    assert seen == [6, 12]
