"""The GPU window in 15 minutes, on an H100 or an H200 (issue 35): two device calls, back to back.

``scripts/gpu-window plan [--kind KIND]`` prints the minute plan (:func:`plan_rows`, docs/gpu-window.md);
``scripts/gpu-window prepare`` builds the carried extensions here (:data:`CARRY`, torch 2.11, sm_90a);
``scripts/gpu-window [--dry-run] proof|tune [--left S]`` runs one call; ``--dry-run all`` both (CI).

- ``proof`` (cap :data:`PROOF_CAP_S`): the environment line; the install; the carried extensions
  copied into the build cache and loaded where their hash matches (else built); then a
  self-contained night on whatever machine this is: the focused set (:data:`FOCUSED`) recorded into
  a scratch baseline folder in one pytest process, the unchanged night against it in a fresh process
  (every FAIL a false alarm), the planted 10 % night (the depthwise forward checks must FAIL and
  survive the fresh confirm, their FAIL must name a depthwise forward kernel, nothing else may
  FAIL), the A/B (HEAD against itself SAME, a commit with the slowdown hard-wired SLOWER); on an
  H100 alone (the detected machine slug, not the kind asked for) the unchanged selection against
  the committed ``baselines/nvidia-h100-80gb-hbm3/``, reported apart.
- ``tune`` (cap :data:`TUNE_CAP_S`): ``python -m kernels.sweep all`` at fixed repetitions, the rows
  deciding the 13 goals first (``kernels/sweep_goals.py``); compute-sanitizer memcheck on one small
  shape per family only if time is left.

Each step is capped by min(its cap, the call's time left - packing): SIGINT first (pytest still writes
its report), SIGKILL 15 s later. A call writes ``$OUT/<call>-summary.txt`` as it goes (what comes back
even when cut short), then packs ``$OUT/<call>-results.json`` (typed, what ``scripts/window_harvest.py``
reads after the window) and ``$OUT/<call>.tar.gz`` (logs, CSVs, reports, junit; at most
:data:`OUT_FILE_BYTES`): 3 files of the 8 the device tool returns.

``--dry-run`` runs both calls on the CPU (under 2 minutes): GPU-only steps are logged; the pytest steps
run one small CPU check (record, night, planted, the A/B's SLOWER side for real on the CPU reference,
which honours the switch); the carry's load-or-build logic runs against the carry folder (absent in
CI: every family would be built); the sweep lists its goal-ordered plan.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_suite  # noqa: E402  (scripts/gpu_suite.py: the sanitize selection, one source)

KINDS = ("nvidia-h100-x1", "nvidia-h200")
COMMITTED_MACHINE = "nvidia-h100-80gb-hbm3"  # the machine of the committed baselines/
SM90A = "9.0a"  # -gencode=arch=compute_90a,code=sm_90a (kernels/_build.py); H100 and H200 are both sm_90
DEVICE_TORCH = "2.11.0"  # the device image's torch (docs/results-nvidia-h100-80gb-hbm3.md)
WINDOW_S = 900  # the session's device time: starts, calls, idle waits and the hand-back
MIN_SPARE_S = 60
SAFETY_S = 30  # kept back from a call's budget when the window runs late
CALL_LIMIT_S = 600
# The first window's figures (docs/results-nvidia-h100-80gb-hbm3.md, scripts/gpu-session.sh's logs):
MACHINE_START_S = 120  # "one to two minutes": the upper end
TRANSFER_S = 15  # per call: the working tree and the carry out, $OUT back
HANDBACK_S = 10  # give_back right after the last call
BUILD_S = 69  # every family for sm_90a, MAX_JOBS=16
CHECK_S = 2  # recording: ~7.5 min for 217 checks
PYTEST_START_S = 10  # interpreter, torch, the plugin and collection (assumed: not logged apart)
INSTALL_S = 15
LOAD_S = 10  # the carried libraries copied and loaded, no compiler
REF_BUILD_S = 45  # the A/B's REF depthwise build (renamed namespace: never carried), about 2/3 of BUILD_S
PROOF_CAP_S = 480
TUNE_CAP_S = 240
PACK_S = 20  # kept back from the last step for packing
MIN_STEP_S = 15
CARRY = ROOT / ".gpu-carry"  # git-ignored; named in the device call's carry
CARRY_LIMIT_BYTES = 64 * 2**20  # what a call's carry may hold in all
OUT_FILE_BYTES = 16 * 2**20
PLANTED_SHARE = "0.1"
EXPECT_FAIL = "-forward]"  # ends a depthwise forward seed check's test id
PLANTED_KERNEL = re.compile(r"\bfwd_(?:tile_nchw|nhwc_vec|rows_nhwc|direct)\w*")
SWEEP_REPS = 100
# A dry run's caps and budget are the GPU's times this: a CPU pytest start on a loaded CI box takes
# longer than a GPU check, and a cut step fails the dry run.
DRY_RUN_SLACK = 2


def seed_forward_ids() -> list[str]:
    """The 16 depthwise fp32 forward seed checks (8 seed shapes x NCHW/NHWC), as a GPU collects them."""
    sys.path.insert(0, str(ROOT))
    from kernels.depthwise.seed import DEPTHWISE_SEED_SHAPES

    return [
        f"perf_tests/test_depthwise.py::test_seed_shape[{n}x{c}x{hw}-k{k}-fp32-{layout}-forward]"
        for n, c, hw, k in DEPTHWISE_SEED_SHAPES
        for layout in ("nchw", "nhwc")
    ]


# One check each of EDSR (its own fused kernel: the planted depthwise slowdown must not touch it),
# PCILT and im2col+GEMM.
OTHER_FOCUSED = (
    "perf_tests/test_edsr.py::test_fused_block_vs_unfused_pytorch_block",
    "perf_tests/test_pcilt.py::test_tiled_vs_naive_kernel[4]",
    "perf_tests/test_im2col_gemm.py::test_edsr[gemm-n16-ci64-h48-w48-co64-k3x3-s1-p1-d1-g1-fp32-nchw]",
)
FOCUSED_CHECKS = 16 + len(OTHER_FOCUSED)
AB_SELECTION = ("perf_tests/test_depthwise.py::test_seed_shape[16x144x56-k3-fp32-nchw-forward]",)
# The CPU's stand-in (dry run): one seed check at the CPU's batch 1.
CPU_SELECTION = ("perf_tests/test_depthwise.py::test_seed_shape[1x1152x7-k3-fp32-nchw-forward]",)


# ---- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    name: str
    estimate_s: int
    cap_s: int
    what: str
    h100_only: bool = False


def _night_s(checks: int, confirmed: int = 0) -> int:
    """A pytest night: start-up, each check at the recording rate, and a fresh confirm process that
    measures each FAIL again (twice the rate: its own rounds)."""
    confirm = PYTEST_START_S + 2 * CHECK_S * confirmed if confirmed else 0
    return PYTEST_START_S + CHECK_S * checks + confirm


def sweep_estimate_s() -> int:
    """``kernels.sweep``'s own estimate of every row at :data:`SWEEP_REPS` (a model, not a measurement)."""
    sys.path.insert(0, str(ROOT))
    from kernels import sweep

    _, _, est = sweep.describe(sweep.plan(sweep.kernel_families()), SWEEP_REPS)
    return int(est + 0.5)


