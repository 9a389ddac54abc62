"""``python -m pytest_convperf SUBCOMMAND``: calibrate, merge-baselines, report, review, history,
store, export, dashboard, bisect.

calibrate [pytest args] --runs K
    Runs the selection's timed checks (``-m convperf``, within any ``-m`` given) K times, unchanged,
    each in a fresh ``pytest`` subprocess (with ``--convperf`` and a private report directory, never
    updating baselines), saying after each run what it measured and the time left; then stores per
    check ``noise`` = the between-run SD of ln(time ratio) (the plain SD of the runs left after
    dropping load spikes beyond 5 robust SDs of the median, from 3 runs on), floored, and
    ``noise_runs`` = K. A check without an entry gets one: the median of the K runs (ref_runs K).
merge-baselines A B [...] -o OUT [--prefer first|last]
    Merges baseline files of one machine by key; a key with different values in two inputs is
    a conflict (exit 1) unless ``--prefer`` says which side wins.
report DIR [--markdown]
    Prints the summary of a ``--convperf-report`` directory again (from its rows.json).
review BASE_REV [HEAD_REV]
    Prints a pull request's baseline changes as Markdown (old -> new ratio of every changed
    entry, env moved, reason) between two git revisions; HEAD_REV defaults to the work tree.
history DIR|URL [--persist N] [--no-plot]
    Change points per check over DIR/history.jsonl or a results store (URL), one line each, and
    history.png (in DIR; a store's in the current folder).
store import DIR [--store URL]
    Loads every history.jsonl under DIR into a results store (default: DIR/convperf.sqlite);
    records already stored are not added again. See docs/results-store.md.
export --format bmf|gab DIR|URL [--machine M] [-o FILE]
    The latest run of each check as Bencher Metric Format or github-action-benchmark's
    customBiggerIsBetter list. See pytest_convperf.reports.exports.
dashboard DIR|URL --out OUT
    Writes the static dashboard (OUT/index.html, every asset inlined) of a report folder's
    history or a results store. See docs/dashboard.md.
bisect GOOD BAD -- [pytest args]
    Finds the commit between GOOD and BAD that changed one convperf check, measuring each midpoint
    against both ends with ``--convperf-against``; AMBIGUOUS (exit 2) with the interval when the
    statistics cannot place a midpoint. See ``pytest_convperf.ab.bisect``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_convperf.baselines.calibration import calibrate_records, write_calibration
from pytest_convperf.baselines.store import dump_text, merge_files
from pytest_convperf.core.env import load_avg
from pytest_convperf.core.files import atomic_write
from pytest_convperf.core.rerun import plugin_args
from pytest_convperf.night.history import PERSIST, WINDOW
from pytest_convperf.reports.progress import Pace, fmt_duration

# pytest exit codes after which the runs are still usable (0 passed, 1 some tests failed,
# 5 nothing collected is handled separately).
_USABLE_EXIT = (0, 1)
_NO_TESTS = 5  # pytest.ExitCode.NO_TESTS_COLLECTED (pytest is not imported here)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    """A calibrate run's history records; a line that cannot be read is named and skipped."""
    from pytest_convperf.core.jsonl import read_objects

    objects, skipped = read_objects(run_dir / "history.jsonl")
    for line in skipped:
        print(f"calibrate: {line}", file=sys.stderr)
    return [rec for _, rec in objects]


def timed_only(pytest_args: Sequence[str]) -> list[str]:
    """``pytest_args`` selecting the convperf checks alone: calibrate times them and nothing else
    (issue 38.3: a 25-example fuzz test in the file cost every run minutes). A ``-m`` given is kept,
    and-ed with ``convperf`` (pytest honours only the last ``-m``)."""
    out: list[str] = []
    given: list[str] = []
    args = list(pytest_args)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m" and i + 1 < len(args):
            given.append(args[i + 1])
            i += 2
            continue
        if arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
            given.append(arg[2:].lstrip("="))
        else:
            out.append(arg)
        i += 1
    expr = f"({given[-1]}) and convperf" if given else "convperf"
    return [*out, "-m", expr]


