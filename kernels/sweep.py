"""A fixed-repetition sweep of every family's variants: ``python -m kernels.sweep FAMILY... --out DIR``.

The adaptive pytest suite answers "did this check regress"; tuning needs many variants measured in a
few minutes of a GPU window, so this tool times each :class:`kernels.sweep_case.Case` of
``kernels/<family>/sweep_plan.py`` with a fixed number of cold repetitions (no adaptive stopping):
per repetition the L2 is flushed by reading a 2 x L2 buffer (``pytest_convperf.read_flush``,
the suite's default flush) and the call is timed with CUDA events. Per problem it adds anchors:

- ``copy``: a device-to-device copy moving the problem's bytes (read + write): what the memory
  system gives this size, the ceiling a memory-bound kernel is held to;
- ``cudnn-<dtype>-<layout>``: ``F.conv2d`` (cuDNN) on the same problem and phase in fp16 NCHW, fp16
  channels_last, and the problem's own dtype in both layouts (fp32 where the problem is fp32).

Rows are measured in :func:`order_by_goals`'s order: those that decide the 13 goals of
docs/tuning-log.md (``kernels/sweep_goals.py``) first, so a sweep cut at its cap still decides them;
the CSVs are rewritten every :data:`CHUNK_ROWS` rows. One CSV per family, ``DIR/<family>.csv``,
columns :data:`COLUMNS`: ``median_us`` and ``spread``
(IQR / median) over the repetitions; ``pct_hbm_spec`` is the time to move ``bytes`` at the GPU's
datasheet bandwidth (``pytest_convperf.spec_peak``) over the median; ``reference_us`` is the cuDNN
anchor of the row's own dtype, layout and phase; ``note`` holds an error a case raised (its time
columns are then empty). ``--dry-run`` lists the plan and its estimated GPU time without CUDA; without
a GPU and without ``--dry-run`` the sweep stops, saying it needs one.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from kernels._build import families as all_families
from kernels.sweep_calls import conv_call
from kernels.sweep_case import Call, Case
from kernels.sweep_goals import goal_rank
from pytest_convperf import Conv2dProblem, read_flush, resolve_device, spec_peak

COLUMNS = (
    "family", "variant", "problem", "phase", "dtype", "reps", "median_us", "spread", "bytes",
    "pct_hbm_spec", "reference_us", "predicted_us", "machine", "note",
)  # fmt: skip
DEFAULT_REPS = 100
WARMUP_CALLS = 3
# The plan's estimate of one case on an H100 (an upper bound, for the window's budget): inputs made on
# the CPU and copied over, the forward graph of a gradient phase and the warm-up calls; then per
# repetition the 2 x L2 read flush (196 us measured on the first H100 window, docs/results-*), the
# host's enqueue, and the call at no better than half the copy bandwidth (3.0 TB/s measured).
CASE_SETUP_S = 0.3
FLUSH_S = 200e-6
ENQUEUE_S = 50e-6
ESTIMATE_BYTES_PER_S = 1.5e12
ANCHOR_LAYOUTS = ("nchw", "nhwc")
# torch.cuda's stubs leave Event untyped (as pytest_convperf.measure.cuda notes).
_CUDA: Any = torch.cuda


@dataclass(frozen=True)
class Planned:
    """A case to time and the anchor it is compared with (its own dtype, layout and phase)."""

    case: Case
    dtype: str
    reference: str | None  # the anchor's variant name, None for anchors themselves


def kernel_families() -> list[str]:
    """The families a sweep covers: every kernels/ family but the negative controls (``_controls``)."""
    return [f for f in all_families() if not f.startswith("_")]


def family_cases(family: str) -> list[Case]:
    """``kernels/<family>/sweep_plan.py``'s ``cases()``; a family without one raises naming the file."""
    try:
        module = importlib.import_module(f"kernels.{family}.sweep_plan")
    except ModuleNotFoundError as exc:
        if exc.name != f"kernels.{family}.sweep_plan":
            raise
        raise SystemExit(
            f"kernels.sweep: kernels/{family}/sweep_plan.py is missing; write its cases() -> list[Case] "
            f"(see kernels/sweep_case.py), or pick from: {', '.join(kernel_families())}"
        ) from exc
    cases: list[Case] = module.cases()
    return cases


def anchor_name(dtype: str, layout: str) -> str:
    return f"cudnn-{dtype}-{layout}"