def proof_steps() -> tuple[Step, ...]:
    n = FOCUSED_CHECKS
    return (
        Step("environment", 5, 20, "GPU, driver, torch, SM/memory clocks, free memory"),
        Step("install", INSTALL_S, 60, "pip install --no-deps -e ."),
        Step(
            "extensions", LOAD_S, BUILD_S + 60, f"carried sm_90a libraries loaded (else built, {BUILD_S} s)"
        ),
        Step("record", _night_s(n), 100, f"{n} focused checks recorded into a scratch baseline folder"),
        Step("night", _night_s(n), 120, "unchanged night, fresh process: every FAIL a false alarm"),
        Step("planted", _night_s(n, 16), 170, "CONVPERF_PLANTED_SLOWDOWN=0.1: 16 forward FAILs confirmed"),
        Step("ab", REF_BUILD_S + 2 * _night_s(2), 140, "HEAD vs HEAD SAME, hard-wired commit SLOWER"),
        Step("committed", _night_s(n), 100, f"the {n} against baselines/{COMMITTED_MACHINE}/", True),
    )


SWEEP_CAP_S = TUNE_CAP_S - 30 - PACK_S  # the environment and the cache hit before it, packing after


def sweep_what() -> str:
    est = sweep_estimate_s()
    cut = f"; cut at {SWEEP_CAP_S} s: the last rows, no goal's" if est > SWEEP_CAP_S else ""
    return f"kernels.sweep all, the 13 goals' rows first; modelled {est} s{cut}"


