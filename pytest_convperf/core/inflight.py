"""What each pytest process is running right now, on disk, so that a crash is named (issue 24.3).

A segfault or an abort in a candidate, a reference or an oracle (PyTorch's own CPU conv has one:
``known_defects``) ends the process at once: no exception, no report, no Python code after it.
So every correctness run (each fuzz example included) and every timed check writes its problem,
seed and repro line to ``<dir>/<pid>.json`` before it runs and removes it after, also on an
exception. A record left behind by a process that is gone is a crash (or a kill). The next
session's start names it and re-runs its repro line first in a separate process, whose crash
cannot end the session (:mod:`pytest_convperf.crash_watch`); an xdist controller adds it to the
crashed test's failure. The folder is per user and per rootdir, in the temp dir, so the user's
tree gets no files.

No torch here: the records are plain JSON, written with ``os.replace`` (a reader sees a whole one).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_convperf.core.pids import pid_alive

_STATE: dict[str, Path | None] = {"dir": None}
_STACK: list[dict[str, Any]] = []  # nested records of this process (a check runs a correctness run)


def folder_for(rootdir: Path) -> Path:
    """The records' folder of a rootdir: ``$TMPDIR/convperf-running-<uid>/<hash of rootdir>``."""
    digest = hashlib.sha1(str(rootdir.resolve()).encode()).hexdigest()[:12]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"convperf-running-{uid}" / digest


def configure(folder: Path | None) -> None:
    """Record into ``folder`` from now on (None: record nothing, as outside pytest)."""
    _STATE["dir"] = folder
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)


def _path(pid: int) -> Path | None:
    folder = _STATE["dir"]
    return None if folder is None else folder / f"{pid}.json"


def _write(record: dict[str, Any] | None) -> None:
    path = _path(os.getpid())
    if path is None:
        return
    try:
        if record is None:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    except OSError:  # a record that cannot be written must not fail the check it describes
        pass


@contextlib.contextmanager
def running(**record: Any) -> Iterator[None]:
    """Record what this process is about to run (``step``, ``problem``, ``seed``, ``repro``, ...)
    for the duration of the block; the test's node id and the pid are added."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    full = {"pid": os.getpid(), "nodeid": current.rsplit(" (", 1)[0], **record}
    _STACK.append(full)
    _write(full)
    try:
        yield
    finally:
        _STACK.pop()
        _write(_STACK[-1] if _STACK else None)


def leftovers(folder: Path | None = None) -> list[dict[str, Any]]:
    """Records of processes that are gone, oldest first: each is a crash (or a kill) mid-run."""
    folder = folder or _STATE["dir"]
    if folder is None or not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            record = json.loads(path.read_text())
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)  # a torn or foreign file names nothing
            continue
        if pid != os.getpid() and not pid_alive(pid):
            record["_path"] = str(path)
            found.append(record)
    return found


def forget(record: dict[str, Any]) -> None:
    """Remove a leftover record once it has been named."""
    Path(record["_path"]).unlink(missing_ok=True)


def describe(record: dict[str, Any]) -> str:
    """One line: which test, which step, which problem and seed, which candidate and reference."""
    where = record.get("nodeid") or "a test"
    what = record.get("step", "a check")
    parts = [f"{where}: {what} of {record.get('problem', '?')} (seed {record.get('seed', '?')}"]
    if record.get("phase"):
        parts.append(f", {record['phase']}")
    parts.append(")")
    for side in ("candidate", "reference", "oracle"):
        if record.get(side):
            parts.append(f", {side} {record[side]}")
    return "".join(parts)
