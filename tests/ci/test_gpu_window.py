"""scripts/gpu-window (issue 35): the 15-minute plan on either kind and its arithmetic, the doc in step,
the carried extensions (size measured and bounded, loaded where the hash matches), the steps' caps,
the packing of $OUT, the A/B's scratch repository, the focused set, the after-window harvest.

Both calls run in CI as ``scripts/gpu-window --dry-run all`` (.ci/run), then the harvest on their output."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ci.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
gw = load_script(ROOT / "scripts" / "gpu_window.py")
harvest = load_script(ROOT / "scripts" / "window_harvest.py")


@pytest.mark.parametrize("kind", ["nvidia-h100-x1", "nvidia-h200"])
def test_the_window_fits_15_minutes_with_a_minute_to_spare(kind: str) -> None:
    rows = gw.plan_rows(kind)
    assert rows[0] == ("machine start", gw.MACHINE_START_S, gw.MACHINE_START_S) and rows[-1][0] == "reserve"
    assert sum(est for _, est, _ in rows) == gw.WINDOW_S == 900
    assert rows[-1][1] >= gw.MIN_SPARE_S == 60
    # Both calls run to their caps: still inside the window, each within one device call.
    assert gw.caps_total_s() <= gw.WINDOW_S
    assert gw.PROOF_CAP_S <= 8 * 60 and gw.TUNE_CAP_S <= 4 * 60
    for call, cap in (("proof", gw.PROOF_CAP_S), ("tune", gw.TUNE_CAP_S)):
        assert gw.call_estimate_s(call, kind) + gw.PACK_S <= cap < gw.CALL_LIMIT_S
        assert all(s.estimate_s <= s.cap_s <= cap for s in gw.call_steps(call, kind))


def test_the_plan_uses_the_first_windows_figures() -> None:
    assert (gw.BUILD_S, gw.CHECK_S) == (69, 2) and 60 <= gw.MACHINE_START_S <= 120
    (ext,) = [s for s in gw.proof_steps() if s.name == "extensions"]
    assert ext.cap_s >= gw.BUILD_S  # a carry that does not match still builds within its cap
    (record,) = [s for s in gw.proof_steps() if s.name == "record"]
    assert record.estimate_s >= gw.CHECK_S * gw.FOCUSED_CHECKS == 38


def test_the_committed_baseline_night_is_an_h100s_alone() -> None:
    h100 = [item for item, _, _ in gw.plan_rows("nvidia-h100-x1")]
    h200 = [item for item, _, _ in gw.plan_rows("nvidia-h200")]
    assert any(i.startswith("proof: committed") for i in h100)
    assert not any(i.startswith("proof: committed") for i in h200)
    assert gw.plan_rows("nvidia-h200")[-1][1] > gw.plan_rows("nvidia-h100-x1")[-1][1]
    with pytest.raises(SystemExit, match="not a kind the device tool lends"):
        gw.plan_rows("nvidia-a100")


def test_the_doc_holds_the_plan_of_each_kind_as_the_script_prints_it() -> None:
    doc = (ROOT / "docs" / "gpu-window.md").read_text()
    for kind in gw.KINDS:
        assert gw.plan_markdown(kind) in doc, (
            f"docs/gpu-window.md: paste `scripts/gpu-window plan --kind {kind}`"
        )


def test_the_proof_calls_budget_keeps_the_tune_calls_estimate() -> None:
    kind = "nvidia-h100-x1"
    assert gw.call_budget("proof", gw.WINDOW_S - gw.MACHINE_START_S, kind) == gw.PROOF_CAP_S  # on plan
    # The start took 4.7 minutes: the proof call gives way, the tune call keeps its estimate.
    need = gw.call_estimate_s("tune", kind) + 2 * gw.TRANSFER_S + gw.HANDBACK_S + gw.SAFETY_S
    assert gw.call_budget("proof", 500, kind) == 500 - need < gw.PROOF_CAP_S
    assert gw.call_budget("tune", 100, kind) == 100 - gw.TRANSFER_S - gw.HANDBACK_S - gw.SAFETY_S
    assert gw.call_budget("tune", 10, kind) == 0


def test_every_step_builds_and_loads_for_sm90a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The carry, the prebuild and the pytest runs must hash the same arch list, or every run rebuilds."""
    from kernels import _build

    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    w = gw.Window("demo", tmp_path, 100.0, dry_run=True)
    assert w.env["TORCH_CUDA_ARCH_LIST"] == gw.SM90A
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", gw.SM90A)
    assert _build.default_archs() == ("9.0a",)
    assert gw.spec_names() == {f: _build.make_spec(f).name for f in _build.families()}
    spec = _build.BuildSpec("x", tmp_path, (), (), ("9.0a",), (), (), ())
    assert spec.gencode_flags() == ["-gencode=arch=compute_90a,code=sm_90a"]


