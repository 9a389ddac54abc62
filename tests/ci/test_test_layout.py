"""Every module of ``pytest_convperf`` has its unit test where the package says (issue 39 item 7).

``tests/unit/`` mirrors the package: the module ``pytest_convperf/<layer>/<module>.py`` is tested by
``tests/unit/<layer>/test_<module>.py`` (or ``test_<module>_<aspect>.py`` where one module has several
files), a top-level ``pytest_convperf/<module>.py`` by ``tests/unit/test_<module>.py``, as syrupy's
``tests/syrupy/`` mirrors ``src/syrupy/``. A module without one is named in ``NO_UNIT_TEST`` with the
test that covers it instead, so a new module cannot arrive untested without someone saying why.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_convperf"
UNIT = ROOT / "tests" / "unit"

# module -> the test that covers it instead of a unit test of its name, and what that test checks.
NO_UNIT_TEST: dict[str, str] = {
    "__init__": "tests/ci/test_public_api.py: __all__ resolves, the lazy table agrees, no torch on import",
    # ab
    "ab.ab_plugin": "tests/integration/test_ab.py: A/B sessions end to end; "
    "tests/unit/ab/test_rule.py: GateHint and the A/B check's deadline",
    "ab.ab_report": "tests/unit/reports/test_report_markdown_outputs.py: ab.md with hostile ids; "
    "tests/integration/test_ab.py: ab.md written",
    "ab.bisect": "tests/unit/ab/test_rule.py: walk()'s branches and main; "
    "tests/integration/test_ab.py: one bisect step",
    "ab.distinct": "tests/unit/ab/test_refimport_families.py: NotDistinct, OpLedger, "
    "same_callable over every family",
    # baselines
    "baselines.baseline_yaml": "tests/unit/baselines/test_store_files.py and "
    "tests/unit/baselines/test_store_attacks.py: the YAML files written, read back and attacked",
    "baselines.orphans": "tests/integration/test_orphans.py: orphan entries found and pruned; "
    "tests/unit/reports/test_report_markdown_outputs.py: render_md",
    "baselines.update_outcome": "tests/unit/baselines/test_updates.py: Applied, mark_written",
    "baselines.update_record": "tests/unit/baselines/test_updates.py: render_update_md; "
    "tests/unit/reports/test_report_markdown_outputs.py: convperf-update.md with hostile ids",
    # check
    "check.cliff_search": "tests/integration/test_cliffs.py: the convperf_cliffs fixture in sessions",
    "check.context": "tests/unit/check/test_calls.py: check_phase; "
    "tests/unit/check/test_judgement.py: BaselineSlot",
    "check.faults": "tests/integration/test_faults.py: timeouts and device errors in sessions; "
    "tests/unit/check/test_calls.py: device_errors",
    "check.fixture": "tests/integration/test_fixtures.py: ConvperfFixture in inner sessions; "
    "tests/ci/test_walk.py: the walk from check to a timed round",
    "check.model_check": "tests/integration/test_model_check.py: check_pair in sessions",
    "check.pipeline": "tests/ci/test_walk.py: the check's steps down to measure.run; "
    "tests/integration/test_fixtures.py: every check goes through it",
    # core
    "core.clocks": "tests/unit/core/test_device.py: ClockSample, reason_names; "
    "tests/unit/measure/test_rounds.py: clock_facts",
    "core.config": "tests/unit/core/test_environment.py: every env var through ConvperfConfig; "
    "tests/integration/test_options.py: options and ini values",
    "core.env": "tests/unit/baselines/test_store_timing_modes.py: timing_of; "
    "tests/unit/judge/test_verdict.py: env_from_facts, env_diff",
    "core.files": "tests/unit/baselines/test_store_files.py: atomic_write, check_output_paths; "
    "tests/unit/baselines/test_store.py: LOCK_DIR",
    "core.options": "tests/integration/test_options.py: every option; "
    "tests/unit/core/test_environment.py: OPTIONS, CLI_ONLY",
    "core.results": "tests/unit/judge/test_check_row.py: Comparison, ErrorStats in a row's dict form; "
    "tests/unit/judge/test_verdict.py: Comparison",
    "core.row_format": "tests/unit/judge/test_check_row.py: older rows converted, a newer one refused",
    # correctness
    "correctness.case": "tests/unit/correctness/test_candidate_run.py: build_case; "
    "tests/unit/correctness/test_tolerance.py and tests/unit/check/test_calls_phase_calls.py: make_grad_out",
    "correctness.correctness_report": "tests/unit/correctness/test_oracle.py and "
    "tests/unit/correctness/test_tolerance.py: ConvMismatch, ReferenceDefect messages",
    # top level
    "crash_watch": "tests/integration/test_crash_named.py: a real crash named and re-run",
    "header": "tests/integration/test_first_hour.py: RECORD_HINT, baseline_lines",
    "hookspecs": "tests/integration/test_plugin_hooks.py: a third-party plugin's hooks",
    "plugin": "tests/integration/test_plugin_hooks.py and every tests/integration session",
    # judge
    "judge.changes": "tests/unit/baselines/test_store_timing_modes.py: timing and env changes are STALE; "
    "tests/unit/judge/test_verdict.py: which side moved, in the STALE message",
    "judge.entry": "tests/unit/baselines/test_store.py: Entry written, read and refused; "
    "tests/unit/judge/test_check_row.py: UpdatePlan round trip",
    "judge.few_rounds": "tests/unit/judge/test_verdict_pure.py: the few-rounds rule",
    "judge.outcome": "tests/unit/judge/test_check_row.py: Decision through a row's dict form; "
    "tests/unit/judge/test_verdict.py: the Decision decide makes",
    "judge.policy": "tests/unit/judge/test_verdict.py and "
    "tests/unit/judge/test_decision_machine_drift.py: policy_for, decision_of",
    "judge.quality": "tests/unit/judge/test_verdict.py: quality drift",
    # measure
    "measure.allocator": "tests/unit/core/test_device.py: fix_allocator",
    "measure.memory": "tests/unit/core/test_device.py: memory_tracker; "
    "tests/kernels/test_cuda_timing.py: on a GPU",
    "measure.parallel": "tests/integration/test_parallel.py: parallel timing in sessions",
    "measure.rule": "tests/unit/measure/test_rounds.py: StopRule, Workload, TimedCallError",
    "measure.timers": "tests/unit/measure/test_rounds.py and tests/unit/measure/test_cpu.py: "
    "make_timer, MeasureOne",
    # night
    "night.decide": "tests/integration/test_night.py: a night decided; "
    "tests/unit/night/test_history_change_point_window.py: new_change_point_lines",
    # reports
    "reports.cells": "tests/unit/reports/test_progress.py: fmt_time; "
    "tests/unit/check/test_determinism.py: cells",
    "reports.dashboard": "tests/integration/test_store_dashboard.py: the dashboard from a store",
    "reports.report_row": "tests/integration/test_report.py and tests/unit/core/test_roofline.py: ReportRow",
    "reports.results_writer": "tests/integration/test_results_store.py: rows into the store",
    "reports.review": "tests/unit/reports/test_report_markdown_outputs.py: file_section; "
    "tests/ci/test_workflows.py: the review comment",
    "reports.sections": "tests/unit/test_session.py: ReportSections, write_sections",
    # resultsdb
    "resultsdb.schema": "tests/unit/resultsdb/test_db.py and tests/integration/test_results_store.py",
}


def modules(package: Path = PACKAGE) -> list[str]:
    """Dotted names of the package's modules, relative to it (``core.stats``, ``session``, ``__init__``
    for the package's own); a layer's ``__init__`` that is only a docstring is no module."""
    names = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        if path.name == "__init__.py":
            body = ast.parse(path.read_text(encoding="utf-8")).body
            if all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body):
                continue
        names.append(".".join(rel.parts[1:]))  # relative to the package: "core.stats", "session"
    return names


def unit_tests_of(module: str, unit: Path = UNIT) -> list[Path]:
    """The unit test files of ``module``: ``test_<name>.py`` or ``test_<name>_<aspect>.py`` in the folder
    mirroring its layer (``tests/unit/`` itself for a top-level module)."""
    *layers, name = module.split(".")
    name = name.strip("_")  # __main__ -> test_main.py
    folder = unit.joinpath(*layers)
    # A longer sibling that starts with this name owns its aspect files: test_report_files_x.py is
    # report_files', not report's.
    longer = [p.stem for p in PACKAGE.joinpath(*layers).glob(f"{name}_*.py")]
    found = []
    for path in sorted(folder.glob(f"test_{name}*.py")):
        stem = path.stem.removeprefix("test_")
        owned = any(stem == other or stem.startswith(other + "_") for other in longer)
        if stem == name or (stem.startswith(name + "_") and not owned):
            found.append(path)
    return found


def missing(names: list[str], excused: dict[str, str], unit: Path = UNIT) -> list[str]:
    return [m for m in names if not unit_tests_of(m, unit) and m not in excused]


def test_every_module_has_a_unit_test_or_a_stated_reason() -> None:
    names = modules()
    assert len(names) > 90, names  # the walk found the package
    lacking = missing(names, NO_UNIT_TEST)
    assert not lacking, (
        "modules without tests/unit/<layer>/test_<module>.py: "
        + ", ".join(lacking)
        + "; write one, or name the test that covers each in NO_UNIT_TEST with what it checks"
    )


def test_no_unit_test_names_only_real_untested_modules() -> None:
    names = set(modules())
    stale = sorted(m for m in NO_UNIT_TEST if m not in names or unit_tests_of(m))
    assert not stale, f"NO_UNIT_TEST entries that are no module or have a unit test now (drop them): {stale}"
    for module, reason in NO_UNIT_TEST.items():
        for path in reason.split():
            if path.startswith("tests/") and "::" not in path:
                assert (ROOT / path.rstrip(":,;.)")).exists(), (
                    f"{module}: its reason names {path}, which is gone"
                )


def misplaced(unit: Path = UNIT) -> list[str]:
    """Test files directly in ``tests/unit/`` that are no top-level module's (they belong in a layer's
    folder), and folders of ``tests/unit/`` that mirror nothing."""
    top = [m for m in modules() if "." not in m]
    owners = {p.stem for p in PACKAGE.iterdir() if p.is_dir()} | OTHER_PACKAGES
    out = [
        path.name
        for path in sorted(unit.glob("test_*.py"))
        if not any(path in unit_tests_of(m, unit) for m in top)
    ]
    out += [
        f"{d.name}/" for d in sorted(unit.iterdir()) if d.is_dir() and d.name not in owners | {"__pycache__"}
    ]
    return out


# Repository folders besides the plugin whose helpers have unit tests (tests/unit/<folder>/).
OTHER_PACKAGES = {"kernels", "perf_tests", "tools"}


def test_unit_tests_sit_in_the_folder_of_their_layer() -> None:
    assert not misplaced(), (
        f"in tests/unit/ but not where the package says: {misplaced()}; move each to "
        "tests/unit/<layer>/test_<module>.py (git mv), the layer and module it tests"
    )


def test_a_new_module_without_a_test_fails(tmp_path: Path) -> None:
    # The negative control: a fake module list with one new module, and a fake tests/unit beside it.
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "test_stats.py").write_text("")
    names = ["core.stats", "core.brand_new"]
    assert missing(names, {}, tmp_path) == ["core.brand_new"]
    assert missing(names, {"core.brand_new": "tests/x.py covers it"}, tmp_path) == []
    # a test in the wrong layer's folder does not count
    (tmp_path / "judge").mkdir()
    (tmp_path / "judge" / "test_brand_new.py").write_text("")
    assert missing(names, {}, tmp_path) == ["core.brand_new"]
    # an aspect file counts for its module, but not for a shorter module its name starts with
    (tmp_path / "core" / "test_brand_new_edge_cases.py").write_text("")
    assert missing(names, {}, tmp_path) == []
    (tmp_path / "night").mkdir()
    (tmp_path / "night" / "test_history_gate_x.py").write_text("")
    assert missing(["night.history", "night.history_gate"], {}, tmp_path) == ["night.history"]


def test_a_flat_unit_test_of_a_layers_module_is_misplaced(tmp_path: Path) -> None:
    (tmp_path / "test_session.py").write_text("")  # session.py is top-level: its place
    (tmp_path / "test_main_cli.py").write_text("")  # __main__'s, with an aspect
    assert misplaced(tmp_path) == []
    (tmp_path / "test_verdict.py").write_text("")  # judge/verdict.py's: tests/unit/judge/
    (tmp_path / "oddities").mkdir()
    assert misplaced(tmp_path) == ["test_verdict.py", "oddities/"]
