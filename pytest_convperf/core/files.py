"""Files the plugin writes: one lock per target, atomic replace, the umask's mode, output paths checked early.

Every file (baselines, reports, ``convperf-update.md``) is written by :func:`atomic_write`: under the
target's lock, a temporary file in the target's folder is written, fsynced and ``os.replace``-d over
the target, so a reader never sees half a file.

- The lock is a file in ``.convperf-lock/`` beside the target, named after it, in the target's *real*
  folder: every process writing the same file takes the same lock, whatever its ``$TMPDIR``, user
  or environment (a lock under ``tempfile.gettempdir()`` did not, and updates were lost). The folder
  holds a ``.gitignore`` of ``*``, as pytest's own cache folder does, so git never sees it.
- The temporary files live in that folder too. A process killed between creating one and
  ``os.replace`` leaves it behind; the next write of the same target removes it (under the lock no
  other writer of that target can be in flight), so such leftovers never accumulate.
- The written file gets the mode a plain ``open()`` would give it (``0o666 & ~umask``), not
  ``mkstemp``'s 0600.
- Text that UTF-8 cannot encode (a lone surrogate in a test id) is written backslash-escaped.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from filelock import FileLock

if TYPE_CHECKING:
    from pytest_convperf.core.config import ConvperfConfig

__all__ = ["LOCK_DIR", "atomic_write", "check_output_paths", "lock_for"]

LOCK_DIR = ".convperf-lock"
LOCK_TIMEOUT_S = 120.0
_GITIGNORE = "# created by pytest-convperf: locks and in-flight writes, never committed\n*\n"


def _lock_dir(path: Path) -> Path:
    """``.convperf-lock/`` in the target's real folder (created, with its ``.gitignore``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = path.parent.resolve() / LOCK_DIR
    if not folder.is_dir():
        folder.mkdir(exist_ok=True)
        ignore = folder / ".gitignore"
        if not ignore.exists():
            ignore.write_text(_GITIGNORE, encoding="utf-8")
    return folder


def lock_for(path: Path) -> FileLock:
    """The lock of one target file: the same for every process that writes it, re-entrant in one process.

    A singleton per lock path, so a holder (``baselines.merge_into``: read, merge, write) can call
    :func:`atomic_write`, which takes the same lock again, without deadlocking on itself.
    """
    lock = _lock_dir(path) / f"{path.name}.lock"
    return FileLock(str(lock), timeout=LOCK_TIMEOUT_S, is_singleton=True)


def _umask() -> int:
    """The process's umask (read by setting it back at once; the plugin writes from one thread)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove_stale_temps(path: Path, folder: Path) -> None:
    """Temporary files of ``path`` left by a killed writer: ours in ``folder``, and the hidden
    ``.<name>.*.tmp`` siblings that versions before the lock folder left beside the target."""
    for stale in [*folder.glob(f"{path.name}.*.tmp"), *path.parent.glob(f".{path.name}.*.tmp")]:
        try:
            stale.unlink()
        except FileNotFoundError:
            pass


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically under its lock (see the module docstring)."""
    lock = lock_for(path)
    with lock:
        folder = Path(lock.lock_file).parent
        _remove_stale_temps(path, folder)
        fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=folder)
        try:
            os.fchmod(fd, 0o666 & ~_umask())
            # A lone surrogate (a test id such as '\ud800') is written as its escape, not a crash
            # that loses the whole file (report.md, convperf-update.md with every other check).
            with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise


def unwritable(path: Path) -> str | None:
    """Why a folder cannot be written to (or created), or None when it can.

    Probes by creating a file, since ``os.access`` says yes to root even on a read-only mount.
    """
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            return "no part of it exists"
        existing = existing.parent
    if not existing.is_dir():
        return "is a file, not a folder" if existing == path else f"{existing} is a file, not a folder"
    try:
        fd, probe = tempfile.mkstemp(prefix=".convperf-probe-", dir=existing)
    except OSError as exc:
        return f"cannot create a file in {existing} ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(probe)
    return None


def check_output_paths(cfg: ConvperfConfig) -> None:
    """At session start: every folder this run will write must be writable (``UsageError`` otherwise).

    The report folder (``--convperf-report``) always; the baselines folder, and the folder of
    ``convperf-update.md`` (the report folder, else the rootdir), when updating. Nothing is created.
    """
    targets: list[tuple[str, Path]] = []
    if cfg.report_dir is not None:
        targets.append(("--convperf-report", cfg.report_dir))
    if cfg.updating:
        targets.append(("--convperf-baselines", cfg.baselines_dir))
        if cfg.report_dir is None:
            where = "the rootdir (where convperf-update.md goes without --convperf-report)"
            targets.append((where, cfg.rootdir))
    for option, path in targets:
        why = unwritable(path)
        if why is not None:
            raise pytest.UsageError(
                f"convperf: {option} {path}: {why}. Fix: give a folder this run can create or write "
                "(checked before any test runs, so no result and no baseline is lost)"
            )
