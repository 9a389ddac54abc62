"""Stages of a GPU session, each ending in under 9 minutes on an H100 (issue 13 §4).

``scripts/gpu-suite [--dry-run] [--out DIR] STAGE...`` with STAGE one of:

- ``check``: environment report (nvidia-smi, driver, torch/cuDNN/triton/nvcc versions); prebuild
  every family (``python -m kernels._build --all``, the arch policy ``load()`` uses); the CUDA
  tests and opcheck (the tier less its CPU-only emulator files); compute-sanitizer memcheck and
  racecheck over the ``sanitize``-marked tests (``-m sanitize``: one small shape per family and its
  controls, tests/kernels/sanitizer.py), each capped at ``SANITIZER_STEP_TIMEOUT_S``.
- ``plan``: print the suite's split and how each part was estimated (nothing runs).
- ``suite-<k>``: part k of ``pytest perf_tests --convperf``, split so each part fits the budget.
- ``harness``: the harness table (issue 12 item 3): ``scripts/harness_table.py`` in 5 fresh
  processes with the timer's L2 flush by writing, then by reading (``CONVPERF_L2_FLUSH=write|read``),
  merged into ``report/harness/harness.md``; and ``perf_tests/test_harness.py`` once per mode.
- ``collect``: baselines, reports and logs into ``<out>/gpu-suite.tar.gz`` (at most 16 MiB).
- ``all``: every stage above in order (``plan`` excepted).

Each stage writes ``<out>/logs/<stage>.log`` and exits non-zero naming the step that failed.
``--dry-run`` runs the same stages on the CPU with small budgets (CI runs it): GPU tools that are
absent are reported as absent, pytest runs with ``--convperf-device=cpu``, the CUDA-test step only
collects (its CUDA tests skip on a CPU; its CPU tests are the plain ``pytest`` run's), one sanitizer
stand-in runs the ``sanitize``-marked selection without the ``compute-sanitizer`` wrapper (the
wrappers are logged; on the CPU those tests skip: it proves the selection collects), the plan is the
GPU's plan but each part runs only its first test, and the harness runs one process per flush mode.

How a part is estimated: every collected ``convperf``-marked test is charged the worst case of one
check under the GPU stop rule, ``warmup_cap_s + max_time_s * (1 + confirm factor 3)`` (2 + 5 x 4 =
22 s), plus ``PER_TEST_OVERHEAD_S`` for inputs, correctness and the reference; other tests are
charged ``PER_TEST_OVERHEAD_S``. Tests are packed in collection order into parts of at most
``PART_BUDGET_S`` (480 s: the 9 minute limit less a minute for start-up, kernel loads and
collection). Almost every check stops far below its caps, so the parts are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PART_BUDGET_S = 480.0
PER_TEST_OVERHEAD_S = 1.0
CONFIRM_FACTOR = 3.0
ARCHIVE_LIMIT = 16 * 2**20
STAGES = ("check", "plan", "suite-<k>", "harness", "collect", "all")
KERNEL_TESTS = ("tests/kernels",)  # the tier of CUDA kernel tests; see kernel_tests()
# CPU-only files of that tier: the CUDA emulator and its host sanitizers (proven in CI, minutes of
# CPU each). On a GPU the device time goes to the real kernels instead.
CPU_ONLY_KERNEL_TESTS = (
    "tests/kernels/test_depthwise_emulated.py",
    "tests/kernels/test_emulated_families.py",
    "tests/kernels/test_sanitized_kernels.py",
)
# The tests that run under compute-sanitizer: a marker, not a -k expression (which selected nothing
# in one file and Hypothesis sweeps in another on the first H100 run). The sanitizer slows a kernel
# 10-100x; each tool must end in about 90 s on an H100 (scripts/gpu-session.sh caps it there).
SANITIZE_MARKER = "sanitize"
SANITIZER_ENV = "CONVPERF_UNDER_SANITIZER"  # tests/kernels/sanitizer.py: tests that must not run under it
SANITIZER_STEP_TIMEOUT_S = 120.0
SANITIZE_HELPERS = "tests/kernels/sanitizer.py"
HARNESS_RUNS = 5
DRY_RUN_STEP_TIMEOUT_S = 1800.0


class StepFailed(RuntimeError):
    """One step of a stage failed; the message names the stage and the step."""


@dataclass
class Runner:
    out: Path
    dry_run: bool
    log: Path | None = None
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    # --keep-going: a failed step is logged and the stage goes on; the stage fails at its end.
    keep_going: bool = False
    failed: list[str] = field(default_factory=list)
    # --record REASON: suite parts record every check as the new baseline with this reason.
    record: str | None = None

    def start(self, stage: str) -> None:
        logs = self.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log = logs / f"{stage}.log"
        self.log.write_text(f"# gpu-suite {stage} (dry_run={self.dry_run}) {time.strftime('%F %T')}\n")

    def note(self, text: str) -> None:
        print(text, flush=True)
        assert self.log is not None
        with self.log.open("a") as f:
            f.write(text + "\n")

    def step(
        self,
        stage: str,
        name: str,
        cmd: Sequence[str],
        *,
        timeout: float = 540.0,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        """Run one command, its output into the stage's log; raise ``StepFailed`` naming it."""
        assert self.log is not None
        if self.dry_run:
            # The limits are the GPU's 9 minute budget; a shared CPU (cold nvcc builds) needs more.
            timeout = max(timeout, DRY_RUN_STEP_TIMEOUT_S)
        self.note(f"## step {name}: {shlex.join(cmd)}")
        start = time.monotonic()
        with self.log.open("a") as f:
            try:
                env = self.env | (extra_env or {})
                rc = subprocess.run(
                    list(cmd), cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout
                ).returncode
            except subprocess.TimeoutExpired:
                rc = -1
            except FileNotFoundError as exc:
                f.write(f"{exc}\n")
                rc = 127
        self.note(f"## step {name}: rc={rc} in {time.monotonic() - start:.1f} s")
        if rc != 0:
            self.fail(f"stage {stage}: step {name!r} failed (rc={rc}); see {self.log}")

    def fail(self, message: str) -> None:
        """A failed step: raise ``StepFailed``, or with --keep-going log it and go on."""
        if not self.keep_going:
            raise StepFailed(message)
        self.failed.append(message)
        print(f"gpu-suite: {message} (going on: --keep-going)", file=sys.stderr, flush=True)


