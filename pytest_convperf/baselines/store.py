"""Baseline store: ``<root>/<machine>/<test_module>.yaml``, validated, merged, written atomically.

Format (docs/design.md §7): ``schema: convperf/1``, ``machine: <slug>`` equal to the folder name, and
``benchmarks: {<test id>: entry}`` with sorted keys and no file-wide timestamp, so disjoint
updates merge cleanly in git. Files are read with :mod:`pytest_convperf.baselines.baseline_yaml` (a safe
loader that refuses duplicate keys and reads ``1e6`` as a number), up to :data:`MAX_FILE_BYTES`;
anything malformed (not UTF-8, too large, invalid) raises ``pytest.UsageError`` naming the file,
the entry and the fix, and the file is never rewritten. Writes take the file's lock
(:func:`pytest_convperf.core.files.lock_for`), re-read the file, merge by key (never dropping an
entry) and replace it atomically, so concurrent processes lose nothing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_convperf.baselines import baseline_yaml
from pytest_convperf.core.files import atomic_write, lock_for
from pytest_convperf.core.markdown_safe import bounded
from pytest_convperf.judge.entry import Entry, InvalidEntry, parse_entry

__all__ = [
    "MAX_FILE_BYTES",
    "SCHEMA",
    "BaselineFile",
    "Store",
    "dump_text",
    "merge_files",
    "parse_text",
    "read_file",
    "refuse_shared_keys",
    "validate_files",
]

SCHEMA = "convperf/1"
HEADER = "# pytest-convperf baselines; edit with: pytest --convperf --convperf-update-baselines\n"
# A baseline file holds one test module's entries (~300 bytes each): 4 MiB is some 13 000 entries,
# parsed in about 10 s on a loaded 2-core box. Anything larger is not a baseline file, and parsing
# it took one run 12 minutes and 4 GB.
MAX_FILE_BYTES = 4 * 2**20


@dataclass(frozen=True)
class BaselineFile:
    """A parsed, validated file."""

    path: Path
    machine: str
    entries: Mapping[str, Entry]


# A message names a value from the file; a file can hold megabytes in one value, so every part of
# the message is cut (issue 37.10).
MESSAGE_PART_LIMIT = 300


def _usage(path: Path, err: InvalidEntry) -> pytest.UsageError:
    where = f"entry {bounded(repr(err.entry), MESSAGE_PART_LIMIT)}: " if err.entry else ""
    return pytest.UsageError(
        f"convperf baseline file {path}: {where}{bounded(err.problem, MESSAGE_PART_LIMIT)}. "
        f"Fix: {err.fix}. The file was left unchanged."
    )


def parse_text(text: str, path: Path, expected_machine: str | None = None) -> BaselineFile:
    """Parse and validate a file's text; ``expected_machine`` defaults to the folder name."""
    machine_dir = expected_machine if expected_machine is not None else path.parent.name
    try:
        data = baseline_yaml.load(text)
    except baseline_yaml.AliasRefused as exc:
        raise _usage(
            path,
            InvalidEntry(
                None,
                f"holds {exc.problem}; baseline files hold no anchors or aliases (the writer writes "
                "none, and expanding nested ones can exhaust memory)",
                "write the values out in full, or delete the file and re-record with "
                "pytest --convperf --convperf-update-baselines",
            ),
        ) from None
    except baseline_yaml.DuplicateKeyError as exc:
        raise _usage(
            path,
            InvalidEntry(
                None,
                f"duplicate key {exc.key!r} at line {exc.first_line} and line {exc.second_line} "
                "(YAML keeps only the last, so one of them would be lost)",
                "keep one of the two (an unfinished git merge?) or delete both and re-record with "
                "pytest --convperf --convperf-update-baselines",
            ),
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise _usage(
            path,
            InvalidEntry(
                None,
                f"is not valid YAML{where} ({getattr(exc, 'problem', exc)})",
                "repair the YAML (an unfinished merge or truncated write?) or delete "
                "the file and re-record with pytest --convperf --convperf-update-baselines",
            ),
        ) from None
    try:
        if not isinstance(data, dict):
            raise InvalidEntry(
                None,
                f"top level must be a mapping with schema/machine/benchmarks, got {type(data).__name__}",
                "restore the file from git or delete and re-record it",
            )
        schema = data.get("schema")
        if schema != SCHEMA:
            raise InvalidEntry(
                None,
                f"unknown schema {schema!r} (this plugin reads {SCHEMA!r})",
                f"set 'schema: {SCHEMA}' if the content matches, or upgrade pytest-convperf",
            )
        machine = data.get("machine")
        if machine != machine_dir:
            raise InvalidEntry(
                None,
                f"machine {machine!r} does not match its folder {machine_dir!r}",
                f"move the file to {path.parent.parent / str(machine)}/ or set 'machine: "
                f"{machine_dir}' if it was measured on this machine class",
            )
        extra = sorted(set(data) - {"schema", "machine", "benchmarks"})
        if extra:
            raise InvalidEntry(
                None,
                f"unknown top-level key(s) {', '.join(map(repr, extra))}",
                "remove them (per-entry fields go under benchmarks)",
            )
        benchmarks = data.get("benchmarks") or {}
        if not isinstance(benchmarks, dict):
            raise InvalidEntry(
                None,
                f"'benchmarks' must be a mapping of test id -> entry, got {type(benchmarks).__name__}",
                "restore the file from git",
            )
        entries = {str(k): parse_entry(str(k), v) for k, v in benchmarks.items()}
    except InvalidEntry as err:
        raise _usage(path, err) from None
    return BaselineFile(path, machine_dir, entries)


def dump_text(machine: str, entries: Mapping[str, Entry]) -> str:
    """Serialise with sorted keys and flow-style leaf maps (stable, diff-friendly)."""
    body = {
        "schema": SCHEMA,
        "machine": machine,
        "benchmarks": {k: entries[k].to_yaml() for k in sorted(entries)},
    }
    return HEADER + baseline_yaml.dump(body)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_text(path: Path) -> str:
    """A baseline file's text: ``UsageError`` when it is not a regular file (a FIFO would block the
    session for good: it is opened non-blocking and its type read from the open file, issue 37.12),
    above :data:`MAX_FILE_BYTES` (known from its size, before reading) or when it is not UTF-8."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _usage(
            path,
            InvalidEntry(
                None,
                f"is {_kind(info.st_mode)}, not a baseline file",
                f"remove it (a baseline file is a plain YAML file, {path.name})",
            ),
        )
    with os.fdopen(fd, "rb") as fh:
        return _decode(path, info.st_size, fh)


def _decode(path: Path, size: int, fh: Any) -> str:
    if size > MAX_FILE_BYTES:
        raise _usage(
            path,
            InvalidEntry(
                None,
                f"is {size / 2**20:.1f} MiB, over the {MAX_FILE_BYTES // 2**20} MiB limit of a baseline file "
                "(one test module's entries)",
                "move a file that is not a baseline out of the baselines folder, or split the test module",
            ),
        )
    data: bytes = fh.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _usage(
            path,
            InvalidEntry(
                None,
                f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                "restore the file from git, or re-save it as UTF-8",
            ),
        ) from None


def read_file(path: Path, expected_machine: str | None = None) -> BaselineFile:
    """Load one file (``UsageError`` when invalid); a missing file has no entries."""
    if not path.exists():
        return BaselineFile(path, expected_machine or path.parent.name, {})
    return parse_text(read_text(path), path, expected_machine)


class LinkOutside(OSError):
    """A baselines folder is a symbolic link to a place outside the repository: nothing is written
    through it (the message names the link, its target and the fix)."""


def refuse_links_outside(root: Path, path: Path, rootdir: Path) -> None:
    """:class:`LinkOutside` when ``root``, a folder between it and ``path``, or ``path`` itself is a
    symbolic link that resolves outside ``rootdir``: an update would write entries and its lock
    folder there (issue 37.11). A link inside the repository is fine; a ``root`` given outside it
    on purpose (``--convperf-baselines=/elsewhere``) is no link and is fine too."""
    repo = rootdir.resolve()
    parts = path.relative_to(root).parts
    for link in [root] + [root.joinpath(*parts[: i + 1]) for i in range(len(parts))]:
        if link.is_symlink():
            target = link.resolve()
            if not target.is_relative_to(repo):
                raise LinkOutside(
                    f"{link} is a symbolic link to {target}, outside the repository {repo}; baselines "
                    "are written only inside it: replace the link with a folder, or give the real "
                    "folder with --convperf-baselines"
                )


def merge_into(
    path: Path,
    machine: str,
    updates: Mapping[str, Entry],
    remove: Iterable[str] = (),
    *,
    root: Path | None = None,
    rootdir: Path | None = None,
) -> bool:
    """Under the file's lock: re-read, overlay ``updates`` by key, drop the ``remove`` keys, write if
    anything changed.

    Returns whether the file was written. Entries neither updated nor named in ``remove`` (a
    retired cliff, reviewed in ``convperf-update.md``) are kept as they are. With ``root`` and
    ``rootdir``, a link out of the repository is refused first (:func:`refuse_links_outside`).
    """
    if root is not None and rootdir is not None:
        refuse_links_outside(root, path, rootdir)
    with lock_for(path):
        current = read_file(path, machine)
        merged = dict(current.entries)
        merged.update(updates)
        for key in remove:
            merged.pop(key, None)
        text = dump_text(machine, merged)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            return False
        atomic_write(path, text)
        return True


def validate_files(paths: Iterable[Path]) -> list[Path]:
    """Validate the given files (the ones a run reads or writes); returns those that exist.

    Raises ``UsageError`` at the first bad file. Files not named are never read: validating a whole
    tree cost one run 12 minutes and 4 GB for an unrelated 50 MB file.
    """
    existing = sorted({p for p in paths if p.is_file()})
    for path in existing:
        read_file(path)
    return existing


def refuse_shared_keys(nodeids: Iterable[str]) -> None:
    """``UsageError`` when two test files of one name in different folders hold a test of the same
    name: they share one baseline file (chosen by the file's name) and their checks one key, so
    each would be judged against the other's entry (a false FAIL). Checked before any test runs."""
    seen: dict[tuple[str, str], str] = {}
    for nodeid in nodeids:
        path, _, test = nodeid.partition("::")
        other = seen.setdefault((Path(path).stem, test), nodeid)
        if other.partition("::")[0] != path:
            raise pytest.UsageError(
                f"convperf: the same baseline key in two test files: {other} and {nodeid} (same-named "
                f"files share {Path(path).stem}.yaml, the same test name gives the same key), so each "
                "would be judged against the other's entry; rename one of the tests or test files"
            )


class Store:
    """The baselines of one machine class, loaded lazily per test module and cached."""

    def __init__(self, root: Path, machine: str, *, rootdir: Path | None = None) -> None:
        self.root = root
        self.machine = machine
        self.rootdir = rootdir  # the repository: writes never go through a link out of it
        self._cache: dict[str, BaselineFile] = {}

    def path(self, module: str) -> Path:
        return self.root / self.machine / f"{module}.yaml"

    def load(self, module: str) -> Mapping[str, Entry]:
        if module not in self._cache:
            self._cache[module] = read_file(self.path(module), self.machine)
        return self._cache[module].entries

    def get(self, module: str, key: str) -> Entry | None:
        return self.load(module).get(key)

    def write(self, module: str, updates: Mapping[str, Entry], remove: Iterable[str] = ()) -> bool:
        """Merge ``updates`` into the module's file and drop ``remove`` (locked, atomic); drop the cache."""
        self._cache.pop(module, None)
        return merge_into(
            self.path(module), self.machine, updates, remove, root=self.root, rootdir=self.rootdir
        )


def merge_files(
    paths: Iterable[Path], *, prefer_last: bool = False
) -> tuple[str, dict[str, Entry], list[str]]:
    """Merge baseline files of one machine by key; returns (machine, entries, conflicting keys).

    A key present in several files with different values is a conflict: it is reported, and
    the last file's value is kept only when ``prefer_last``.
    """
    machine: str | None = None
    merged: dict[str, Entry] = {}
    conflicts: list[str] = []
    for path in paths:
        text = read_text(path)
        try:
            data = baseline_yaml.load(text) if text.strip() else None
        except yaml.YAMLError:
            data = None  # parse_text below reports it with the file name and the fix
        declared = data.get("machine") if isinstance(data, dict) else None
        parsed = parse_text(text, path, str(declared) if declared is not None else path.parent.name)
        if machine is None:
            machine = parsed.machine
        elif parsed.machine != machine:
            raise pytest.UsageError(
                f"merge-baselines: {path} is for machine {parsed.machine!r}, the others for {machine!r}; "
                "merge files of one machine class only"
            )
        for key, entry in parsed.entries.items():
            if key in merged and not merged[key].same_values(entry):
                conflicts.append(key)
                if not prefer_last:
                    continue
            merged[key] = entry
    if machine is None:
        raise pytest.UsageError("merge-baselines: no input files")
    return machine, merged, sorted(set(conflicts))
