"""Say which tests a nightly run failed: Markdown for the job summary, ``::error`` lines for the log.

Reads the JUnit XML (every failed or errored test, whatever failed it), the report's
``rows.json`` (the convperf verdict of every check, FAIL and CORRECTNESS_FAIL listed with their
messages; a speed FAIL the night's false-alarm control kept is FAIL there, one it cleared is
SUSPECT) and ``night.json`` (the false alarms the night should expect, change points new tonight).
Exits 0 on its own: the job's status is pytest's exit code, passed as ``--exit-code`` only to be
shown.

    python .ci/nightly_verdicts.py --report report --junit report/junit.xml \
        --summary "$GITHUB_STEP_SUMMARY" --exit-code "$PYTEST_EXIT"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

# The plugin's Markdown escaping (stdlib only; importing pytest_convperf imports nothing heavy).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_convperf.core.markdown_safe import code_span

FAILING_VERDICTS = ("FAIL", "CORRECTNESS_FAIL")
EXIT_MEANINGS = {
    "0": "all tests passed",
    "1": "some tests failed",
    "2": "the run was interrupted",
    "3": "pytest hit an internal error",
    "4": "pytest was called wrongly (usage error)",
    "5": "no test was collected",
}


def junit_failures(path: Path) -> list[tuple[str, str, str]]:
    """``(test, "failure" | "error", first message line)`` for each failed or errored test case."""
    if not path.is_file():
        return []
    # Our own pytest's output on our own runner: a trusted file.
    root = ElementTree.parse(path).getroot()
    found: list[tuple[str, str, str]] = []
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            node = case.find(kind)
            if node is None:
                continue
            text = (node.get("message") or node.text or "").strip().splitlines()
            test = "::".join(part for part in (case.get("classname"), case.get("name")) if part)
            found.append((test, kind, text[0] if text else ""))
    return found


def failing_checks(report: Path) -> list[dict[str, Any]]:
    """Rows of ``rows.json`` whose verdict fails the test (FAIL, CORRECTNESS_FAIL)."""
    path = report / "rows.json"
    if not path.is_file():
        return []
    rows = json.loads(path.read_text(encoding="utf-8"))
    return [row for row in rows if isinstance(row, dict) and row.get("verdict") in FAILING_VERDICTS]


def night_facts(report: Path) -> dict[str, Any]:
    """The report's ``night.json`` (false-alarm control, change points new tonight); {} when absent."""
    path = report / "night.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def night_section(night: dict[str, Any]) -> list[str]:
    """How many false alarms the night should expect, the SUSPECTs it cleared, its new change points."""
    if not night:
        return []
    lines = ["### Night", ""]
    if night.get("summary"):
        lines += [str(night["summary"]), ""]
    cleared = night.get("cleared") or []
    if cleared:
        lines += [f"SUSPECT (slower by its own rule, not significant across the night): {len(cleared)}", ""]
        lines += [f"- {_cell(c)}" for c in cleared] + [""]
    cps = night.get("change_points_new") or []
    lines += [f"Change points new tonight: {len(cps)}", ""]
    lines += [f"- {_cell(c)}" for c in cps]
    return lines + ([""] if cps else [])


def _cell(text: object) -> str:
    """Text from test code (ids, messages) as a code span: no ping, link or broken row."""
    return code_span(text, table=True)


def markdown(
    failures: list[tuple[str, str, str]],
    checks: list[dict[str, Any]],
    exit_code: str | None,
    night: dict[str, Any] | None = None,
) -> str:
    """The job-summary section: pytest's status, the failed tests, the failing convperf checks, the night."""
    lines = ["## Nightly verdicts", ""]
    if exit_code is not None:
        meaning = EXIT_MEANINGS.get(exit_code, "unexpected exit code")
        lines += [f"pytest exit code **{exit_code}**: {meaning}.", ""]
    if failures:
        lines += [f"### {len(failures)} failed test(s)", "", "| test | kind | message |", "|---|---|---|"]
        lines += [f"| {_cell(t)} | {k} | {_cell(m)} |" for t, k, m in failures]
        lines.append("")
    if checks:
        lines += [
            f"### {len(checks)} failing convperf check(s)",
            "",
            "| check | verdict | message |",
            "|---|---|---|",
        ]
        for row in checks:
            where = row.get("nodeid") or row.get("key") or "?"
            lines.append(f"| {_cell(where)} | {row.get('verdict')} | {_cell(row.get('message', ''))} |")
        lines.append("")
    if not failures and not checks:
        lines += ["No test failed.", ""]
    lines += night_section(night or {})
    return "\n".join(lines)


def _escape(text: str, *, prop: bool = False) -> str:
    """Escape a workflow-command value (GitHub's rules: %, CR, LF; also : and , in properties)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def error_lines(failures: list[tuple[str, str, str]], checks: list[dict[str, Any]]) -> list[str]:
    """One ``::error`` line per failed test and per failing check."""
    out = []
    for test, kind, message in failures:
        out.append(f"::error title={_escape(f'{kind}: {test}', prop=True)}::{_escape(message or kind)}")
    for row in checks:
        verdict = str(row.get("verdict"))
        title = _escape(f"convperf {verdict}: {row.get('nodeid') or row.get('key') or '?'}", prop=True)
        out.append(f"::error title={title}::{_escape(str(row.get('message') or verdict))}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--report", type=Path, default=Path("report"), help="the --convperf-report folder")
    parser.add_argument("--junit", type=Path, default=None, help="JUnit XML (default: REPORT/junit.xml)")
    parser.add_argument("--summary", type=Path, default=None, help="append the Markdown here (job summary)")
    parser.add_argument("--exit-code", default=None, help="pytest's exit code, to be explained")
    args = parser.parse_args(argv)
    failures = junit_failures(args.junit or args.report / "junit.xml")
    checks = failing_checks(args.report)
    text = markdown(failures, checks, args.exit_code, night_facts(args.report))
    if args.summary is not None:
        with args.summary.open("a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        print(text)
    for line in error_lines(failures, checks):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