def tune_steps() -> tuple[Step, ...]:
    return (
        Step("environment", 5, 20, "as in proof"),
        Step("extensions", LOAD_S, 60, "the proof call's cache on the warm machine"),
        Step("sweep", min(sweep_estimate_s(), SWEEP_CAP_S), SWEEP_CAP_S, sweep_what()),
        Step("memcheck", 0, 60, "compute-sanitizer memcheck, one small shape per family, if time is left"),
    )


def call_steps(call: str, kind: str) -> list[Step]:
    steps = proof_steps() if call == "proof" else tune_steps()
    return [s for s in steps if kind == "nvidia-h100-x1" or not s.h100_only]


def plan_rows(kind: str) -> list[tuple[str, int, int]]:
    """``(item, estimate s, cap s)``: the start, each call's steps and transfers, the hand-back, the
    reserve. A call's cap is its own (the steps' caps are bounds within it)."""
    if kind not in KINDS:
        raise SystemExit(
            f"gpu-window: --kind {kind!r} is not a kind the device tool lends; use one of {KINDS}"
        )
    rows = [("machine start", MACHINE_START_S, MACHINE_START_S)]
    for call, cap in (("proof", PROOF_CAP_S), ("tune", TUNE_CAP_S)):
        steps = call_steps(call, kind)
        rows += [(f"{call}: {s.name} ({s.what})", s.estimate_s, s.cap_s) for s in steps]
        rows.append((f"{call}: call total (cap) + transfers", TRANSFER_S, cap + TRANSFER_S))
    rows.append(("hand-back", HANDBACK_S, HANDBACK_S))
    used = sum(est for _, est, _ in rows)
    rows.append(("reserve", WINDOW_S - used, 0))
    return rows


def cap_of(call: str, step: str) -> int:
    """A step's cap, as the plan gives it (one source for the table and the run)."""
    return next(s.cap_s for s in (proof_steps() if call == "proof" else tune_steps()) if s.name == step)


def call_estimate_s(call: str, kind: str) -> int:
    return sum(s.estimate_s for s in call_steps(call, kind))


def caps_total_s() -> int:
    """The window when both calls run to their caps."""
    return MACHINE_START_S + PROOF_CAP_S + TUNE_CAP_S + 2 * TRANSFER_S + HANDBACK_S


def plan_markdown(kind: str) -> str:
    """The plan as docs/gpu-window.md holds it (a test keeps the two the same)."""
    lines = [
        f"| # | item ({kind}) | estimate (s) | cap (s) | cumulative (min) |",
        "|---|---|---:|---:|---:|",
    ]
    total = 0
    for i, (item, est, cap) in enumerate(plan_rows(kind)):
        total += est
        lines.append(f"| {i} | {item} | {est} | {cap or '-'} | {total / 60:.1f} |")
    return "\n".join(lines)


def call_budget(call: str, left_s: float, kind: str) -> float:
    """This call's seconds when ``left_s`` of device time is left (status's budget_left_s): its cap,
    less what the calls after it are estimated to need, their transfers, the hand-back and
    :data:`SAFETY_S` (a call still running when the device time ends brings nothing back)."""
    later = ["tune"] if call == "proof" else []
    need = sum(call_estimate_s(c, kind) + TRANSFER_S for c in later) + TRANSFER_S + HANDBACK_S + SAFETY_S
    cap = PROOF_CAP_S if call == "proof" else TUNE_CAP_S
    return max(0.0, min(float(cap), left_s - need))


# ---- the carried extensions ---------------------------------------------------------------------


@dataclass(frozen=True)
class CarryReport:
    """What the extensions step found: the carry's manifest against this machine's toolchain."""

    carried: int  # libraries in the carry
    copied: int  # copied into the build cache (not there yet)
    matching: int  # carried libraries whose name (the loader's hash) this machine would load
    families: int
    carried_toolchain: str
    toolchain: str
    bytes: int

    def line(self) -> str:
        if not self.carried:
            return f"carry: none at {CARRY.name}/: every family is built ({BUILD_S} s on the first window)"
        same = (
            "same toolchain"
            if self.carried_toolchain == self.toolchain
            else (f"toolchain differs (carried {self.carried_toolchain}; here {self.toolchain})")
        )
        return (
            f"carry: {self.carried} libraries, {self.bytes / 2**20:.1f} MiB of "
            f"{CARRY_LIMIT_BYTES / 2**20:.0f}; "
            f"{self.matching} of {self.families} families match this machine's build hash ({same}), "
            f"{self.copied} copied into the build cache; the rest are built"
        )


def carry_bytes(carry: Path) -> int:
    return sum(p.stat().st_size for p in carry.rglob("*") if p.is_file()) if carry.is_dir() else 0


