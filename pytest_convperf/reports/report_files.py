"""The report files of ``--convperf-report`` (the built-in ``pytest_convperf_write_report``).

report.md, results.json (pytest-benchmark's schema), rows.json, history.jsonl (appended, what
``calibrate`` folds) and speedup.png, built from the rows as displayed
(:mod:`pytest_convperf.reports.report_row`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from pytest_convperf.core.files import atomic_write
from pytest_convperf.core.jsonl import end_cut_line
from pytest_convperf.core.results import Comparison
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.judge.entry import Correctness, correctness_of, entry_digest
from pytest_convperf.measure.witness import witness_us
from pytest_convperf.reports.report import markdown
from pytest_convperf.reports.report_row import ReportRow, as_number, final_comparison, row_quality

# The schema name results.json carries beside pytest-benchmark's own fields.
SCHEMA = "convperf-results/1"


# pytest-benchmark's ``stats`` of one benchmark (its ``Stats.as_dict``, plus ``data`` and
# ``iterations``): numbers, ``outliers`` a string ("1;0"), ``data`` the samples.
BenchmarkStats = dict[str, float | int | str | list[float]]


class _PairedTimesUs(TypedDict):
    candidate: float | None
    reference: float | None


class StoredTimesUs(_PairedTimesUs, total=False):
    """A record's times (us): both sides paired, and on a CPU the reference timed alone (``witness``,
    ``measure.witness``), which ``calibrate`` stores with an entry it writes from the records."""

    witness: float


class HistoryRecord(TypedDict):
    """One line of ``history.jsonl`` (:func:`history_records`), as written; a reader of the file
    checks each line (``night.history.record_problem``): older lines lack keys."""

    schema: str
    when: str
    session_id: str | None
    commit: str | None
    code: str | None  # updates.code_state: the commit, "+dirty" with uncommitted code
    machine: str | None
    device_kind: str | None
    module: str
    key: str
    verdict: str
    time_ratio: float | None
    ln_ratio: float | None
    se: float | None
    n_rounds: int | None
    delta: float | None
    us: StoredTimesUs
    env: dict[str, str] | None
    timing: dict[str, str] | None
    reference_backend: str | None
    correctness: Correctness
    quality: dict[str, float]
    baselines_file: str | None
    entry: str | None  # the digest of the entry it was judged against: calibrate
    baseline_ratio: float | None
    tolerance: float | None
    load_avg: list[float] | None  # the CPU timer's: calibrate


def times_of(
    candidate_us: float | None, reference_us: float | None, comp: Comparison | None
) -> StoredTimesUs:
    """A record's ``us``: the row's times, with the comparison's witness where it has one."""
    us = StoredTimesUs(candidate=candidate_us, reference=reference_us)
    alone = witness_us(comp.facts) if comp is not None else None
    if alone is not None:
        us["witness"] = alone
    return us


class BenchmarkOptions(TypedDict):
    timer: str
    min_rounds: int | None
    max_time: None
    min_time: None
    disable_gc: bool
    warmup: bool


class Benchmark(TypedDict):
    """One benchmark of pytest-benchmark's schema (:func:`benchmark_entry`)."""

    group: str
    name: str
    fullname: str
    params: None
    param: None
    extra_info: dict[str, object]
    options: BenchmarkOptions
    stats: BenchmarkStats


class BenchmarkJson(TypedDict):
    """results.json: pytest-benchmark's schema (:func:`benchmark_json`)."""

    machine_info: dict[str, object]
    commit_info: dict[str, object]
    benchmarks: list[Benchmark]
    datetime: str
    version: str


def _stats(samples: Sequence[float]) -> BenchmarkStats:
    from pytest_benchmark.stats import Stats

    stats = Stats()  # type: ignore[no-untyped-call]
    for s in samples:
        stats.update(float(s))  # type: ignore[no-untyped-call]
    out: BenchmarkStats = stats.as_dict()  # type: ignore[no-untyped-call]
    out["data"] = list(stats.data)
    out["iterations"] = 1
    return out


