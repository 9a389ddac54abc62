"""A conv measured against itself: the harness's own bias on the CPU (issue 24 item 1).

Runs ``--sessions`` pytest sessions (fresh processes), each with ``--measurements`` tests calling
``convperf.measure(same, P)`` where ``same`` is ``F.conv2d`` behind a Python function (so the two
sides are distinct callables doing identical work): 4x32x56x56, k3, CPU, 1 thread. Prints every
time ratio with its 95 % CI, then the summary against the goal: every ratio within 2 % of 1 and
the CI covering 1 in at least 17 of 18. ``--busy N`` starts N busy loops beside it (and stops
them, by their own process ids, at the end); the load average is printed before and after.

Usage::

    python tools/self_measure.py                 # quiet (as quiet as the box is)
    python tools/self_measure.py --busy 2        # two busy loops beside it
    python tools/self_measure.py --dump r.json   # keep every measurement's rounds (log ratios)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SUITE = """
import json
import os

import pytest
import torch.nn.functional as F

from pytest_convperf.core.problem import Conv2dProblem

P = Conv2dProblem(n=4, c_in=32, h=56, w=56, c_out=32, kernel=3, padding=1)


def same(x, w, b, *args):
    return F.conv2d(x, w, b, *args)


@pytest.mark.parametrize("i", range(int(os.environ["SELF_MEASUREMENTS"])))
def test_self(convperf, i):
    c = convperf.measure(same, P)
    with open(os.environ["SELF_OUT"], "a") as f:
        f.write(json.dumps({"i": i, "ratio": c.time_ratio, "ci": list(c.time_ratio_ci),
                            "n": c.n_rounds, "noisy": c.noisy, "log_ratios": list(c.log_ratios),
                            "stop": c.facts.get("stop")}) + "\\n")
"""


def load_avg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def session(folder: Path, measurements: int, index: int) -> list[dict[str, Any]]:
    out = folder / f"session{index}.jsonl"
    env = {**os.environ, "SELF_MEASUREMENTS": str(measurements), "SELF_OUT": str(out)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]),) if p)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--convperf",
           "--convperf-device=cpu", "test_self.py"]  # fmt: skip
    res = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        sys.exit(f"session {index} failed:\n{res.stdout[-3000:]}{res.stderr[-2000:]}")
    return [json.loads(line) for line in out.read_text().splitlines()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--measurements", type=int, default=6)
    ap.add_argument("--busy", type=int, default=0, help="busy loops to run beside it")
    ap.add_argument("--bound", type=float, default=0.02, help="allowed |ratio - 1|")
    ap.add_argument("--dump", type=Path, help="write the measurements, rounds too, as JSON")
    args = ap.parse_args(argv)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    print(f"busy loops: {args.busy}; load average before: {load_avg()}", flush=True)
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "test_self.py").write_text(SUITE)
            for s in range(args.sessions):
                for r in session(folder, args.measurements, s):
                    lo, hi = r["ci"]
                    print(f"session {s} measurement {r['i']}: ratio {r['ratio']:.4f} CI [{lo:.4f}, {hi:.4f}]"
                          f" rounds {r['n']}{' noisy' if r['noisy'] else ''}", flush=True)  # fmt: skip
                    rows.append(r)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"load average after: {load_avg()}")
    if args.dump is not None:
        args.dump.write_text(json.dumps(rows))
    ratios = [float(r["ratio"]) for r in rows]
    within = sum(abs(x - 1) <= args.bound for x in ratios)
    covering = sum(float(r["ci"][0]) <= 1.0 <= float(r["ci"][1]) for r in rows)
    print(
        f"ratios {min(ratios):.4f}-{max(ratios):.4f}; within {args.bound:.0%} of 1: {within}/{len(rows)}; "
        f"CI covers 1: {covering}/{len(rows)}"
    )
    ok = within == len(rows) and covering >= len(rows) - len(rows) // 18
    print("GOAL MET" if ok else "GOAL NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
