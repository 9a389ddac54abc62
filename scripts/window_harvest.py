"""After a GPU window, before anything else: ``python scripts/window_harvest.py OUT_DIR [--docs DIR]``.

``OUT_DIR`` holds what the two device calls of ``scripts/gpu-window`` brought back (``proof-*`` and
``tune-*``: the summary, the results JSON, the archive). This script, for the machine the proof call
detected (never assumed):

- writes the ``## Night proof`` section of ``docs/results-<machine>.md`` (the page's other sections
  stay; a machine without a page gets one from the self-contained night's report,
  ``scripts/results_page.py``): false FAILs K of N on the self-contained night (goal 0), the
  committed-baseline night on an H100 (K of N false FAILs, STALE, NEW and changed-kernel FAILs
  counted apart), the planted night (caught or not, confirmed in a fresh process, the kernel named,
  other FAILs), the A/B's answers, the time each step took;
- copies the sweep's CSVs to ``docs/sweeps/<machine>/``;
- reads each of the 13 goals of docs/tuning-log.md from them (``kernels/sweep_goals.py``: measured
  against the cost model's prediction) into the page's ``## Sweep goals`` section.

Switching defaults, recalibrating the model and committing baselines stay with the engineer: they
need the judgement this script cannot make.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import results_page  # noqa: E402  (scripts/results_page.py: the page and its sections)

from kernels.sweep_goals import GOALS, read_goal  # noqa: E402

CHANGED = "kernels changed since the baseline"


def load_call(out: Path, call: str, into: Path) -> dict[str, Any] | None:
    """The call's results JSON, its archive unpacked under ``into/<call>``; None when it did not run."""
    results = out / f"{call}-results.json"
    if not results.exists():
        return None
    archive = out / f"{call}.tar.gz"
    if archive.exists():
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    data: dict[str, Any] = json.loads(results.read_text())
    return data