def spec_names(archs: Sequence[str] = (SM90A,)) -> dict[str, str]:
    """Per family, the extension name (and build hash) this machine's loader computes for ``archs``."""
    sys.path.insert(0, str(ROOT))
    from kernels import _build

    return {f: _build.make_spec(f, archs=archs).name for f in _build.families()}


def install_carry(carry: Path, cache: Path, names: Mapping[str, str], toolchain: str) -> CarryReport:
    """Copy the carry's libraries (``torch_extensions/<name>/<name>.so`` and its ready marker) into the
    build cache ``cache`` where absent; the loader then loads those whose name it computes itself and
    builds the rest. Only the two files: a partial build folder would be built on, not loaded."""
    manifest_file = carry / "manifest.json"
    manifest = json.loads(manifest_file.read_text()) if manifest_file.exists() else {}
    carried = sorted(p.name for p in (carry / "torch_extensions").glob("*") if p.is_dir())
    copied = 0
    for name in carried:
        target = cache / name
        files = [carry / "torch_extensions" / name / f"{name}{suffix}" for suffix in (".so", ".ready")]
        if all(f.is_file() for f in files) and not (target / f"{name}.ready").exists():
            target.mkdir(parents=True, exist_ok=True)
            for f in files:
                shutil.copy2(f, target / f.name)
            copied += 1
    return CarryReport(
        carried=len(carried),
        copied=copied,
        matching=len(set(carried) & set(names.values())),
        families=len(names),
        carried_toolchain=str(manifest.get("toolchain", "?")),
        toolchain=toolchain,
        bytes=carry_bytes(carry),
    )


