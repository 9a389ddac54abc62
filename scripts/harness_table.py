"""The harness table of the GPU bring-up (issue 12 item 3), for ``scripts/gpu-suite harness``.

``python scripts/harness_table.py measure --json FILE [--device cpu]`` measures, in this one process:

- copy bandwidth (a device-to-device copy, read + write bytes over the median time);
- the L2 flush, by writing (``zero_`` of 2 x L2, what ``CudaTimer`` does by default) and by
  reading (a sum over the same buffer): its own time, and the time of a small kernel right after
  it, which shows whether a written flush leaves dirty lines that the next kernel pays for;
- the gate size and the clocks seen (the timer's facts and an NVML sample after the convs);
- the median of a cuDNN conv in three size classes (>= 50 us, 10-50 us, < 10 us on an H100) with
  this plugin's timer (``measure_one``) and with ``triton.testing.do_bench`` when it is there.

The timer flushes as ``$CONVPERF_L2_FLUSH`` (``write``/``read``) says. ``gpu-suite`` runs this in 5
fresh processes per flush mode, then ``python scripts/harness_table.py merge --out DIR FILE...``
writes ``harness.md`` and ``harness.json``: the run-to-run spread of each median across processes
next to do_bench's, against the targets (drift <= 1 % / 2 % / 3 % by class).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLUSH_ENV = "CONVPERF_L2_FLUSH"
DRIFT_TARGET = {"large": 0.01, "medium": 0.02, "small": 0.03}
AFTER_FLUSH_REPS = 50


def _problems(is_cuda: bool) -> dict[str, Any]:
    from pytest_convperf.core.problem import Conv2dProblem

    if is_cuda:  # chosen for an H100; the table names the class each median actually falls in
        return {
            "large": Conv2dProblem(n=32, c_in=64, h=112, w=112, c_out=64, kernel=(3, 3), padding=(1, 1)),
            "medium": Conv2dProblem(n=16, c_in=32, h=112, w=112, c_out=32, padding=(1, 1), groups=32),
            "small": Conv2dProblem(n=1, c_in=32, h=28, w=28, c_out=32, padding=(1, 1), groups=32),
        }
    return {  # the dry run: small enough for a shared CPU
        "large": Conv2dProblem(n=1, c_in=16, h=32, w=32, c_out=16, kernel=(3, 3), padding=(1, 1)),
        "medium": Conv2dProblem(n=1, c_in=16, h=16, w=16, c_out=16, padding=(1, 1), groups=16),
        "small": Conv2dProblem(n=1, c_in=8, h=8, w=8, c_out=8, padding=(1, 1), groups=8),
    }


def _size_class(median_s: float) -> str:
    return "large" if median_s >= 50e-6 else "medium" if median_s >= 10e-6 else "small"


def _elapsed(is_cuda: bool, before: Callable[[], object], fn: Callable[[], object]) -> float:
    """Median time of ``fn`` right after ``before`` (CUDA events on a GPU, perf_counter on a CPU)."""
    import torch

    from pytest_convperf.core import stats

    times = []
    for _ in range(AFTER_FLUSH_REPS):
        before()
        if is_cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return stats.median(times)


def measure(device_pref: str) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from pytest_convperf.core.device import resolve_device
    from pytest_convperf.measure.rounds import measure_one
    from pytest_convperf.measure.timers import make_timer

    device = resolve_device(device_pref)
    timer = make_timer(device)
    dev = device.torch_device
    is_cuda = device.is_cuda
    out: dict[str, Any] = {"device": device.slug, "flush_mode": os.environ.get(FLUSH_ENV, "write")}

    copy_bytes = 2**30 if is_cuda else 2**24
    src = torch.empty(copy_bytes // 4, dtype=torch.float32, device=dev).fill_(1.0)
    dst = torch.empty_like(src)
    copy = measure_one(timer, lambda: dst.copy_(src), mode="warm")
    out["copy_bandwidth_gbs"] = 2 * copy_bytes / copy.median / 1e9

    l2 = device.l2_bytes or 50 * 2**20
    flush_buf = torch.zeros(2 * l2 // 4, dtype=torch.int32, device=dev)
    small = torch.ones(2**21, dtype=torch.float32, device=dev)  # 8 MiB: fits in L2
    flushes: dict[str, Callable[[], object]] = {"write": flush_buf.zero_, "read": flush_buf.sum}
    out["l2_flush"] = {
        name: {
            "flush_us": measure_one(timer, fn, mode="warm").median * 1e6,
            "next_kernel_us": _elapsed(is_cuda, fn, lambda: small.mul_(1.0)) * 1e6,
        }
        for name, fn in flushes.items()
    }

    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    convs = {}
    for label, problem in _problems(is_cuda).items():
        x, w, b = problem.make_inputs(0, dev)
        conv = functools.partial(F.conv2d, x, w, b, *problem.conv_args())

        ours = measure_one(timer, conv, mode="auto" if is_cuda else "cold")
        row: dict[str, Any] = {
            "problem": problem.id,
            "convperf_median_s": ours.median,
            "convperf_rounds": ours.n,
            "convperf_mode": ours.mode,
            "convperf_noisy": ours.noisy,
            "class": _size_class(ours.median),
        }
        if do_bench is not None and is_cuda:
            row["do_bench_median_s"] = float(do_bench(conv, return_mode="median")) * 1e-3
        convs[label] = row
    out["convs"] = convs
    out["timer_facts"] = timer.facts()
    clock = device.sample_clocks()
    out["clocks"] = None if clock is None else asdict(clock)
    return out


def merge(files: Sequence[Path]) -> tuple[dict[str, Any], str]:
    """Per flush mode: medians across processes, their spread, and the same for do_bench."""
    from pytest_convperf.core import stats

    runs = [json.loads(f.read_text()) for f in files]
    table: dict[str, Any] = {}
    lines = ["# Harness table", ""]
    for mode in sorted({r["flush_mode"] for r in runs}):
        group = [r for r in runs if r["flush_mode"] == mode]
        entry: dict[str, Any] = {
            "processes": len(group),
            "copy_bandwidth_gbs": stats.median([r["copy_bandwidth_gbs"] for r in group]),
            "l2_flush": {
                name: {
                    k: stats.median([r["l2_flush"][name][k] for r in group])
                    for k in ("flush_us", "next_kernel_us")
                }
                for name in ("write", "read")
            },
            "gate_us": sorted({round(r["timer_facts"].get("gate_us") or 0.0, 1) for r in group}),
            "sm_mhz": sorted({(r["clocks"] or {}).get("sm_mhz") for r in group}, key=str),
            "convs": {},
        }
        lines += [
            f"## Timer flushing by {mode} ({len(group)} fresh processes, {group[0]['device']})",
            "",
            f"copy bandwidth {entry['copy_bandwidth_gbs']:.1f} GB/s; gate {entry['gate_us']} us; "
            f"SM clocks {entry['sm_mhz']} MHz",
            "",
            "| L2 flush by | flush us | next kernel us |",
            "|---|---:|---:|",
            *(
                f"| {n} | {v['flush_us']:.1f} | {v['next_kernel_us']:.1f} |"
                for n, v in entry["l2_flush"].items()
            ),
            "",
            "| conv | class | convperf median us | spread | do_bench median us | do_bench spread | target |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for label in group[0]["convs"]:
            ours = [r["convs"][label]["convperf_median_s"] for r in group]
            theirs = [
                r["convs"][label]["do_bench_median_s"]
                for r in group
                if "do_bench_median_s" in r["convs"][label]
            ]
            cls = _size_class(stats.median(ours))
            row = {
                "problem": group[0]["convs"][label]["problem"],
                "class": cls,
                "convperf_median_us": stats.median(ours) * 1e6,
                "convperf_spread": stats.relative_spread(ours),
                "do_bench_median_us": stats.median(theirs) * 1e6 if theirs else None,
                "do_bench_spread": stats.relative_spread(theirs) if len(theirs) > 1 else None,
                "drift_target": DRIFT_TARGET[cls],
            }
            entry["convs"][label] = row
            db = "n/a" if row["do_bench_median_us"] is None else f"{row['do_bench_median_us']:.2f}"
            dbs = "n/a" if row["do_bench_spread"] is None else f"{row['do_bench_spread']:.2%}"
            ours_text = f"{row['convperf_median_us']:.2f} | {row['convperf_spread']:.2%}"
            lines.append(
                f"| {row['problem']} | {cls} | {ours_text} | {db} | {dbs} | {row['drift_target']:.0%} |"
            )
        lines.append("")
        table[mode] = entry
    return table, "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/harness_table.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="one process's measurements, as JSON")
    m.add_argument("--json", type=Path, required=True)
    m.add_argument("--device", default="auto")
    g = sub.add_parser("merge", help="harness.md and harness.json from the measure files")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "measure":
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(measure(args.device), indent=1))
        return 0
    table, text = merge(args.files)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "harness.json").write_text(json.dumps(table, indent=1))
    (args.out / "harness.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
