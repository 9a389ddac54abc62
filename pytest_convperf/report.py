"""Reports as data first, printing last: terminal lines, Markdown, pytest-benchmark JSON, history, plot.

Input is the list of result rows the controller collected (dicts, see docs/architecture.md);
every function here is pure except the ``write_*`` ones, which write one file each.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_convperf.baselines import atomic_write
from pytest_convperf.results import Verdict

# Most urgent first: what a reader must act on comes before what merely passed.
VERDICT_ORDER: tuple[str, ...] = (
    Verdict.CORRECTNESS_FAIL.value,
    Verdict.FAIL.value,
    Verdict.INCONCLUSIVE.value,
    Verdict.STALE.value,
    Verdict.ADVISORY.value,
    Verdict.NEW.value,
    Verdict.IMPROVED.value,
    Verdict.PASS.value,
)
SCHEMA = "convperf-results/1"


def _f(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ReportRow:
    """One check, flattened for display."""

    key: str
    module: str
    nodeid: str
    verdict: str
    message: str
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    baseline_speedup: float | None
    delta: float | None
    delta_ci: tuple[float, float] | None
    candidate_us: float | None
    reference_us: float | None
    mde: float | None
    n_rounds: int | None
    update: str | None
    quality: str | None = None
    # Candidate's % of roofline: the problem's minimum bytes at the measured copy bandwidth, and
    # at the GPU's datasheet peak (None: unknown GPU or CPU; ``spec`` names the peak or says why).
    roofline: float | None = None
    roofline_spec: float | None = None
    spec: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ReportRow:
        comp = row.get("comparison") or {}
        decision = row.get("decision") or {}
        final = decision.get("confirm") or comp
        ratio = _f(final.get("time_ratio"))
        ci = final.get("time_ratio_ci")
        base = _f((row.get("baseline") or {}).get("time_ratio"))
        dci = decision.get("delta_ci")
        update = row.get("update") or {}
        facts = final.get("facts") or comp.get("facts") or {}
        cand_us = _us(final.get("candidate"))
        return cls(
            key=str(row.get("key", row.get("nodeid", "?"))),
            module=str(row.get("module", "")),
            nodeid=str(row.get("nodeid", "")),
            verdict=str(row.get("verdict") or decision.get("verdict") or "UNDECIDED"),
            message=str(row.get("message") or decision.get("message") or ""),
            speedup=1 / ratio if ratio else None,
            speedup_ci=(1 / ci[1], 1 / ci[0]) if ci and ci[0] and ci[1] else None,
            baseline_speedup=1 / base if base else None,
            delta=_f(decision.get("delta")),
            delta_ci=(dci[0], dci[1]) if dci else None,
            candidate_us=_us(final.get("candidate")),
            reference_us=_us(final.get("reference")),
            mde=_f(decision.get("mde")),
            n_rounds=final.get("n_rounds"),
            update=update.get("action") if update and update.get("action") != "skip" else None,
            quality=_quality_cell(row),
            roofline=_share(facts.get("roofline_floor_us"), cand_us),
            roofline_spec=_share(facts.get("roofline_spec_floor_us"), cand_us),
            spec=str(facts["roofline_spec"]) if facts.get("roofline_spec") else None,
        )


def _share(floor_us: Any, us: float | None) -> float | None:
    floor = _f(floor_us)
    return floor / us if floor is not None and us else None


def _quality_cell(row: Mapping[str, Any]) -> str | None:
    q = _quality(row)
    if not q:
        return None
    parts = []
    if "sqnr_db" in q:
        parts.append(f"SQNR {q['sqnr_db']:.3g} dB")
    if "rel_l2" in q:
        parts.append(f"rel L2 {q['rel_l2']:.3g}")
    return ", ".join(parts)


def _us(meas: Any) -> float | None:
    if isinstance(meas, Mapping) and _f(meas.get("median")) is not None:
        return float(meas["median"]) * 1e6
    return None


def grouped(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, list[ReportRow]]]:
    """Rows grouped by verdict, most urgent group first, rows sorted by key."""
    groups: dict[str, list[ReportRow]] = {}
    for row in rows:
        r = ReportRow.from_row(row)
        groups.setdefault(r.verdict, []).append(r)
    order = {v: i for i, v in enumerate(VERDICT_ORDER)}
    return [
        (v, sorted(groups[v], key=lambda r: (r.module, r.key)))
        for v in sorted(groups, key=lambda v: order.get(v, len(order)))
    ]


def _x(value: float | None) -> str:
    return f"{value:.3f}x" if value is not None else "-"


def _ci(ci: tuple[float, float] | None, pct: bool = False) -> str:
    if ci is None:
        return ""
    if pct:
        return f"[{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]"
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _pct(value: float | None) -> str:
    return f"{value * 100:+.1f} %" if value is not None else "-"


def _usf(value: float | None) -> str:
    return f"{value:.4g}" if value is not None else "-"


def cells(r: ReportRow) -> dict[str, str]:
    """The display columns of one row."""
    return {
        "check": f"{r.module}::{r.key}" if r.module else r.key,
        "speedup": f"{_x(r.speedup)} {_ci(r.speedup_ci)}".strip(),
        "baseline": _x(r.baseline_speedup),
        "delta": f"{_pct(r.delta)} {_ci(r.delta_ci, pct=True)}".strip(),
        "candidate us": _usf(r.candidate_us),
        "reference us": _usf(r.reference_us),
        "MDE": f"{r.mde:.1%}" if r.mde is not None else "-",
        "update": r.update or "",
        "roofline (copy BW)": f"{r.roofline:.0%}" if r.roofline is not None else "-",
        "roofline (spec)": f"{r.roofline_spec:.0%}" if r.roofline_spec is not None else "-",
    }


def roofline_note(rows: Sequence[ReportRow]) -> str | None:
    """What the two roofline columns mean, naming the spec peaks used (or why there is none)."""
    specs = sorted({r.spec for r in rows if r.spec})
    if not any(r.roofline is not None for r in rows):
        return None
    return (
        "roofline: the candidate's median against the time to move the problem's minimum bytes at the "
        "measured device copy bandwidth (copy BW) and at the datasheet peak (spec: "
        + ("; ".join(specs) if specs else "none")
        + ")"
    )


def fake_timed(row: Mapping[str, Any]) -> bool:
    """Whether the row's check was timed by the fake timer (replayed durations)."""
    return (row.get("facts") or {}).get("timer") == "fake"