def prepare(carry: Path, python: str, cache: Path, limit: int = CARRY_LIMIT_BYTES) -> int:
    """Build every family for sm_90a with ``python`` (a torch 2.11 environment: the device's), then
    keep each library and its ready marker under ``carry`` with a manifest; refuse a carry over
    ``limit``. Returns the exit status."""
    env = os.environ | {"TORCH_CUDA_ARCH_LIST": SM90A, "TORCH_EXTENSIONS_DIR": str(cache)}
    env["PYTHONPATH"] = str(ROOT)
    env.setdefault("MAX_JOBS", "2")
    probe = (
        "import json, torch; from kernels import _build; "
        "print(json.dumps({'torch': torch.__version__, 'toolchain': _build._toolchain(), "
        f"'names': {{f: _build.make_spec(f, archs=({SM90A!r},)).name for f in _build.families()}}}}))"
    )
    probed = subprocess.run(
        [python, "-c", probe], env=env, cwd=ROOT, check=True, capture_output=True, text=True
    )
    facts = json.loads(probed.stdout.strip().splitlines()[-1])
    if not str(facts["torch"]).startswith(DEVICE_TORCH):
        print(f"gpu-window prepare: {python} has torch {facts['torch']}, the device has {DEVICE_TORCH}: "
              f"make a venv with `pip install torch=={DEVICE_TORCH} torchvision==0.26.0 ninja` and pass "
              "--python", file=sys.stderr)  # fmt: skip
        return 2
    began = time.monotonic()
    built = subprocess.run([python, "-m", "kernels._build", "--all"], env=env, cwd=ROOT, check=False)
    if built.returncode:
        return built.returncode
    shutil.rmtree(carry, ignore_errors=True)
    for name in facts["names"].values():
        for suffix in (".so", ".ready"):
            src = cache / name / f"{name}{suffix}"
            (carry / "torch_extensions" / name).mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, carry / "torch_extensions" / name / src.name)
    manifest = {
        "torch": facts["torch"], "toolchain": facts["toolchain"], "archs": [SM90A],
        "libraries": facts["names"], "build_s": round(time.monotonic() - began, 1),
    }  # fmt: skip
    (carry / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return check_carry_size(carry, limit)


def check_carry_size(carry: Path, limit: int = CARRY_LIMIT_BYTES) -> int:
    size = carry_bytes(carry)
    if size > limit:
        print(f"gpu-window: the carry {carry} holds {size / 2**20:.1f} MiB, over the device tool's "
              f"{limit / 2**20:.0f} MiB: carry fewer families (the rest build on the device)",
              file=sys.stderr)  # fmt: skip
        return 3
    print(f"gpu-window: carry {carry}: {size / 2**20:.1f} MiB of {limit / 2**20:.0f} MiB")
    return 0


# ---- running a call ---------------------------------------------------------------------------


@dataclass
class StepResult:
    name: str
    rc: int | None  # None: skipped (no time) or logged (dry run)
    seconds: float
    cap_s: float
    cut: bool = False
    note: str = ""


@dataclass
class CallResult:
    """``$OUT/<call>-results.json``: what scripts/window_harvest.py reads."""

    call: str
    dry_run: bool
    machine: str = "?"
    environment: str = ""
    carry: str = ""
    steps: list[StepResult] = field(default_factory=list)
    nights: dict[str, Any] = field(default_factory=dict)  # name -> night_summary.py's JSON
    planted_kernel: list[str] = field(default_factory=list)  # kernels the planted FAILs name
    ab: dict[str, str] = field(default_factory=dict)  # side -> verdict counts
    sweep_rows: int = 0
    memcheck: str = ""
    stopped: str = ""


class Window:
    """One device call: its work folder, its clock, its steps, its summary and its result."""

    def __init__(self, call: str, out: Path, budget_s: float, dry_run: bool) -> None:
        self.call = call
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f"convperf-window-{call}-"))
        self.budget_s = budget_s
        self.start = time.monotonic()
        self.dry_run = dry_run
        self.summary = out / f"{call}-summary.txt"
        self.summary.write_text("")
        self.result = CallResult(call, dry_run)
        self.env = dict(os.environ)
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.env.setdefault("MAX_JOBS", "16")
        # Every step: load() hashes the arch list, so each run finds the carried or prebuilt library.
        self.env.setdefault("TORCH_CUDA_ARCH_LIST", SM90A)
        cache = (
            Path.home()
            / ".cache"
            / "convperf"
            / ("torch_extensions-dry-run" if dry_run else "torch_extensions")
        )
        self.env.setdefault("TORCH_EXTENSIONS_DIR", str(cache))
        self.note(f"# {call} (dry_run={dry_run}) budget {budget_s:.0f} s")

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def note(self, text: str) -> None:
        print(text, flush=True)
        with self.summary.open("a") as f:
            f.write(text + "\n")

    def logged(self, name: str, cmd: Sequence[str]) -> bool:
        """In a dry run, log a GPU-only step instead of running it (True: skip it)."""
        if self.dry_run:
            self.note(f"{name}: dry run, needs a GPU: {shlex.join(cmd)}")
            self.result.steps.append(StepResult(name, None, 0.0, 0.0, note="dry run"))
        return self.dry_run

    def step(
        self, name: str, cmd: Sequence[str], cap_s: float, *, env: Mapping[str, str] | None = None,
        cwd: Path = ROOT,
    ) -> int | None:  # fmt: skip
        """Run ``cmd`` (output in ``<name>.log``) for at most min(cap, time left - packing); SIGINT to
        its process group at the cap, SIGKILL 15 s later. None when there was no time to start it."""
        limit = min(cap_s * (DRY_RUN_SLACK if self.dry_run else 1), self.left() - PACK_S)
        if limit < MIN_STEP_S:
            self.note(f"SKIP {name}: {self.left():.0f} s left")
            self.result.steps.append(StepResult(name, None, 0.0, cap_s, note="no time left"))
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
        seconds = time.monotonic() - began
        self.result.steps.append(StepResult(name, rc, round(seconds, 1), round(limit), cut))
        self.note(f"{name}: rc={rc} {seconds:.0f} s (cap {limit:.0f} s){' CUT at its cap' if cut else ''}")
        return rc

    def pytest(
        self, name: str, args: Sequence[str], cap_s: float, *, env: Mapping[str, str] | None = None,
        cwd: Path = ROOT,
    ) -> int | None:  # fmt: skip
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE", *args]
        cmd += ["--junitxml", str(self.dir / f"junit-{name}.xml")]
        if self.dry_run:
            cmd.append("--convperf-device=cpu")
        return self.step(name, cmd, cap_s, env=env, cwd=cwd)

    def pack(self) -> list[Path]:
        """``$OUT/<call>-results.json`` and ``$OUT/<call>.tar.gz`` (summary first, then logs, reports,
        CSVs; a file that would take the archive over :data:`OUT_FILE_BYTES` is left out, named)."""
        self.note(f"packed after {time.monotonic() - self.start:.0f} s")
        results = self.out / f"{self.call}-results.json"
        results.write_text(json.dumps(asdict(self.result), indent=1) + "\n")
        archive = self.out / f"{self.call}.tar.gz"
        files = sorted((p for p in self.dir.rglob("*") if p.is_file()), key=_pack_order)
        total, left_out = 0, []
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(self.summary, arcname=f"{self.call}/{self.summary.name}")
            for path in files:
                size = path.stat().st_size
                if total + size > OUT_FILE_BYTES - 2**20:  # compressed is smaller; a MiB kept for the rest
                    left_out.append(f"{path.relative_to(self.dir)} ({size} bytes)")
                    continue
                total += size
                tar.add(path, arcname=f"{self.call}/{path.relative_to(self.dir)}")
        if left_out:
            self.note("left out of the archive (over 16 MiB): " + ", ".join(left_out))
        shutil.rmtree(self.dir, ignore_errors=True)
        return [self.summary, results, archive]