# ---- the carry ----------------------------------------------------------------------------------


def _carry(root: Path, names: list[str], size: int = 10, toolchain: str = "torch=2.11.0") -> Path:
    carry = root / "carry"
    for name in names:
        (carry / "torch_extensions" / name).mkdir(parents=True)
        (carry / "torch_extensions" / name / f"{name}.so").write_bytes(b"\0" * size)
        (carry / "torch_extensions" / name / f"{name}.ready").write_text(name)
    (carry / "manifest.json").write_text(json.dumps({"toolchain": toolchain}))
    return carry


def test_the_carry_is_copied_and_counted_against_this_machines_hashes(tmp_path: Path) -> None:
    carry = _carry(tmp_path, ["convperf_a_1111", "convperf_b_2222"])
    cache = tmp_path / "cache"
    (cache / "convperf_b_2222").mkdir(parents=True)
    (cache / "convperf_b_2222" / "convperf_b_2222.ready").write_text("built here before")
    names = {"a": "convperf_a_1111", "b": "convperf_b_2222", "c": "convperf_c_3333"}
    report = gw.install_carry(carry, cache, names, "torch=2.11.0")
    assert (report.carried, report.copied, report.matching, report.families) == (2, 1, 2, 3)
    assert (cache / "convperf_a_1111" / "convperf_a_1111.so").read_bytes() == b"\0" * 10
    assert (cache / "convperf_b_2222" / "convperf_b_2222.ready").read_text() == "built here before"
    assert "2 of 3 families match" in report.line() and "same toolchain" in report.line()
    other = gw.install_carry(carry, cache, {"a": "convperf_a_9999"}, "torch=2.14.1")
    assert other.matching == 0 and "toolchain differs" in other.line()
    assert "every family is built" in gw.install_carry(tmp_path / "none", cache, names, "t").line()


def test_prepare_measures_the_carry_and_refuses_one_over_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, carry = tmp_path / "cache", tmp_path / "carry"
    names = {"a": "convperf_a_1111", "b": "convperf_b_2222"}

    def fake_run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        if "-c" in cmd:  # the probe of the torch 2.11 environment
            facts = {"torch": "2.11.0+cu130", "toolchain": "torch=2.11.0+cu130;nvcc=x", "names": names}
            return subprocess.CompletedProcess(cmd, 0, json.dumps(facts) + "\n", "")
        for name in names.values():  # the build: a library and its marker per family
            (cache / name).mkdir(parents=True, exist_ok=True)
            (cache / name / f"{name}.so").write_bytes(b"\0" * 3000)
            (cache / name / f"{name}.ready").write_text(name)
            (cache / name / "depthwise.cuda.o").write_bytes(b"\0" * 9000)  # not carried
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(gw.subprocess, "run", fake_run)
    assert gw.prepare(carry, "python", cache, limit=7000) == 0
    assert gw.carry_bytes(carry) < 7000 and "MiB of" in capsys.readouterr().out
    manifest = json.loads((carry / "manifest.json").read_text())
    assert manifest["libraries"] == names and manifest["archs"] == ["9.0a"]
    assert gw.prepare(carry, "python", cache, limit=5000) == 3
    assert "over the device tool's" in capsys.readouterr().err
    assert gw.CARRY_LIMIT_BYTES == 64 * 2**20


