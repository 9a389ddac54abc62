"""kernels/sweep_goals.py and the sweep's goal order (issue 35): the 13 goals of docs/tuning-log.md are
decided by rows the plan holds, those rows are measured first, and each goal reads from CSV rows."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch.nn.functional as F

from kernels import sweep
from kernels.sweep_calls import conv_case
from kernels.sweep_case import Case
from kernels.sweep_goals import BEST_FP32, GOALS, SPEC, Goal, Pair, goal_rank, read_goal
from pytest_convperf.core.problem import Conv2dProblem

TINY = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=(3, 3), padding=(1, 1), groups=4)


@pytest.fixture(scope="module")
def planned() -> dict[str, list[sweep.Planned]]:
    return sweep.plan(sweep.kernel_families())


def test_thirteen_goals_each_decided_by_rows_of_the_plan(planned: dict[str, list[sweep.Planned]]) -> None:
    assert [g.number for g in GOALS] == list(range(1, 14))
    labels = {
        (r.case.family, r.case.variant, r.case.problem_id, r.case.phase)
        for rows in planned.values()
        for r in rows
    }
    for goal in GOALS:
        wanted = {lab for lab in labels if goal.wants(*lab)}
        for pair in goal.pairs:
            cands = {lab for lab in wanted if lab[1] == pair.candidate and lab[3] == goal.phase}
            assert cands, f"goal {goal.number}: no {pair.candidate} row in the plan"
            refs = {
                SPEC: {"copy"}, BEST_FP32: {"cudnn-fp32-nchw", "cudnn-fp32-nhwc"}
            }.get(pair.reference, {pair.reference})  # fmt: skip
            assert refs <= {lab[1] for lab in wanted}, f"goal {goal.number}: no {refs} rows to compare with"


def test_the_goal_rows_come_first(planned: dict[str, list[sweep.Planned]]) -> None:
    flat = sweep.order_by_goals(planned)
    assert sorted(map(id, flat)) == sorted(id(r) for rows in planned.values() for r in rows)
    ranks = [goal_rank(r.case.family, r.case.variant, r.case.problem_id, r.case.phase) for r in flat]
    first = ranks.index(None)
    assert first == sweep.goal_rows(flat) > 100 and all(r is None for r in ranks[first:])
    assert ranks[:first] == sorted(ranks[:first])  # goal by goal


def _row(variant: str, problem: str, phase: str, median: float, **extra: str) -> dict[str, str]:
    return {
        "family": "dw",
        "variant": variant,
        "problem": problem,
        "phase": phase,
        "median_us": str(median),
        **extra,
    }


def test_a_geomean_goal_with_a_floor() -> None:
    goal = Goal(5, "t", "dw", "forward", (Pair("v4", "cudnn-fp16-nchw", 1.2),), reduce="geomean", floor=1.0)
    p1, p2 = TINY.replace(dtype="fp16").id, TINY.replace(dtype="fp16", c_in=8, c_out=8, groups=8).id
    rows = [
        _row("v4", p1, "forward", 10, predicted_us="5"),
        _row("cudnn-fp16-nchw", p1, "forward", 20),
        _row("v4", p2, "forward", 10, predicted_us="10"),
        _row("cudnn-fp16-nchw", p2, "forward", 9),
    ]
    r = read_goal(goal, rows)
    assert r.rows == 2 and r.measured == pytest.approx((2.0 * 0.9) ** 0.5)
    assert r.predicted == pytest.approx((4.0 * 0.9) ** 0.5) and r.met is False  # 0.9 < the floor
    assert r.cell(r.measured) == "1.34x"


def test_a_min_goal_with_thresholds_by_kernel_size_and_the_best_pytorch_path() -> None:
    k5 = TINY.replace(kernel=(5, 5), padding=(2, 2))
    goal = Goal(7, "t", "dw", "weight_grad", (Pair("w2", BEST_FP32, 2.0),), per_kernel=(("k5x5", 3.0),))
    nhwc = TINY.replace(layout="nhwc").id
    rows = [
        _row("w2", TINY.id, "weight_grad", 10),
        _row("cudnn-fp32-nchw", TINY.id, "weight_grad", 40),
        _row("cudnn-fp32-nhwc", nhwc, "weight_grad", 25),  # the best path: 2.5x, of a 2x goal
        _row("w2", k5.id, "weight_grad", 10),
        _row("cudnn-fp32-nchw", k5.id, "weight_grad", 33),  # 3.3x of a 3x goal
    ]
    r = read_goal(goal, rows)
    assert r.measured == pytest.approx(1.1) and r.met is True and r.predicted is None
    assert r.cell(r.measured) == "1.10 of goal"


def test_a_bandwidth_goal_and_a_goal_without_rows() -> None:
    goal = Goal(2, "t", "dw", "forward", (Pair("v4", SPEC, 0.8),))
    rows = [_row("v4", TINY.id, "forward", 10, pct_hbm_spec="60", predicted_us="7.5")]
    r = read_goal(goal, rows)
    assert r.measured == pytest.approx(0.75) and r.predicted == pytest.approx(1.0) and r.met is False
    empty = read_goal(goal, [_row("v2", TINY.id, "forward", 10)])
    assert (empty.rows, empty.met, empty.cell(empty.measured)) == (0, None, "-")


def _planned() -> dict[str, list[sweep.Planned]]:
    ok = conv_case("demo", "ours", F.conv2d, TINY, "forward")
    anchors = sweep.anchor_cases("demo", [ok])
    rows = [sweep.Planned(ok, "fp32", sweep.anchor_name("fp32", "nchw"))]
    return {
        "demo": rows + [sweep.Planned(a, Conv2dProblem.from_id(a.problem_id).dtype, None) for a in anchors]
    }


def test_the_sweep_fills_references_across_chunks_and_rewrites_its_csvs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep, "CHUNK_ROWS", 1)  # the row before its anchor, in another chunk
    assert sweep.sweep_in_goal_order(_planned(), 2, tmp_path, "m", None, device="cpu") == 0
    with (tmp_path / "demo.csv").open() as f:
        read = list(csv.DictReader(f))
    anchor = next(r for r in read if r["variant"] == "cudnn-fp32-nchw")
    assert read[0]["variant"] == "ours" and float(read[0]["reference_us"]) == float(anchor["median_us"])


def test_an_interrupted_sweep_keeps_its_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep, "CHUNK_ROWS", 1)
    planned = _planned()

    def stop(device: str) -> object:
        raise KeyboardInterrupt

    cut = Case("demo", "cut", TINY.id, "forward", TINY.min_bytes, stop)  # type: ignore[arg-type]
    planned["demo"].insert(1, sweep.Planned(cut, "fp32", None))
    assert sweep.sweep_in_goal_order(planned, 2, tmp_path, "m", None, device="cpu") == 130
    with (tmp_path / "demo.csv").open() as f:
        assert [r["variant"] for r in csv.DictReader(f)] == ["ours"]
