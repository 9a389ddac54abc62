"""The baseline lifecycle (``updates.py``): the entry a check would store, the update plan, the writes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_convperf.baselines import Entry, Store
from pytest_convperf.config import ConvperfConfig
from pytest_convperf.results import Verdict
from pytest_convperf.updates import (
    UpdatePlan,
    apply_updates,
    new_entry,
    plan_update,
    quality_of,
    render_update_md,
)
from pytest_convperf.verdict import Decision, default_policy
from tests.rows import check_row
from tests.unit.test_verdict import ENV, comparison

CPU = default_policy("cpu")


def _decision(verdict: Verdict, stage: str = "screen") -> Decision:
    return Decision(verdict, "msg", "pass", stage)


def _cfg(tmp_path: Path, update: set[str], reason: str | None = None) -> ConvperfConfig:
    return ConvperfConfig(
        enabled=True, update=frozenset(update), baselines_dir=tmp_path / "bl", rootdir=tmp_path, reason=reason
    )


def test_new_entry_keeps_the_machines_noise_and_stores_quality() -> None:
    old = Entry(time_ratio=0.5, noise=0.03, noise_runs=5, us_candidate=5.0, us_reference=10.0)
    entry = new_entry(
        comparison(0.6), old, CPU, env=ENV, backend="Mkldnn", errors=(), quality={"rel_l2": 0.1}
    )
    assert entry.time_ratio == pytest.approx(0.6) and entry.noise == 0.03 and entry.noise_runs == 5
    assert entry.reference_backend == "Mkldnn" and entry.quality == {"rel_l2": 0.1}
    fresh = new_entry(comparison(0.6), None, CPU, env=ENV, backend=None, errors=())
    assert fresh.noise == CPU.noise_floor and fresh.noise_runs is None


def test_quality_of_keeps_only_gated_finite_numbers() -> None:
    metrics = {"rel_l2": 0.01, "sqnr_db": float("nan"), "other": 3.0, "flag": True}
    assert quality_of(metrics) == {"rel_l2": 0.01}


def test_plan_update_rules(tmp_path: Path) -> None:
    old = Entry(time_ratio=0.5, noise=0.01, us_candidate=5.0, us_reference=10.0, env=dict(ENV), mode="fake")
    same = new_entry(comparison(0.5), old, CPU, env=ENV, backend=None, errors=())
    assert same.mode == "fake"  # the timing mode of ``comparison``
    slower = new_entry(comparison(0.8), old, CPU, env=ENV, backend=None, errors=())
    assert plan_update(_cfg(tmp_path, set()), _decision(Verdict.PASS), old, same, CPU) is None
    skip = plan_update(_cfg(tmp_path, {"new"}), _decision(Verdict.FAIL), old, slower, CPU)
    assert skip is not None and skip.action == "skip" and "not selected" in skip.why
    keep = plan_update(_cfg(tmp_path, {"all"}), _decision(Verdict.PASS), old, same, CPU)
    assert keep is not None and keep.action == "keep"
    # An entry recorded before modes were stored gains its mode on the next update, same ratio or not.
    unmoded = plan_update(
        _cfg(tmp_path, {"all"}), _decision(Verdict.PASS), replace(old, mode=None), same, CPU
    )
    assert unmoded is not None and unmoded.action == "write" and unmoded.entry == same
    refused = plan_update(_cfg(tmp_path, {"failed"}), _decision(Verdict.FAIL), old, slower, CPU)
    assert refused is not None and refused.action == "refused" and "--convperf-reason" in refused.why
    written = plan_update(_cfg(tmp_path, {"failed"}, reason="ok"), _decision(Verdict.FAIL), old, slower, CPU)
    assert written == UpdatePlan("write", "updated", slower, slower=True)
    new = plan_update(_cfg(tmp_path, {"new"}), _decision(Verdict.NEW), None, same, CPU)
    assert new is not None and new.action == "write" and new.entry == same


def test_apply_updates_writes_entries_and_renders_the_review(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"new"}, reason="first record")
    entry = Entry(time_ratio=0.5, noise=0.01, us_candidate=5.0, us_reference=10.0)
    rows = [
        {
            "key": "test_x",
            "module": "test_mod",
            "machine": "box",
            "nodeid": "test_mod.py::test_x",
            "verdict": "NEW",
            "update": {"action": "write", "entry": entry.to_yaml(), "why": "new entry"},
        },
        {"key": "test_y", "module": "test_mod", "update": {"action": "keep", "why": "in band"}},
    ]
    path = apply_updates(cfg, [check_row(row) for row in rows], tmp_path)
    assert path == tmp_path / "convperf-update.md"
    stored = Store(cfg.baselines_dir, "box").get("test_mod", "test_x")
    assert stored is not None and stored.time_ratio == 0.5
    assert stored.updated is not None and stored.updated["reason"] == "first record"
    text = path.read_text()
    assert "Reason: first record" in text and "`test_x` | NEW | (new) -> 0.5" in text
    assert "## Left as they are" in text and "`test_y` (test_mod): in band" in text
    assert apply_updates(_cfg(tmp_path, set()), [check_row(row) for row in rows], tmp_path) is None


def test_render_update_md_without_writes_says_so(tmp_path: Path) -> None:
    text = render_update_md(_cfg(tmp_path, {"new"}), {}, [], ["`k` (m): slower"], None)
    assert "No entry was written." in text and "## Refused" in text


def test_an_implausible_improvement_needs_a_reason(tmp_path: Path) -> None:
    # Issue 25: a cached-output cheat read IMPROVED -92.8 % and =improved recorded it.
    old = Entry(time_ratio=1.0, noise=0.02, us_candidate=10.0, us_reference=10.0, env=dict(ENV), mode="fake")
    cheat = new_entry(comparison(0.07318), old, CPU, env=ENV, backend=None, errors=())
    refused = plan_update(_cfg(tmp_path, {"improved"}), _decision(Verdict.IMPROVED), old, cheat, CPU)
    assert refused is not None and refused.action == "refused", refused
    assert "13.66x faster than stored" in refused.why and "--convperf-reason" in refused.why
    told = plan_update(
        _cfg(tmp_path, {"improved"}, reason="new kernel"), _decision(Verdict.IMPROVED), old, cheat, CPU
    )
    assert told is not None and told.action == "write"
    # A plausible improvement (-30 %) is recorded without a word, as before.
    better = new_entry(comparison(0.7), old, CPU, env=ENV, backend=None, errors=())
    plain = plan_update(_cfg(tmp_path, {"improved"}), _decision(Verdict.IMPROVED), old, better, CPU)
    assert plain is not None and plain.action == "write"