def test_prepare_refuses_a_torch_other_than_the_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake_run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        facts = {"torch": "2.14.1+cu130", "toolchain": "t", "names": {}}
        return subprocess.CompletedProcess(cmd, 0, json.dumps(facts), "")

    monkeypatch.setattr(gw.subprocess, "run", fake_run)
    assert gw.prepare(tmp_path / "carry", "python", tmp_path / "cache") == 2
    assert "torch 2.14.1+cu130, the device has 2.11.0" in capsys.readouterr().err


def test_the_carry_folder_is_ignored_by_git() -> None:
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", ".gpu-carry/manifest.json"])
    assert ignored.returncode == 0, ".gitignore: add /.gpu-carry/ (it is carried, not committed)"


# ---- running a call -----------------------------------------------------------------------------


def test_a_step_is_stopped_at_its_cap_with_sigint_and_the_call_still_packs(tmp_path: Path) -> None:
    w = gw.Window("demo", tmp_path, gw.PACK_S + gw.MIN_STEP_S + 3, dry_run=True)
    trap = "import signal, sys, time\nsignal.signal(signal.SIGINT, lambda *a: sys.exit(42))\ntime.sleep(60)"
    assert w.step("sleeper", [sys.executable, "-c", trap], cap_s=600) == 42
    assert w.step("late", [sys.executable, "-c", "pass"], cap_s=600) is None
    files = w.pack()
    assert [p.name for p in files] == ["demo-summary.txt", "demo-results.json", "demo.tar.gz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in files)  # <= 8 files
    with tarfile.open(files[2]) as tar:
        names = tar.getnames()
    assert names[0] == "demo/demo-summary.txt" and "demo/sleeper.log" in names
    summary = files[0].read_text()
    assert "sleeper: rc=42" in summary and "CUT at its cap" in summary and "SKIP late" in summary
    steps = json.loads(files[1].read_text())["steps"]
    assert [(s["name"], s["rc"], s["cut"]) for s in steps] == [("sleeper", 42, True), ("late", None, False)]


def test_the_archive_stays_under_the_file_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gw, "OUT_FILE_BYTES", 2**20 + 5000)
    w = gw.Window("demo", tmp_path, 100.0, dry_run=True)
    (w.dir / "a.log").write_bytes(b"x" * 3000)
    (w.dir / "trace.json").write_bytes(b"x" * 4000)  # packed after the logs: it would pass the limit
    files = w.pack()
    with tarfile.open(files[2]) as tar:
        assert "demo/a.log" in tar.getnames() and "demo/trace.json" not in tar.getnames()
    assert "left out of the archive" in files[0].read_text() and "trace.json" in files[0].read_text()


def test_a_call_that_raises_still_packs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(w: object) -> None:
        raise RuntimeError("no GPU today")

    monkeypatch.setitem(gw.RUNNERS, "tune", boom)
    files, broken = gw.run_call("tune", tmp_path, 100.0, dry_run=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert all(p.exists() for p in files)
    assert json.loads(files[1].read_text())["stopped"] == "RuntimeError: no GPU today"
    assert broken == ["stopped: RuntimeError: no GPU today"]


def test_a_dry_run_fails_on_broken_steps_not_on_verdicts() -> None:
    result = gw.CallResult("proof", dry_run=True)
    result.steps = [
        gw.StepResult("record", 0, 1.0, 100.0),
        gw.StepResult("planted", 1, 1.0, 100.0),  # a FAIL: pytest's rc 1, the planted night's point
        gw.StepResult("install", None, 0.0, 0.0, note="dry run"),
        gw.StepResult("night", 4, 1.0, 100.0),  # pytest found no such test
        gw.StepResult("ab-slower", -2, 70.0, 70.0, cut=True),
        gw.StepResult("committed", None, 0.0, 100.0, note="no time left"),
    ]
    result.nights = {"planted": {"checks": 1}}
    result.ab = {"slower": "no ab.md (see the step's log)", "same": "INCONCLUSIVE=1"}
    assert gw.broken_steps(result) == [
        "night: rc=4", "ab-slower: rc=-2 (cut)", "committed: skipped, no time left",
        "night: no summary", "ab-slower: no ab.md (see the step's log)",
    ]  # fmt: skip


def test_the_scratch_repository_hard_wires_the_slowdown_and_leaves_the_checkout(tmp_path: Path) -> None:
    def status() -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True
        ).stdout

    before = status()
    base, slow = gw.scratch_repo(ROOT, tmp_path / "ab")
    assert base != slow
    diff = gw.git(tmp_path / "ab", "diff", base, slow)
    assert "-HARDWIRED: float | None = None" in diff
    assert f"+HARDWIRED: float | None = {gw.PLANTED_SHARE}" in diff
    assert gw.git(tmp_path / "ab", "diff", "--stat", base, slow).count("|") == 1  # that file alone
    assert not (tmp_path / "ab" / ".gpu-carry").exists()  # ignored: the A/B builds its own
    assert before == status()


