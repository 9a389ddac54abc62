"""Reading and appending the plugin's JSON-lines files (``history.jsonl``, ``rows.journal.jsonl``).

These files outlive the run that wrote them: the nightly workflow downloads history.jsonl from an
earlier run, and a crash can cut a line short. One bad line must not cost the rest, so
:func:`read_objects` returns every line that is a JSON object and names each line it skipped
(file, line, why); what a field must hold is the reader's business (:func:`finite`). Appending
after a cut-off line starts a new line (:func:`end_cut_line`), so the cut record does not swallow
the next one.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A record is about 1 KB and a journal row with every raw sample some 100 KB: a longer line is not
# one of ours, and is skipped before it is parsed.
MAX_LINE_BYTES = 16 * 1024 * 1024
# A lone surrogate (``"\ud800"``) parses but cannot be printed or written as UTF-8 again.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# How many skipped lines a summary names before it counts the rest.
NAMED = 5


@dataclass(frozen=True)
class Skipped:
    """A line left out: where, and why."""

    file: Path
    line: int
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.why}; line skipped"


def read_objects(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[Skipped]]:
    """(line number, object) of every line of ``path`` that is a JSON object, and the lines skipped.

    Blank lines are neither. NaN and infinities parse (the caller decides whether a field may hold
    one); a missing file is no line at all.
    """
    if not path.exists():
        return [], []
    objects: list[tuple[int, dict[str, Any]]] = []
    skipped: list[Skipped] = []
    data = path.read_bytes()
    data = data[3:] if data.startswith(b"\xef\xbb\xbf") else data  # a BOM an editor added
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        why = _why_not(raw)
        if why is None:
            try:
                value = json.loads(raw.decode("utf-8"))
            except (ValueError, RecursionError) as exc:  # JSONDecodeError, too deep, int too long
                why = f"not JSON ({type(exc).__name__}: {str(exc)[:120]})"
            else:
                if isinstance(value, dict):
                    objects.append((n, value))
                    continue
                why = f"a JSON {type(value).__name__}, not an object"
        skipped.append(Skipped(path, n, why))
    return objects, skipped


def _why_not(raw: bytes) -> str | None:
    """Why a line cannot be read before parsing it, or None."""
    if len(raw) > MAX_LINE_BYTES:
        return f"{len(raw)} bytes, over the {MAX_LINE_BYTES // 2**20} MiB a line may hold"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte {exc.start})"
    if "\x00" in text:
        return "holds NUL bytes (a write cut short by a crash)"
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(json.loads(text), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return "holds a lone surrogate (\\ud800-\\udfff), not text"
        except (ValueError, RecursionError):
            return None  # the parse names it
    return None


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool, NaN or an infinity), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return out if math.isfinite(out) else None


def summary(skipped: Sequence[object]) -> list[str]:
    """One line per skipped line or row (:class:`Skipped`, or a line of text), the first
    :data:`NAMED`, then how many more."""
    lines = [str(s) for s in skipped[:NAMED]]
    if len(skipped) > NAMED:
        lines.append(f"... and {len(skipped) - NAMED} more skipped")
    return lines


def end_cut_line(path: Path) -> None:
    """Before appending to ``path``: end a last line cut short by a crash, so the next record starts on
    a line of its own (the cut line stays, and is skipped by :func:`read_objects`). The newline is
    appended (``O_APPEND``), never written at an offset: a line another process appended meanwhile
    costs at most a blank line, never a byte."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
    except FileNotFoundError:
        return
    with open(path, "ab") as out:
        out.write(b"\n")