def benchmark_json(
    rows: Sequence[CheckRow],
    *,
    machine_info: Mapping[str, Any],
    commit_info: Mapping[str, Any],
    when: str,
) -> BenchmarkJson:
    """pytest-benchmark's JSON schema: one benchmark for the candidate and one for the reference per check.

    Both share ``group`` = the check's key; ``extra_info`` carries the comparison and verdict, so
    ``pytest-benchmark compare`` and github-action-benchmark (``tool: pytest``) read it as is.
    """
    from pytest_benchmark import __version__ as pb_version

    benchmarks: list[Benchmark] = []
    for row in rows:
        comp = row.comparison
        r = ReportRow.from_row(row)
        extra: dict[str, object] = {
            "convperf_verdict": r.verdict,
            "speedup": r.speedup,
            "speedup_ci": list(r.speedup_ci) if r.speedup_ci else None,
            "baseline_speedup": r.baseline_speedup,
            "delta": r.delta,
            "delta_ci": list(r.delta_ci) if r.delta_ci else None,
            "time_ratio": comp.time_ratio if comp is not None else None,
            "se_log_ratio": comp.se if comp is not None else None,
            "n_rounds": comp.n_rounds if comp is not None else None,
            "mde": r.mde,
            "problem": row.problem,
            "phase": row.phase,
            "message": r.message,
        }
        if comp is None:
            continue
        for side, meas in (("candidate", comp.candidate), ("reference", comp.reference)):
            samples = list(meas.samples) or [meas.median]
            benchmarks.append(
                benchmark_entry(
                    (r.module, r.key, r.nodeid),
                    side,
                    extra,
                    mode=meas.mode,
                    l2=meas.l2,
                    samples=samples,
                    n_rounds=comp.n_rounds,
                )
            )
    return BenchmarkJson(
        machine_info=dict(machine_info),
        commit_info=dict(commit_info),
        benchmarks=benchmarks,
        datetime=when,
        version=pb_version,
    )


def benchmark_entry(
    check: tuple[str, str, str],
    side: str,
    extra: Mapping[str, Any],
    *,
    mode: str | None,
    l2: str | None,
    samples: Sequence[float],
    n_rounds: int | None,
) -> Benchmark:
    """One benchmark of pytest-benchmark's schema: one ``side`` of a check (module, key, node id),
    grouped by the check."""
    module, key, nodeid = check
    return Benchmark(
        group=f"{module}::{key}",
        name=f"{key}[{side}]",
        fullname=f"{nodeid or key}::{side}",
        params=None,
        param=None,
        extra_info=dict(extra, side=side, mode=mode, l2=l2),
        options=BenchmarkOptions(
            timer=f"convperf {mode or '?'}",
            min_rounds=n_rounds,
            max_time=None,
            min_time=None,
            disable_gc=False,
            warmup=True,
        ),
        stats=_stats(samples),
    )


def history_records(
    rows: Sequence[CheckRow],
    *,
    when: str,
    commit: str | None,
    code: str | None = None,
    session_id: str | None = None,
) -> list[HistoryRecord]:
    """One JSON record per check per run (feeds trend plots and a persistence gate); ``session_id``
    tells two sessions' records apart (``when`` has whole seconds; records of earlier versions lack it)."""
    out = []
    for row in rows:
        # The final comparison (the confirm run when there was one) gives ratio, se, rounds and us alike.
        comp = final_comparison(row)
        r = ReportRow.from_row(row)
        ratio = as_number(comp.time_ratio) if comp is not None else None
        out.append(
            HistoryRecord(
                schema=SCHEMA,
                when=when,
                session_id=session_id,
                commit=commit,
                code=code,
                machine=row.machine,
                device_kind=row.device_kind,
                module=r.module,
                key=r.key,
                verdict=r.verdict,
                time_ratio=ratio,
                ln_ratio=math.log(ratio) if ratio else None,
                se=comp.se if comp is not None else None,
                n_rounds=comp.n_rounds if comp is not None else None,
                delta=r.delta,
                us=times_of(r.candidate_us, r.reference_us, comp),
                env=row.env,
                timing=row.timing,
                reference_backend=row.facts.get("reference_backend"),
                correctness=correctness_of(row.errors),
                quality=row_quality(row),
                baselines_file=row.baselines_file,
                entry=entry_digest(row.baseline.to_yaml()) if row.baseline is not None else None,
                # The baseline's ratio and the rule's tolerance band around it: the dashboard's charts.
                baseline_ratio=row.baseline.time_ratio if row.baseline is not None else None,
                tolerance=row.decision.tolerance if row.decision is not None else None,
                load_avg=comp.facts.get("load_avg") if comp is not None else None,
            )
        )
    return out


