"""Issue 36 item 4: judging in cycles (time x SM clock) where the sides' SM clocks moved.

Each side's clock is read right before its slot (a fake NVML reader: ``FakeTimer(slot_clocks=...)``),
the entry stores the clocks it was recorded at, and where the cycle ratio differs from the time
ratio by over 2 % the decision judges cycles and shows both."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from pytest_convperf.core.clocks import SideClocks
from pytest_convperf.core.results import Comparison, Verdict
from pytest_convperf.judge.cycles import CLOCK_MOVE, clock_move
from pytest_convperf.judge.entry import Entry, InvalidEntry, parse_entry
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.judge.policy import decision_of
from pytest_convperf.judge.verdict import default_policy
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.rounds import measure_pair
from pytest_convperf.measure.rule import StopRule

GPU = default_policy("cuda")
REF_S = 1e-3
FULL, LOW = 1980.0, 1500.0  # MHz: the recording's clock, a lower one
AT_FULL = SideClocks(FULL, FULL)


def noop() -> None:
    return None


def measured(time_ratio: float, cand_mhz: float | None, ref_mhz: float | None = FULL) -> Comparison:
    """A paired measurement through the fake timer, each side's clock given by a fake NVML reader."""
    slots = None if cand_mhz is None else {"candidate": [cand_mhz], "reference": [ref_mhz]}
    timer = FakeTimer({"candidate": time_ratio * REF_S, "reference": REF_S}, slot_clocks=slots)
    return measure_pair(timer, noop, noop, rule=StopRule(warmup_min_calls=0, warmup_window=5))


def recorded(sm_mhz: SideClocks | None = AT_FULL) -> Entry:
    """The entry of a candidate at half the reference's time, recorded at ``sm_mhz``."""
    return Entry(time_ratio=0.5, noise=0.0, us_candidate=500.0, us_reference=1000.0, sm_mhz=sm_mhz)


def judged(cmp: Comparison, entry: Entry) -> Decision:
    """The decision, its confirm measured again alike (the fake timer is exact)."""
    return decision_of(cmp, entry, GPU, confirm=lambda _rounds: cmp)


def test_each_side_carries_the_clock_read_before_its_slot() -> None:
    cmp = measured(0.5, LOW)
    assert (cmp.candidate.sm_mhz, cmp.reference.sm_mhz) == (LOW, FULL)
    assert measured(0.5, None).candidate.sm_mhz is None  # no reader (a CPU): unknown


def test_a_candidate_at_a_lower_clock_is_slower_in_time_but_same_in_cycles() -> None:
    # The same code at 1500 instead of 1980 MHz takes 1980/1500 = 1.32x the time: not a regression.
    cmp = measured(0.5 * FULL / LOW, LOW)
    decision = judged(cmp, recorded())
    assert decision.verdict is Verdict.PASS, decision.message
    assert decision.delta == pytest.approx(0.0, abs=1e-9)
    # Both ratios in the message: the judged one in cycles, the time one beside it, and the clocks.
    assert "delta +0.0 % in cycles" in decision.message
    assert "in time +32.0 %" in decision.message
    assert "SM clock candidate 1980 -> 1500 MHz, reference 1980 -> 1980 MHz" in decision.message


def test_a_real_slowdown_at_equal_clocks_fails_in_time() -> None:
    cmp = measured(0.5 * 1.32, FULL)
    decision = judged(cmp, recorded())
    assert decision.verdict is Verdict.FAIL, decision.message
    assert "in cycles" not in decision.message  # clocks agree: judged in time, as before
    assert decision.delta == pytest.approx(0.32, rel=1e-6)


def test_a_real_slowdown_at_a_lower_clock_still_fails_in_cycles() -> None:
    # 20 % more cycles, run at the lower clock: 1.2 x 1.32 in time, still 20 % in cycles.
    cmp = measured(0.5 * 1.2 * FULL / LOW, LOW)
    decision = judged(cmp, recorded())
    assert decision.verdict is Verdict.FAIL, decision.message
    assert decision.delta == pytest.approx(0.2, rel=1e-6)
    assert "in cycles" in decision.message


def test_clocks_unknown_or_within_the_threshold_judge_time() -> None:
    slow = measured(0.5 * FULL / LOW, LOW)
    # An entry recorded before entries stored clocks: time, as before (the lower clock reads slower).
    assert judged(slow, recorded(None)).verdict is Verdict.FAIL
    # Both sides moved together: the cycle ratio is the time ratio, nothing to normalise.
    both = measured(0.5, LOW, LOW)
    assert clock_move(both, recorded()) is None
    # A clock difference under CLOCK_MOVE is sampling jitter (NVML steps ~15 MHz), not a move.
    near = FULL / (1 + CLOCK_MOVE / 2)
    assert clock_move(measured(0.5, near), recorded()) is None
    moved = clock_move(measured(0.5, FULL / (1 + 2 * CLOCK_MOVE)), recorded())
    assert moved is not None and moved.log_shift == pytest.approx(-math.log1p(2 * CLOCK_MOVE))


def test_the_entry_stores_its_clocks_and_old_entries_still_load() -> None:
    entry = recorded(SideClocks(1980.0, 1965.0))
    raw = yaml.safe_load(yaml.safe_dump(entry.to_yaml()))
    assert raw["sm_mhz"] == {"candidate": 1980.0, "reference": 1965.0}
    assert parse_entry("k", raw).sm_mhz == SideClocks(1980.0, 1965.0)
    del raw["sm_mhz"]
    assert parse_entry("k", raw).sm_mhz is None  # recorded before entries stored clocks
    assert "sm_mhz" not in recorded(None).to_yaml()
    for bad in (
        {"candidate": 1980.0},
        {"candidate": 0, "reference": 1980},
        "fast",
        {"candidate": "x", "reference": 1},
    ):
        with pytest.raises(InvalidEntry, match="sm_mhz"):
            parse_entry("k", {**raw, "sm_mhz": bad})


def test_the_fake_timer_file_gives_slot_clocks(tmp_path: Path) -> None:
    path = tmp_path / "fake.json"
    path.write_text('{"times": {"*": 0.001}, "slot_clocks": {"candidate": [1500], "reference": [1980]}}')
    timer = FakeTimer.from_file(path)
    cmp = measure_pair(timer, noop, noop, rule=StopRule(warmup_min_calls=0, warmup_window=5))
    assert (cmp.candidate.sm_mhz, cmp.reference.sm_mhz) == (1500.0, 1980.0)
    path.write_text('{"times": {"*": 0.001}, "slot_clocks": [1500]}')
    with pytest.raises(ValueError, match="slot_clocks"):
        FakeTimer.from_file(path)
