"""Rows written as they are measured: ``<report dir>/rows.journal.jsonl``.

Every process (the controller and each xdist worker) appends each check's row, one JSON line per
row, the moment the row is recorded, with a single ``write`` on an ``O_APPEND`` descriptor (lines
of several processes do not interleave) and an ``fsync``. A segfault or a kill then loses no row
already measured: the controller folds the journal's rows it did not receive from a report (a
worker that crashed after its check) into the session's rows at session end, and after a crash of
the whole session ``python -m pytest_convperf report DIR`` reads the journal. The controller moves
an earlier run's journal aside (``rows.journal.previous.jsonl``) when its session starts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_convperf.core.jsonl import Skipped, read_objects, summary
from pytest_convperf.judge.check_row import CheckRow

JOURNAL = "rows.journal.jsonl"
PREVIOUS = "rows.journal.previous.jsonl"


def start(report_dir: Path) -> None:
    """Controller, at session start: an earlier run's journal is kept once, as the previous one."""
    path = report_dir / JOURNAL
    if path.exists():
        os.replace(path, report_dir / PREVIOUS)


def append(report_dir: Path, row: Mapping[str, Any]) -> None:
    """Append one row (its ``CheckRow.to_dict`` form) and flush it to disk.

    A full disk (ENOSPC) may take part of a line and then refuse the rest: the ``OSError`` is
    raised (the caller names the row), and the next append first ends the cut line, so a failed row
    never glues itself to the next one (which was then lost as well)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(row, default=str, allow_nan=True) + "\n").encode()
    fd = os.open(report_dir / JOURNAL, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        if _cut_short(fd):
            line = b"\n" + line
        rest = memoryview(line)
        while rest:  # a short write is not an error: write what is left
            rest = rest[os.write(fd, rest) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _cut_short(fd: int) -> bool:
    """Whether the journal ends inside a line (a write refused midway)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def read(report_dir: Path) -> list[dict[str, Any]]:
    """The journal's rows; a line cut short by a crash (or otherwise unreadable) is skipped."""
    return [row for _, row in read_named(report_dir)[0]]


def read_named(report_dir: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[Skipped]]:
    """The journal's rows with their line numbers, and the lines skipped (:func:`jsonl.read_objects`)."""
    return read_objects(report_dir / JOURNAL)


def usable_rows(dicts: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[list[CheckRow], list[str]]:
    """The rows of ``(where, row dict)`` pairs that the reports can show, and one line per row left
    out, naming ``where`` (file and line) and why: a row that does not convert (``CheckRow.from_dict``)
    or does not render alone (terminal lines and Markdown) would otherwise stop the whole report."""
    from pytest_convperf.reports.report import markdown, terminal_lines

    rows, problems = [], []
    for where, data in dicts:
        try:
            for name in ("facts", "decision", "baseline", "update", "night", "comparison"):
                if data.get(name) is not None and not isinstance(data[name], Mapping):
                    raise TypeError(f"{name} is a {type(data[name]).__name__}, not an object")
            row = CheckRow.from_dict(dict(data))
            # Rendered alone, and as UTF-8 (a lone surrogate in a name cannot be printed or written).
            ("\n".join(terminal_lines([row])) + markdown([row])).encode("utf-8")
        except Exception as exc:  # any field of any type: the row is named, the others are shown
            why = f"{type(exc).__name__}: {str(exc)[:120]}"
            problems.append(f"{where}: not a usable row ({why}); row skipped")
            continue
        rows.append(row)
    return rows, problems


def lost_rows(report_dir: Path, received: set[tuple[str | None, ...]]) -> tuple[list[CheckRow], list[str]]:
    """The controller's fold at session end: the journal's usable rows whose :func:`ident` is not
    among those ``received`` through reports, and notes naming each line or row skipped (one bad
    line must not cost the session's other rows and reports)."""
    objects, skipped = read_named(report_dir)
    where = report_dir / JOURNAL
    lost, problems = usable_rows((f"{where}:{n}", row) for n, row in objects if ident(row) not in received)
    return lost, [f"journal: {line}" for line in summary([*skipped, *problems])]


def ident(row: Mapping[str, Any]) -> tuple[str | None, ...]:
    """What makes a row one check's: its (node id, key); hashable whatever a bad line holds there."""
    return tuple(
        v if v is None or isinstance(v, str) else repr(v) for v in (row.get("nodeid"), row.get("key"))
    )
