"""scripts/gpu-window's plan and logic (issue 23): phases in priority order, each within a call, the
window within 30 minutes with a reserve; docs/gpu-window.md in step; the steps' caps; the A/B's
scratch repository; the missing baselines; the sweep's estimate within its phase.

The whole script runs in CI as ``scripts/gpu-window --dry-run all`` (.ci/run)."""

from __future__ import annotations

import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kernels import sweep
from tests.ci.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
gw = load_script(ROOT / "scripts" / "gpu_window.py")


def test_phases_in_priority_order_each_within_a_call() -> None:
    assert [p.name for p in gw.PHASES] == ["night", "planted", "sweep", "record", "sanitize"]
    for phase in gw.PHASES:
        assert phase.estimate_s <= phase.cap_s <= gw.PHASE_CAP_LIMIT_S == 540
        assert gw.PHASE_CAP_LIMIT_S + gw.CALL_OVERHEAD_S < gw.CALL_LIMIT_S


def test_the_window_fits_30_minutes_with_a_reserve() -> None:
    plan = gw.time_plan()
    assert plan[0][0] == "machine start" and plan[-1][0] == "reserve"
    assert sum(est for _, est, _ in plan) == gw.SESSION_S == 1800
    assert plan[-1][1] >= gw.MIN_RESERVE_S


def test_a_phase_budget_keeps_the_later_phases_estimates() -> None:
    start_left = gw.SESSION_S - gw.MACHINE_START_S
    assert gw.phase_budget("night", start_left) == 490  # on plan: the whole cap
    # Night overran by 3 minutes: planted gives it back, the phases after it keep their estimates.
    left = start_left - (400 + 180 + gw.CALL_OVERHEAD_S)
    later = sum(p.estimate_s + gw.CALL_OVERHEAD_S for p in gw.PHASES[2:])
    assert gw.phase_budget("planted", left) == left - later - 60 < 540
    assert gw.phase_budget("sanitize", 100) == 40 and gw.phase_budget("sanitize", 10) == 0


def test_the_doc_holds_the_plan_as_the_script_prints_it() -> None:
    doc = (ROOT / "docs" / "gpu-window.md").read_text()
    assert gw.plan_markdown() in doc, "docs/gpu-window.md: paste `scripts/gpu-window plan`'s table"


def test_the_sweep_fits_its_phase_and_reaches_300_rows() -> None:
    _, rows, est = sweep.describe(sweep.plan(sweep.kernel_families()), sweep.DEFAULT_REPS)
    (phase,) = [p for p in gw.PHASES if p.name == "sweep"]
    assert rows >= 300
    assert est + 20 <= phase.estimate_s  # + install and the warm build cache


