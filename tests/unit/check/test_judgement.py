"""The judgement of one check (``gate.judge``): config, a Store and the device in; a Judgement out."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_convperf.baselines.store import Store
from pytest_convperf.check.context import BaselineSlot
from pytest_convperf.check.judgement import judge
from pytest_convperf.core.config import ConvperfConfig
from pytest_convperf.core.results import Comparison, Verdict
from pytest_convperf.judge.entry import Entry
from pytest_convperf.judge.policy import policy_for
from tests.unit.judge.test_verdict import ENV, comparison

DEVICE: Any = SimpleNamespace(kind="cpu", facts={**ENV, "cudnn": 92400})


def _store(tmp_path: Path, ratio: float | None, cfg: ConvperfConfig) -> BaselineSlot:
    store = Store(tmp_path / "bl", "box")
    if ratio is not None:
        entry = Entry(time_ratio=ratio, noise=0.01, us_candidate=ratio * 30, us_reference=30.0)
        store.write("test_mod", {"test_k": entry})
    return BaselineSlot.look_up(store, "test_mod", "test_k", cfg=cfg, device=DEVICE)


def _never(n_rounds: int) -> Comparison:
    raise AssertionError("no confirmation expected")


def test_a_new_check_is_new_and_plans_a_write_when_selected(tmp_path: Path) -> None:
    cfg = ConvperfConfig(enabled=True, update=frozenset({"new"}), baselines_dir=tmp_path / "bl")
    j = judge(cfg, _store(tmp_path, None, cfg), DEVICE, comparison(0.5), confirm=_never)
    assert j.decision.verdict is Verdict.NEW
    assert j.update is not None and j.update.action == "write"
    assert j.machine == "box" and j.baseline is None
    assert j.baselines_file.endswith("box/test_mod.yaml")
    j.enforce()  # a planned write passes


def test_a_regression_is_confirmed_in_rounds_and_fails(tmp_path: Path) -> None:
    asked: list[int] = []

    def confirm(n_rounds: int) -> Comparison:
        asked.append(n_rounds)
        return comparison(0.8, n=n_rounds)

    cfg = ConvperfConfig(enabled=True, baselines_dir=tmp_path / "bl")
    first = comparison(0.8, n=41)
    j = judge(cfg, _store(tmp_path, 0.5, cfg), DEVICE, first, confirm=confirm)
    assert j.decision.verdict is Verdict.FAIL and j.update is None
    assert asked == [3 * first.n_rounds]  # the confirm run is asked for in rounds
    # Under session-wide control (the default) the speed FAIL is decided at session end: the test is
    # reported "speed FAIL pending" from its row (night.pending_speed_fail), never with a warning.
    assert j.deferred
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        j.enforce()
    alone = dataclasses.replace(cfg, false_alarms="none")  # each check alone: the test fails at once
    j = judge(alone, _store(tmp_path, 0.5, alone), DEVICE, first, confirm=confirm)
    assert not j.deferred
    with pytest.raises(pytest.fail.Exception):
        j.enforce()


def test_inconclusive_timing_is_never_recorded(tmp_path: Path) -> None:
    cfg = ConvperfConfig(enabled=True, update=frozenset({"all"}), baselines_dir=tmp_path / "bl")
    shaky = comparison(0.5, inconclusive="too many rounds dropped")
    j = judge(cfg, _store(tmp_path, 0.5, cfg), DEVICE, shaky, confirm=_never)
    assert j.decision.verdict is Verdict.INCONCLUSIVE
    assert j.update is not None and j.update.action == "skip"


def test_policy_tolerance_precedence(tmp_path: Path) -> None:
    entry = Entry(time_ratio=0.5, noise=0.01, us_candidate=5.0, us_reference=10.0, tolerance=0.2)
    assert policy_for(ConvperfConfig(), "cpu", entry).tolerance == 0.2
    assert policy_for(ConvperfConfig(tolerance=0.3), "cpu", entry).tolerance == 0.3
    assert policy_for(ConvperfConfig(noise_floor=0.02), "cpu", None).noise_floor == 0.02


def test_gate_is_the_old_name_of_judge_and_warns() -> None:

    from pytest_convperf.check.fixture import ConvperfFixture

    fixture = ConvperfFixture.__new__(ConvperfFixture)
    seen: dict[str, Any] = {}

    def judge(comparison: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return comparison

    fixture.judge = judge  # type: ignore[method-assign]
    with pytest.warns(DeprecationWarning, match=r"convperf\.judge\(\)"):
        assert fixture.gate("c", name="n", phase="forward", confirm=None) == "c"  # type: ignore[arg-type]
    assert seen == {"name": "n", "phase": "forward", "confirm": None}