def run_lines(records: Sequence[Mapping[str, Any]], *, most: int = 5) -> list[str]:
    """What one calibrate run measured: each check's ratio, speedup and verdict (up to ``most``
    checks; beyond, the verdicts counted and the speedups' range)."""
    timed = [r for r in records if isinstance(r.get("ln_ratio"), (int, float))]
    if not timed:
        return ["    no timed check measured in this run"]
    if len(timed) <= most:
        return [
            f"    {r.get('key')}: ratio {math.exp(r['ln_ratio']):.4g} (speedup "
            f"{math.exp(-r['ln_ratio']):.3f}x), {r.get('verdict')}"
            for r in timed
        ]
    verdicts = Counter(str(r.get("verdict")) for r in timed)
    speedups = sorted(math.exp(-r["ln_ratio"]) for r in timed)
    counts = ", ".join(f"{v} {n}" for v, n in verdicts.most_common())
    return [f"    {len(timed)} checks ({counts}), speedups {speedups[0]:.3f}x .. {speedups[-1]:.3f}x"]


def cmd_calibrate(args: argparse.Namespace, pytest_args: list[str]) -> int:
    if args.runs < 2:
        print("calibrate: --runs must be at least 2 (a standard deviation needs two runs)", file=sys.stderr)
        return 2
    if any(a.startswith("--convperf-update-baselines") for a in pytest_args):
        print(
            "calibrate: do not pass --convperf-update-baselines; calibrate writes noise itself",
            file=sys.stderr,
        )
        return 2
    runs: list[list[dict[str, Any]]] = []
    pace = Pace(total={"run": args.runs})
    selection = timed_only(pytest_args)
    with tempfile.TemporaryDirectory(prefix="convperf-calibrate-") as tmp:
        for i in range(args.runs):
            run_dir = Path(tmp) / f"run-{i}"
            cmd = [
                sys.executable,
                "-m",
                "pytest",
                *plugin_args(pytest_args),
                *selection,
                "--convperf",
                f"--convperf-report={run_dir}",
                # One process per run: a fresh-process confirm's mean of 2 processes would halve
                # the offset variance this run is there to measure.
                "--convperf-confirm=process",
                "-p",
                "no:cacheprovider",
                "-q",
            ]
            load = " ".join(f"{x:.2f}" for x in load_avg())
            print(f"calibrate: run {i + 1}/{args.runs} (load {load}): {' '.join(cmd[1:])}", flush=True)
            started = time.monotonic()
            proc = subprocess.run(cmd, capture_output=not args.verbose, text=True, check=False)
            if proc.returncode == _NO_TESTS and not runs:
                print(
                    "calibrate: the selection has no convperf checks (tests marked convperf or using the "
                    "convperf fixture); name a file or -k that holds one",
                    file=sys.stderr,
                )
                return 5
            if proc.returncode not in _USABLE_EXIT:
                tail = (proc.stdout or "")[-3000:] + (proc.stderr or "")[-2000:]
                print(f"calibrate: pytest exited {proc.returncode}; stopping.\n{tail}", file=sys.stderr)
                return proc.returncode or 1
            runs.append(_records(run_dir))
            pace.finish("run", time.monotonic() - started)
            print(
                f"calibrate: run {i + 1}/{args.runs} took {fmt_duration(time.monotonic() - started)}; "
                + (pace.eta_text() if i + 1 < args.runs else "the last run"),
                flush=True,
            )
            for line in run_lines(runs[-1]):
                print(line, flush=True)
    folded = calibrate_records(runs, floor=args.floor)
    if not folded:
        print(
            "calibrate: the selection produced no convperf checks (are the tests marked convperf?)",
            file=sys.stderr,
        )
        return 5
    for file, data in folded.items():
        print(f"{file}:")
        for line in write_calibration(file, data["machine"], data["checks"]):
            print(line)
    return 0


def _merge_paths_problem(paths: Sequence[Path], output: Path) -> str | None:
    """Why the inputs or ``-o`` cannot be used (one line with the fix), or None."""
    for path in paths:
        if not path.is_file():
            what = "is a folder" if path.is_dir() else "does not exist"
            return f"input {path} {what}; give baseline YAML files (baselines/<machine>/<module>.yaml)"
    if output.is_dir():
        return f"-o {output} is a folder; give the file to write, e.g. -o {output / paths[0].name}"
    return None