def test_every_step_builds_and_loads_for_sm90a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prebuild and the pytest runs must hash the same arch list, or every run rebuilds."""
    from kernels import _build

    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    w = _window(tmp_path)
    assert w.env["TORCH_CUDA_ARCH_LIST"] == gw.SM90A  # type: ignore[attr-defined]
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", gw.SM90A)
    assert _build.default_archs() == ("9.0a",)
    spec = _build.BuildSpec("x", tmp_path, (), (), ("9.0a",), (), (), ())
    assert spec.gencode_flags() == ["-gencode=arch=compute_90a,code=sm_90a"]


def _window(tmp_path: Path, budget: float = 100.0) -> object:
    phase = gw.Phase("demo", 540, 10, "a test")
    return gw.Window(phase, tmp_path, budget, dry_run=True)


def test_a_step_is_stopped_at_its_cap_with_sigint_and_the_phase_still_packs(tmp_path: Path) -> None:
    w = _window(tmp_path, budget=gw.PACK_S + gw.MIN_STEP_S + 3)
    trap = "import signal, sys, time\nsignal.signal(signal.SIGINT, lambda *a: sys.exit(42))\ntime.sleep(60)"
    rc = w.step("sleeper", [sys.executable, "-c", trap], cap_s=600)  # type: ignore[attr-defined]
    assert rc == 42 and w.cut == {"sleeper"}  # type: ignore[attr-defined]
    assert w.step("late", [sys.executable, "-c", "pass"], cap_s=600) is None  # type: ignore[attr-defined]
    archive = w.pack()  # type: ignore[attr-defined]
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert {"demo/summary.txt", "demo/sleeper.log"} <= set(names)
    summary = (tmp_path / "demo" / "summary.txt").read_text()
    assert "sleeper: rc=42" in summary and "CUT at its cap" in summary and "SKIP late" in summary


def test_a_phase_that_raises_still_packs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(w: object) -> None:
        raise RuntimeError("no GPU today")

    monkeypatch.setitem(gw.RUNNERS, "sweep", boom)
    (phase,) = [p for p in gw.PHASES if p.name == "sweep"]
    archive = gw.run_phase(phase, tmp_path, 100.0, dry_run=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with tarfile.open(archive) as tar:
        assert "sweep/summary.txt" in tar.getnames()
    assert "stopped by RuntimeError: no GPU today" in (tmp_path / "sweep" / "summary.txt").read_text()


def test_the_scratch_repository_hard_wires_the_slowdown_and_leaves_the_checkout(tmp_path: Path) -> None:
    before = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True
    ).stdout
    base, slow = gw.scratch_repo(ROOT, tmp_path / "ab")
    assert base != slow
    diff = gw.git(tmp_path / "ab", "diff", base, slow)
    assert (
        "-HARDWIRED: float | None = None" in diff and f"+HARDWIRED: float | None = {gw.PLANTED_SHARE}" in diff
    )
    assert gw.git(tmp_path / "ab", "diff", "--stat", base, slow).count("|") == 1  # that file alone
    after = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True
    ).stdout
    assert before == after


def test_missing_baselines_from_keys_the_night_and_the_last_window(tmp_path: Path) -> None:
    (tmp_path / "test_a.yaml").write_text(
        "benchmarks:\n  t_one@n1-p:\n    noise: 0.01\n  t_two[x]:backward:\n    noise: 0.01\n"
        "  ? t_long[y]@n16-very-long:weight_grad\n  : noise: 0.01\n  t_plain:\n    noise: 0.01\n"
    )
    ids = [
        f"perf_tests/test_a.py::{n}" for n in ("t_one", "t_two[x]", "t_long[y]", "t_plain", "t_new", "t_tw")
    ]
    ids.append("perf_tests/test_b.py::t_b")  # no baseline file at all
    assert gw.missing_baselines(ids, tmp_path) == [
        "perf_tests/test_a.py::t_new",
        "perf_tests/test_a.py::t_tw",
        "perf_tests/test_b.py::t_b",
    ]
    page = tmp_path / "results.md"
    page.write_text(
        "## Tests that failed in this session\n\n- `perf_tests.test_x::t[a-b]`: Failed: ...\n"
        "- `perf_tests.test_y::u`: AssertionError\n\n## Timing precision\n- `perf_tests.test_z::no`\n"
    )
    assert gw.failed_last_window(page) == ["perf_tests/test_x.py::t[a-b]", "perf_tests/test_y.py::u"]


def test_the_real_missing_list_holds_the_first_windows_ten() -> None:
    failed = gw.failed_last_window(ROOT / "docs" / f"results-{gw.MACHINE}.md")
    assert len(failed) == 10
    doc = (ROOT / "docs" / "gpu-window.md").read_text()
    assert all(f"`{t}`" in doc for t in failed), "docs/gpu-window.md lists the checks to record"


def test_best_rows_pick_the_largest_speedup_per_family(tmp_path: Path) -> None:
    def row(variant: str, median: str, reference: str) -> dict[str, str]:
        return {"family": "dw", "variant": variant, "problem": "p", "phase": "forward",
                "median_us": median, "reference_us": reference}  # fmt: skip

    rows = [
        row("v1", "10", "15"),
        row("v2", "5", "15"),
        row("cudnn-fp32-nchw", "15", ""),
        row("broken", "", "1"),
    ]
    path = tmp_path / "dw.csv"
    sweep.write_csv(path, [{**dict.fromkeys(sweep.COLUMNS, ""), **r} for r in rows])
    assert gw.best_rows([path]) == {"dw": "v2@p:forward"}


def test_sanitizer_errors_are_summed_per_tool(tmp_path: Path) -> None:
    log = tmp_path / "memcheck.log"
    log.write_text("========= ERROR SUMMARY: 0 errors\n...\n========= ERROR SUMMARY: 3 errors\n")
    assert gw.sanitizer_errors(log, 1) == "3 errors"
    log.write_text("pytest crashed\n")
    assert gw.sanitizer_errors(log, 1).startswith("no ERROR SUMMARY (rc=1")
    assert gw.sanitizer_errors(log, None) == "not run (no time left)"


def test_the_sanitize_phase_runs_gpu_suites_selection() -> None:
    """One source for the sanitize selection: scripts/gpu_suite.py's, as gpu-session.sh's test pins."""
    source = (ROOT / "scripts" / "gpu_window.py").read_text()
    assert "gpu_suite.sanitizer_args(gpu_suite.kernel_tests())" in source
    assert "gpu_suite.SANITIZER_ENV" in source
    assert set(gw.SANITIZER_TOOLS) == {"memcheck", "racecheck", "synccheck", "initcheck"}
