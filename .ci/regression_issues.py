"""One GitHub issue per kept speed FAIL of the nightly run (issue 27.5), kept in step night by night.

From the report's ``rows.json`` (a FAIL the night's false-alarm control kept is ``FAIL`` there; one
it cleared is ``SUSPECT``) and the open issues labelled ``convperf-regression`` (``gh issue list
--json number,title,body``), each check is one issue, found by the marker line in its body
(``<!-- convperf-check: <machine> | <check id> -->``, both percent-encoded, so no id can end the
comment early and each night finds the issue again):

- a FAIL without an open issue opens one (title, speedup with CI, commit, the FAIL's message,
  which names the kernels that moved, and a link to the run, whose artifacts hold the dashboard);
- a FAIL with one adds a comment with tonight's numbers (no second issue);
- an open issue whose check ran tonight on that machine and did not FAIL is closed with a comment;
  a check that did not run tonight leaves its issue as it is.

    gh issue list --label convperf-regression --state open --json number,title,body > issues.json
    python .ci/regression_issues.py --report report --issues issues.json --run-url "$RUN_URL" [--apply]

Without ``--apply`` it prints the plan (one JSON object per action); with it, it runs ``gh``.

Ids, machine names, commits and messages come from test code and go into Markdown that GitHub
renders: each is a code span or a fenced block (``pytest_convperf.core.markdown_safe``), so none
pings a person, links an issue or shows a link or an image.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

# The plugin's escaping (stdlib only; importing pytest_convperf imports nothing heavy): this job
# runs from the checkout, with no install.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_convperf.core.markdown_safe import bounded, code_block, code_span

LABEL = "convperf-regression"
MARK = re.compile(r"<!-- convperf-check: (.+?) \| (.+?) -->")
# GitHub refuses an issue title over 256 characters.
TITLE_LIMIT = 200


@dataclass(frozen=True)
class Action:
    kind: str  # open | comment | close
    check: str  # "<machine> | <module>::<key>"
    title: str
    body: str
    number: int | None = None


def marker(check: str) -> str:
    """The hidden line that finds a check's issue, machine and id percent-encoded where they could
    end it (``<``, ``>``: no ``-->``), split it (``|``), break its line, or not read back (``%``)."""
    machine, _, ident = check.partition(" | ")
    return f"<!-- convperf-check: {_encode(machine)} | {_encode(ident)} -->"


# Printable ASCII stays readable (an issue's marker of ``test_dw::test_a[n8-c64]`` is that text).
_MARK_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in "%<>|")


def _encode(text: str) -> str:
    return quote(text, safe=_MARK_SAFE)


def _title(text: str) -> str:
    """An issue title: plain text on GitHub (no mention, no link), so only bounded, on one line."""
    return " ".join(bounded(text, TITLE_LIMIT).replace("\r", "\n").split("\n"))


def check_of(row: dict[str, Any]) -> str:
    return f"{row.get('machine') or 'unknown'} | {row.get('module')}::{row.get('key')}"


def _numbers(row: dict[str, Any]) -> str:
    comp = ((row.get("decision") or {}).get("confirm")) or row.get("comparison") or {}
    ratio, ci = comp.get("time_ratio"), comp.get("time_ratio_ci")
    if not isinstance(ratio, (int, float)) or ratio <= 0:
        return "no timing"
    text = f"speedup {1 / ratio:.3f}x"
    if isinstance(ci, list) and len(ci) == 2 and all(isinstance(c, (int, float)) and c > 0 for c in ci):
        text += f" (95 % CI {1 / ci[1]:.3f} .. {1 / ci[0]:.3f})"
    base = (row.get("baseline") or {}).get("time_ratio")
    if isinstance(base, (int, float)) and base > 0:
        text += f", baseline {1 / base:.3f}x"
    return text


def _report(row: dict[str, Any], commit: str, run_url: str) -> str:
    return (
        f"**{code_span(row.get('verdict'))}** at commit {code_span(commit)} on "
        f"{code_span(row.get('machine'))}: {_numbers(row)}.\n\n"
        f"{code_block((row.get('message') or '').strip())}\n\n"
        f"Run, report and dashboard (artifacts `convperf-report-*`, `convperf-dashboard-*`): {run_url}\n"
    )


def plan(
    rows: list[dict[str, Any]], issues: list[dict[str, Any]], *, commit: str, run_url: str
) -> list[Action]:
    """What to open, comment on and close (see the module docstring)."""
    open_by_check: dict[str, dict[str, Any]] = {}
    for issue in issues:
        found = MARK.search(str(issue.get("body") or ""))
        if found:
            open_by_check.setdefault(f"{unquote(found.group(1))} | {unquote(found.group(2))}", issue)
    ran = {check_of(r): r for r in rows}
    actions = []
    for check, row in sorted(ran.items()):
        issue = open_by_check.get(check)
        if row.get("verdict") in ("FAIL", "HISTORY_FAIL"):
            title = f"convperf regression: {check.split(' | ', 1)[1]} [{row.get('machine')}]"
            body = _report(row, commit, run_url)
            if issue is None:
                actions.append(Action("open", check, _title(title), f"{marker(check)}\n\n{body}"))
            else:
                actions.append(
                    Action("comment", check, title, f"Still failing.\n\n{body}", int(issue["number"]))
                )
        elif issue is not None:
            body = (
                f"Passes again: **{code_span(row.get('verdict'))}** at commit {code_span(commit)}, "
                f"{_numbers(row)}. {run_url}\n"
            )
            actions.append(Action("close", check, str(issue.get("title") or ""), body, int(issue["number"])))
    return actions


def history_rows(report: Path) -> list[dict[str, Any]]:
    """The night's history gate (``history_findings.json``, issue 36.2) as rows: a HISTORY_FAIL is
    alerted like a FAIL, and, listed after rows.json's, replaces that check's (ADVISORY) row."""
    path = report / "history_findings.json"
    found = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    return [
        {**f, "verdict": "HISTORY_FAIL"}
        for f in found
        if isinstance(f, dict) and f.get("verdict") == "HISTORY_FAIL"
    ]


def apply(actions: list[Action]) -> None:
    for a in actions:
        if a.kind == "open":
            cmd = ["gh", "issue", "create", "--title", a.title, "--body", a.body, "--label", LABEL]
        elif a.kind == "comment":
            cmd = ["gh", "issue", "comment", str(a.number), "--body", a.body]
        else:
            cmd = ["gh", "issue", "close", str(a.number), "--comment", a.body]
        subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--report", required=True, type=Path)
    parser.add_argument("--issues", required=True, type=Path, help="gh issue list --json number,title,body")
    parser.add_argument("--run-url", required=True)
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--apply", action="store_true", help="run gh (default: print the plan)")
    args = parser.parse_args(argv)
    rows_file = args.report / "rows.json"
    if not rows_file.is_file():
        print(
            f"regression_issues: no {rows_file} (the suite wrote no report); nothing to do", file=sys.stderr
        )
        return 0
    rows = [r for r in json.loads(rows_file.read_text(encoding="utf-8")) if isinstance(r, dict)]
    rows += history_rows(args.report)
    issues = json.loads(args.issues.read_text(encoding="utf-8"))
    actions = plan(rows, issues, commit=args.commit, run_url=args.run_url)
    for a in actions:
        print(json.dumps(asdict(a)))
    if args.apply:
        apply(actions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
