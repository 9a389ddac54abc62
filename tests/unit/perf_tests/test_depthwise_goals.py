"""Issue 29's aggregate depthwise goals: the arithmetic over measured rows (perf_tests.depthwise_goals)."""

from __future__ import annotations

import math

import pytest

from perf_tests.depthwise_goals import AGGREGATE_GOALS, AggregateGoal, RowTimes

A, B = (16, 32, 112, 3), (16, 1152, 7, 5)


def _goal(name: str) -> AggregateGoal:
    return next(g for g in AGGREGATE_GOALS if g.name == name)


def test_geomean_of_the_rows_speedups() -> None:
    goal = _goal("fp16-nchw-forward-vs-cudnn-geomean")
    rows = {(A, "nchw"): RowTimes(10.0, 20.0), (B, "nchw"): RowTimes(10.0, 8.0)}  # 2.0x and 0.8x
    value, account = goal.judge(rows)
    assert value == pytest.approx(math.sqrt(2.0 * 0.8))
    assert value >= goal.at_least  # 1.26x: the geomean goal is met although one shape loses
    assert "16x1152x7-k5 0.80x" in account
    rows[B, "nchw"] = RowTimes(10.0, 6.0)  # 0.6x: geomean 1.10x, not met
    assert goal.judge(rows)[0] < goal.at_least


def test_best_path_takes_the_faster_reference_and_the_worst_shape() -> None:
    goal = _goal("fp32-forward-vs-best-pytorch")
    assert goal.rows_needed([A]) == [(A, "nchw"), (A, "nhwc")]
    rows = {
        (A, "nchw"): RowTimes(10.0, 25.0),  # ours 10 us; native NCHW 25 us
        (A, "nhwc"): RowTimes(30.0, 12.0),  # cuDNN channels_last 12 us: the best path
        (B, "nchw"): RowTimes(5.0, 6.0),
        (B, "nhwc"): RowTimes(9.0, 4.0),  # 4 us: ours loses (0.8x)
    }
    value, account = goal.judge(rows)
    assert value == pytest.approx(0.8)
    assert value < goal.at_least and "16x1152x7-k5 0.80x" in account