def plot_title(machine_info: Mapping[str, Any], when: str | None) -> str:
    """``convperf speedups`` with the machine (slug and device name) and the run's date (UTC)."""
    machine = machine_info.get("machine") or machine_info.get("slug") or "unknown machine"
    name = machine_info.get("name")
    where = f"{machine} ({name})" if name and name != machine else str(machine)
    return f"convperf speedups: {where}" + (f", {when[:16].replace('T', ' ')} UTC" if when else "")


def plot_speedups(
    rows: Sequence[CheckRow],
    path: Path,
    *,
    machine_info: Mapping[str, Any] | None = None,
    when: str | None = None,
) -> str | None:
    """``speedup.png``: speedup per check with its 95 % CI, the baseline marked, titled with the
    machine and the date; a note when skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "speedup.png not written: matplotlib is not installed (pip install 'pytest-convperf[plot]')"
    data = [ReportRow.from_row(r) for r in rows]
    data = [r for r in data if r.speedup is not None]
    if not data:
        return "speedup.png not written: no timed checks"
    data.sort(key=lambda r: (r.module, r.key))
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(data) + 1.5))
    ys = list(range(len(data)))
    for y, r in zip(ys, data):
        speed = r.speedup
        assert speed is not None
        lo, hi = r.speedup_ci or (speed, speed)
        ax.errorbar(
            [speed],
            [y],
            xerr=[[speed - lo], [hi - speed]],
            fmt="o",
            color="C0",
            capsize=3,
            label="this run (95 % CI)" if y == 0 else None,
        )
        if r.baseline_speedup is not None:
            ax.plot(
                [r.baseline_speedup],
                [y],
                marker="|",
                markersize=14,
                color="C3",
                linestyle="none",
                label="baseline" if not any(d.baseline_speedup for d in data[:y]) else None,
            )
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--", label="candidate = reference")
    ax.set_title(plot_title(machine_info or {}, when), fontsize=9)
    ax.legend(fontsize=7, loc="best")
    ax.set_yticks(ys, [r.key if len(r.key) < 60 else r.key[:57] + "..." for r in data], fontsize=7)
    ax.set_xlabel("speedup of the candidate over the reference (reference time / candidate time)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_reports(
    report_dir: Path,
    rows: Sequence[CheckRow],
    *,
    machine_info: Mapping[str, Any],
    commit_info: Mapping[str, Any],
    when: str,
    night: Mapping[str, Any] | None = None,
    session_id: str | None = None,
) -> list[str]:
    """Write history.jsonl (appended), report.md, results.json, rows.json, night.json and speedup.png.

    Returns notes, one per change point new tonight among them (history first: tonight's run is in it).
    """
    from pytest_convperf.night.decide import NIGHT_FILE, new_change_point_lines, night_markdown

    report_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    commit = commit_info.get("id")
    history = report_dir / "history.jsonl"
    end_cut_line(history)  # a line an earlier run left cut short must not swallow tonight's first
    with open(history, "a", encoding="utf-8") as fh:
        code = commit_info.get("code")
        records = history_records(
            rows, when=when, commit=str(commit) if commit else None, code=code, session_id=session_id
        )
        for rec in records:
            fh.write(json.dumps(rec, default=str, sort_keys=True) + "\n")
    change_points, cp_notes = new_change_point_lines(report_dir)
    notes += [f"change point new in this run: {line}" for line in change_points]
    notes += cp_notes
    md = markdown(rows, machine_info=machine_info) + "\n" + night_markdown(night, change_points)
    atomic_write(report_dir / "report.md", md + "\n")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(md + "\n")
    payload = benchmark_json(rows, machine_info=machine_info, commit_info=commit_info, when=when)
    atomic_write(report_dir / "results.json", json.dumps(payload, indent=2, default=str) + "\n")
    atomic_write(
        report_dir / "rows.json", json.dumps([row.to_dict() for row in rows], indent=1, default=str) + "\n"
    )
    night_json = {**(night or {}), "change_points_new": change_points}
    atomic_write(report_dir / NIGHT_FILE, json.dumps(night_json, indent=1, default=str) + "\n")
    note = plot_speedups(rows, report_dir / "speedup.png", machine_info=machine_info, when=when)
    if note:
        notes.append(note)
    return notes
