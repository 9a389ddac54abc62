"""``kernels.model.static``: the tile-plan mirrors and the arithmetic of the cost model."""

from __future__ import annotations

import pytest

from kernels.model import static as model
from kernels.model.static import KernelCounts, Shape


def test_v1_plan_wastes_lanes_on_7x2k_planes() -> None:
    plan = model.plan_v1(Shape(16, 480, 14, 3))
    assert (plan.tw, plan.mode) == (16, "scalar")  # W = 14: no vector staging in v1


@pytest.mark.parametrize(("hw", "tw"), [(7, 7), (14, 14), (28, 28)])
def test_v2_tiles_fit_small_planes_exactly(hw: int, tw: int) -> None:
    plan = model.plan_v2(Shape(16, 480, hw, 3))
    assert plan.tw == tw
    assert plan.mode == "planes4"
    assert plan.pl * hw * hw % 4 == 0  # every block's span starts 16-byte aligned


def test_v2_plan_for_large_planes_uses_row_staging() -> None:
    plan = model.plan_v2(Shape(16, 32, 112, 3))
    assert plan.mode == "rows4"
    assert 112 % plan.tw == 0


def test_warp_trips_counts_the_busiest_thread_of_each_warp() -> None:
    assert model.warp_trips(256) == 8
    assert model.warp_trips(257) == 9  # one more trip, for warp 0 only
    assert model.warp_trips(0) == 0
    assert model.warp_trips(32) == 1


def test_dram_bound_shape_time_is_bytes_over_bandwidth() -> None:
    sh = Shape(16, 32, 112, 3)
    hw = model.Hardware(launch_s=0.0, clock_hz=1e12)  # make issue and MIO free
    pred = model.predict_native(sh, hw)
    assert pred.bound == "dram"
    assert pred.seconds == pytest.approx(sh.bytes / hw.dram_bps)


def test_fewer_instructions_predict_less_time_when_issue_bound() -> None:
    sh = Shape(16, 1152, 7, 5)
    plan = model.plan_v2(sh)
    slow = KernelCounts(pre=100, post=900, post_mio=10, fill_per_item=5, load_per_item=100, regs=40)
    fast = KernelCounts(pre=100, post=450, post_mio=10, fill_per_item=5, load_per_item=100, regs=40)
    a, b = model.predict_tiled(sh, plan, slow), model.predict_tiled(sh, plan, fast)
    assert a.bound == "issue"
    assert b.seconds < a.seconds
    assert b.instr_per_output < a.instr_per_output


def test_lanes_wasted() -> None:
    sh = Shape(16, 1152, 7, 3)
    counts = KernelCounts(pre=1, post=1, post_mio=1, fill_per_item=1, load_per_item=1, regs=32)
    assert model.predict_tiled(sh, model.plan_v1(sh), counts).lanes_wasted == pytest.approx(1 - 49 / 64)
    assert model.predict_tiled(sh, model.plan_v2(sh), counts).lanes_wasted == pytest.approx(1 - 7 / 8)