def test_the_focused_set_is_what_the_first_window_recorded() -> None:
    """16 depthwise fp32 forward seed checks and one each of EDSR, PCILT and im2col+GEMM, under the
    test ids the H100 recorded (a GPU's ids: the committed-baseline night finds their keys)."""
    ids = [*gw.seed_forward_ids(), *gw.OTHER_FOCUSED]
    assert len(ids) == gw.FOCUSED_CHECKS == 19 and len(set(ids)) == 19
    assert sum(i.endswith(gw.EXPECT_FAIL) for i in ids) == 16
    for nodeid in ids:
        path, _, name = nodeid.partition("::")
        data = yaml.safe_load(
            (ROOT / "baselines" / gw.COMMITTED_MACHINE / f"{Path(path).stem}.yaml").read_text()
        )
        keys = [str(k) for k in data["benchmarks"]]
        assert any(k == name or k.startswith((name + "@", name + ":")) for k in keys), nodeid


def test_planted_kernels_are_read_from_the_fail_messages(tmp_path: Path) -> None:
    rows = [
        {
            "verdict": "FAIL",
            "message": "slower by 9 %\nkernels changed since the baseline: fwd_tile_nchw_v4 x2",
        },
        {
            "verdict": "FAIL",
            "message": "slower\nkernels changed since the baseline: fwd_nhwc_vec<float, 3> x2",
        },
        {"verdict": "PASS", "message": "fwd_direct"},
    ]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    assert gw.planted_kernels(tmp_path) == ["fwd_nhwc_vec", "fwd_tile_nchw_v4"]
    assert gw.planted_kernels(tmp_path / "absent") == []


def test_sanitizer_errors_are_summed(tmp_path: Path) -> None:
    log = tmp_path / "memcheck.log"
    log.write_text("========= ERROR SUMMARY: 0 errors\n...\n========= ERROR SUMMARY: 3 errors\n")
    assert gw.sanitizer_errors(log, 1) == "3 errors"
    log.write_text("pytest crashed\n")
    assert gw.sanitizer_errors(log, 1).startswith("no ERROR SUMMARY (rc=1")
    assert gw.sanitizer_errors(log, None) == "not run (no time left)"


# ---- after the window ---------------------------------------------------------------------------


