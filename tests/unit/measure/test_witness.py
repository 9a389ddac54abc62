"""The machine's witness (issue 36): the reference timed alone around a paired CPU measurement."""

from __future__ import annotations

import math

import pytest

from pytest_convperf.core.device import resolve_device
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.rule import StopRule, Workload
from pytest_convperf.measure.timers import make_timer
from pytest_convperf.measure.witness import (
    MAX_TIME_S,
    Witness,
    applies,
    as_witness,
    capped,
    every_witness,
    look,
    witness_us,
)
from tests.unit.judge.test_verdict import comparison


def test_the_witness_is_the_geometric_mean_of_its_two_looks_and_is_a_fact() -> None:
    w = Witness(100.0, 121.0)
    assert w.us == pytest.approx(110.0)
    facts = w.to_facts()
    assert facts == {"witness_us": 110.0, "witness_looks_us": [100.0, 121.0]}
    assert witness_us(facts) == pytest.approx(110.0)


@pytest.mark.parametrize("bad", [None, 0, -3.0, math.nan, math.inf, True, "12", [1.0]])
def test_a_missing_or_bad_witness_fact_reads_as_none(bad: object) -> None:
    assert witness_us({"witness_us": bad}) is None
    assert witness_us({}) is None and witness_us(None) is None


def test_pooled_witnesses_are_all_or_none() -> None:
    a, b = (
        comparison(0.5).with_facts({"witness_us": 100.0}),
        comparison(0.5).with_facts({"witness_us": 121.0}),
    )
    assert every_witness([a, b]) == [100.0, 121.0]
    assert every_witness([a, comparison(0.5)]) is None and every_witness([]) is None
    assert as_witness(180) == 180.0 and as_witness(-1.0) is None and as_witness("180") is None


def test_only_a_cpu_timer_has_a_witness() -> None:
    assert applies(make_timer(resolve_device("cpu")))
    # The fake timer replays the plugin's own tests' rounds: a witness would consume them.
    assert not applies(FakeTimer({"candidate": [1e-3], "reference": [1e-3]}))


def test_a_look_times_the_reference_alone_within_its_caps() -> None:
    calls: list[int] = []

    def reference() -> None:
        calls.append(1)
        sum(range(2000))

    rule = StopRule.for_timer(make_timer(resolve_device("cpu")))
    assert capped(rule).max_time_s == MAX_TIME_S < rule.max_time_s
    us = look(make_timer(resolve_device("cpu")), Workload.of("reference", reference), rule)
    assert us > 0 and len(calls) >= 11
