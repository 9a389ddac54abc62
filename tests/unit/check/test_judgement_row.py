"""One constructor of a judged row (``Judgement.row``): the typed judgement and the check's identity in."""

from __future__ import annotations

from pathlib import Path

from pytest_convperf.baselines.store import Store
from pytest_convperf.check.context import BaselineSlot
from pytest_convperf.check.judgement import judge
from pytest_convperf.core.config import ConvperfConfig
from pytest_convperf.core.results import Comparison, Verdict
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.judge.entry import Entry
from tests.unit.check.test_judgement import DEVICE
from tests.unit.judge.test_verdict import comparison


def _never(n_rounds: int) -> Comparison:
    raise AssertionError("no confirmation expected")


def test_a_judged_row_carries_the_judgement_once_and_round_trips(tmp_path: Path) -> None:
    cfg = ConvperfConfig(enabled=True, baselines_dir=tmp_path / "bl")
    store = Store(tmp_path / "bl", "box")
    entry = Entry(time_ratio=0.5, noise=0.01, us_candidate=15.0, us_reference=30.0)
    store.write("test_mod", {"test_k": entry})
    slot = BaselineSlot.look_up(store, "test_mod", "test_k", cfg=cfg, device=DEVICE)
    first = comparison(0.5)
    j = judge(cfg, slot, DEVICE, first, confirm=_never)
    row = j.row(
        key="test_k",
        nodeid="test_mod.py::test_k",
        module="test_mod",
        problem="p",
        phase="forward",
        comparison=first,
        errors=[],
        facts={"seed": 0},
        extra_metrics={"psnr": 40},
    )
    assert (row.verdict, row.message) == (j.decision.verdict, j.decision.message)
    assert row.verdict is Verdict.PASS and row.decision is j.decision and row.update is j.update
    assert (row.machine, row.baselines_file, row.device_kind) == ("box", j.baselines_file, "cpu")
    assert (row.env, row.timing, row.baseline) == (j.env, j.timing, slot.entry)
    assert row.errors == () and row.extra_metrics == {"psnr": 40.0}
    assert CheckRow.from_dict(row.to_dict()) == row