def verdicts(night: Mapping[str, Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for module in night.get("modules", []):
        for verdict, count in module["verdicts"].items():
            total[verdict] = total.get(verdict, 0) + int(count)
    return total


def fails(night: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [f for m in night.get("modules", []) for f in m["fails"]]


def night_line(name: str, night: Mapping[str, Any] | None) -> str:
    if not night:
        return f"| {name} | not run (see the call's summary) |"
    counts = verdicts(night)
    changed = sum(CHANGED in f.get("kernel_diff", "") for f in fails(night) if not f["expected"])
    false = int(night["false_fails"]) - changed
    apart = f"; STALE {counts.get('STALE', 0)}, NEW {counts.get('NEW', 0)}, changed kernel {changed}"
    shown = " ".join(f"{k}={v}" for k, v in counts.items() if v)
    return f"| {name} | **false FAILs {false} of {night['checks']}**{apart} ({shown}) |"


def planted_line(night: Mapping[str, Any] | None, kernels: Sequence[str]) -> str:
    if not night:
        return "| planted 10 % | not run |"
    caught = [f for f in fails(night) if f["expected"]]
    confirm = night.get("fresh_confirm") or {}
    fresh = (
        f"fresh confirm: {confirm['todo']} re-run, {confirm['still']} still FAIL"
        if confirm
        else "no fresh-confirm line in the log"
    )
    other = int(night["false_fails"])
    named = ", ".join(f"`{k}`" for k in kernels) or "**no kernel named**"
    expected = len(caught) + len(night["missed"])  # 16 on a GPU (the seed forward checks), 1 in a dry run
    verdict = "caught" if caught and not night["missed"] else "**not caught**"
    return (
        f"| planted 10 % | {verdict}: {len(caught)} of {expected} forward checks FAIL, "
        f"{len(night['missed'])} missed; {fresh}; kernel named: {named}; other FAILs {other} |"
    )


def night_proof(proof: Mapping[str, Any], tune: Mapping[str, Any] | None) -> str:
    nights = proof.get("nights", {})
    lines = [
        f"Window run with `scripts/gpu-window` (issue 35) on `{proof['machine']}`: {proof['environment']}",
        "",
        f"Extensions: {proof['carry']}",
        "",
        "| step | result |",
        "|---|---|",
        night_line("self-contained night (goal 0: no false FAIL)", nights.get("night")),
    ]
    if "committed" in nights:
        lines.append(night_line("committed baselines (another host, days later)", nights["committed"]))
    else:
        lines.append(f"| committed baselines | not run: `{proof['machine']}` has none committed |")
    lines.append(planted_line(nights.get("planted"), proof.get("planted_kernel", [])))
    ab = proof.get("ab", {})
    lines.append(
        f"| A/B | HEAD vs HEAD: {ab.get('same', 'not run')} (expected SAME); "
        f"hard-wired commit: {ab.get('slower', 'not run')} (expected SLOWER) |"
    )
    if proof.get("stopped"):
        lines.append(f"| proof call stopped | {proof['stopped']} |")
    lines += ["", "Time per step (s; cap in brackets; CUT: stopped at its cap):", ""]
    for call in (proof, tune):
        if call:
            steps = [
                f"{s['name']} {s['seconds']:.0f} [{s['cap_s']:.0f}]{' CUT' if s['cut'] else ''}"
                f"{' ' + s['note'] if s['note'] else ''}"
                for s in call["steps"]
            ]
            lines.append(f"- {call['call']}: " + ", ".join(steps))
    if proof.get("dry_run"):
        lines += ["", "**Dry run on a CPU: no number above is a GPU measurement.**"]
    return "\n".join(lines)


def sweep_goals(csvs: Sequence[Path]) -> str:
    rows: list[dict[str, str]] = []
    for path in csvs:
        with path.open() as f:
            rows += list(csv.DictReader(f))
    lines = [
        f"{len(rows)} sweep rows ({sum(bool(r.get('median_us')) for r in rows)} measured). "
        "Measured: the goal's statistic (a ratio to its reference; 'of goal': the worst row's share of "
        "its threshold); model: the same with the candidate's cost-model time (`predicted_us`).",
        "",
        "| # | goal | rows | measured | model | met |",
        "|---|---|---:|---:|---:|---|",
    ]
    for goal in GOALS:
        r = read_goal(goal, rows)
        met = "not measured" if r.met is None else ("met" if r.met else "not met")
        cells = [str(goal.number), goal.title, str(r.rows), r.cell(r.measured), r.cell(r.predicted), met]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def harvest(out: Path, docs: Path) -> Path:
    """Write the page's sections and copy the CSVs; returns the page."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        proof = load_call(out, "proof", work)
        tune = load_call(out, "tune", work)
        if proof is None:
            raise SystemExit(
                f"window_harvest: {out / 'proof-results.json'} is missing: no proof call came back"
            )
        machine = str(proof["machine"])
        if not machine or machine == "?":
            raise SystemExit("window_harvest: the proof call detected no machine (see proof-summary.txt)")
        docs.mkdir(parents=True, exist_ok=True)
        page = docs / f"results-{machine}.md"
        if page.exists():
            text = page.read_text()
        else:
            report = work / "proof" / "report-night"
            reports = [report] if (report / "rows.json").exists() else []
            intro = "Built by scripts/window_harvest.py from a 15-minute GPU window (docs/gpu-window.md)."
            title = f"Results: {machine}"
            text = results_page.build_page(title, reports, None, intro) if reports else f"# {title}\n"
        text = results_page.replace_section(text, "Night proof", night_proof(proof, tune))
        sweeps = docs / "sweeps" / machine
        found = sorted((work / "tune" / "sweeps").glob("*.csv"))
        if found:
            sweeps.mkdir(parents=True, exist_ok=True)
            for path in found:
                shutil.copy2(path, sweeps / path.name)
        csvs = sorted(sweeps.glob("*.csv"))
        text = results_page.replace_section(text, "Sweep goals", sweep_goals(csvs), after="Night proof")
        page.write_text(text)
    return page


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/window_harvest.py", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the folder the two calls' files came back to")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="docs/ (default: the checkout's)")
    args = parser.parse_args(argv)
    page = harvest(args.out, args.docs)
    print(f"window_harvest: {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
