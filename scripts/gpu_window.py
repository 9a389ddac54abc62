"""The next GPU window, one device call per phase: ``scripts/gpu-window [--dry-run] PHASE [BUDGET_S]``.

A window is 30 minutes of device time, each call at most 10 (issue 23); docs/gpu-window.md gives the
minute plan (:data:`PHASES`, ``scripts/gpu-window plan`` prints it). Phases, in priority order:

- ``night``: install, prebuild (sm_90a), then ``pytest perf_tests/{depthwise,edsr,pcilt} --convperf``
  against the committed ``baselines/<machine>/`` with the defaults (Holm 0.05, fresh confirm) on
  unchanged code: every FAIL is a false alarm. ``scripts/night_summary.py`` writes the summary.
- ``planted``: the depthwise fp32 seed checks with ``CONVPERF_PLANTED_SLOWDOWN=0.1`` (the forward
  checks must FAIL, the gradients not); then ``--convperf-against`` on one seed shape in a scratch
  repository: HEAD against itself (SAME) and a commit with the switch hard-wired (SLOWER).
- ``sweep``: ``python -m kernels.sweep all`` (fixed cold repetitions) -> ``sweeps/<family>.csv``.
- ``record``: the convperf tests without a baseline for this machine recorded; ncu on the best
  variant of each family (from the sweep's CSVs); the EfficientNet-B0 diagnosis.
- ``sanitize``: compute-sanitizer memcheck, racecheck, synccheck, initcheck over ``-m sanitize``.

Each phase spends at most its cap (and what BUDGET_S leaves), each step capped by the time left
(SIGINT first, so pytest still writes its report), and always ends by packing ``$OUT/<phase>`` into
``$OUT/<phase>.tar.gz`` with ``summary.txt`` (what it measured). Build outputs persist in
``TORCH_EXTENSIONS_DIR`` while the machine stays warm, so a later phase's prebuild is a cache hit.

``--dry-run`` runs every phase on the CPU (CI, under 2 minutes): GPU-only steps (install,
prebuild, ncu, compute-sanitizer) are logged, not run; pytest steps run one small check on the CPU;
the planted A/B runs SLOWER for real on the CPU reference (which honours the switch); the tar and
summaries are written as on the GPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_suite  # noqa: E402  (scripts/gpu_suite.py: the sanitize selection, one source)

MACHINE = "nvidia-h100-80gb-hbm3"
SM90A = "9.0a"  # -gencode=arch=compute_90a,code=sm_90a (kernels/_build.py), as the first window built
SESSION_S = 1800  # the session's device time
CALL_LIMIT_S = 600  # one device call
PHASE_CAP_LIMIT_S = 540  # 9 minutes: a call's 10 less start-up, transfers and packing
MACHINE_START_S = 120  # a fresh machine ("a minute or more", README of the device tool)
CALL_OVERHEAD_S = 15  # per call: the working tree's transfer, $OUT's return
MIN_RESERVE_S = 120
PACK_S = 20  # kept back from the last step for packing
MIN_STEP_S = 15
NIGHT_MODULES = ("perf_tests/test_depthwise.py", "perf_tests/test_edsr.py", "perf_tests/test_pcilt.py")
PLANTED_SHARE = "0.1"
# The planted night: the depthwise fp32 seed checks (16 forward that must FAIL, 32 gradients that must
# not); -forward] ends a forward check's test id.
PLANTED_SELECTION = ("perf_tests/test_depthwise.py", "-k", "test_seed_shape and fp32")
EXPECT_FAIL = "-forward]"
AB_SELECTION = (
    "perf_tests/test_depthwise.py",
    "-k",
    "test_seed_shape and 16x144x56-k3 and fp32 and nchw and forward",
)
# The CPU's stand-ins (dry run): one seed check at the CPU's batch 1.
CPU_SELECTION = (
    "perf_tests/test_depthwise.py",
    "-k",
    "test_seed_shape and 1x1152x7-k3 and fp32 and nchw and forward",
)
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
SANITIZER_CAP_S = 60
NCU_CAP_S = 60
# Survives between calls while the machine stays warm ($OUT is emptied before each call); a dry run
# keeps it under its --out instead.
STATE = Path.home() / ".cache" / "convperf" / "window"
ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


@dataclass(frozen=True)
class Phase:
    name: str
    cap_s: int  # the most this phase's call spends, <= PHASE_CAP_LIMIT_S
    estimate_s: int  # expected, from the first window's logs (docs/gpu-window.md)
    what: str


PHASES: tuple[Phase, ...] = (
    Phase("night", 490, 400, "install 15 + prebuild sm_90a 69 + 3-module night ~280 + fresh confirm ~40"),
    Phase(
        "planted",
        540,
        320,
        "install+cache 20 + 48 planted checks ~100 + confirm of 16 FAILs ~130 + A/B 2 x ~35",
    ),
    Phase("sweep", 360, 230, "install+cache 20 + kernels.sweep all (631 rows x 100 reps) ~207 estimated"),
    Phase("record", 480, 260, "install+cache 20 + missing baselines ~90 + ncu 4 x <= 30 + EfficientNet ~30"),
    Phase("sanitize", 480, 260, "install+cache 20 + 4 compute-sanitizer tools x <= 60"),
)


def time_plan() -> list[tuple[str, int, int]]:
    """``(item, estimate s, cap s)``: the machine's start, each phase's call, and the reserve."""
    rows = [("machine start", MACHINE_START_S, MACHINE_START_S)]
    rows += [
        (f"{p.name} (+{CALL_OVERHEAD_S} s call)", p.estimate_s + CALL_OVERHEAD_S, p.cap_s) for p in PHASES
    ]
    used = sum(r[1] for r in rows)
    rows.append(("reserve", SESSION_S - used, 0))
    return rows


def phase_budget(name: str, left_s: float) -> float:
    """This call's seconds when ``left_s`` of the session's device time is left (status's
    budget_left_s): the phase's cap, less what the phases after it are estimated to need (and their
    calls) and a minute, so an overrun takes from the reserve and not from the phases after it."""
    names = [p.name for p in PHASES]
    later = PHASES[names.index(name) + 1 :]
    return max(
        0.0,
        min(
            PHASES[names.index(name)].cap_s, left_s - sum(p.estimate_s + CALL_OVERHEAD_S for p in later) - 60
        ),
    )


def plan_markdown() -> str:
    """The time plan as the table docs/gpu-window.md holds (a test keeps the two the same)."""
    lines = ["| # | item | estimate (s) | cap (s) | cumulative (min) |", "|---|---|---:|---:|---:|"]
    total = 0
    for i, (item, est, cap) in enumerate(time_plan()):
        total += est
        lines.append(f"| {i} | {item} | {est} | {cap or '-'} | {total / 60:.1f} |")
    return "\n".join(lines)


# ---- running a phase -------------------------------------------------------------------------


class Window:
    """One phase's call: its folder under $OUT, its clock, its steps and its summary."""

    def __init__(self, phase: Phase, out: Path, budget_s: float, dry_run: bool) -> None:
        self.phase = phase
        self.out = out
        self.dir = out / phase.name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.budget_s = min(float(phase.cap_s), budget_s)
        self.start = time.monotonic()
        self.dry_run = dry_run
        self.summary = self.dir / "summary.txt"
        self.cut: set[str] = set()  # steps their cap stopped
        self.state = out / "state" if dry_run else STATE
        self.env = dict(os.environ)
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.env.setdefault("MAX_JOBS", "16")
        # Every step, not the prebuild alone: load() hashes the arch list, so the pytest runs find the
        # prebuilt libraries only under the same list (kernels/_build.py default_archs).
        self.env.setdefault("TORCH_CUDA_ARCH_LIST", SM90A)
        self.env.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/convperf/torch_extensions"))
        self.note(f"# {phase.name} (dry_run={dry_run}) budget {self.budget_s:.0f} s: {phase.what}")

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def note(self, text: str) -> None:
        print(text, flush=True)
        with self.summary.open("a") as f:
            f.write(text + "\n")

    def gpu_only(self, name: str, cmd: Sequence[str]) -> bool:
        """In a dry run, log a GPU-only step instead of running it (True: skip it)."""
        if self.dry_run:
            self.note(f"{name}: dry run, needs a GPU: {shlex.join(cmd)}")
        return self.dry_run

    def step(
        self,
        name: str,
        cmd: Sequence[str],
        cap_s: float,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path = ROOT,
    ) -> int | None:
        """Run ``cmd`` (output in ``<name>.log``) for at most min(cap, time left - packing); SIGINT to
        its process group at the cap, SIGKILL 15 s later. None when there was no time to start it."""
        limit = min(cap_s, self.left() - PACK_S)
        if limit < MIN_STEP_S:
            self.note(f"SKIP {name}: {self.left():.0f} s left")
            return None
        began = time.monotonic()
        with (self.dir / f"{name}.log").open("w") as log:
            log.write(f"$ {shlex.join(cmd)}\n")
            log.flush()
            proc = subprocess.Popen(
                list(cmd), cwd=cwd, env=self.env | dict(env or {}), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            rc, cut = _wait_capped(proc, limit)
        self.cut |= {name} if cut else set()
        tail = " CUT at its cap" if cut else ""
        self.note(f"{name}: rc={rc} {time.monotonic() - began:.0f} s (cap {limit:.0f} s){tail}")
        return rc

    def pytest(
        self,
        name: str,
        args: Sequence[str],
        cap_s: float,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path = ROOT,
    ) -> int | None:
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE", *args]
        cmd += ["--junitxml", str(self.dir / f"junit-{name}.xml")]
        if self.dry_run:
            cmd.append("--convperf-device=cpu")
        return self.step(name, cmd, cap_s, env=env, cwd=cwd)

    def pack(self) -> Path:
        """``$OUT/<phase>.tar.gz`` of the phase's folder (the device tool brings back 8 files)."""
        self.note(f"packed after {time.monotonic() - self.start:.0f} s")
        archive = self.out / f"{self.phase.name}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(self.dir, arcname=self.phase.name)
        return archive


def _wait_capped(proc: subprocess.Popen[bytes], limit: float) -> tuple[int, bool]:
    """The exit status, and whether the cap stopped it (SIGINT to its group, SIGKILL 15 s later)."""
    try:
        return proc.wait(timeout=limit), False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            return proc.wait(timeout=15), True
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(), True


def install(w: Window) -> None:
    """Install the plugin as on the GPU image, report the environment, prebuild every family for
    sm_90a (``TORCH_CUDA_ARCH_LIST`` through kernels/_build.py; a cache hit on a warm machine)."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", "."]
    if not w.gpu_only("install", cmd):
        w.step("install", cmd, 90)
    env_report = (
        "nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE; nvcc --version | tail -1; "
        "compute-sanitizer --version | head -2; ncu --version | tail -1"
    )
    if not w.gpu_only("environment", ["bash", "-c", env_report]):
        w.step("environment", ["bash", "-c", env_report], 30)
    build = [sys.executable, "-m", "kernels._build", "--all"]
    if not w.gpu_only("prebuild", build):
        w.step("prebuild", build, 240)


def summarize_night(w: Window, name: str, *expect_fail: str) -> None:
    cmd = [sys.executable, "scripts/night_summary.py", str(w.dir / f"report-{name}")]
    cmd += ["--log", str(w.dir / f"{name}.log"), "--junit", str(w.dir / f"junit-{name}.xml")]
    cmd += [f"--expect-fail={e}" for e in expect_fail] + ["--out", str(w.dir / f"{name}-summary.json")]
    rc = w.step(f"{name}-summary", cmd, 30)
    log = w.dir / f"{name}-summary.log"
    if rc is not None and log.exists():
        w.note("\n".join("    " + line for line in log.read_text().splitlines()[1:]))


def phase_night(w: Window) -> None:
    install(w)
    selection = list(CPU_SELECTION if w.dry_run else NIGHT_MODULES)
    w.pytest(
        "night", [*selection, "--convperf", f"--convperf-report={w.dir / 'report-night'}"], PHASE_CAP_LIMIT_S
    )
    summarize_night(w, "night")
    new = night_new_tests(w.dir / "report-night")
    w.state.mkdir(parents=True, exist_ok=True)
    (w.state / "night-new.txt").write_text("".join(f"{t}\n" for t in new))
    w.note(f"night: {len(new)} tests with NEW checks (no baseline) kept for the record phase")


def phase_planted(w: Window) -> None:
    install(w)
    selection = list(CPU_SELECTION if w.dry_run else PLANTED_SELECTION)
    args = [*selection, "--convperf", f"--convperf-report={w.dir / 'report-planted'}"]
    w.pytest("planted", args, 300, env={"CONVPERF_PLANTED_SLOWDOWN": PLANTED_SHARE})
    summarize_night(w, "planted", EXPECT_FAIL)
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"convperf-window-ab-{os.getpid()}"
    try:
        base, slow = scratch_repo(ROOT, scratch)
        w.note(f"A/B scratch repository {scratch}: base {base[:10]}, hard-wired slowdown {slow[:10]}")
        ab = list(CPU_SELECTION if w.dry_run else AB_SELECTION)
        sides = (("same", base), ("slower", slow)) if not w.dry_run else (("slower", slow),)
        if w.dry_run:
            w.note("ab-same: dry run: the SLOWER side alone proves the A/B path on the CPU")
        for side, commit in sides:
            git(scratch, "checkout", "-q", commit)
            report = w.dir / f"report-ab-{side}"
            args = [*ab, "--convperf", f"--convperf-against={base}", f"--convperf-report={report}"]
            # The scratch's own kernels/ (its HARDWIRED), not the checkout's: PYTHONPATH names it.
            w.pytest(f"ab-{side}", args, 150, cwd=scratch, env={"PYTHONPATH": str(scratch)})
            w.note(f"ab-{side}: {ab_verdicts(report)} (expected {side.upper()})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def ab_verdicts(report: Path) -> str:
    """The A/B verdicts the report's ab.md table holds (FASTER/SLOWER/SAME/INCONCLUSIVE counts)."""
    path = report / "ab.md"
    if not path.exists():
        return "no ab.md (see the step's log)"
    text = path.read_text()
    counts = {v: len(re.findall(rf"\| {v} ", text)) for v in ("FASTER", "SLOWER", "SAME", "INCONCLUSIVE")}
    return " ".join(f"{k}={v}" for k, v in counts.items() if v) or "no verdict in ab.md"


def phase_sweep(w: Window) -> None:
    install(w)
    cmd = [sys.executable, "-m", "kernels.sweep", "all", "--out", str(w.dir / "sweeps")]
    w.step("sweep", [*cmd, "--dry-run"] if w.dry_run else cmd, PHASE_CAP_LIMIT_S)
    log = w.dir / "sweep.log"
    if log.exists():
        w.note("\n".join("    " + line for line in log.read_text().splitlines()[-8:]))


def phase_record(w: Window) -> None:
    install(w)
    missing = missing_baselines(convperf_tests(), ROOT / "baselines" / MACHINE)
    night_new = w.state / "night-new.txt"
    partial = night_new.read_text().split() if night_new.exists() else []
    failed = failed_last_window(ROOT / "docs" / f"results-{MACHINE}.md")
    missing = sorted({*missing, *partial, *failed})
    (w.dir / "missing.txt").write_text("".join(f"{m}\n" for m in missing))
    kept = f"{len(partial)} NEW in the night" if night_new.exists() else "no night on this machine"
    kept += f", {len(failed)} failed in the last window"
    cpu = " (CPU ids: the scaled depthwise ids differ from the GPU's)" if w.dry_run else ""
    w.note(f"missing baselines: {len(missing)} tests without a key in baselines/{MACHINE}/ ({kept}){cpu}")
    if missing and w.dry_run:  # the night step proved the pytest path; nothing is recorded on a CPU
        w.note(f"record: dry run, needs a GPU: pytest <{len(missing)} tests> --convperf-update-baselines=all")
    elif missing:
        report = f"--convperf-report={w.dir / 'report-record'}"
        reason = "--convperf-reason=second GPU window: checks without a baseline"
        w.pytest("record", [*missing, "--convperf", "--convperf-update-baselines=all", reason, report], 200)
        shutil.copytree(ROOT / "baselines" / MACHINE, w.dir / "baselines", dirs_exist_ok=True)
    for family, label in ncu_targets().items():
        cmd = ncu_command(family, label, w.dir)
        to_csv = f"{shlex.join(cmd)} > {shlex.quote(str(w.dir / f'ncu-{family}.csv'))}"
        if not w.gpu_only(f"ncu-{family}", cmd):
            w.step(f"ncu-{family}", ["bash", "-c", to_csv], NCU_CAP_S)
    effnet = [sys.executable, "scripts/effnet_diagnosis.py", "--out", str(w.dir / "effnet.json")]
    if not w.gpu_only("effnet", effnet):  # its CPU mode (--device=cpu) is for a manual look: 30 s here
        w.step("effnet", effnet, 90)


def convperf_tests() -> list[str]:
    """Node ids of the perf_tests tests that make gated checks (they request the ``convperf``
    fixture; the model tables, the cliff search and the harness store no baseline), as this machine
    collects them."""
    items = gpu_suite.collect_items(["perf_tests", "-m", "convperf"])
    searches = "convperf_cliffs"  # a cliff search keeps its cliffs, not a baseline key
    return [str(i["nodeid"]) for i in items if "convperf" in i["fixtures"] and searches not in i["fixtures"]]


def failed_last_window(results_page: Path) -> list[str]:
    """Node ids of the results page's 'Tests that failed in this session' (their checks have no
    baseline; some of their tests recorded other checks, so no key check finds them)."""
    text = results_page.read_text() if results_page.exists() else ""
    section = text.partition("## Tests that failed in this session")[2].partition("\n## ")[0]
    found = re.findall(r"^- `perf_tests\.(\w+)::([^`]+)`", section, flags=re.MULTILINE)
    return [f"perf_tests/{module}.py::{name}" for module, name in found]


def missing_baselines(nodeids: Iterable[str], baselines: Path) -> list[str]:
    """The tests with no key in their module's baseline file (baselines/<machine>/<module>.yaml).

    A key is ``<test name>[@problem][:phase]``; a test with a recorded check has a key equal to its
    name (``test[params]``) or starting with it and ``@`` or ``:``. A test with some checks recorded
    and others not is not found here: the night's NEW rows name those (:func:`night_new_tests`).
    """
    keys: dict[str, list[str]] = {}
    out = []
    for nodeid in nodeids:
        path, _, name = nodeid.partition("::")
        module = Path(path).stem
        if module not in keys:
            file = baselines / f"{module}.yaml"
            data = yaml.safe_load(file.read_text()) if file.exists() else None
            keys[module] = [str(k) for k in ((data or {}).get("benchmarks") or {})]
        if not any(k == name or k.startswith((name + "@", name + ":")) for k in keys[module]):
            out.append(nodeid)
    return out


def night_new_tests(report: Path) -> list[str]:
    """The tests of the night's NEW rows (checks without a baseline), from its rows.json."""
    rows_file = report / "rows.json"
    rows = json.loads(rows_file.read_text()) if rows_file.exists() else []
    return sorted({str(r["nodeid"]) for r in rows if r.get("verdict") == "NEW"})


def sweep_csvs() -> list[Path]:
    """The sweep's CSVs: committed under docs/sweeps/<machine>/ (the session copies them there after
    the sweep phase, so the next call carries them)."""
    return sorted((ROOT / "docs" / "sweeps" / MACHINE).glob("*.csv"))


def best_rows(csvs: Iterable[Path]) -> dict[str, str]:
    """Per family, the ``variant@problem:phase`` of its measured variant row with the largest speedup
    over its cuDNN anchor (reference_us / median_us); families without such a row are left out."""
    best: dict[str, tuple[float, str]] = {}
    for path in csvs:
        with path.open() as f:
            for row in csv.DictReader(f):
                if not row["median_us"] or not row["reference_us"]:
                    continue
                speedup = float(row["reference_us"]) / float(row["median_us"])
                label = f"{row['variant']}@{row['problem']}:{row['phase']}"
                if speedup > best.get(row["family"], (0.0, ""))[0]:
                    best[row["family"]] = (speedup, label)
    return {family: label for family, (_, label) in sorted(best.items())}


def ncu_targets() -> dict[str, str]:
    """Per family the row ncu profiles: the sweep's best (:func:`best_rows`), else, for a family the
    sweep did not measure, its plan's first case."""
    sys.path.insert(0, str(ROOT))
    from kernels import sweep

    targets = best_rows(sweep_csvs())
    for family in sweep.kernel_families():
        targets.setdefault(family, sweep.row_label(sweep.family_cases(family)[0]))
    return targets


def ncu_command(family: str, label: str, out_dir: Path) -> list[str]:
    """ncu over one sweep row (its NVTX range only): DRAM bytes, achieved occupancy, stall reasons
    (WarpStateStats), as CSV on stdout."""
    metrics = "dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active"
    sweep = [sys.executable, "-m", "kernels.sweep", family, "--only", label, "--no-anchors", "--nvtx"]
    sweep += ["--reps", "2", "--out", str(out_dir / f"ncu-sweep-{family}")]
    ncu = ["ncu", "--nvtx", "--nvtx-include", "sweep-call/", "--metrics", metrics]
    return [*ncu, "--section", "WarpStateStats", "--csv", "--page", "details", *sweep]


def phase_sanitize(w: Window) -> None:
    install(w)
    pytest_args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    pytest_args += gpu_suite.sanitizer_args(gpu_suite.kernel_tests())
    errors: dict[str, str] = {}
    for tool in SANITIZER_TOOLS:
        cmd = [
            "compute-sanitizer",
            f"--tool={tool}",
            "--error-exitcode=1",
            "--target-processes=all",
            *pytest_args,
        ]
        if w.gpu_only(f"sanitizer-{tool}", cmd):
            errors[tool] = "not run (dry run)"
            continue
        rc = w.step(f"sanitizer-{tool}", cmd, SANITIZER_CAP_S, env={gpu_suite.SANITIZER_ENV: "1"})
        errors[tool] = sanitizer_errors(w.dir / f"sanitizer-{tool}.log", rc)
    w.note("sanitizer errors: " + ", ".join(f"{t} {e}" for t, e in errors.items()))


def sanitizer_errors(log: Path, rc: int | None) -> str:
    """Errors compute-sanitizer reported (its ERROR SUMMARY lines summed over processes)."""
    if rc is None:
        return "not run (no time left)"
    found = [int(n) for n in ERROR_SUMMARY.findall(log.read_text(errors="replace"))] if log.exists() else []
    if not found:
        return f"no ERROR SUMMARY (rc={rc}; see its log)"
    return f"{sum(found)} errors" + (" (cut at its cap)" if rc == -int(signal.SIGINT) else "")


# ---- the scratch repository of the A/B ---------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def tree_files(root: Path) -> list[str]:
    """The checkout's files as the device tool sends them: tracked and untracked-not-ignored."""
    if (root / ".git").exists():
        listed = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        return [p for p in listed.split("\0") if p and (root / p).is_file()]
    skip = {".git", "__pycache__", ".mypy_cache", ".ruff_cache", "gpu-window-out", "gpu-session-out"}
    return [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not skip & set(p.relative_to(root).parts)
    ]


def scratch_repo(root: Path, scratch: Path) -> tuple[str, str]:
    """A fresh git repository at ``scratch`` holding the checkout (commit ``base``) and a second commit
    with the planted slowdown hard-wired in kernels/_controls/planted.py; the user's checkout is only
    read. Returns ``(base, slow)`` commit hashes."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    for rel in tree_files(root):
        (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, scratch / rel)
    git(scratch, "init", "-q")
    ident = ("-c", "user.name=gpu-window", "-c", "user.email=gpu-window@localhost")
    git(scratch, "add", "-A")
    git(scratch, *ident, "commit", "-q", "-m", "base: the checkout")
    base = git(scratch, "rev-parse", "HEAD")
    planted = scratch / "kernels" / "_controls" / "planted.py"
    text = planted.read_text()
    wired = "HARDWIRED: float | None = None"
    if wired not in text:
        raise RuntimeError(f"{planted}: no line {wired!r} to hard-wire the slowdown in")
    planted.write_text(text.replace(wired, f"HARDWIRED: float | None = {PLANTED_SHARE}"))
    git(scratch, *ident, "commit", "-q", "-am", f"planted slowdown hard-wired ({PLANTED_SHARE})")
    return base, git(scratch, "rev-parse", "HEAD")


RUNNERS = {
    "night": phase_night,
    "planted": phase_planted,
    "sweep": phase_sweep,
    "record": phase_record,
    "sanitize": phase_sanitize,
}


def run_phase(phase: Phase, out: Path, budget_s: float, dry_run: bool) -> Path:
    """Run one phase and pack it, even when a step raised or a signal stopped it."""
    w = Window(phase, out, budget_s, dry_run)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        RUNNERS[phase.name](w)
    except (Exception, KeyboardInterrupt) as exc:
        w.note(f"{phase.name}: stopped by {type(exc).__name__}: {exc}")
    return w.pack()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu-window", description=__doc__.split("\n")[0])
    names = [p.name for p in PHASES]
    parser.add_argument(
        "phase", choices=[*names, "plan", "all"], help="a phase, plan (the time plan), all (dry run)"
    )
    parser.add_argument(
        "budget_s", nargs="?", type=float, default=float(PHASE_CAP_LIMIT_S), help="this call's seconds"
    )
    parser.add_argument("--dry-run", action="store_true", help="every step on the CPU or logged (CI)")
    parser.add_argument(
        "--left", type=float, help="the session's device seconds left: BUDGET_S from the plan"
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "gpu-window-out")))
    args = parser.parse_args(argv)
    if args.phase == "plan":
        print(plan_markdown())
        return 0
    if args.phase == "all" and not args.dry_run:
        parser.error("all runs every phase in one call: only as --dry-run (a GPU call holds one phase)")
    out = args.out.resolve()
    for phase in PHASES:
        if args.phase in ("all", phase.name):
            budget = args.budget_s if args.left is None else phase_budget(phase.name, args.left)
            archive = run_phase(phase, out, budget, args.dry_run)
            print(f"gpu-window: {archive} ({archive.stat().st_size / 2**20:.2f} MiB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