def _pack_order(path: Path) -> tuple[int, str]:
    rank = {".txt": 0, ".log": 1, ".csv": 2, ".md": 3, ".json": 4, ".xml": 5}  # traces (.json) last
    return rank.get(path.suffix, 6), str(path)


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


ENV_PROBE = (
    "import torch, subprocess\n"
    "from pytest_convperf.core.device import resolve_device\n"
    "info = resolve_device('cuda' if torch.cuda.is_available() else 'cpu')\n"
    "free = torch.cuda.mem_get_info()[0] / 2**30 if torch.cuda.is_available() else None\n"
    "smi = subprocess.run(['nvidia-smi', '--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm',"
    " '--format=csv,noheader'], capture_output=True, text=True).stdout.strip() if torch.cuda.is_available()"
    " else 'no GPU'\n"
    "free_text = f'{free:.1f} GiB' if free is not None else '-'\n"
    "print(f'machine={info.slug} gpu={info.name} torch={torch.__version__} cuda={torch.version.cuda} "
    "driver,sm,mem,max-sm MHz={smi} free={free_text}')\n"
)


def environment(w: Window) -> None:
    """The environment line first: the GPU, driver, torch, SM/memory clocks, free memory; the machine
    slug as the plugin detects it (what decides the committed-baseline night)."""
    rc = w.step(
        "environment",
        [sys.executable, "-c", ENV_PROBE],
        cap_of("proof", "environment"),
        env={"PYTHONPATH": str(ROOT)},
    )
    log = w.dir / "environment.log"
    lines = log.read_text().splitlines() if log.exists() else []
    line = next((x for x in lines if x.startswith("machine=")), "")
    w.result.environment = line
    w.result.machine = line.split()[0].removeprefix("machine=") if line else "?"
    w.note(f"environment: {line or f'no line (rc={rc}; see environment.log)'}")


def install(w: Window) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", "."]
    if not w.logged("install", cmd):
        w.step("install", cmd, cap_of("proof", "install"))


def extensions(w: Window, cap_s: float) -> None:
    """The carried libraries into the build cache, then every family loaded (or built)."""
    sys.path.insert(0, str(ROOT))
    from kernels import _build

    cache = Path(w.env["TORCH_EXTENSIONS_DIR"])
    report = install_carry(CARRY, cache, spec_names(), _build._toolchain())
    w.result.carry = report.line()
    w.note(report.line())
    cmd = [sys.executable, "-m", "kernels._build", "--all"]
    if not w.logged("extensions", cmd):
        w.step("extensions", cmd, cap_s, env={"PYTHONPATH": str(ROOT)})
        log = w.dir / "extensions.log"
        text = log.read_text() if log.exists() else ""
        w.note(f"extensions: {text.count(': cached for')} loaded as built, {text.count(': built for')} built")


def summarize_night(w: Window, name: str, *expect_fail: str) -> dict[str, Any]:
    cmd = [sys.executable, "scripts/night_summary.py", str(w.dir / f"report-{name}")]
    cmd += ["--log", str(w.dir / f"{name}.log"), "--junit", str(w.dir / f"junit-{name}.xml")]
    cmd += [f"--expect-fail={e}" for e in expect_fail] + ["--out", str(w.dir / f"{name}-summary.json")]
    rc = w.step(f"{name}-summary", cmd, 30)
    log, out = w.dir / f"{name}-summary.log", w.dir / f"{name}-summary.json"
    if rc is not None and log.exists():
        w.note("\n".join("    " + line for line in log.read_text().splitlines()[1:]))
    summary: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    w.result.nights[name] = summary
    return summary


