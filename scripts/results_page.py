"""Write ``docs/results-<machine>.md`` from the reports of a GPU session (issue 12 item 4).

``python scripts/results_page.py --out docs/results-<machine>.md --harness HARNESS_DIR REPORT_DIR...``

Every number on the page comes from what the plugin wrote in that session:

- ``REPORT_DIR/rows.json`` (one per ``--convperf-report``): one table per suite module with every
  check: ours, the reference, the reference's backend, the speedup with its 95 % CI, and the share
  of the roofline at the measured copy bandwidth and at the datasheet peak;
- the family sections the suite wrote beside it (``depthwise.md``, ``edsr.md``, ...), verbatim:
  they hold the model tables and the goal tables;
- ``REPORT_DIR/junit*.xml`` beside the report (when present): the tests that failed;
- ``HARNESS_DIR/harness.md`` from ``scripts/harness_table.py merge``.

The goal summary collects every row of a family table that has a "goal met" column, so a goal
is listed exactly as its suite judged it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SECTION_FILES = ("depthwise.md", "edsr.md", "pcilt.md", "im2col_gemm.md", "models.md")


def load_rows(report: Path) -> list[dict[str, Any]]:
    path = report / "rows.json"
    if not path.is_file():
        raise SystemExit(f"{path}: no rows.json; pass the folder given to --convperf-report")
    rows = json.loads(path.read_text())
    if not isinstance(rows, list):
        raise SystemExit(f"{path}: expected a list of rows, got {type(rows).__name__}")
    return rows


def _us(stats: dict[str, Any] | None) -> float | None:
    return None if not stats or stats.get("median") is None else float(stats["median"]) * 1e6


def _pct(floor_us: Any, median_us: float | None) -> str:
    if floor_us is None or not median_us:
        return "-"
    return f"{100.0 * float(floor_us) / median_us:.0f} %"


def speedup_cell(comparison: dict[str, Any]) -> str:
    ratio = comparison.get("time_ratio")
    if ratio is None:
        return "-"
    cell = f"{1.0 / float(ratio):.3f}x"
    ci = comparison.get("time_ratio_ci")
    if ci and None not in ci:  # speedup = 1 / time ratio, so the CI's ends swap
        cell += f" [{1.0 / float(ci[1]):.3f}, {1.0 / float(ci[0]):.3f}]"
    return cell


def check_line(row: dict[str, Any]) -> str:
    comp = row.get("comparison") or {}
    facts = comp.get("facts") or {}
    ours, ref = _us(comp.get("candidate")), _us(comp.get("reference"))
    test = str(row.get("nodeid", row.get("key", "?"))).split("::", 1)[-1]
    cells = [
        test.replace("|", "/"),
        str(row.get("phase", "-")),
        f"{ours:.2f}" if ours is not None else "-",
        f"{ref:.2f}" if ref is not None else "-",
        str(facts.get("reference_backend", (row.get("facts") or {}).get("reference_backend", "-"))),
        speedup_cell(comp),
        _pct(facts.get("roofline_spec_floor_us"), ours),
        _pct(facts.get("roofline_floor_us"), ours),
        str(row.get("verdict", "-")),
    ]
    return "| " + " | ".join(cells) + " |"


CHECK_HEADER = (
    "| check | phase | ours us | reference us | reference backend | speedup [95 % CI] "
    "| % of HBM spec | % of copy BW | verdict |\n|---|---|---:|---:|---|---|---:|---:|---|"
)


def check_tables(rows: Sequence[dict[str, Any]]) -> list[str]:
    by_module: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_module[str(row.get("module", "?"))].append(row)
    out: list[str] = []
    for module in sorted(by_module):
        group = sorted(by_module[module], key=lambda r: str(r.get("nodeid", "")))
        out += [f"### {module} ({len(group)} checks)", "", CHECK_HEADER]
        out += [check_line(r) for r in group]
        out.append("")
    return out


def precision_summary(rows: Sequence[dict[str, Any]]) -> list[str]:
    """How tight the within-run CIs came out, against the issue's targets (+-0.5 %, +-1 % < 10 us)."""
    met = total = 0
    halfwidths: list[float] = []
    for row in rows:
        comp = row.get("comparison") or {}
        ci = comp.get("time_ratio_ci")
        ratio = comp.get("time_ratio")
        ours = _us(comp.get("candidate"))
        if not ci or ratio is None or ours is None or None in ci:
            continue
        half = (math.log(float(ci[1])) - math.log(float(ci[0]))) / 2
        halfwidths.append(half)
        total += 1
        met += half <= (0.01 if ours < 10 else 0.005)
    if not total:
        return ["No timed checks."]
    q = statistics.quantiles(halfwidths, n=20) if len(halfwidths) > 1 else halfwidths * 19
    return [
        f"Within-run 95 % CI of the speedup (half-width in log ratio): {met} of {total} checks meet the "
        f"target (+-0.5 %, +-1 % for candidates under 10 us); median half-width "
        f"{statistics.median(halfwidths):.2%}, 95th percentile {q[-1]:.2%}, largest {max(halfwidths):.2%}."
    ]


