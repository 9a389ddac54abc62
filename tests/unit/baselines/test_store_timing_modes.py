"""Timing mode and L2 flush in baseline entries: stored, validated, reused by ``auto``, never
judged across (a mismatch is STALE naming the change).

Fake timers stand in for CUDA: the graph capture and the flush themselves are not run here. The
plugin end to end: ``tests/integration/test_timing_modes_plugin.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_convperf.baselines.store import parse_text
from pytest_convperf.core.env import timing_of
from pytest_convperf.core.results import Comparison, Measurement, Verdict
from pytest_convperf.judge.entry import Entry
from pytest_convperf.judge.verdict import decide, default_policy
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.protocol import Job
from pytest_convperf.measure.rounds import measure_pair
from pytest_convperf.measure.rule import StopRule
from tests.rows import check_row

RULE = StopRule(min_rounds=21, max_rounds=21)


def noop() -> None:
    return None


class Graphs(FakeTimer):
    """A fake with CUDA-graph jobs (a replay is a Python loop over the calls)."""

    supports_graphs = True

    def graph_job(self, name: str, calls: Sequence[Callable[[], object]], per_replay: int, l2: str) -> Job:
        def replay() -> None:
            for i in range(per_replay):
                calls[i % len(calls)]()

        return Job(name, replay, calls_per_sample=per_replay, flush=False, mode="graph", l2=l2)

    def job(self, name: str, call: Callable[[], object], mode: str) -> Job:
        return Job(name, call, flush=mode != "warm", mode=mode, l2="flushed")

    def facts(self) -> dict[str, object]:
        return {**super().facts(), "flush": "read"}


# ---- auto is sticky per key --------------------------------------------------------------------------


def test_auto_picks_graphs_under_the_threshold_and_says_why() -> None:
    cmp = measure_pair(Graphs({"*": 5e-6}), noop, noop, rule=RULE)
    assert cmp.candidate.mode == "graph"
    assert cmp.facts["auto_mode"] == "graph: warm-up median 5 us < 20 us"


def test_a_stored_mode_wins_over_auto_s_fresh_choice_both_ways() -> None:
    short = measure_pair(Graphs({"*": 5e-6}), noop, noop, rule=RULE, stored_mode="cold")
    assert (short.candidate.mode, short.reference.mode) == ("cold", "cold")
    assert short.facts["auto_mode"].startswith("cold: as stored")
    long = measure_pair(Graphs({"*": 1e-3}), noop, noop, rule=RULE, stored_mode="graph")
    assert long.candidate.mode == "graph" and long.facts["auto_mode"].startswith("graph: as stored")


def test_a_stored_mode_never_overrides_an_explicit_mode_or_another_timer_s_mode() -> None:
    explicit = measure_pair(Graphs({"*": 5e-6}), noop, noop, mode="cold", rule=RULE, stored_mode="graph")
    assert explicit.candidate.mode == "cold" and "auto_mode" not in explicit.facts
    # A CPU/fake entry's mode is no auto choice: auto decides afresh.
    fresh = measure_pair(Graphs({"*": 5e-6}), noop, noop, rule=RULE, stored_mode="cpu")
    assert fresh.candidate.mode == "graph"


# ---- entries store and validate the mode ---------------------------------------------------------------


def _file(tmp_path: Path, extra: str) -> str:
    return (
        "schema: convperf/1\nmachine: box\nbenchmarks:\n  k:\n"
        "    time_ratio: 0.5\n    noise: 0.01\n    us: {candidate: 5.0, reference: 10.0}\n" + extra
    )


def test_mode_and_flush_round_trip_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "box" / "t.yaml"
    entry = parse_text(_file(tmp_path, "    mode: cold\n    flush: read\n"), path).entries["k"]
    assert (entry.mode, entry.flush) == ("cold", "read")
    assert entry.to_yaml()["mode"] == "cold" and entry.to_yaml()["flush"] == "read"
    old = parse_text(_file(tmp_path, ""), path).entries["k"]  # recorded before the fields existed
    assert (old.mode, old.flush) == (None, None) and "mode" not in old.to_yaml()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "    mode: hot\n",
            r"field 'mode' must be one of cold, warm, graph, cpu, cpu-thread, fake, got 'hot'",
        ),
        ("    mode: 3\n", r"field 'mode' must be one of .*, got 3"),
        ("    flush: zero\n", r"field 'flush' must be one of read, write, got 'zero'"),
    ],
)
def test_a_bad_mode_or_flush_is_a_usage_error_naming_the_entry(
    tmp_path: Path, extra: str, message: str
) -> None:
    with pytest.raises(pytest.UsageError, match=rf"entry 'k': {message}.*Fix: .*left unchanged"):
        parse_text(_file(tmp_path, extra), tmp_path / "box" / "t.yaml")


# ---- never judged across modes ----------------------------------------------------------------------


def _comparison(ratio: float, mode: str, flush: str | None = "read") -> Comparison:
    ref = 10e-6

    def m(t: float) -> Measurement:
        return Measurement(samples=(t,) * 31, median=t, ci=(t, t), n=31, mode=mode, l2="flushed")

    return Comparison(
        candidate=m(ref * ratio),
        reference=m(ref),
        log_ratios=(math.log(ratio),) * 31,
        time_ratio=ratio,
        time_ratio_ci=(ratio, ratio),
        se=0.0005,
        n_rounds=31,
        facts={"flush": flush} if flush else {},
    )


ENTRY = Entry(time_ratio=0.5, noise=0.004, us_candidate=5.0, us_reference=10.0, mode="cold", flush="read")
POLICY = default_policy("cuda")


def test_a_mode_change_is_stale_naming_old_and_new_even_when_much_slower() -> None:
    d = decide(_comparison(0.8, "graph"), ENTRY, POLICY)  # +60 %: would be a FAIL within one mode
    assert d.verdict is Verdict.STALE and d.outcome == "pass" and d.stage == "mode"
    assert d.message.startswith("STALE: timing changed (mode cold -> graph)")
    assert d.env_diff == {"mode": ("cold", "graph")}


def test_a_flush_change_is_stale_and_combines_with_an_env_change() -> None:
    entry = replace(ENTRY, env={"torch": "2.4.0"})
    d = decide(_comparison(0.5, "cold", flush="write"), entry, POLICY, env={"torch": "2.11.0"})
    assert d.verdict is Verdict.STALE
    assert "timing changed (flush read -> write); environment changed (torch 2.4.0 -> 2.11.0)" in d.message


def test_the_same_mode_or_an_unknown_stored_mode_is_judged_as_before() -> None:
    same = decide(_comparison(0.8, "cold"), ENTRY, POLICY)
    assert same.verdict is Verdict.FAIL
    legacy = decide(_comparison(0.8, "graph"), replace(ENTRY, mode=None, flush=None), POLICY)
    assert legacy.verdict is Verdict.FAIL


def test_timing_of_records_the_flush_for_cold_timings_only() -> None:
    assert timing_of(_comparison(0.5, "cold")) == {"mode": "cold", "flush": "read"}
    assert timing_of(_comparison(0.5, "graph")) == {"mode": "graph"}  # rotated inputs, no flush


def test_calibrate_folds_one_mode_and_records_it(tmp_path: Path) -> None:
    from pytest_convperf.baselines.calibration import calibrate_records, write_calibration
    from pytest_convperf.baselines.store import read_file
    from pytest_convperf.reports.report_files import history_records

    path = tmp_path / "box" / "m.yaml"

    def record(ratio: float, mode: str) -> dict[str, object]:
        timing = {"mode": mode, "flush": "read"} if mode == "cold" else {"mode": mode}
        row = {
            "key": "k",
            "module": "m",
            "verdict": "NEW",
            "comparison": {"time_ratio": ratio, "candidate": {"median": 5e-6}, "reference": {"median": 1e-5}},
            "baselines_file": str(path),
            "machine": "box",
            "device_kind": "cuda",
            "timing": timing,
        }
        return history_records([check_row(row)], when="now", commit=None)[0]

    # Two graph runs and one cold run (auto flipped at the threshold): only the graph runs count.
    runs = [[record(0.5, "graph")], [record(0.9, "cold")], [record(0.52, "graph")]]
    check = calibrate_records(runs)[str(path)]["checks"]["k"]
    assert check["runs"] == 2 and check["other_mode_runs"] == 1
    assert check["time_ratio"] == pytest.approx(math.sqrt(0.5 * 0.52))
    lines = write_calibration(str(path), "box", calibrate_records(runs)[str(path)]["checks"])
    assert "1 run(s) of another timing mode left out" in lines[0]
    entry = read_file(path).entries["k"]
    assert (entry.mode, entry.flush) == ("graph", None)