def run_proof(w: Window) -> None:
    environment(w)
    install(w)
    extensions(w, cap_of("proof", "extensions"))
    focused = list(CPU_SELECTION if w.dry_run else [*seed_forward_ids(), *OTHER_FOCUSED])
    scratch = w.dir / "baselines"
    base = ["--convperf", f"--convperf-baselines={scratch}"]
    reason = "--convperf-reason=GPU window: the self-contained night's record"
    record = [*focused, *base, "--convperf-update-baselines=all", reason]
    w.pytest("record", [*record, f"--convperf-report={w.dir / 'report-record'}"], cap_of("proof", "record"))
    w.pytest(
        "night", [*focused, *base, f"--convperf-report={w.dir / 'report-night'}"], cap_of("proof", "night")
    )
    summarize_night(w, "night")
    args = [*focused, *base, f"--convperf-report={w.dir / 'report-planted'}"]
    # A CPU's planted FAIL is confirmed in the same process: one pytest start less in CI (the GPU's
    # night keeps the default, a fresh process, which is what the proof is about).
    args += ["--convperf-confirm=process"] if w.dry_run else []
    w.pytest("planted", args, cap_of("proof", "planted"), env={"CONVPERF_PLANTED_SLOWDOWN": PLANTED_SHARE})
    summarize_night(w, "planted", EXPECT_FAIL)
    w.result.planted_kernel = planted_kernels(w.dir / "report-planted")
    missing = "none (a CPU names no CUDA kernel)" if w.dry_run else "NONE: no FAIL named the kernel"
    named = ", ".join(w.result.planted_kernel) or missing
    w.note(f"planted: kernels its FAILs name: {named}")
    run_ab(w)
    if w.result.machine == COMMITTED_MACHINE and (ROOT / "baselines" / COMMITTED_MACHINE).is_dir():
        args = [*focused, "--convperf", f"--convperf-report={w.dir / 'report-committed'}"]
        w.pytest("committed", args, cap_of("proof", "committed"))
        summarize_night(w, "committed")
    else:
        theirs = f"the committed baselines are {COMMITTED_MACHINE}'s (an H100's)"
        w.note(f"committed: not run: this machine is {w.result.machine}, {theirs}")


def planted_kernels(report: Path) -> list[str]:
    """The depthwise forward kernels the planted night's FAIL messages name (their kernel diff)."""
    rows_file = report / "rows.json"
    rows = json.loads(rows_file.read_text()) if rows_file.exists() else []
    found = {
        m for r in rows if r.get("verdict") == "FAIL" for m in PLANTED_KERNEL.findall(str(r.get("message")))
    }
    return sorted(found)


def run_ab(w: Window) -> None:
    scratch = Path(tempfile.gettempdir()) / f"convperf-window-ab-{os.getpid()}"
    try:
        base, slow = scratch_repo(ROOT, scratch)
        w.note(f"A/B scratch repository {scratch}: base {base[:10]}, hard-wired slowdown {slow[:10]}")
        ab = list(CPU_SELECTION if w.dry_run else AB_SELECTION)
        sides = (("same", base), ("slower", slow)) if not w.dry_run else (("slower", slow),)
        if w.dry_run:
            w.note("ab-same: dry run: the SLOWER side alone proves the A/B path on the CPU")
        began = time.monotonic()
        for side, commit in sides:
            git(scratch, "checkout", "-q", commit)
            cap = cap_of("proof", "ab") - (time.monotonic() - began)  # the sides share the step's cap
            report = w.dir / f"report-ab-{side}"
            args = [*ab, "--convperf", f"--convperf-against={base}", f"--convperf-report={report}"]
            # The scratch's own kernels/ (its HARDWIRED), not the checkout's: PYTHONPATH names it.
            w.pytest(f"ab-{side}", args, cap, cwd=scratch, env={"PYTHONPATH": str(scratch)})
            w.result.ab[side] = ab_verdicts(report)
            w.note(f"ab-{side}: {w.result.ab[side]} (expected {side.upper()})")
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


