"""The baseline lifecycle (``updates.py``): the entry a check would store, the update plan, the writes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_convperf.baselines.store import Store
from pytest_convperf.baselines.update_record import render_update_md
from pytest_convperf.baselines.updates import apply_updates, new_entry, plan_update, quality_of
from pytest_convperf.core.config import ConvperfConfig
from pytest_convperf.core.results import Verdict
from pytest_convperf.judge.entry import Entry, UpdatePlan
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.judge.verdict import default_policy
from tests.disk_full import no_space, refuse_write
from tests.rows import check_row
from tests.unit.judge.test_verdict import ENV, comparison

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
    applied = apply_updates(cfg, [check_row(row) for row in rows], tmp_path)
    assert applied is not None and applied.recorded and applied.failed == ()
    assert applied.written == {("box", "test_mod", "test_x")}
    path = applied.path
    assert path == tmp_path / "convperf-update.md"
    stored = Store(cfg.baselines_dir, "box").get("test_mod", "test_x")
    assert stored is not None and stored.time_ratio == 0.5
    assert stored.updated is not None and stored.updated["reason"] == "first record"
    text = path.read_text()
    assert "Reason: ` first record `" in text and "` test_x ` | NEW | (new) -> 0.5 (speedup 2x)" in text
    assert "## Left as they are" in text and "- ` test_y (test_mod): in band `" in text
    assert apply_updates(_cfg(tmp_path, set()), [check_row(row) for row in rows], tmp_path) is None


def test_render_update_md_without_writes_says_so(tmp_path: Path) -> None:
    text = render_update_md(_cfg(tmp_path, {"new"}), {}, [], ["`k` (m): slower"], None)
    assert "No entry was written." in text and "## Refused" in text


def _new_rows(modules_keys: list[tuple[str, str]]) -> list[dict[str, object]]:
    entry = Entry(time_ratio=0.5, noise=0.01, us_candidate=5.0, us_reference=10.0)
    return [
        {
            "key": key,
            "module": module,
            "machine": "box",
            "nodeid": f"{module}.py::{key}",
            "verdict": "NEW",
            "update": {"action": "write", "entry": entry.to_yaml(), "why": "new entry"},
        }
        for module, key in modules_keys
    ]


def test_a_full_disk_on_one_file_writes_the_others_and_names_what_was_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = Store.write

    def full_for_a(self: Store, module: str, *args: object, **kwargs: object) -> bool:
        if module == "test_a":
            raise no_space()
        return real_write(self, module, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "write", full_for_a)
    cfg = _cfg(tmp_path, {"new"})
    rows = [check_row(r) for r in _new_rows([("test_a", "test_1"), ("test_b", "test_2")])]
    applied = apply_updates(cfg, rows, tmp_path)
    assert applied is not None and applied.written == {("box", "test_b", "test_2")}
    (line,) = applied.failed
    assert "test_a.yaml not written" in line and "No space left" in line and "test_1" in line
    assert Store(cfg.baselines_dir, "box").get("test_b", "test_2") is not None
    assert "## Write failed" in applied.path.read_text()


def test_no_baseline_is_written_without_its_review_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_convperf.baselines import updates

    monkeypatch.setattr(updates, "atomic_write", refuse_write)
    cfg = _cfg(tmp_path, {"new"})
    applied = apply_updates(cfg, [check_row(r) for r in _new_rows([("test_a", "test_1")])], tmp_path)
    assert applied is not None and not applied.recorded and applied.written == frozenset()
    assert "none of the 1 planned baseline changes was" in applied.failed[0]
    assert not Store(cfg.baselines_dir, "box").path("test_a").exists()


def test_a_lone_surrogate_in_a_key_does_not_cost_the_other_entries(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"new"})
    rows = [check_row(r) for r in _new_rows([("test_a", "test_x[\ud800]"), ("test_a", "test_y")])]
    applied = apply_updates(cfg, rows, tmp_path)
    assert applied is not None and applied.written == {("box", "test_a", "test_y")}
    assert "'test_x[\\ud800]' (test_a) not written: its key is not UTF-8" in applied.failed[0]
    assert Store(cfg.baselines_dir, "box").get("test_a", "test_y") is not None  # the file reads back
    assert "## Write failed" in applied.path.read_text(encoding="utf-8")


def test_a_planned_write_never_applied_is_not_reported_as_recorded() -> None:
    from pytest_convperf.baselines.update_outcome import Applied, mark_written
    from pytest_convperf.reports.report import terminal_lines

    rows = [check_row(r) for r in _new_rows([("test_a", "test_1"), ("test_a", "test_2")])]
    crashed = "\n".join(terminal_lines(rows))  # journal rows of a session that died before its update
    assert "recorded as the new baseline" not in crashed
    assert "2 planned as the new baseline but NOT written" in crashed
    applied = Applied(Path("u.md"), True, frozenset({("box", "test_a", "test_1")}), ())
    one = "\n".join(terminal_lines(mark_written(rows, applied)))
    assert "1 recorded as the new baseline" in one and "1 planned as the new baseline but NOT written" in one


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