def cmd_merge(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.files]
    problem = _merge_paths_problem(paths, Path(args.output))
    if problem is not None:
        print(f"merge-baselines: {problem}", file=sys.stderr)
        return 2
    # prefer=first: walk the files backwards and let the later (= earlier given) one win.
    order = list(reversed(paths)) if args.prefer == "first" else paths
    machine, merged, conflicts = merge_files(order, prefer_last=args.prefer is not None)
    if conflicts and args.prefer is None:
        print(
            "merge-baselines: conflicting values for: "
            + ", ".join(conflicts)
            + "; re-measure these checks, or pass --prefer first|last",
            file=sys.stderr,
        )
        return 1
    atomic_write(Path(args.output), dump_text(machine, merged))
    print(
        f"merge-baselines: {len(merged)} entries -> {args.output}"
        + (f" ({len(conflicts)} conflicts resolved: {args.prefer})" if conflicts else "")
    )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pytest_convperf.core.jsonl import summary
    from pytest_convperf.reports import journal
    from pytest_convperf.reports.report import markdown, terminal_lines

    directory = Path(args.dir)
    dicts, notes = _rows_json(directory / "rows.json")
    # A session that crashed wrote no rows.json: its journal holds every row it measured.
    seen = {journal.ident(d) for _, d in dicts if isinstance(d, Mapping)}
    objects, skipped = journal.read_named(directory)
    dicts += [(f"{directory / journal.JOURNAL}:{n}", d) for n, d in objects if journal.ident(d) not in seen]
    rows, problems = journal.usable_rows(dicts)
    for line in summary([*notes, *skipped, *problems]):
        print(f"report: {line}", file=sys.stderr)
    if not rows:
        print(
            f"report: no rows in {args.dir} (rows.json or {journal.JOURNAL}); write them with "
            f"pytest --convperf --convperf-report={args.dir}",
            file=sys.stderr,
        )
        return 2
    print(markdown(rows) if args.markdown else "\n".join(terminal_lines(rows)))
    return 0


def _rows_json(path: Path) -> tuple[list[tuple[str, Any]], list[str]]:
    """(where, row) of each element of a ``rows.json``, or a note on why none was read from it."""
    if not path.exists():
        return [], []
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # cut off, not UTF-8, not JSON
        return [], [f"{path}: not read ({type(exc).__name__}: {str(exc)[:120]}); the journal's rows are used"]
    if not isinstance(data, list):
        return [], [f"{path}: a JSON {type(data).__name__}, not a list of rows; the journal's rows are used"]
    return [(f"{path}: row {i}", row) for i, row in enumerate(data)], []


def cmd_history(args: argparse.Namespace) -> int:
    from pytest_convperf.night.history import run

    lines, code = run(args.dir, persist=args.persist, plot=not args.no_plot)
    print("\n".join(lines), file=sys.stderr if code else sys.stdout)
    return code


def cmd_store(args: argparse.Namespace) -> int:
    from pytest_convperf.reports.results_writer import DEFAULT_FILE, import_dir

    directory = Path(args.dir)
    url = args.store or f"sqlite:///{(directory / DEFAULT_FILE).resolve()}"
    lines, code = import_dir(url, directory)
    print("\n".join(lines), file=sys.stderr if code else sys.stdout)
    return code


def cmd_export(args: argparse.Namespace) -> int:
    from pytest_convperf.reports.exports import export

    out = Path(args.output) if args.output else None
    lines, code = export(args.source, args.format, machine=args.machine, out=out)
    if lines:
        print("\n".join(lines), file=sys.stderr)
    return code


