"""What one night of the GPU window measured, per module: ``python scripts/night_summary.py REPORT_DIR
[--log PYTEST_LOG] [--junit JUNIT_XML] [--expect-fail SUBSTRING] --out SUMMARY.json``.

Reads a ``--convperf-report`` directory (``rows.json``, ``night.json``) and, when given, the pytest log
(the fresh-process confirm's line: how many FAILs it re-ran, how many stayed, its seconds) and the
junit XML (wall time per module). Per module: the checks, the count of each verdict
(:data:`VERDICTS`; any other verdict under ``other``), the checks that went through the fresh
confirm, the wall time, and every FAIL with its check, its ratio to the baseline (1 + delta) and the
noise it was judged with. ``--expect-fail`` names the checks that should FAIL (the planted slowdown):
a FAIL outside them is a false alarm, and an expected check that did not FAIL is a miss. Prints the
summary as text too (the phase's summary.txt).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

VERDICTS = ("PASS", "FAIL", "SUSPECT", "STALE", "NEW", "INCONCLUSIVE")
# The line fresh_confirm.py prints at session end (pytest_convperf/night/fresh_confirm.py, _confirm).
CONFIRM_LINE = re.compile(
    r"(?P<todo>\d+) speed FAIL\(s\) confirmed again in up to \d+ fresh pytest processes: "
    r"(?P<still>\d+) still FAIL, (?P<cleared>\d+) cleared(?:.*?in (?P<seconds>[\d.]+) s)?"
)
FRESH_MARKERS = ("confirmed again in", "not confirmed in a fresh process")


@dataclass
class Fail:
    check: str
    ratio: float | None  # t_now / t_baseline of the time ratio (1 + delta)
    noise: float | None
    expected: bool
    message: str
    # The FAIL's kernel diff line ("kernels changed since the baseline: ..."), "" when it has none: what
    # names the planted kernel, and what sets a changed kernel apart from a false alarm.
    kernel_diff: str = ""


@dataclass
class ModuleSummary:
    module: str
    checks: int = 0
    verdicts: dict[str, int] = field(default_factory=lambda: dict.fromkeys((*VERDICTS, "other"), 0))
    fresh_confirmed: int = 0
    wall_s: float | None = None
    fails: list[Fail] = field(default_factory=list)


@dataclass
class NightSummary:
    modules: list[ModuleSummary]
    checks: int
    false_fails: int  # FAILs outside --expect-fail (all FAILs when nothing is expected)
    missed: list[str]  # expected checks that did not FAIL
    fresh_confirm: dict[str, Any] | None  # the confirm line's numbers, seconds when printed
    night: dict[str, Any]  # night.json: method, alpha, m, fails, cleared

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_label(row: dict[str, Any]) -> str:
    return f"{row.get('nodeid', '?')} [{row.get('key', '?')}]"


def summarize(
    rows: Sequence[dict[str, Any]],
    night: dict[str, Any],
    *,
    log: str = "",
    junit: str | None = None,
    expect_fail: Sequence[str] = (),
) -> NightSummary:
    """The night's summary from rows.json's rows, night.json, the pytest log and the junit XML."""
    modules: dict[str, ModuleSummary] = {}
    missed: list[str] = []
    false_fails = 0
    for row in rows:
        module = str(row.get("module") or "?")
        summary = modules.setdefault(module, ModuleSummary(module))
        summary.checks += 1
        verdict = str(row.get("verdict"))
        summary.verdicts[verdict if verdict in VERDICTS else "other"] += 1
        message = str(row.get("message") or "")
        if any(marker in message for marker in FRESH_MARKERS):
            summary.fresh_confirmed += 1
        label = check_label(row)
        expected = any(s in label for s in expect_fail)
        if verdict == "FAIL":
            decision = row.get("decision") or {}
            delta = decision.get("delta")
            summary.fails.append(
                Fail(
                    label,
                    None if delta is None else 1.0 + float(delta),
                    decision.get("noise"),
                    expected,
                    message.splitlines()[0] if message else "",
                    next((x for x in message.splitlines() if x.startswith("kernels ")), ""),
                )
            )
            false_fails += not expected
        elif expected:
            missed.append(f"{label}: {verdict}")
    for module, seconds in (wall_times(junit) if junit else {}).items():
        modules.setdefault(module, ModuleSummary(module)).wall_s = seconds
    return NightSummary(
        modules=sorted(modules.values(), key=lambda m: m.module),
        checks=len(rows),
        false_fails=false_fails,
        missed=missed,
        fresh_confirm=confirm_numbers(log),
        night={k: night.get(k) for k in ("method", "alpha", "m", "fails", "cleared", "summary")},
    )


def confirm_numbers(log: str) -> dict[str, Any] | None:
    """The fresh confirm's line in the pytest log: FAILs re-run, still FAIL, cleared, seconds."""
    match = CONFIRM_LINE.search(log)
    if match is None:
        return None
    out: dict[str, Any] = {k: int(match[k]) for k in ("todo", "still", "cleared")}
    out["seconds"] = float(match["seconds"]) if match["seconds"] else None
    return out


