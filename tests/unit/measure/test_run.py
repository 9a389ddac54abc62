"""One measurement's rounds (``measure/run.py``) return how the mode was chosen as typed fields,
never written into a caller's dict (issue 39 item 2): ``auto_mode``, the graphs' facts or why none."""

from __future__ import annotations

import pytest

from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.rounds import measure_pair
from pytest_convperf.measure.rule import StopRule, Workload
from pytest_convperf.measure.run import GraphFacts, TimedRounds, run

RULE = StopRule(min_rounds=6, max_rounds=6, warmup_min_calls=1, warmup_window=2)


def _run(mode: str, stored_mode: str | None = None) -> TimedRounds:
    timer = FakeTimer({"candidate": 5e-6, "reference": 1e-5})
    sides = [Workload("candidate", lambda: None), Workload("reference", lambda: None)]
    return run(timer, sides, mode, RULE, stored_mode)


def test_auto_says_why_it_chose_its_mode() -> None:
    ran = _run("auto")
    assert ran.auto_mode is not None and ran.auto_mode.startswith("graph: warm-up median 5 us")
    # The fake timer has no graphs: wanted, not timed, and no fallback note for auto (as before).
    assert ran.graph is None and ran.graph_fallback is None
    assert ran.mode_facts() == {"auto_mode": ran.auto_mode}


def test_graph_mode_without_graphs_says_what_was_timed_instead() -> None:
    ran = _run("graph")
    assert ran.auto_mode is None and ran.graph is None
    assert ran.graph_fallback == "graph mode needs CUDA; the fake timer timed fake instead"
    assert ran.mode_facts() == {"graph": ran.graph_fallback}


def test_an_explicit_mode_has_no_mode_facts() -> None:
    assert _run("cold").mode_facts() == {}


def test_graph_facts_are_the_comparisons_graph_dict() -> None:
    facts = GraphFacts(calls_per_replay=20, input_sets=3, rotated_bytes=300, l2="rotated")
    ran = _run("cold")
    with_graph = TimedRounds(**{**ran.__dict__, "graph": facts})
    assert with_graph.mode_facts() == {
        "graph": {"calls_per_replay": 20, "input_sets": 3, "rotated_bytes": 300, "l2": "rotated"}
    }


def test_measure_pair_leaves_the_callers_facts_alone() -> None:
    caller = {"seed": 1}
    timer = FakeTimer({"candidate": 5e-4, "reference": 1e-3})
    cmp = measure_pair(timer, lambda: None, lambda: None, mode="auto", rule=RULE, facts=caller)
    assert caller == {"seed": 1}
    assert cmp.facts["seed"] == 1 and cmp.facts["auto_mode"].startswith("cold: warm-up median")
    timing = {"warmup", "stop", "target_halfwidth", "ci_halfwidth", "timing_seconds", "clocks"}
    assert timing <= set(cmp.facts)


@pytest.mark.parametrize("mode", ["cold", "warm"])
def test_measure_pair_facts_have_no_mode_facts_for_an_explicit_mode(mode: str) -> None:
    timer = FakeTimer({"candidate": 5e-4, "reference": 1e-3})
    cmp = measure_pair(timer, lambda: None, lambda: None, mode=mode, rule=RULE)
    assert "auto_mode" not in cmp.facts and "graph" not in cmp.facts
