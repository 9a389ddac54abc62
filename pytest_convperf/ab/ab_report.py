"""The A/B section of the reports: ``ab.md`` (table sorted by change), ``ab.png`` (ratios with CIs),
and REF's side added to ``results.json`` (pytest-benchmark's schema: one more benchmark per check,
``<key>[candidate@ref]``, in the check's group, so ``pytest-benchmark compare`` shows both sides).

Input: result rows (``check_row.CheckRow``) whose ``facts["ab"]`` an A/B run filled
(:mod:`pytest_convperf.ab.ab_plugin`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_convperf.ab.rule import ABResult
from pytest_convperf.core.files import atomic_write
from pytest_convperf.core.markdown_safe import code_span
from pytest_convperf.judge.check_row import CheckRow


@dataclass(frozen=True)
class ABRow:
    """A row that carries an A/B: its check, its ``facts["ab"]`` (``ab_plugin.ABFact``, as the row
    holds it: a row read back from rows.json has the mapping) and the result read from it."""

    key: str
    module: str
    nodeid: str
    ab: Mapping[str, Any]
    result: ABResult


def ab_rows(rows: Sequence[CheckRow]) -> list[ABRow]:
    """The rows that carry an A/B, sorted by change (largest slowdown first)."""
    out = []
    for row in rows:
        ab = row.facts.get("ab")
        if not ab:
            continue
        out.append(ABRow(row.key, row.module, row.nodeid, ab, ABResult.from_dict(ab["result"])))
    out.sort(key=lambda r: -abs(r.result.ratio - 1.0))
    return out


def _speedup(value: Any, ci: Any) -> str:
    if value is None:
        return "-"
    text = f"{value:.2f}x"
    return f"{text} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else text


def markdown(rows: Sequence[CheckRow]) -> str:
    """The A/B table: check, verdict, t_A/t_REF with 95 % CI, both speedups over the reference."""
    data = ab_rows(rows)
    if not data:
        return "## A/B\n\nNo check was compared against a revision.\n"
    first = data[0].ab
    lines = [
        "## A/B",
        "",
        f"A = {code_span(first['a'])}; REF = {code_span(first['ref'])}. t_A/t_REF > 1: A is slower. "
        "Verdicts use the gate's "
        f"rules (noise floor {first['result']['noise']:.1%}, tolerance {first['result']['tolerance']:.1%}, "
        "screen then confirm).",
        "",
        "| check | verdict | t_A/t_REF [95 % CI] | change | speedup A | speedup REF | rounds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in data:
        res = r.result
        ab = r.ab
        lines.append(
            f"| {code_span(r.key, table=True)} | {res.verdict} | "
            f"{res.ratio:.3f} [{res.ci[0]:.3f}, {res.ci[1]:.3f}] | "
            f"{res.change:+.1%} | {_speedup(ab.get('a_speedup'), ab.get('a_speedup_ci'))} | "
            f"{_speedup(ab.get('ref_speedup'), ab.get('ref_speedup_ci'))} | {res.n_rounds} |"
        )
    counts = {
        v: sum(1 for r in data if r.result.verdict == v) for v in ("SLOWER", "FASTER", "SAME", "INCONCLUSIVE")
    }
    lines += ["", ", ".join(f"{v} {n}" for v, n in counts.items() if n)]
    return "\n".join(lines) + "\n"


def terminal_lines(rows: Sequence[CheckRow]) -> list[str]:
    data = ab_rows(rows)
    if not data:
        return []
    out = [f"A = {data[0].ab['a']}, REF = {data[0].ab['ref']}"]
    for r in data:
        res = r.result
        out.append(
            f"{res.verdict:<12} {r.key}  t_A/t_REF {res.ratio:.3f} [{res.ci[0]:.3f}, {res.ci[1]:.3f}]  "
            f"{res.message}"
        )
    return out


def plot(rows: Sequence[CheckRow], path: Path) -> str | None:
    """``ab.png``: t_A/t_REF per check with its 95 % CI (sorted by change); a note when not written."""
    data = ab_rows(rows)
    if not data:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "ab.png not written: matplotlib is not installed (pip install 'pytest-convperf[plot]')"
    colors = {"SLOWER": "C3", "FASTER": "C2", "SAME": "C0", "INCONCLUSIVE": "grey"}
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(data) + 1.5))
    for y, r in enumerate(data):
        res = r.result
        ax.errorbar(
            [res.ratio],
            [y],
            xerr=[[res.ratio - res.ci[0]], [res.ci[1] - res.ratio]],
            fmt="o",
            color=colors.get(res.verdict, "k"),
            capsize=3,
        )
    tol = data[0].result.tolerance
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
    for edge in (1 / (1 + tol), 1 + tol):
        ax.axvline(edge, color="grey", linewidth=0.5, linestyle=":")
    ax.set_yticks(range(len(data)), [str(r.key)[:60] for r in data], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("t_A / t_REF with 95 % CI (> 1: A slower; dotted: tolerance)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def add_ref_benchmarks(results: dict[str, Any], rows: Sequence[CheckRow]) -> dict[str, Any]:
    """``results.json`` with REF's candidate added beside A's, and the A/B in every extra_info."""
    from pytest_convperf.reports.report_files import benchmark_entry

    by_group: dict[str, list[dict[str, Any]]] = {}
    for bench in results.get("benchmarks", []):
        by_group.setdefault(bench["group"], []).append(bench)
    added = []
    for r in ab_rows(rows):
        group = by_group.get(f"{r.module}::{r.key}", [])
        ab = r.ab
        for bench in group:
            bench["extra_info"]["ab"] = {"ref": ab["ref"], **ab["result"]}
        template = next((b for b in group if b["extra_info"].get("side") == "candidate"), None)
        ref_side = ab.get("ref_measurement")
        if template is None or not ref_side:
            continue
        # The same schema as A's benchmarks (report_files.benchmark_entry), from REF's measurement.
        samples = ref_side.get("samples") or [ref_side["median"]]
        mode, l2, n_rounds = ref_side.get("mode"), ref_side.get("l2"), ab["result"]["n_rounds"]
        ref_bench = benchmark_entry(
            (r.module, r.key, r.nodeid),
            "candidate",
            {},
            mode=mode,
            l2=l2,
            samples=samples,
            n_rounds=n_rounds,
        )
        ref_bench["name"] = f"{r.key}[candidate@ref]"
        ref_bench["fullname"] = f"{r.nodeid or r.key}::candidate@{ab['ref']}"
        ref_bench["extra_info"] = dict(template["extra_info"], side="candidate@ref", ref=ab["ref"])
        added.append(ref_bench)
    results["benchmarks"] = [*results.get("benchmarks", []), *added]
    return results


def write(report_dir: Path, rows: Sequence[CheckRow]) -> list[str]:
    """Write ab.md and ab.png and extend results.json (after the built-in reports); returns notes."""
    if not ab_rows(rows):
        return []
    atomic_write(report_dir / "ab.md", markdown(rows))
    results_path = report_dir / "results.json"
    if results_path.is_file():
        results = json.loads(results_path.read_text(encoding="utf-8"))
        atomic_write(
            results_path, json.dumps(add_ref_benchmarks(results, rows), indent=2, default=str) + "\n"
        )
    note = plot(rows, report_dir / "ab.png")
    return [note] if note else []