def wall_times(junit_xml: str) -> dict[str, float]:
    """Seconds per test module (setup, call and teardown of its tests) from a junit XML."""
    out: dict[str, float] = {}
    for case in ET.fromstring(junit_xml).iter("testcase"):
        module = case.get("classname", "?").split(".")[-1]
        out[module] = out.get(module, 0.0) + float(case.get("time", 0.0))
    return {m: round(s, 1) for m, s in out.items()}


def text(summary: NightSummary) -> str:
    lines = [f"checks: {summary.checks}; false FAILs: {summary.false_fails}"]
    if summary.missed:
        lines.append(f"expected FAILs missed: {len(summary.missed)}")
        lines += [f"  {m}" for m in summary.missed]
    fc = summary.fresh_confirm
    lines.append(
        "fresh confirm: none needed"
        if fc is None
        else f"fresh confirm: {fc['todo']} re-run, {fc['still']} still FAIL, {fc['cleared']} cleared, "
        f"{fc['seconds'] if fc['seconds'] is not None else '?'} s"
    )
    if summary.night.get("summary"):
        lines.append(str(summary.night["summary"]))
    for m in summary.modules:
        counts = " ".join(f"{k}={v}" for k, v in m.verdicts.items() if v)
        wall = f"{m.wall_s:.0f} s" if m.wall_s is not None else "? s"
        lines.append(f"{m.module}: {m.checks} checks, {counts}; fresh-confirmed {m.fresh_confirmed}; {wall}")
        for f in m.fails:
            ratio = f"{f.ratio:.3f}x" if f.ratio is not None else "?"
            noise = f"{f.noise:.2%}" if f.noise is not None else "?"
            tag = "expected" if f.expected else "FALSE ALARM"
            lines.append(f"  FAIL ({tag}) {f.check}: ratio {ratio}, noise {noise}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/night_summary.py", description=__doc__.split("\n")[0])
    parser.add_argument("report", type=Path, help="a --convperf-report directory")
    parser.add_argument("--log", type=Path, help="the pytest log (for the fresh confirm's line)")
    parser.add_argument("--junit", type=Path, help="the junit XML (for wall time per module)")
    parser.add_argument("--expect-fail", action="append", default=[], help="checks that should FAIL")
    parser.add_argument("--out", type=Path, required=True, help="the summary JSON")
    args = parser.parse_args(argv)
    rows_file = args.report / "rows.json"
    if not rows_file.exists():
        print(
            f"night_summary: {rows_file} is missing: the pytest run wrote no report (see its log)",
            file=sys.stderr,
        )
        return 2
    rows = json.loads(rows_file.read_text())
    night_file = args.report / "night.json"
    night = json.loads(night_file.read_text()) if night_file.exists() else {}
    log = args.log.read_text(errors="replace") if args.log and args.log.exists() else ""
    junit = args.junit.read_text() if args.junit and args.junit.exists() else None
    summary = summarize(rows, night, log=log, junit=junit, expect_fail=args.expect_fail)
    args.out.write_text(json.dumps(summary.to_dict(), indent=1) + "\n")
    print(text(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