def anchor_cases(family: str, cases: Iterable[Case]) -> list[Case]:
    """The copy per problem and the cuDNN anchors per (problem, phase), each once."""
    out: dict[tuple[str, str, str], Case] = {}
    for case in cases:
        problem = Conv2dProblem.from_id(case.problem_id)
        copy_key = (problem.id, "copy", "copy")
        if copy_key not in out:
            out[copy_key] = Case(
                family, "copy", problem.id, "copy", problem.min_bytes, copy_call(problem.min_bytes)
            )
        for dtype in dict.fromkeys(("fp16", problem.dtype)):
            for layout in ANCHOR_LAYOUTS:
                anchor = problem.replace(dtype=dtype, layout=layout)
                key = (anchor.id, anchor_name(dtype, layout), case.phase)
                if key not in out:
                    call = conv_call(F.conv2d, anchor, case.phase)
                    out[key] = Case(family, key[1], anchor.id, case.phase, case.bytes_moved, call)
    return list(out.values())


def copy_call(nbytes: int) -> Callable[[str], Call]:
    """A device copy that reads ``nbytes / 2`` and writes as many (the problem's bytes in all)."""

    def make(device: str) -> Call:
        src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device=device).random_(0, 255)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)

    return make


def row_label(case: Case) -> str:
    """``variant@problem:phase``: what ``--only`` matches, and how the window names a row."""
    return f"{case.variant}@{case.problem_id}:{case.phase}"


def plan(
    families: Sequence[str], *, only: str | None = None, anchors: bool = True
) -> dict[str, list[Planned]]:
    """Every row each family's CSV will hold, in order: its cases, then its anchors (``anchors``).
    ``only``: the cases whose :func:`row_label` contains it (ncu profiles one row at a time)."""
    out: dict[str, list[Planned]] = {}
    for family in families:
        cases = [c for c in family_cases(family) if only is None or only in row_label(c)]
        rows = [
            Planned(c, Conv2dProblem.from_id(c.problem_id).dtype, anchor_name(*_dtype_layout(c)))
            for c in cases
        ]
        if anchors:
            extra = anchor_cases(family, cases)
            rows += [Planned(a, Conv2dProblem.from_id(a.problem_id).dtype, None) for a in extra]
        out[family] = rows
    return out


def order_by_goals(planned: dict[str, list[Planned]]) -> list[Planned]:
    """Every planned row in one list, the rows that decide the goals of docs/tuning-log.md first
    (``kernels/sweep_goals.py``, by goal number: candidates and the references and anchors they are
    compared with), then the rest in plan order: a sweep cut at its cap still decides the goals."""
    flat = [row for rows in planned.values() for row in rows]
    ranks = [goal_rank(r.case.family, r.case.variant, r.case.problem_id, r.case.phase) for r in flat]
    order = sorted(range(len(flat)), key=lambda i: (ranks[i] is None, ranks[i] or 0, i))
    return [flat[i] for i in order]


def goal_rows(planned: Sequence[Planned]) -> int:
    """How many of ``planned`` decide a goal."""
    return sum(
        goal_rank(r.case.family, r.case.variant, r.case.problem_id, r.case.phase) is not None for r in planned
    )


def _dtype_layout(case: Case) -> tuple[str, str]:
    problem = Conv2dProblem.from_id(case.problem_id)
    return problem.dtype, problem.layout


def estimate_s(case: Case, reps: int) -> float:
    """The plan's upper estimate of one case's GPU time (see ``CASE_SETUP_S``)."""
    call_s = case.predicted_us * 1e-6 if case.predicted_us else case.bytes_moved / ESTIMATE_BYTES_PER_S
    return CASE_SETUP_S + (reps + WARMUP_CALLS) * (FLUSH_S + ENQUEUE_S + call_s)


def describe(planned: dict[str, list[Planned]], reps: int) -> tuple[list[str], int, float]:
    """Lines of the dry run's table, the total rows and the estimated GPU seconds."""
    lines = [f"{'family':<12} {'cases':>6} {'anchors':>8} {'rows':>6} {'est. GPU s':>11}"]
    total_rows, total_s = 0, 0.0
    for family, rows in planned.items():
        cases = sum(r.reference is not None for r in rows)
        est = sum(estimate_s(r.case, reps) for r in rows)
        lines.append(f"{family:<12} {cases:>6} {len(rows) - cases:>8} {len(rows):>6} {est:>11.1f}")
        total_rows += len(rows)
        total_s += est
    lines.append(f"{'total':<12} {'':>6} {'':>8} {total_rows:>6} {total_s:>11.1f}  ({reps} reps per row)")
    return lines, total_rows, total_s


