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
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

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
    """The journal's rows; a line cut short by a crash is skipped."""
    path = report_dir / JOURNAL
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def missing(
    received: Iterable[Mapping[str, Any]], journal: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Journal rows whose (node id, key) is not among the rows ``received`` through reports."""
    seen = {(r.get("nodeid"), r.get("key")) for r in received}
    return [dict(r) for r in journal if (r.get("nodeid"), r.get("key")) not in seen]
