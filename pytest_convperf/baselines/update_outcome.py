"""What a baseline update run wrote, as against what it planned (``updates.apply_updates``).

A row's update plan (``action: write``) is made when its check is judged; whether the entry reached
its file is known only at session end. :func:`mark_written` puts that on the rows
(``update["written"]``), so the reports say "recorded" only for an entry that was written: the
journal rows of a session that crashed before its end, or an entry of a file the disk refused,
read as "write planned, not written".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_convperf.judge.check_row import CheckRow


def utf8(text: str) -> bool:
    """Whether ``text`` can be stored as UTF-8 (a lone surrogate cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class Applied:
    """What an update run wrote: its review record (``recorded``: whether it could be written), the
    entries written as ``(machine, module, key)``, and one line per file that could not be."""

    path: Path
    recorded: bool
    written: frozenset[tuple[str, str, str]]
    failed: tuple[str, ...]


def mark_written(rows: Sequence[CheckRow], applied: Applied | None) -> list[CheckRow]:
    """The rows with ``update.written`` on each planned write: True only for an entry written.

    A row whose write was planned but never applied (the session crashed before its end, so its row
    comes from the journal; or the file write failed) then never reads as recorded."""
    written = applied.written if applied is not None else frozenset()
    out = []
    for row in rows:
        plan = row.update
        if plan is not None and plan.action == "write":
            done = (str(row.machine), row.module, row.key) in written
            row = dataclasses.replace(row, update=dataclasses.replace(plan, written=done))
        out.append(row)
    return out
