"""``python -m pytest_convperf bisect GOOD BAD -- <pytest args>``: find the commit that changed a check.

The walk (:func:`walk`, pure: it takes a ``compare(a, ref) -> ABResult`` function):

1. BAD is measured against GOOD: its verdict (SLOWER or FASTER) is the step's direction; SAME or
   INCONCLUSIVE ends the bisect (there is no step to find, or it cannot be seen).
2. At each midpoint M of the interval (lo, hi], M is measured against *both* ends. M is on the bad
   side when M vs lo shows the step and M vs hi is SAME; on the good side when M vs lo is SAME and
   M vs hi shows the step reversed. Anything else is AMBIGUOUS: the walk stops and reports the
   interval and both measurements. It never guesses.
3. The first bad commit is then measured against its parent: the step with its CI.

:func:`pytest_compare` is ``compare`` for real: ``pytest --convperf --convperf-against=REF`` in a
worktree of A (:mod:`pytest_convperf.ab.revisions`), reading the A/B of the check from ``rows.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_convperf.ab.revisions import (
    Checkouts,
    Revision,
    RevisionError,
    commits_between,
    repo_root,
    resolve,
)
from pytest_convperf.ab.rule import FASTER, SAME, SLOWER, ABResult

Compare = Callable[[Revision, Revision], ABResult]
FOUND, AMBIGUOUS, NO_STEP = "FOUND", "AMBIGUOUS", "NO_STEP"


@dataclass
class BisectResult:
    """``status`` FOUND (``first_bad``, ``step``), AMBIGUOUS (``interval``) or NO_STEP; ``log`` lines."""

    status: str
    interval: tuple[Revision, Revision]
    first_bad: Revision | None = None
    step: ABResult | None = None
    log: list[str] = field(default_factory=list)


def _fmt(r: ABResult) -> str:
    return f"{r.verdict} t/t_ref {r.ratio:.3f} [{r.ci[0]:.3f}, {r.ci[1]:.3f}]"


def walk(commits: Sequence[Revision], compare: Compare, log: Callable[[str], None] = print) -> BisectResult:
    """Bisect ``commits`` (GOOD first, BAD last) with the A/B ``compare(a, ref)``."""
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        log(line)

    lo, hi = 0, len(commits) - 1
    whole = compare(commits[hi], commits[lo])
    say(f"BAD {commits[hi].label} vs GOOD {commits[lo].label}: {_fmt(whole)}")
    if whole.verdict not in (SLOWER, FASTER):
        say(f"no step to bisect: BAD against GOOD is {whole.verdict} ({whole.message})")
        return BisectResult(NO_STEP, (commits[lo], commits[hi]), log=lines)
    direction = whole.verdict
    reverse = FASTER if direction == SLOWER else SLOWER
    while hi - lo > 1:
        mid = (lo + hi) // 2
        vs_lo = compare(commits[mid], commits[lo])
        vs_hi = compare(commits[mid], commits[hi])
        side = (
            "bad"
            if vs_lo.verdict == direction and vs_hi.verdict == SAME
            else "good"
            if vs_lo.verdict == SAME and vs_hi.verdict == reverse
            else None
        )
        say(
            f"{commits[mid].label}: vs {commits[lo].label} {_fmt(vs_lo)}; "
            f"vs {commits[hi].label} {_fmt(vs_hi)}"
            f" -> {side or 'ambiguous'}"
        )
        if side is None:
            say(
                f"AMBIGUOUS: the step lies after {commits[lo].label} and at or before {commits[hi].label}; "
                f"the midpoint {commits[mid].label} is on neither side by the statistics (rerun on a "
                "quieter machine, or bisect the two halves separately)"
            )
            return BisectResult(AMBIGUOUS, (commits[lo], commits[hi]), log=lines)
        lo, hi = (lo, mid) if side == "bad" else (mid, hi)
    step = compare(commits[hi], commits[lo])
    say(f"first bad commit: {commits[hi].label} {commits[hi].subject!r}: vs its parent {_fmt(step)}")
    return BisectResult(FOUND, (commits[lo], commits[hi]), commits[hi], step, lines)


def _pick(rows: Sequence[dict[str, object]], key: str | None) -> tuple[str, ABResult]:
    """The check's A/B: the row of ``key``, else the only A/B row."""
    found = []
    for row in rows:
        facts = row.get("facts")
        ab = facts.get("ab") if isinstance(facts, dict) else None
        if isinstance(ab, dict) and (key is None or row.get("key") == key):
            found.append((str(row.get("key")), ABResult.from_dict(ab["result"])))
    if len(found) != 1:
        raise RevisionError(
            f"bisect follows one check, but the pytest args gave {len(found)} A/B results"
            + (f" for {key}" if key else "")
            + "; select a single convperf check (a test id or -k)"
        )
    return found[0]


