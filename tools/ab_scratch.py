"""Scratch git repositories for the A/B and bisect: tests use them, and ``main`` measures with them.

``make_repo(path, slow_from=k, n_commits=n, kind=...)`` writes a tiny suite (one convperf check of
``kernels/depthwise/reference.py``'s ``forward`` on a small depthwise problem) and commits it n
times; commits ``k``.. (1-based) carry a slowdown:

* ``kind="depthwise"``: the real depthwise reference (copied from this repository) and, from commit
  k, a few extra tap products per output row (about 20 % more time at the shape below);
* ``kind="sleep"``: a candidate that sleeps ``FAST_S`` (``SLOW_S`` from commit k) and then calls
  ``F.conv2d``: a change the CPU timer sees at any load;
* ``kind="fake"``: the sleep candidate without the sleep; it logs its revision's cost (``FAST_S``
  or ``SLOW_S``) in ``costlog.COSTS`` and a conftest's fake timer replays it (with a 1 % wobble):
  the A/B and bisect logic end to end in seconds, for CI.
* ``kind="slowed"``: this repository's ``kernels/`` copied whole, and a candidate ``cand.forward``:
  the depthwise reference, from commit k spending 30 % more thread CPU time (``--fraction``);
  issue 36's A/B gate measurement.

CLI (the measurements in docs/ab.md)::

    python tools/ab_scratch.py ab|self|bisect|baseline --runs N --out DIR [--kind depthwise|slowed]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pytest_convperf.ab.bisect import pytest_command
from tools.cpu_false_alarm import CONFTEST as BANDWIDTH_CONFTEST

HERE = Path(__file__).resolve().parent.parent
_PYCACHE = shutil.ignore_patterns("__pycache__")
PROBLEM = "Conv2dProblem(n=1, c_in=16, h=24, w=24, c_out=16, kernel=(3, 3), padding=(1, 1), groups=16)"
FAST_S, SLOW_S = 0.002, 0.003
# Extra tap products per output row: ~20 % more time for the 3x3 problem above (measured).
EXTRA = "            _ = xp[:, :, rows, cols] * taps[:, 0, i, 0].view(1, channels, 1, 1)\n"
ANCHOR = "            out = term if out is None else out + term\n"

TEST = f"""
import pytest
from kernels.depthwise import reference
from pytest_convperf.core.problem import Conv2dProblem


@pytest.mark.convperf
def test_dw(convperf):
    convperf.check(reference.forward, {PROBLEM})
"""

SLEEP_REF = """
import time

import costlog
import torch.nn.functional as F

DELAY = {delay}