# ---- measuring -------------------------------------------------------------------------------


NVTX_RANGE = "sweep-call"


def time_reps(call: Call, reps: int, device: str, *, nvtx: bool = False) -> list[float]:
    """Microseconds of ``reps`` cold calls: CUDA events around each, the L2 flushed before each.
    ``nvtx``: each timed call inside an NVTX range :data:`NVTX_RANGE` (what ncu is told to profile)."""
    for _ in range(WARMUP_CALLS):
        call()
    if device != "cuda":  # the CSV path's test on a CPU: wall clock, nothing to flush
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            call()
            times.append((time.perf_counter() - start) * 1e6)
        return times
    torch.cuda.synchronize()
    flush, sink = _flush_buffers()
    events = [(_CUDA.Event(enable_timing=True), _CUDA.Event(enable_timing=True)) for _ in range(reps)]
    for before, after in events:
        read_flush(flush, sink)
        before.record()
        if nvtx:
            _CUDA.nvtx.range_push(NVTX_RANGE)
        call()
        if nvtx:
            _CUDA.nvtx.range_pop()
        after.record()
    torch.cuda.synchronize()
    return [float(before.elapsed_time(after)) * 1e3 for before, after in events]


_FLUSH: list[tuple[torch.Tensor, torch.Tensor]] = []