def goal_rows(markdown: str, source: str) -> list[tuple[str, str, str, str]]:
    """``(source, item, goal, met)`` for every row of a table with a "goal met" column."""
    found: list[tuple[str, str, str, str]] = []
    header: list[str] | None = None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        lowered = [c.lower() for c in cells]
        if "goal met" in lowered:
            header = lowered
            continue
        if header is None or set(line.replace("|", "").strip()) <= set("-: "):
            continue
        met = cells[header.index("goal met")]
        goal_col = next((i for i, h in enumerate(header) if h.startswith("goal") and h != "goal met"), None)
        goal = cells[goal_col] if goal_col is not None and goal_col < len(cells) else "-"
        if met.lower() in ("met", "not met"):  # rows without a goal carry "-"
            found.append((source, " / ".join(cells[:2]), goal, met))
    return found


DEPTHWISE_GEOMEAN_GOAL = 1.5  # issue 19: fp32 NCHW forward over PyTorch's native kernel, 8 seed shapes
DEPTHWISE_PEAK_GOAL = 0.80  # issue 19: share of the HBM spec peak on the two largest seed shapes


def depthwise_goals(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """Issue 19's two depthwise goals, computed from the seed-shape rows (fp32 NCHW forward)."""
    seeds = [
        r
        for r in rows
        if r.get("module") == "test_depthwise"
        and "test_seed_shape[" in str(r.get("nodeid"))
        and "-fp32-nchw-forward]" in str(r.get("nodeid"))
        and (r.get("comparison") or {}).get("time_ratio")
    ]
    if not seeds:
        return []
    ratios = [1.0 / float(r["comparison"]["time_ratio"]) for r in seeds]
    geomean = math.exp(statistics.fmean(math.log(x) for x in ratios))

    what = f"fp32 NCHW forward, {len(seeds)} seed shapes"
    goals = [
        (
            "depthwise (issue 19)",
            f"geomean speedup over PyTorch's native kernel, {what}: {geomean:.2f}x",
            f">= {DEPTHWISE_GEOMEAN_GOAL}x",
            "met" if geomean >= DEPTHWISE_GEOMEAN_GOAL else "not met",
        )
    ]
    # A CPU has no datasheet bandwidth: its rows carry no spec floor, and no bandwidth goal.
    floored = [r for r in seeds if r["comparison"].get("facts", {}).get("roofline_spec_floor_us") is not None]
    if not floored:
        return goals
    largest = sorted(floored, key=lambda r: -float(r["comparison"]["facts"]["roofline_spec_floor_us"]))[:2]
    shares = [
        float(r["comparison"]["facts"]["roofline_spec_floor_us"])
        / (_us(r["comparison"]["candidate"]) or math.inf)
        for r in largest
    ]
    return [
        *goals,
        (
            "depthwise (issue 19)",
            "share of the HBM spec peak on the two largest seed shapes: "
            + ", ".join(f"{x:.0%}" for x in shares),
            f">= {DEPTHWISE_PEAK_GOAL:.0%}",
            "met" if min(shares) >= DEPTHWISE_PEAK_GOAL else "not met",
        ),
    ]


def failed_tests(folders: Iterable[Path]) -> list[str]:
    lines: list[str] = []
    for folder in folders:
        for xml in sorted(folder.glob("junit*.xml")):
            for case in ET.parse(xml).getroot().iter("testcase"):
                failure = case.find("failure")
                if failure is None:
                    failure = case.find("error")
                if failure is not None:
                    first = (failure.get("message") or "").splitlines()[0][:220]
                    lines.append(f"- `{case.get('classname')}::{case.get('name')}`: {first}")
    return lines


def machine_line(rows: Sequence[dict[str, Any]]) -> str:
    for row in rows:
        facts = (row.get("comparison") or {}).get("facts") or {}
        env = row.get("env") or {}  # the row's own (rows.json format 2 stores it there only)
        if env:
            return (
                f"Machine `{row.get('machine')}`; torch {env.get('torch')}, CUDA {env.get('cuda')}, "
                f"cuDNN {env.get('cudnn')}, driver {env.get('driver')}; timer {facts.get('timer')}, "
                f"L2 flush by {facts.get('flush')}, TF32 {facts.get('tf32')}."
            )
    return "Machine: unknown (no row carried its environment)."


def build_page(title: str, reports: Sequence[Path], harness: Path | None, intro: str) -> str:
    rows = [row for report in reports for row in load_rows(report)]
    sections = [(report, name) for report in reports for name in SECTION_FILES if (report / name).is_file()]
    goals = depthwise_goals(rows)
    goals += [g for report, name in sections for g in goal_rows((report / name).read_text(), name)]
    out = [f"# {title}", "", intro.strip(), "", machine_line(rows), ""]
    out += ["## Kernel goals", ""]
    if goals:
        met = sum(1 for g in goals if g[3].lower() == "met")
        out += [f"{met} of {len(goals)} goals met.", ""]
        out += ["| table | item | goal | met |", "|---|---|---|---|"]
        out += [f"| {s} | {i} | {g} | {m} |" for s, i, g, m in goals]
    else:
        out.append("No goal tables in these reports.")
    failures = failed_tests(dict.fromkeys([*reports, *(r.parent for r in reports)]))
    out += ["", "## Tests that failed in this session", ""]
    out += failures or ["None."]
    out += ["", "## Timing precision", "", *precision_summary(rows), ""]
    if harness is not None and (harness / "harness.md").is_file():
        text = (harness / "harness.md").read_text().replace("# Harness table", "").strip()
        out += ["## Harness table", "", text, ""]
    out += ["## Every check", "", *check_tables(rows)]
    for report, name in sections:
        text = (report / name).read_text().strip()
        out += ["", f"## Suite section: {name}", "", _demote(text), ""]
    return "\n".join(out).rstrip() + "\n"


def replace_section(page: str, title: str, body: str, *, after: str | None = None) -> str:
    """``page`` with its ``## title`` section (up to the next ``## ``) replaced by ``body``; a page
    without one gets it after the ``## after`` section when there is one, else after the intro
    (before the first ``## ``): a window's section updates a page whose other sections came from an
    earlier session."""
    section = f"## {title}\n\n{body.strip()}\n"
    head, found, rest = page.partition(f"## {title}\n")
    if found:
        tail = rest.partition("\n## ")
        return head + section + ("\n## " + tail[2] if tail[1] else "")
    if after is not None and f"## {after}\n" in page:
        head, found, rest = page.partition(f"## {after}\n")
        body_of_after, sep, tail = rest.partition("\n## ")
        return head + found + body_of_after.rstrip() + "\n\n" + section + ("\n## " + tail if sep else "")
    before, sep, tail = page.partition("\n## ")
    return before.rstrip() + "\n\n" + section + ("\n## " + tail if sep else "")


def _demote(markdown: str) -> str:
    """Nest a section's own headings under the page's ``##``."""
    return "\n".join("##" + line if line.startswith("#") else line for line in markdown.splitlines())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("reports", nargs="+", type=Path, help="folders given to --convperf-report")
    parser.add_argument("--harness", type=Path, help="folder of harness.md (scripts/harness_table.py merge)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="Results")
    parser.add_argument("--intro", default="", help="a paragraph saying how the numbers were produced")
    args = parser.parse_args(argv)
    args.out.write_text(build_page(args.title, args.reports, args.harness, args.intro))
    print(f"results page: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
