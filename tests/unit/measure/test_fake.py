"""The fake timer (``measure/fake.py``) replays exactly what it is given: durations per job name
(cycling, a ``"*"`` default, or a function), clock readings per round, a simulated clock, and a
``$CONVPERF_FAKE_TIMER`` file whose mistakes are named. (Driving the rounds engine:
``tests/unit/measure/test_rounds.py``.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_convperf.core.clocks import ClockSample
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.protocol import Job


def _jobs(timer: FakeTimer, *names: str, calls: list[str] | None = None) -> list[Job]:
    return [timer.job(n, lambda n=n: calls.append(n) if calls is not None else None, "cold") for n in names]


def test_durations_cycle_per_name_and_the_clock_advances_by_them() -> None:
    timer = FakeTimer({"candidate": [1.0, 2.0], "*": 0.5})
    jobs = _jobs(timer, "candidate", "reference")
    assert [timer.run_round(jobs) for _ in range(3)] == [[1.0, 0.5], [2.0, 0.5], [1.0, 0.5]]
    assert timer.counts == {"candidate": 3, "reference": 3} and timer.rounds == 3
    assert timer.now() == pytest.approx(5.5)


def test_a_function_gets_the_name_and_its_own_index() -> None:
    timer = FakeTimer(lambda name, i: i + (10 if name == "b" else 0))
    jobs = _jobs(timer, "a", "b")
    assert timer.run_round(jobs) == [0.0, 10.0] and timer.run_round(jobs) == [1.0, 11.0]


def test_jobs_are_called_unless_told_not_to() -> None:
    calls: list[str] = []
    for timer, name in ((FakeTimer({"*": 1.0}), "a"), (FakeTimer({"*": 1.0}, call_jobs=False), "b")):
        timer.run_round(_jobs(timer, name, calls=calls))
    assert calls == ["a"]


def test_a_name_without_durations_is_named() -> None:
    timer = FakeTimer({"candidate": 1.0})
    with pytest.raises(KeyError, match="no durations for job 'reference' and no '\\*' entry"):
        timer.run_round(_jobs(timer, "reference"))
    with pytest.raises(ValueError, match="empty duration list for job 'x'"):
        FakeTimer({"x": []}).run_round(_jobs(timer, "x"))


def test_clock_readings_follow_the_rounds() -> None:
    fast, slow = ClockSample(sm_mhz=1980), ClockSample(sm_mhz=1500, reasons=8)
    timer = FakeTimer({"*": 1.0}, clocks=[fast, slow])
    seen = []
    for _ in range(3):
        timer.run_round(_jobs(timer, "a"))
        seen.append(timer.clocks())
    assert seen == [fast, slow, fast]
    assert FakeTimer({"*": 1.0}).clocks() is None


def test_from_file_reads_times_and_clocks_and_names_a_bad_file(tmp_path: Path) -> None:
    good = tmp_path / "t.json"
    good.write_text(json.dumps({"times": {"*": [0.25]}, "clocks": [{"sm_mhz": 1500, "reasons": 8}, None]}))
    timer = FakeTimer.from_file(good)
    timer.run_round(_jobs(timer, "a"))
    assert timer.now() == 0.25 and timer.clocks() == ClockSample(sm_mhz=1500, reasons=8)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match=re.escape("bad.json: cannot read it as JSON")):
        FakeTimer.from_file(bad)
    bad.write_text('{"candidate": [1]}')
    with pytest.raises(ValueError, match=re.escape('expected {"times"')):
        FakeTimer.from_file(bad)