def forward(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    {action}
    return F.conv2d(input, weight, bias, stride, padding, dilation, groups)
"""

SLOWED_FRACTION = 0.3
# The candidate spends ``fraction`` more of its own thread CPU time: exactly that much slower at any
# shape (the control kernels._controls.cpu.slowed(0.3) redoes 30 % of the channels, which costs 55 %
# at this shape: its extra call's fixed overhead is not 30 % of the work).
CAND = """
import time

from kernels.depthwise import reference

FRACTION = {fraction}


def forward(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    start = time.thread_time()
    out = reference.forward(input, weight, bias, stride, padding, dilation, groups)
    end = time.thread_time() + FRACTION * (time.thread_time() - start)
    while time.thread_time() < end:
        pass
    return out
"""
# tools/cpu_false_alarm.py's problem: big enough that the control's extra channels cost their share.
PROBLEM_SLOWED = "Conv2dProblem(n=1, c_in=32, h=56, w=56, c_out=32, kernel=(3, 3), padding=(1, 1), groups=32)"
TEST_SLOWED = (
    TEST.replace("from kernels.depthwise import reference", "import cand")
    .replace("reference.forward", "cand.forward")
    .replace(PROBLEM, PROBLEM_SLOWED)
)

COSTLOG = "COSTS = []\n"
FAKE_CONFTEST = """
import pytest
import costlog
from pytest_convperf.measure.fake import FakeTimer


def _duration(name, index):
    # The candidate's own revision logged its cost; the reference (F.conv2d) logs nothing.
    base = costlog.COSTS.pop() if costlog.COSTS else 0.002
    return base * (1 + 0.01 * ((index * 7919) % 13 - 6) / 6)


@pytest.fixture
def convperf_timer():
    return FakeTimer(_duration)
"""

PYPROJECT = """[tool.pytest.ini_options]
pythonpath = ["."]
"""


def git(root: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True
    ).stdout


def reference_source(kind: str, slow: bool) -> str:
    if kind in ("sleep", "fake"):
        action = "time.sleep(DELAY)" if kind == "sleep" else "costlog.COSTS.append(DELAY)"
        return SLEEP_REF.format(delay=SLOW_S if slow else FAST_S, action=action)
    text = (HERE / "kernels" / "depthwise" / "reference.py").read_text()
    assert ANCHOR in text
    return text.replace(ANCHOR, ANCHOR + EXTRA.replace("            ", "        ", 1)) if slow else text


def make_repo(
    path: Path,
    *,
    slow_from: int | None = 2,
    n_commits: int = 2,
    kind: str = "depthwise",
    fraction: float = SLOWED_FRACTION,
) -> list[str]:
    """Create the repository; return its commit hashes, oldest first."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / "kernels" / "depthwise").mkdir(parents=True, exist_ok=True)
    (path / "kernels" / "__init__.py").write_text("")
    (path / "kernels" / "depthwise" / "__init__.py").write_text("")
    (path / "pyproject.toml").write_text(PYPROJECT)
    (path / "test_dw.py").write_text(TEST_SLOWED if kind == "slowed" else TEST)
    if kind == "slowed":
        shutil.copytree(HERE / "kernels", path / "kernels", dirs_exist_ok=True, ignore=_PYCACHE)
        (path / "conftest.py").write_text(BANDWIDTH_CONFTEST)
    (path / "costlog.py").write_text(COSTLOG)
    if kind == "fake":
        (path / "conftest.py").write_text(FAKE_CONFTEST)
    shas = []
    for k in range(1, n_commits + 1):
        slow = slow_from is not None and k >= slow_from
        if kind == "slowed":
            (path / "cand.py").write_text(CAND.format(fraction=fraction if slow else 0.0))
        else:
            (path / "kernels" / "depthwise" / "reference.py").write_text(reference_source(kind, slow))
        if kind == "depthwise":  # the reference parses its arguments with the kernels' shared module
            (path / "kernels" / "conv_args.py").write_text((HERE / "kernels" / "conv_args.py").read_text())
        (path / "notes.txt").write_text(f"commit {k}\n")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"commit {k}" + (" (slow)" if slow else ""))
        shas.append(git(path, "rev-parse", "HEAD").strip())
    return shas


def run_pytest(repo: Path, *args: str, report: Path) -> tuple[float, list[dict[str, object]]]:
    """One ``pytest --convperf`` session in ``repo``; returns (wall seconds, rows)."""
    start = time.perf_counter()
    cmd = pytest_command(f"--convperf-report={report}", "--convperf-machine=scratch", *args)
    subprocess.run(cmd, cwd=repo, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    rows = json.loads((report / "rows.json").read_text()) if (report / "rows.json").is_file() else []
    return wall, rows


def _main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("ab", "self", "bisect", "baseline", "twoproc"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--kind", choices=("depthwise", "slowed"), default="depthwise")
    ap.add_argument("--fraction", type=float, default=SLOWED_FRACTION, help="kind slowed: the control's")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    out: Path = args.out
    results = []
    if args.what == "twoproc":
        # Interleaving two processes: A's and REF's (identical) trees, each timed against F.conv2d in its
        # own pytest session, alternately; the A/B ratio is the quotient of the two sessions' ratios.
        import math

        repo = out / "repo"
        make_repo(repo, slow_from=None, n_commits=2)
        ref = out / "ref"
        git(repo, "worktree", "add", "--detach", str(ref), "HEAD~1")
        ratios = []
        for i in range(args.runs):
            wa, ra = run_pytest(repo, report=out / f"a{i}")
            wb, rb = run_pytest(ref, report=out / f"b{i}")
            q = ra[0]["comparison"]["time_ratio"] / rb[0]["comparison"]["time_ratio"]
            ratios.append(q)
            print(json.dumps({"run": i, "wall_s": round(wa + wb, 1), "ratio": q}), flush=True)
        lr = [math.log(x) for x in ratios]
        print(
            json.dumps({"n": len(ratios), "median": statistics.median(ratios), "sd_ln": statistics.stdev(lr)})
        )
        git(repo, "worktree", "remove", "--force", str(ref))
        return 0
    if args.what == "bisect":
        repo = out / "repo"
        shas = make_repo(repo, slow_from=5, n_commits=8)
        for i in range(args.runs):
            start = time.perf_counter()
            res = subprocess.run(
                [sys.executable, "-m", "pytest_convperf", "bisect", shas[0], shas[-1], "--", "test_dw.py"],
                cwd=repo,
                capture_output=True,
                text=True,
                check=False,
            )
            wall = time.perf_counter() - start
            tail = res.stdout.strip().splitlines()[-3:]
            results.append(
                {
                    "run": i,
                    "wall_s": wall,
                    "rc": res.returncode,
                    "tail": tail,
                    "named_5": shas[4][:10] in res.stdout.strip().splitlines()[-1] if tail else False,
                }
            )
            print(json.dumps(results[-1]), flush=True)
    else:
        repo = out / "repo"
        slow_from = 2 if args.what != "self" else None
        make_repo(repo, slow_from=slow_from, n_commits=2, kind=args.kind, fraction=args.fraction)
        for i in range(args.runs):
            report = out / f"r{i}"
            extra = ["--convperf-against=HEAD~1"] if args.what in ("ab", "self") else []
            if args.what == "baseline":
                extra = [f"--convperf-baselines={out / 'baselines'}"]
                if i == 0:
                    extra.append("--convperf-update-baselines=all")
            wall, rows = run_pytest(repo, *extra, report=report)
            row = rows[0] if rows else {}
            ab = (row.get("facts") or {}).get("ab") if isinstance(row, dict) else None
            comp = row.get("comparison") or {} if isinstance(row, dict) else {}
            rec = {
                "run": i,
                "wall_s": round(wall, 1),
                "verdict": row.get("verdict") if row else None,
                "ab": ab["result"] if ab else None,
                "time_ratio": comp.get("time_ratio"),
            }
            results.append(rec)
            print(json.dumps(rec), flush=True)
        ratios = [r["ab"]["ratio"] for r in results if r["ab"]] or [
            r["time_ratio"] for r in results if r["time_ratio"]
        ]
        if len(ratios) >= 2:
            import math

            lr = [math.log(x) for x in ratios]
            print(
                json.dumps(
                    {"n": len(ratios), "median": statistics.median(ratios), "sd_ln": statistics.stdev(lr)}
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(_main())
