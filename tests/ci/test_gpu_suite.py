"""scripts/gpu-suite's logic: the split, failures that name their step, the archive limit.

The whole script runs in CI as ``scripts/gpu-suite --dry-run all`` (see .ci/run); these tests pin
the parts that a dry run on a CPU cannot show failing.
"""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

import pytest

from tests.ci.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


gs = load_script(ROOT / "scripts" / "gpu_suite.py")


def test_worst_case_per_check_comes_from_the_gpu_stop_rule() -> None:
    from pytest_convperf.measure.rule import StopRule

    rule = StopRule()
    assert gs.worst_check_s() == rule.warmup_cap_s + rule.max_time_s * (1 + gs.CONFIRM_FACTOR)


def test_split_keeps_order_and_every_part_within_budget() -> None:
    items = [(f"m{i // 7}.py::t{i}", i % 3 != 0) for i in range(50)]
    parts = gs.split(items, budget_s=100.0, check_s=22.0)
    assert [i for p in parts for i in p.ids] == [i for i, _ in items]
    assert all(p.estimate_s <= 100.0 for p in parts)
    assert len(parts) > 1
    # A test over the budget alone still gets a part of its own (and the estimate says so).
    (alone,) = gs.split([("big.py::t", True)], budget_s=10.0, check_s=22.0)
    assert alone.ids == ("big.py::t",) and alone.estimate_s > 10.0


def test_a_failed_step_names_the_stage_and_the_step(tmp_path: Path) -> None:
    runner = gs.Runner(out=tmp_path, dry_run=True)
    runner.start("check")
    with pytest.raises(gs.StepFailed, match=r"stage check: step 'boom' failed \(rc=3\)"):
        runner.step("check", "boom", [sys.executable, "-c", "print('the output'); raise SystemExit(3)"])
    assert "the output" in (tmp_path / "logs" / "check.log").read_text()


def test_main_exits_non_zero_naming_the_step_and_still_collects_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "plan.json").write_text(json.dumps([{"ids": ["perf_tests/x.py::t"], "estimate_s": 23.0}]))
    assert gs.main(["--dry-run", "--out", str(tmp_path), "suite-2", "collect"]) == 1
    assert "stage suite-2: no such part; the plan has suite-1 .. suite-1" in capsys.readouterr().err
    with tarfile.open(tmp_path / "gpu-suite.tar.gz") as tar:
        assert "logs/suite-2.log" in tar.getnames()


def test_collect_refuses_an_archive_over_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = gs.Runner(out=tmp_path, dry_run=True)
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "rows.json").write_bytes(bytes(range(256)) * 64)
    runner.start("collect")
    assert gs.stage_collect(runner).stat().st_size > 0
    monkeypatch.setattr(gs, "ARCHIVE_LIMIT", 10)
    with pytest.raises(gs.StepFailed, match="step 'archive' failed"):
        gs.stage_collect(runner)


def test_every_kernel_family_has_a_sanitize_marked_cuda_test() -> None:
    """compute-sanitizer runs ``-m sanitize`` (tests/kernels/sanitizer.py): a family without a marked
    CUDA test would go unsanitized without a word, as test_edsr.py did under ``-k "cuda or gpu"``."""
    from kernels import _build

    items = gs.collect_items(gs.sanitizer_args(gs.kernel_tests()))
    assert gs.sanitize_gaps(items, _build.families()) == []
    # Not the test that bounds allocator memory: the sanitizer's instrumentation changes it.
    assert not [i for i in items if "workspace_bound" in i["nodeid"]]


def test_sanitize_gaps_name_a_family_without_a_test_and_a_marked_cpu_test() -> None:
    cuda = ["needs a CUDA GPU"]
    items = [
        {"nodeid": "t.py::a", "sanitize": ["depthwise"], "skipif": cuda},
        {"nodeid": "t.py::b", "sanitize": ["pcilt"], "skipif": []},
        {"nodeid": "t.py::c", "sanitize": [None], "skipif": cuda},
        {"nodeid": "t.py::d", "sanitize": ["nope"], "skipif": cuda},
    ]
    gaps = gs.sanitize_gaps(items, ["depthwise", "edsr", "pcilt"])
    assert gaps == [
        "t.py::b: marked sanitize but not a CUDA test (no skipif naming CUDA or a GPU)",
        "t.py::c: @sanitize names no family; use @sanitize(family) from tests/kernels/sanitizer.py",
        "t.py::d: @sanitize('nope') names no family of kernels/",
        "kernels/edsr: no sanitize-marked CUDA test; mark one small CUDA test with @sanitize('edsr') "
        "(tests/kernels/sanitizer.py)",
    ]
    assert gs.sanitize_gaps([], ["edsr"])[0].startswith("kernels/edsr: no sanitize-marked CUDA test")


def test_gpu_session_runs_the_same_selections_as_gpu_suite() -> None:
    """scripts/gpu-session.sh (the device tool's phases) keeps in step with gpu_suite.py's check stage."""
    session = (ROOT / "scripts" / "gpu-session.sh").read_text()
    sanitizer_line = " ".join(gs.sanitizer_args(gs.kernel_tests()))
    assert sanitizer_line in session, (
        f"gpu-session.sh's sanitizer steps should run: pytest ... {sanitizer_line}"
    )
    assert f"{gs.SANITIZER_ENV}=1" in session
    assert all(f"--ignore={p}" in session for p in gs.CPU_ONLY_KERNEL_TESTS)
    assert '-k "cuda or gpu"' not in session