def run_tune(w: Window) -> None:
    environment(w)
    extensions(w, cap_of("tune", "extensions"))
    out = w.dir / "sweeps"
    cmd = [sys.executable, "-m", "kernels.sweep", "all", "--reps", str(SWEEP_REPS), "--out", str(out)]
    # The sweep's cap leaves the memcheck a minute at most: it runs only on what is left.
    w.step(
        "sweep",
        [*cmd, "--dry-run"] if w.dry_run else cmd,
        cap_of("tune", "sweep"),
        env={"PYTHONPATH": str(ROOT)},
    )
    log = w.dir / "sweep.log"
    if log.exists():
        w.note("\n".join("    " + line for line in log.read_text().splitlines()[-4:]))
    w.result.sweep_rows = sum(max(0, len(p.read_text().splitlines()) - 1) for p in out.glob("*.csv"))
    w.note(f"sweep: {w.result.sweep_rows} rows in {len(list(out.glob('*.csv')))} CSVs")
    tests = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    tests += gpu_suite.sanitizer_args(gpu_suite.kernel_tests())
    cmd = ["compute-sanitizer", "--tool=memcheck", "--error-exitcode=1", "--target-processes=all", *tests]
    if not w.logged("memcheck", cmd):
        rc = w.step("memcheck", cmd, 60, env={gpu_suite.SANITIZER_ENV: "1"})
        w.result.memcheck = sanitizer_errors(w.dir / "memcheck.log", rc)
    w.note(f"memcheck: {w.result.memcheck or 'not run (dry run)'}")


ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


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
    skip = {".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".gpu-carry", "gpu-window-out"}
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


RUNNERS = {"proof": run_proof, "tune": run_tune}


def run_call(call: str, out: Path, budget_s: float, dry_run: bool) -> tuple[list[Path], list[str]]:
    """Run one call and pack it, even when a step raised or a signal stopped it; the files and
    :func:`broken_steps`."""
    w = Window(call, out, budget_s, dry_run)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        RUNNERS[call](w)
    except (Exception, KeyboardInterrupt) as exc:
        w.result.stopped = f"{type(exc).__name__}: {exc}"
        w.note(f"{call}: stopped by {w.result.stopped}")
    broken = broken_steps(w.result)
    w.note(f"{call}: broken steps: {'; '.join(broken)}" if broken else f"{call}: every step ran")
    return w.pack(), broken


def broken_steps(result: CallResult) -> list[str]:
    """What makes a dry run fail CI: a step that crashed, was cut or found no arguments (pytest rc
    2-5, a signal), a night that left no summary, an A/B that left no table, a call stopped by an
    exception. Verdicts are not judged: a CPU's timing under load decides them, not the logic."""
    out = [
        f"{s.name}: rc={s.rc}{' (cut)' if s.cut else ''}" for s in result.steps if s.rc not in (None, 0, 1)
    ]
    out += [f"{s.name}: skipped, no time left" for s in result.steps if s.note == "no time left"]
    ran = {s.name for s in result.steps}
    out += [f"{n}: no summary" for n in ("night", "planted") if n in ran and not result.nights.get(n)]
    out += [f"ab-{side}: {v}" for side, v in result.ab.items() if v.startswith("no ")]
    return out + ([f"stopped: {result.stopped}"] if result.stopped else [])


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu-window", description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["proof", "tune", "all", "plan", "prepare"])
    parser.add_argument("--kind", choices=KINDS, default=KINDS[0], help="plan: the machine kind lent")
    parser.add_argument("--dry-run", action="store_true", help="every step on the CPU or logged (CI)")
    parser.add_argument(
        "--left", type=float, help="the session's device seconds left (status's budget_left_s)"
    )
    parser.add_argument(
        "--budget", type=float, help="this call's seconds (default: from --left, else its cap)"
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "gpu-window-out")))
    parser.add_argument(
        "--python", default=sys.executable, help=f"prepare: a torch {DEVICE_TORCH} interpreter"
    )
    parser.add_argument("--cache", type=Path, help="prepare: its build cache (default: one of its own)")
    args = parser.parse_args(argv)
    if args.what == "plan":
        print(plan_markdown(args.kind))
        return 0
    if args.what == "prepare":
        cache = (
            args.cache or Path.home() / ".cache" / "convperf" / f"torch_extensions-torch{DEVICE_TORCH}-sm90a"
        )
        return prepare(CARRY, args.python, cache)
    if args.what == "all" and not args.dry_run:
        parser.error("all runs both calls in one process: only as --dry-run (a device call holds one)")
    out = args.out.resolve()
    failed = False
    for call in ("proof", "tune"):
        if args.what in ("all", call):
            cap = float(PROOF_CAP_S if call == "proof" else TUNE_CAP_S) * (
                DRY_RUN_SLACK if args.dry_run else 1
            )
            budget = args.budget or (call_budget(call, args.left, args.kind) if args.left else cap)
            files, broken = run_call(call, out, budget, args.dry_run)
            sizes = ", ".join(f"{p.name} {p.stat().st_size / 2**20:.2f} MiB" for p in files)
            print(f"gpu-window: {call}: {sizes}", flush=True)
            failed |= bool(broken)
    # On a GPU the call's files are the answer whatever happened; a dry run is CI's test of the logic.
    return 1 if failed and args.dry_run else 0


if __name__ == "__main__":
    sys.exit(main())
