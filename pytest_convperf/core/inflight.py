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
from dataclasses import asdict, dataclass
from pathlib import Path

from pytest_convperf.core import json_fields as jf
from pytest_convperf.core.pids import pid_alive


@dataclass(frozen=True)
class Running:
    """One record: what process ``pid`` runs for test ``nodeid``, and the line that runs it again.

    ``path`` is the file a leftover was read from (None while running: it is not written)."""

    pid: int
    nodeid: str
    step: str
    problem: str
    seed: int | None
    repro: str
    phase: str | None = None
    candidate: str | None = None
    reference: str | None = None
    oracle: str | None = None
    path: Path | None = None

    def to_json(self) -> str:
        data = asdict(self)
        del data["path"]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str, path: Path) -> Running:
        """A record as written; ``ValueError`` or ``TypeError`` for a torn or foreign file."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not a record")
        seed = data.get("seed")
        return cls(
            pid=jf.integer(data, "pid"),
            nodeid=jf.text(data, "nodeid", ""),
            step=jf.text(data, "step", "a check"),
            problem=str(data.get("problem", "?")),
            seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
            repro=jf.text(data, "repro", ""),
            phase=jf.opt_text(data, "phase"),
            candidate=jf.opt_text(data, "candidate"),
            reference=jf.opt_text(data, "reference"),
            oracle=jf.opt_text(data, "oracle"),
            path=path,
        )


_STATE: dict[str, Path | None] = {"dir": None}
_STACK: list[Running] = []  # nested records of this process (a check runs a correctness run)


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


def _write(record: Running | None) -> None:
    path = _path(os.getpid())
    if path is None:
        return
    try:
        if record is None:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_suffix(".tmp")
        tmp.write_text(record.to_json())
        os.replace(tmp, path)
    except OSError:  # a record that cannot be written must not fail the check it describes
        pass


@contextlib.contextmanager
def running(
    *,
    step: str,
    problem: str,
    seed: int | None,
    repro: str,
    phase: str | None = None,
    candidate: str | None = None,
    reference: str | None = None,
    oracle: str | None = None,
) -> Iterator[None]:
    """Record what this process is about to run for the duration of the block; the test's node
    id and the pid are added."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    full = Running(
        os.getpid(),
        current.rsplit(" (", 1)[0],
        step,
        problem,
        seed,
        repro,
        phase,
        candidate,
        reference,
        oracle,
    )
    _STACK.append(full)
    _write(full)
    try:
        yield
    finally:
        _STACK.pop()
        _write(_STACK[-1] if _STACK else None)


def leftovers(folder: Path | None = None) -> list[Running]:
    """Records of processes that are gone, oldest first: each is a crash (or a kill) mid-run."""
    folder = folder or _STATE["dir"]
    if folder is None or not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            record = Running.from_json(path.read_text(), path)
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)  # a torn or foreign file names nothing
            continue
        if record.pid != os.getpid() and not pid_alive(record.pid):
            found.append(record)
    return found


def forget(record: Running) -> None:
    """Remove a leftover record once it has been named."""
    if record.path is not None:
        record.path.unlink(missing_ok=True)


def describe(record: Running) -> str:
    """One line: which test, which step, which problem and seed, which candidate and reference."""
    seed = "?" if record.seed is None else record.seed
    parts = [f"{record.nodeid or 'a test'}: {record.step} of {record.problem} (seed {seed}"]
    if record.phase:
        parts.append(f", {record.phase}")
    parts.append(")")
    for side, name in (
        ("candidate", record.candidate),
        ("reference", record.reference),
        ("oracle", record.oracle),
    ):
        if name:
            parts.append(f", {side} {name}")
    return "".join(parts)