def _flush_buffers() -> tuple[torch.Tensor, torch.Tensor]:
    if not _FLUSH:
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)) or 50 * 2**20
        _FLUSH.append((torch.zeros(2 * l2 // 4, device="cuda"), torch.zeros((), device="cuda")))
    return _FLUSH[0]


def spread(times: Sequence[float]) -> float:
    """Interquartile range over the median."""
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return (q[2] - q[0]) / q[1] if q[1] > 0 else 0.0


def measure(
    planned: Sequence[Planned],
    reps: int,
    device: str,
    machine: str,
    spec_bytes_per_s: float | None,
    *,
    nvtx: bool = False,
    medians: dict[tuple[str, str, str], float] | None = None,
) -> list[dict[str, str]]:
    """Time every planned row; a case that raises gets a row with its error in ``note``.

    Ctrl-C (SIGINT: the window's cap) stops at the current row and returns the rows measured so far,
    the last one noted ``interrupted``: a phase cut short still keeps what it measured. ``medians``
    (kept by the caller across calls) lets a row find an anchor measured in an earlier call.
    """
    medians = {} if medians is None else medians
    rows: list[dict[str, str]] = []
    try:
        _measure_into(rows, medians, planned, reps, device, machine, spec_bytes_per_s, nvtx)
    except KeyboardInterrupt:
        rows.append({**dict.fromkeys(COLUMNS, ""), "note": "interrupted", "machine": machine})
    fill_references(planned, rows, medians)
    return rows


def fill_references(
    planned: Sequence[Planned], rows: Sequence[dict[str, str]], medians: dict[tuple[str, str, str], float]
) -> None:
    """Each variant row's ``reference_us``: its anchor's median, when measured (in any call)."""
    for item, row in zip(planned, rows):
        if item.reference is not None:
            ref = medians.get((item.case.problem_id, item.reference, item.case.phase))
            row["reference_us"] = _fmt(ref)


def _measure_into(
    rows: list[dict[str, str]],
    medians: dict[tuple[str, str, str], float],
    planned: Sequence[Planned],
    reps: int,
    device: str,
    machine: str,
    spec_bytes_per_s: float | None,
    nvtx: bool,
) -> None:
    for item in planned:
        case = item.case
        row = {
            "family": case.family,
            "variant": case.variant,
            "problem": case.problem_id,
            "phase": case.phase,
            "dtype": item.dtype,
            "reps": str(reps),
            "median_us": "",
            "spread": "",
            "bytes": str(case.bytes_moved),
            "pct_hbm_spec": "",
            "reference_us": "",
            "predicted_us": _fmt(case.predicted_us),
            "machine": machine,
            "note": "",
        }
        try:
            times = time_reps(case.make_call(device), reps, device, nvtx=nvtx)
        except Exception as exc:  # one variant that cannot run this problem must not end the window
            row["note"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
            rows.append(row)
            continue
        median = statistics.median(times)
        medians[(case.problem_id, case.variant, case.phase)] = median
        row.update(median_us=_fmt(median), spread=_fmt(spread(times)))
        if spec_bytes_per_s and median > 0:
            row["pct_hbm_spec"] = _fmt(100 * case.bytes_moved / spec_bytes_per_s / (median * 1e-6))
        rows.append(row)


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def write_csv(path: Path, rows: Sequence[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def machine_facts() -> tuple[str, float | None]:
    """The GPU's machine slug (as baselines/ and docs/sweeps/ name it) and its datasheet bandwidth."""
    info = resolve_device("cuda")
    peak = spec_peak(info.name, int(torch.cuda.get_device_properties(0).total_memory))
    return info.slug, peak.bytes_per_s if peak else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.sweep", description=__doc__.split("\n")[0])
    parser.add_argument("families", nargs="+", help=f"one or more of: {', '.join(kernel_families())}, or all")
    parser.add_argument("--out", type=Path, help="folder of the CSVs (one per family)")
    parser.add_argument(
        "--reps", type=int, default=DEFAULT_REPS, help=f"cold repetitions per row ({DEFAULT_REPS})"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list the plan and its estimated GPU time; no CUDA"
    )
    parser.add_argument(
        "--only", metavar="TEXT", help="only the cases whose variant@problem:phase contains TEXT"
    )
    parser.add_argument("--no-anchors", action="store_true", help="leave out the copy and cuDNN anchors")
    parser.add_argument(
        "--nvtx", action="store_true", help=f"each timed call in an NVTX range {NVTX_RANGE!r} (ncu)"
    )
    args = parser.parse_args(argv)
    if args.reps < 2:
        parser.error(f"--reps {args.reps}: at least 2 (the spread needs two repetitions)")
    names = kernel_families() if args.families == ["all"] else args.families
    planned = plan(names, only=args.only, anchors=not args.no_anchors)
    lines, n_rows, est = describe(planned, args.reps)
    print("\n".join(lines), flush=True)
    if args.dry_run:
        print(f"kernels.sweep: dry run: {n_rows} rows, about {est:.0f} s of GPU time; nothing measured")
        return 0
    if args.out is None:
        parser.error("--out DIR is needed to write the CSVs")
    if not torch.cuda.is_available():
        print(
            "kernels.sweep: the sweep times CUDA kernels and needs a GPU (none is visible); "
            "use --dry-run to list the plan on a CPU",
            file=sys.stderr,
        )
        return 2
    machine, spec = machine_facts()
    return sweep_in_goal_order(planned, args.reps, args.out, machine, spec, nvtx=args.nvtx)


CHUNK_ROWS = 16  # the CSVs are rewritten after every chunk: a sweep killed at its cap keeps its rows


def sweep_in_goal_order(
    planned: dict[str, list[Planned]],
    reps: int,
    out: Path,
    machine: str,
    spec: float | None,
    *,
    device: str = "cuda",
    nvtx: bool = False,
) -> int:
    """Measure every row in :func:`order_by_goals`'s order, one CSV per family (rows in measured order)."""
    flat = order_by_goals(planned)
    print(f"kernels.sweep: {goal_rows(flat)} rows decide the goals of docs/tuning-log.md: measured first")
    medians: dict[tuple[str, str, str], float] = {}
    done: list[tuple[Planned, dict[str, str]]] = []
    start = time.monotonic()
    for begin in range(0, len(flat), CHUNK_ROWS):
        chunk = flat[begin : begin + CHUNK_ROWS]
        measured = measure(chunk, reps, device, machine, spec, nvtx=nvtx, medians=medians)
        interrupted = bool(measured) and measured[-1]["note"] == "interrupted"
        done += list(zip(chunk, measured[: len(measured) - interrupted]))
        fill_references([p for p, _ in done], [r for _, r in done], medians)
        for family in dict.fromkeys(p.case.family for p, _ in done):
            write_csv(out / f"{family}.csv", [r for p, r in done if p.case.family == family])
        failed = sum(bool(r["note"]) for _, r in done)
        print(
            f"kernels.sweep: {len(done)} of {len(flat)} rows, {failed} failed, "
            f"{time.monotonic() - start:.0f} s -> {out}",
            flush=True,
        )
        if interrupted:
            print("kernels.sweep: interrupted; the CSVs hold what was measured", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