def terminal_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The terminal summary: one block per verdict, a line per check, a note under non-PASS rows."""
    out: list[str] = []
    if any(fake_timed(r) for r in rows):
        out.append("timer: fake timer (replayed durations, not measurements)")
    groups = grouped(rows)
    note = roofline_note([r for _, g in groups for r in g])
    if note:
        out.append(note)
    for verdict, group in groups:
        out.append(f"{verdict} ({len(group)})")
        for r in group:
            c = cells(r)
            line = (
                f"  {c['check']}  speedup {c['speedup']}  baseline {c['baseline']}  delta {c['delta']}  "
                f"cand {c['candidate us']} us  ref {c['reference us']} us"
            )
            if r.roofline is not None:
                spec = "spec unknown"
                if r.roofline_spec is not None:
                    spec = f"{c['roofline (spec)']} of spec peak"
                line += f"  roofline {c['roofline (copy BW)']} of copy BW, {spec}"
            if r.quality:
                line += f"  quality {r.quality}"
            if r.update:
                line += f"  [update: {r.update}]"
            out.append(line)
            if verdict != Verdict.PASS.value and r.message:
                out.append(f"      {r.message.splitlines()[0]}")
    return out


def markdown(
    rows: Sequence[Mapping[str, Any]],
    *,
    title: str = "convperf report",
    machine_info: Mapping[str, Any] | None = None,
) -> str:
    """Markdown for people (and ``$GITHUB_STEP_SUMMARY``): counts, then a table per verdict."""
    groups = grouped(rows)
    lines = [f"## {title}", ""]
    if machine_info:
        facts = ", ".join(
            f"{k} {v}"
            for k, v in machine_info.items()
            if k in ("machine", "device", "gpu", "cpu", "torch", "cuda", "cudnn", "driver")
        )
        lines += [f"Machine: {facts}", ""]
    if any(fake_timed(r) for r in rows):
        lines += ["Timer: **fake timer** (replayed durations, not measurements)", ""]
    lines += ["Verdicts: " + ", ".join(f"**{v}** {len(g)}" for v, g in groups), ""]
    note = roofline_note([r for _, g in groups for r in g])
    if note:
        lines += [note[0].upper() + note[1:] + ".", ""]
    cols = (
        "check",
        "speedup",
        "baseline",
        "delta",
        "candidate us",
        "reference us",
        "MDE",
        "roofline (copy BW)",
        "roofline (spec)",
    )
    for verdict, group in groups:
        lines += [
            f"### {verdict} ({len(group)})",
            "",
            "| " + " | ".join(cols) + " | note |",
            "|" + "---|" * (len(cols) + 1),
        ]
        for r in group:
            c = cells(r)
            note = "" if verdict == Verdict.PASS.value else r.message.splitlines()[0] if r.message else ""
            if r.quality:
                note = f"quality {r.quality}. {note}".strip()
            if r.update:
                note = f"update: {r.update}. {note}".strip()
            lines.append(
                "| " + " | ".join(c[k].replace("|", "\\|") for k in cols) + f" | {note.replace('|', '/')} |"
            )
        lines.append("")
    return "\n".join(lines)


def _stats(samples: Sequence[float]) -> dict[str, Any]:
    from pytest_benchmark.stats import Stats

    stats = Stats()  # type: ignore[no-untyped-call]
    for s in samples:
        stats.update(float(s))  # type: ignore[no-untyped-call]
    out: dict[str, Any] = stats.as_dict()  # type: ignore[no-untyped-call]
    out["data"] = list(stats.data)
    out["iterations"] = 1
    return out


def benchmark_json(
    rows: Sequence[Mapping[str, Any]],
    *,
    machine_info: Mapping[str, Any],
    commit_info: Mapping[str, Any],
    when: str,
) -> dict[str, Any]:
    """pytest-benchmark's JSON schema: one benchmark for the candidate and one for the reference per check.

    Both share ``group`` = the check's key; ``extra_info`` carries the comparison and verdict, so
    ``pytest-benchmark compare`` and github-action-benchmark (``tool: pytest``) read it as is.
    """
    from pytest_benchmark import __version__ as pb_version

    benchmarks: list[dict[str, Any]] = []
    for row in rows:
        comp = row.get("comparison") or {}
        r = ReportRow.from_row(row)
        extra = {
            "convperf_verdict": r.verdict,
            "speedup": r.speedup,
            "speedup_ci": list(r.speedup_ci) if r.speedup_ci else None,
            "baseline_speedup": r.baseline_speedup,
            "delta": r.delta,
            "delta_ci": list(r.delta_ci) if r.delta_ci else None,
            "time_ratio": comp.get("time_ratio"),
            "se_log_ratio": comp.get("se"),
            "n_rounds": comp.get("n_rounds"),
            "mde": r.mde,
            "problem": row.get("problem"),
            "phase": row.get("phase"),
            "message": r.message,
        }
        for side in ("candidate", "reference"):
            meas = comp.get(side) or {}
            samples = meas.get("samples") or ([meas["median"]] if "median" in meas else [])
            if not samples:
                continue
            name = f"{r.key}[{side}]"
            benchmarks.append(
                {
                    "group": f"{r.module}::{r.key}",
                    "name": name,
                    "fullname": f"{r.nodeid or r.key}::{side}",
                    "params": None,
                    "param": None,
                    "extra_info": dict(extra, side=side, mode=meas.get("mode"), l2=meas.get("l2")),
                    "options": {
                        "timer": f"convperf {meas.get('mode', '?')}",
                        "min_rounds": comp.get("n_rounds"),
                        "max_time": None,
                        "min_time": None,
                        "disable_gc": False,
                        "warmup": True,
                    },
                    "stats": _stats(samples),
                }
            )
    return {
        "machine_info": dict(machine_info),
        "commit_info": dict(commit_info),
        "benchmarks": benchmarks,
        "datetime": when,
        "version": pb_version,
    }


def history_records(
    rows: Sequence[Mapping[str, Any]], *, when: str, commit: str | None
) -> list[dict[str, Any]]:
    """One JSON record per check per run (feeds trend plots and a persistence gate)."""
    out = []
    for row in rows:
        # The final comparison (the confirm run when there was one) gives ratio, se, rounds and us alike.
        comp = (row.get("decision") or {}).get("confirm") or row.get("comparison") or {}
        r = ReportRow.from_row(row)
        ratio = _f(comp.get("time_ratio"))
        out.append(
            {
                "schema": SCHEMA,
                "when": when,
                "commit": commit,
                "machine": row.get("machine"),
                "device_kind": row.get("device_kind"),
                "module": r.module,
                "key": r.key,
                "verdict": r.verdict,
                "time_ratio": ratio,
                "ln_ratio": math.log(ratio) if ratio else None,
                "se": comp.get("se"),
                "n_rounds": comp.get("n_rounds"),
                "delta": r.delta,
                "us": {"candidate": r.candidate_us, "reference": r.reference_us},
                "env": row.get("env"),
                "timing": row.get("timing"),
                "reference_backend": (row.get("facts") or {}).get("reference_backend"),
                "correctness": _correctness(row.get("errors") or []),
                "quality": _quality(row),
                "baselines_file": row.get("baselines_file"),
            }
        )
    return out


def _quality(row: Mapping[str, Any]) -> dict[str, float]:
    """The row's quality metrics against the float conv (``rel_l2``, ``sqnr_db``), if any."""
    metrics = row.get("extra_metrics") or {}
    return {k: float(metrics[k]) for k in ("rel_l2", "sqnr_db") if _f(metrics.get(k)) is not None}