def python() -> str:
    return sys.executable


def pytest_cmd(runner: Runner, *args: str) -> list[str]:
    cmd = [python(), "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    if runner.dry_run:
        cmd.append("--convperf-device=cpu")
    return cmd


def kernel_tests() -> list[str]:
    """The CUDA kernel tests: the ``tests/kernels`` tier, or today's per-family files before it lands."""
    tier = [p for p in KERNEL_TESTS if (ROOT / p).is_dir()]
    if tier:
        return tier
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*kernels*.py"))


# ---- stages ----------------------------------------------------------------------------------


def stage_check(runner: Runner) -> None:
    env_report = (
        "import torch, platform; print('python', platform.python_version());"
        "print('torch', torch.__version__, 'cuda', torch.version.cuda);"
        "print('cudnn', torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None);"
        "print('gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None);"
        "import importlib.util as u;"
        "print('triton', __import__('triton').__version__ if u.find_spec('triton') else None);"
        "from kernels import _build; print('archs', _build.default_archs(), 'nvcc', _build.nvcc_path())"
    )
    runner.step("check", "environment", [python(), "-c", env_report])
    for tool, args in (("nvidia-smi", []), ("nvcc", ["--version"]), ("compute-sanitizer", ["--version"])):
        if shutil.which(tool) is None:
            if not runner.dry_run:
                raise StepFailed(f"stage check: step {tool!r} failed: {tool} is not on PATH")
            runner.note(f"## step {tool}: absent (dry run)")
            continue
        runner.step("check", tool, [tool, *args])
    if shutil.which("nvidia-smi"):
        runner.step("check", "clocks", ["nvidia-smi", "-q", "-d", "CLOCK,PERFORMANCE,POWER"])
    runner.step("check", "prebuild", [python(), "-m", "kernels._build", "--all"], timeout=540)
    tests = kernel_tests()
    # The CPU-only emulator files take minutes of CPU and prove nothing about the device; CI's
    # ``pytest`` runs them. The dry run runs the GPU's command, so it skips them too.
    ignore = [f"--ignore={p}" for p in CPU_ONLY_KERNEL_TESTS if (ROOT / p).exists()]
    cmd = pytest_cmd(runner, *tests, *ignore)
    if runner.dry_run:
        # Without a GPU every CUDA test skips and the rest is the tier's CPU tests, which the plain
        # ``pytest`` run (CI's "tests" step) runs: collecting proves the command, in seconds not minutes.
        runner.note(
            "## dry run: CUDA tests skip on the CPU; collect only (the CPU tests run in plain pytest)"
        )
        cmd.append("--collect-only")
    runner.step("check", "cuda-tests-and-opcheck", cmd)
    check_sanitize_selection(runner, tests)
    for tool in ("memcheck", "racecheck"):
        cmd = pytest_cmd(runner, *sanitizer_args(tests))
        wrapped = ["compute-sanitizer", f"--tool={tool}", "--error-exitcode=1", "--target-processes=all"]
        if runner.dry_run:
            if tool != "memcheck":  # without the wrapper every tool's stand-in is the same command
                runner.note(f"## dry run: sanitizer-{tool}: the stand-in above, in {shlex.join(wrapped)}")
                continue
            runner.note(
                f"## dry run: sanitizer stand-in, only the {SANITIZE_MARKER!r}-marked tests (skipped without "
                f"a GPU: this proves the selection collects); would wrap in {shlex.join(wrapped)}"
            )
            runner.step("check", f"sanitizer-{tool}", cmd)
        else:
            runner.step(
                "check",
                f"sanitizer-{tool}",
                [*wrapped, *cmd],
                timeout=SANITIZER_STEP_TIMEOUT_S,
                extra_env={SANITIZER_ENV: "1"},
            )


def check_sanitize_selection(runner: Runner, tests: Sequence[str]) -> None:
    """Log what the sanitizer steps will run; fail the step if a family has no marked CUDA test."""
    sys.path.insert(0, str(ROOT))
    from kernels._build import families

    try:
        items = collect_items(sanitizer_args(tests), runner.env)
    except StepFailed as exc:
        runner.fail(f"stage check: sanitize-selection {exc}")
        return
    counts = {f: sum(f in i["sanitize"] for i in items) for f in families()}
    runner.note(f"## sanitize selection: {len(items)} tests; per family {counts}")
    gaps = sanitize_gaps(items, families())
    for gap in gaps:
        runner.note(f"   {gap}")
    if gaps:
        runner.fail(f"stage check: step 'sanitize-selection' failed: {len(gaps)} gaps; see {runner.log}")


def sanitize_gaps(items: Sequence[dict[str, Any]], families: Sequence[str]) -> list[str]:
    """What is wrong with the ``sanitize`` selection (``collect_items`` of ``sanitizer_args``): a
    marked test that is not a CUDA test or names no family, and each family with no marked test."""
    gaps: list[str] = []
    covered: set[str] = set()
    for item in items:
        nodeid = item["nodeid"]
        if not any("CUDA" in r or "GPU" in r for r in item["skipif"]):
            gaps.append(f"{nodeid}: marked sanitize but not a CUDA test (no skipif naming CUDA or a GPU)")
        for family in item["sanitize"]:
            if family is None:
                gaps.append(
                    f"{nodeid}: @sanitize names no family; use @sanitize(family) from {SANITIZE_HELPERS}"
                )
            elif family not in families:
                gaps.append(f"{nodeid}: @sanitize({family!r}) names no family of kernels/")
            else:
                covered.add(family)
    gaps += [
        f"kernels/{f}: no sanitize-marked CUDA test; mark one small CUDA test with @sanitize({f!r}) "
        f"({SANITIZE_HELPERS})"
        for f in families
        if f not in covered
    ]
    return gaps


def sanitizer_args(tests: Sequence[str]) -> list[str]:
    """pytest arguments of the sanitizer steps: the ``sanitize``-marked tests of the kernel tier.

    No ``-x``: one failing test must not hide the others' reports. pytest exits 5 when the marker
    selects nothing, which fails the step rather than passing it empty.
    """
    return [*tests, "-m", SANITIZE_MARKER, "-rs"]


@dataclass(frozen=True)
class Part:
    ids: tuple[str, ...]
    estimate_s: float


def worst_check_s() -> float:
    """Worst case of one check under the GPU stop rule (see the module docstring)."""
    sys.path.insert(0, str(ROOT))
    from pytest_convperf.measure.rule import StopRule

    rule = StopRule()
    return rule.warmup_cap_s + rule.max_time_s * (1 + CONFIRM_FACTOR)


_COLLECT = (
    "import json, sys, pytest\n"
    "class P:\n"
    "    items = []\n"
    "    def pytest_collection_finish(self, session):\n"
    "        self.items = [{\n"
    "            'nodeid': i.nodeid,\n"
    "            'convperf': i.get_closest_marker('convperf') is not None,\n"
    "            'sanitize': [m.args[0] if m.args else None for m in i.iter_markers('sanitize')],\n"
    "            'skipif': [str(m.kwargs.get('reason', '')) for m in i.iter_markers('skipif')],\n"
    "            'fixtures': list(getattr(i, 'fixturenames', ())),\n"
    "        } for i in session.items]\n"
    "p = P()\n"
    "rc = pytest.main(sys.argv[1:], plugins=[p])\n"
    "print('GPU-SUITE-ITEMS ' + json.dumps(p.items))\n"
    "sys.exit(0 if rc in (0, 5) else rc)\n"
)


def collect_items(args: Sequence[str], env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """What ``pytest --collect-only ARGS`` selects, one dict per test: ``nodeid``, ``convperf`` (the
    marker is on it), ``sanitize`` (the families its ``sanitize`` markers name), ``skipif`` (reasons),
    ``fixtures`` (the fixture names it requests: ``convperf`` for a test that makes gated checks)."""
    cmd = [python(), "-c", _COLLECT, *args, "--collect-only", "-q", "-p", "no:cacheprovider"]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    for line in res.stdout.splitlines():
        if line.startswith("GPU-SUITE-ITEMS "):
            items: list[dict[str, Any]] = json.loads(line.split(" ", 1)[1])
            return items
    raise StepFailed(
        f"step 'collect' failed (rc={res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}"
    )


def collect(runner: Runner) -> list[tuple[str, bool]]:
    """``(node id, is a convperf check)`` for every test of ``pytest perf_tests --convperf``."""
    # The harness has its own stage.
    args = ["perf_tests", "--ignore=perf_tests/test_harness.py", "--convperf"]
    if runner.dry_run:
        args.append("--convperf-device=cpu")
    try:
        items = collect_items(args, runner.env)
    except StepFailed as exc:
        raise StepFailed(f"stage plan: {exc}") from exc
    return [(str(i["nodeid"]), bool(i["convperf"])) for i in items]


def split(items: Sequence[tuple[str, bool]], budget_s: float, check_s: float) -> list[Part]:
    """Pack tests in collection order into parts whose estimate stays within ``budget_s``."""
    parts: list[Part] = []
    ids: list[str] = []
    total = 0.0
    for nodeid, is_check in items:
        cost = PER_TEST_OVERHEAD_S + (check_s if is_check else 0.0)
        if ids and total + cost > budget_s:
            parts.append(Part(tuple(ids), total))
            ids, total = [], 0.0
        ids.append(nodeid)
        total += cost
    if ids:
        parts.append(Part(tuple(ids), total))
    return parts


def load_plan(runner: Runner) -> list[Part]:
    """The plan written by ``plan`` (or ``all``) in this ``--out``, else a new one."""
    saved = runner.out / "plan.json"
    if saved.is_file():
        return [Part(tuple(p["ids"]), float(p["estimate_s"])) for p in json.loads(saved.read_text())]
    return plan(runner)


def plan(runner: Runner) -> list[Part]:
    budget = PART_BUDGET_S
    check_s = worst_check_s()
    items = collect(runner)
    parts = split(items, budget, check_s)
    runner.note(
        f"plan: {len(items)} tests ({sum(c for _, c in items)} convperf checks), worst case {check_s:.0f} s "
        f"per check + {PER_TEST_OVERHEAD_S:.0f} s per test, budget {budget:.0f} s per part"
    )
    for k, part in enumerate(parts, 1):
        modules = sorted({i.split("::")[0] for i in part.ids})
        runner.note(f"  suite-{k}: {len(part.ids)} tests, <= {part.estimate_s:.0f} s: {', '.join(modules)}")
    (runner.out / "plan.json").write_text(
        json.dumps([{"ids": p.ids, "estimate_s": p.estimate_s} for p in parts], indent=1)
    )
    return parts


def stage_suite(runner: Runner, stage: str, k: int, parts: Sequence[Part]) -> None:
    if not 1 <= k <= len(parts):
        raise StepFailed(f"stage {stage}: no such part; the plan has suite-1 .. suite-{len(parts)}")
    report = runner.out / "report" / f"suite-{k}"
    args = ["--convperf", f"--convperf-report={report}", f"--junitxml={report / 'junit.xml'}"]
    if runner.record is not None:
        args += ["--convperf-update-baselines=all", f"--convperf-reason={runner.record}"]
    ids = parts[k - 1].ids
    if runner.dry_run:
        args.append("--hypothesis-profile=convperf-dev")
        ids = ids[:1]
    runner.step(stage, "pytest", pytest_cmd(runner, *args, *ids), timeout=570)


def stage_harness(runner: Runner) -> None:
    """``scripts/harness_table.py`` in fresh processes per flush mode, then the merged table;
    and ``perf_tests/test_harness.py`` (the anchors: torch.utils.benchmark, pytest-benchmark)."""
    report = runner.out / "report" / "harness"
    runs = 1 if runner.dry_run else HARNESS_RUNS
    device = ["--device", "cpu"] if runner.dry_run else []
    files = []
    for flush in ("write", "read"):
        runner.env["CONVPERF_L2_FLUSH"] = flush
        for run in range(1, runs + 1):
            # A fresh process per run: the spread across processes is what the table reports.
            out = report / f"{flush}-{run}.json"
            cmd = [python(), "scripts/harness_table.py", "measure", "--json", str(out), *device]
            runner.step("harness", f"flush-{flush}-run-{run}", cmd, timeout=240)
            files.append(str(out))
        cmd = pytest_cmd(
            runner, "perf_tests/test_harness.py", "--convperf", f"--convperf-report={report}/{flush}"
        )
        runner.step("harness", f"anchors-flush-{flush}", cmd, timeout=300)
    runner.env.pop("CONVPERF_L2_FLUSH", None)
    runner.step(
        "harness", "merge", [python(), "scripts/harness_table.py", "merge", "--out", str(report), *files]
    )


def stage_collect(runner: Runner) -> Path:
    archive = runner.out / "gpu-suite.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        parts = {"baselines": ROOT / "baselines", "report": runner.out / "report"}
        parts |= {"logs": runner.out / "logs", "plan.json": runner.out / "plan.json"}
        for name, path in parts.items():
            if path.exists():
                tar.add(path, arcname=name, filter=_skip_traces_over_limit)
    size = archive.stat().st_size
    runner.note(f"collect: {archive} {size / 2**20:.2f} MiB")
    if size > ARCHIVE_LIMIT:
        raise StepFailed(f"stage collect: step 'archive' failed: {size} bytes > {ARCHIVE_LIMIT} (16 MiB)")
    return archive


def _skip_traces_over_limit(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    # Profiler traces can be tens of MiB each; the numbers matter more than every trace.
    return None if info.isfile() and info.size > 4 * 2**20 else info


def run_stage(runner: Runner, stage: str) -> None:
    runner.start(stage)
    if stage == "check":
        stage_check(runner)
    elif stage == "plan":
        plan(runner)
    elif stage.startswith("suite-"):
        try:
            k = int(stage.removeprefix("suite-"))
        except ValueError as exc:
            raise StepFailed(f"stage {stage}: not of the form suite-<k> with k a number") from exc
        stage_suite(runner, stage, k, load_plan(runner))
    elif stage == "harness":
        stage_harness(runner)
    elif stage == "collect":
        stage_collect(runner)
    else:
        raise StepFailed(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu-suite", description=__doc__.split("\n")[0])
    parser.add_argument("stages", nargs="+", help=f"one or more of {', '.join(STAGES)}")
    parser.add_argument("--dry-run", action="store_true", help="the same stages on the CPU, small budgets")
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-suite-out", help="logs, report, archive")
    parser.add_argument("--keep-going", action="store_true", help="log a failed step and go on")
    parser.add_argument("--record", metavar="REASON", help="suite parts record every check as the baseline")
    args = parser.parse_args(argv)
    runner = Runner(
        out=args.out.resolve(), dry_run=args.dry_run, keep_going=args.keep_going, record=args.record
    )
    runner.env.setdefault("MAX_JOBS", "16" if not args.dry_run else "2")
    stages: list[str] = []
    for stage in args.stages:
        if stage == "all":
            runner.start("plan")
            n_parts = len(plan(runner))
            stages += ["check", *(f"suite-{k}" for k in range(1, n_parts + 1)), "harness", "collect"]
        else:
            stages.append(stage)
    failed_stages: list[str] = []
    for stage in stages:
        start = time.monotonic()
        runner.failed = []
        try:
            run_stage(runner, stage)
            if runner.failed:
                raise StepFailed("; ".join(runner.failed))
        except StepFailed as exc:
            print(f"gpu-suite: FAILED {exc}", file=sys.stderr)
            failed_stages.append(stage)
            if runner.keep_going:
                continue
            if stage != "collect" and "collect" in stages:
                _collect_anyway(runner)
            return 1
        print(f"gpu-suite: stage {stage} passed in {time.monotonic() - start:.0f} s", flush=True)
    if failed_stages:
        print(f"gpu-suite: failed stages: {', '.join(failed_stages)}", file=sys.stderr)
        return 1
    return 0


def _collect_anyway(runner: Runner) -> None:
    """A failed stage still leaves its logs in the archive: that is what the session needs most."""
    try:
        runner.start("collect")
        stage_collect(runner)
    except StepFailed as exc:
        print(f"gpu-suite: FAILED {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