def _night(checks: int, verdicts: dict[str, int], fails: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    module = {"module": "test_depthwise", "checks": checks, "verdicts": verdicts, "fails": fails}
    false = sum(not f["expected"] for f in fails)
    return {"modules": [module], "checks": checks, "false_fails": false, "missed": [], **kw}


def _fail(expected: bool, diff: str = "") -> dict[str, Any]:
    return {
        "check": "c",
        "ratio": 1.1,
        "noise": 0.01,
        "expected": expected,
        "message": "m",
        "kernel_diff": diff,
    }


def _out(tmp_path: Path, machine: str, nights: dict[str, Any]) -> Path:
    """What the two calls bring back, written by the window's own packing."""
    out = tmp_path / "out"
    w = gw.Window("proof", out, 100.0, dry_run=False)
    w.result.machine, w.result.environment, w.result.carry = machine, "machine=x gpu=H", "carry: 5 libraries"
    w.result.nights = nights
    w.result.planted_kernel = ["fwd_tile_nchw_v4"]
    w.result.ab = {"same": "SAME=1", "slower": "SLOWER=1"}
    w.result.steps = [gw.StepResult("record", 0, 40.0, 100.0)]
    w.pack()
    t = gw.Window("tune", out, 100.0, dry_run=False)
    (t.dir / "sweeps").mkdir()
    header = "family,variant,problem,phase,median_us,reference_us,predicted_us,pct_hbm_spec\n"
    problem = "n16-ci64-h48-w48-co64-k3x3-s1-p1-d1-g64-fp32-nchw"
    (t.dir / "sweeps" / "edsr.csv").write_text(
        header + f"edsr,fused_v2,{problem},forward,10,,8,\nedsr,cudnn_unfused,{problem},forward,25,,,\n"
    )
    t.pack()
    return out


def test_the_harvest_writes_the_night_proof_and_reads_the_goals(tmp_path: Path) -> None:
    nights = {
        "night": _night(19, {"PASS": 18, "FAIL": 1}, [_fail(False)]),
        "planted": _night(
            19, {"PASS": 3, "FAIL": 16}, [_fail(True)] * 16,
            fresh_confirm={"todo": 16, "still": 16, "cleared": 0, "seconds": 40.0},
        ),
        "committed": _night(
            19, {"PASS": 15, "STALE": 1, "FAIL": 3},
            [_fail(False), _fail(False, "kernels changed since the baseline: x"), _fail(False)],
        ),
    }  # fmt: skip
    out = _out(tmp_path, "nvidia-h100-80gb-hbm3", nights)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "results-nvidia-h100-80gb-hbm3.md").write_text("# Results\n\nintro\n\n## Kernel goals\n\nkept\n")
    page = harvest.harvest(out, docs).read_text()
    assert page.startswith("# Results\n\nintro\n\n## Night proof") and "## Kernel goals\n\nkept" in page
    assert "**false FAILs 1 of 19**" in page  # the self-contained night
    assert (
        "**false FAILs 2 of 19**; STALE 1, NEW 0, changed kernel 1" in page
    )  # committed: 3 FAILs, 1 changed
    assert "caught: 16 of 16 forward checks FAIL" in page and "16 still FAIL" in page
    assert "`fwd_tile_nchw_v4`" in page and "SAME=1 (expected SAME)" in page and "record 40 [100]" in page
    assert (docs / "sweeps" / "nvidia-h100-80gb-hbm3" / "edsr.csv").exists()
    goal13 = next(line for line in page.splitlines() if line.startswith("| 13 |"))
    assert "| 1 | 1.25 of goal | 1.56 of goal | met |" in goal13  # 25/10 and 25/8 (the model) over 2.0x
    assert "| 1 |" in page and "not measured" in page  # goals without rows
    again = harvest.harvest(out, docs).read_text()  # a second harvest replaces, never repeats
    assert again.count("## Night proof") == 1 and again.count("## Sweep goals") == 1


def test_the_harvest_of_a_machine_without_a_page_starts_one(tmp_path: Path) -> None:
    out = _out(tmp_path, "nvidia-h200", {"night": _night(19, {"PASS": 19}, [])})
    page = harvest.harvest(out, tmp_path / "docs").read_text()
    assert page.startswith("# Results: nvidia-h200") and "**false FAILs 0 of 19**" in page
    assert "| committed baselines | not run: `nvidia-h200` has none committed |" in page
    assert "planted 10 % | not run" in page


def test_the_harvest_without_a_proof_call_says_so(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no proof call came back"):
        harvest.harvest(tmp_path, tmp_path / "docs")


def test_a_dry_run_gives_each_step_twice_its_cap(tmp_path: Path) -> None:
    """A loaded CI box starts pytest slower than a GPU runs a check: a cut would fail the dry run."""
    cap = gw.MIN_STEP_S - 5  # under the least a step starts with, unless doubled
    dry = gw.Window("dry", tmp_path / "a", 100.0, dry_run=True)
    assert dry.step("quick", [sys.executable, "-c", "pass"], cap_s=cap) == 0
    wet = gw.Window("wet", tmp_path / "b", 100.0, dry_run=False)
    assert wet.step("quick", [sys.executable, "-c", "pass"], cap_s=cap) is None