def cmd_dashboard(args: argparse.Namespace) -> int:
    from pytest_convperf.reports.dashboard import build

    lines, code = build(args.source, Path(args.out), window=args.window)
    print("\n".join(lines), file=sys.stderr if code else sys.stdout)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m pytest_convperf``."""
    parser = argparse.ArgumentParser(
        prog="python -m pytest_convperf",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate", help="run the selection K times and store each check's noise")
    cal.add_argument("--runs", type=int, default=10, help="number of unchanged runs (default 10)")
    cal.add_argument(
        "--floor", type=float, default=None, help="noise floor (default: GPU 0.004, CPU measured)"
    )
    cal.add_argument("--verbose", action="store_true", help="show each run's pytest output")
    merge = sub.add_parser("merge-baselines", help="merge baseline files of one machine by key")
    merge.add_argument("files", nargs="+", help="baseline YAML files")
    merge.add_argument("-o", "--output", required=True, help="output file")
    merge.add_argument("--prefer", choices=("first", "last"), default=None, help="which side wins a conflict")
    rep = sub.add_parser("report", help="print the summary of a --convperf-report directory")
    rep.add_argument("dir")
    rep.add_argument("--markdown", action="store_true")
    rev = sub.add_parser("review", help="print a pull request's baseline changes as Markdown")
    rev.add_argument("base", help="the base revision (e.g. the pull request's base sha)")
    rev.add_argument("head", nargs="?", default=None, help="the head revision (default: the work tree)")
    hist = sub.add_parser("history", help="change points per check over a report directory's history.jsonl")
    hist.add_argument("dir", help="a --convperf-report folder, a history.jsonl, or a results store URL")
    hist.add_argument(
        "--persist", type=int, default=PERSIST, help=f"runs a step must last to count (default {PERSIST})"
    )
    hist.add_argument("--no-plot", action="store_true", help="do not draw history.png")
    store = sub.add_parser("store", help="the results store: store import DIR loads history.jsonl files")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    imp = store_sub.add_parser("import", help="load every history.jsonl under DIR into the store")
    imp.add_argument("dir")
    imp.add_argument("--store", default=None, metavar="URL", help="sqlite:///PATH or postgresql://... ")
    dash = sub.add_parser("dashboard", help="write the static dashboard of a report folder or a store")
    dash.add_argument("source", help="a --convperf-report folder (its history.jsonl) or a results store URL")
    dash.add_argument("--out", required=True, help="folder for index.html")
    dash.add_argument(
        "--window",
        type=int,
        default=WINDOW,
        help=f"runs per check searched for change points (default {WINDOW}, as a session's; 0: all)",
    )
    exp = sub.add_parser("export", help="the latest run of each check as bmf (Bencher) or gab JSON")
    exp.add_argument("source", help="a --convperf-report folder (its history.jsonl) or a results store URL")
    exp.add_argument("--format", required=True, choices=("bmf", "gab"))
    exp.add_argument("--machine", default=None, help="default: the machine of the newest record")
    exp.add_argument("-o", "--output", default=None, help="file to write (default: stdout)")
    bis = sub.add_parser("bisect", help="find the commit that made a check slower (or faster), by A/B")
    bis.add_argument("good", help="a revision where the check is as it should be")
    bis.add_argument("bad", help="a later revision where it changed")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bisect":
        cut = argv.index("--") if "--" in argv else len(argv)
        args = parser.parse_args(argv[:cut])
        from pytest_convperf.ab.bisect import main as bisect_main

        return bisect_main(args.good, args.bad, argv[cut + 1 :])
    args, rest = parser.parse_known_args(argv)
    if args.command == "calibrate":
        return cmd_calibrate(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "merge-baselines":
            return cmd_merge(args)
        if args.command == "review":
            from pytest_convperf.reports.review import ReviewError, review

            try:
                print(review(args.base, args.head))
            except ReviewError as exc:
                print(f"ERROR: {exc}", file=sys.stderr)
                return 2
            return 0
        if args.command == "history":
            return cmd_history(args)
        if args.command == "store":
            return cmd_store(args)
        if args.command == "dashboard":
            return cmd_dashboard(args)
        if args.command == "export":
            return cmd_export(args)
        return cmd_report(args)
    except Exception as exc:  # UsageError from validation: print it like pytest does
        if type(exc).__name__ == "UsageError":
            print(f"ERROR: {exc}", file=sys.stderr)
            return 4
        raise


if __name__ == "__main__":
    sys.exit(main())