def pytest_command(*args: str) -> list[str]:
    """``python -m pytest -q --convperf ARGS`` with this interpreter (no cache folder in the tree)."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--convperf", *args]


def pytest_compare(repo: Path, checkouts: Checkouts, pytest_args: Sequence[str], work: Path) -> Compare:
    """``compare(a, ref)``: one ``pytest --convperf --convperf-against=ref`` session in a worktree of a."""
    key: list[str] = []
    counter = [0]

    def compare(a: Revision, ref: Revision) -> ABResult:
        tree = checkouts.path(a)
        counter[0] += 1
        report = work / f"run{counter[0]}"
        cmd = pytest_command(f"--convperf-against={ref.sha}", f"--convperf-report={report}", *pytest_args)
        res = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, check=False)
        rows_file = report / "rows.json"
        if not rows_file.is_file():
            tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-15:])
            raise RevisionError(
                f"pytest at {a.label} against {ref.label} wrote no results (exit {res.returncode}):\n{tail}"
            )
        name, result = _pick(json.loads(rows_file.read_text(encoding="utf-8")), key[0] if key else None)
        key[:] = [name]
        return result

    return compare


# Options bisect gives each run itself: the user's copy would replace the revision or the folder
# bisect reads (a "--convperf-against=HEAD" made every step HEAD against HEAD: SAME, no step).
OWN_OPTIONS = ("--convperf-against", "--convperf-report")


def refuse_own_options(pytest_args: Sequence[str]) -> None:
    """:class:`RevisionError` naming a pytest arg that would override what bisect sets per run."""
    for arg in pytest_args:
        name = arg.split("=", 1)[0]
        if name in OWN_OPTIONS:
            raise RevisionError(
                f"{arg!r} conflicts with bisect, which sets {name} itself for every run (GOOD, BAD "
                "and each midpoint); drop it from the pytest args after --"
            )


def main(good: str, bad: str, pytest_args: Sequence[str], cwd: Path | None = None) -> int:
    """The CLI: 0 first bad commit found, 2 AMBIGUOUS, 3 no step, 1 an error (printed)."""
    try:
        refuse_own_options(pytest_args)
        repo = repo_root(
            cwd or Path.cwd(), "bisect walks the commits between GOOD and BAD: run it in a git clone"
        )
        g, b = resolve(repo, good), resolve(repo, bad)
        commits = [g, *commits_between(repo, g, b)]
        if len(commits) < 2:
            raise RevisionError(f"GOOD {g.label} and BAD {b.label} are the same commit")
        print(f"bisect: {len(commits) - 1} commits after GOOD {g.label} up to BAD {b.label}", flush=True)
        with tempfile.TemporaryDirectory(prefix="convperf-bisect-") as work:
            co = Checkouts(repo)
            try:
                result = walk(
                    commits,
                    pytest_compare(repo, co, pytest_args, Path(work)),
                    log=lambda line: print(line, flush=True),
                )
            finally:
                co.close()
    except RevisionError as exc:
        print(f"bisect: error: {exc}", file=sys.stderr)
        return 1
    return {FOUND: 0, AMBIGUOUS: 2, NO_STEP: 3}[result.status]