def _correctness(errors: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Stored correctness for an entry: flat for one output, per output name for several."""
    if len(errors) == 1:
        return {"max_abs": errors[0].get("max_abs"), "max_rel": errors[0].get("max_rel")}
    return {str(e.get("name")): {"max_abs": e.get("max_abs"), "max_rel": e.get("max_rel")} for e in errors}


def plot_speedups(rows: Sequence[Mapping[str, Any]], path: Path) -> str | None:
    """``speedup.png``: speedup per check with its 95 % CI, the baseline marked; a note when skipped."""
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
        ax.errorbar([speed], [y], xerr=[[speed - lo], [hi - speed]], fmt="o", color="C0", capsize=3)
        if r.baseline_speedup is not None:
            ax.plot([r.baseline_speedup], [y], marker="|", markersize=14, color="C3")
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_yticks(ys, [r.key if len(r.key) < 60 else r.key[:57] + "..." for r in data], fontsize=7)
    ax.set_xlabel("speedup over the reference (o: this run with 95 % CI, |: baseline)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def junit_properties(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Flat ``(name, value)`` pairs for JUnit ``<properties>`` (one set per check)."""
    r = ReportRow.from_row(row)
    prefix = f"convperf[{r.key}]"
    props = [(f"{prefix}.verdict", r.verdict)]
    for name, value in (
        ("speedup", r.speedup),
        ("baseline_speedup", r.baseline_speedup),
        ("delta", r.delta),
        ("candidate_us", r.candidate_us),
        ("reference_us", r.reference_us),
    ):
        if value is not None:
            props.append((f"{prefix}.{name}", f"{value:.6g}"))
    return props


def write_reports(
    report_dir: Path,
    rows: Sequence[Mapping[str, Any]],
    *,
    machine_info: Mapping[str, Any],
    commit_info: Mapping[str, Any],
    when: str,
) -> list[str]:
    """Write report.md, results.json, rows.json, history.jsonl (appended) and speedup.png; returns notes."""
    report_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    md = markdown(rows, machine_info=machine_info)
    atomic_write(report_dir / "report.md", md + "\n")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(md + "\n")
    payload = benchmark_json(rows, machine_info=machine_info, commit_info=commit_info, when=when)
    atomic_write(report_dir / "results.json", json.dumps(payload, indent=2, default=str) + "\n")
    atomic_write(report_dir / "rows.json", json.dumps(list(rows), indent=1, default=str) + "\n")
    commit = commit_info.get("id")
    with open(report_dir / "history.jsonl", "a", encoding="utf-8") as fh:
        for rec in history_records(rows, when=when, commit=str(commit) if commit else None):
            fh.write(json.dumps(rec, default=str, sort_keys=True) + "\n")
    note = plot_speedups(rows, report_dir / "speedup.png")
    if note:
        notes.append(note)
    return notes
