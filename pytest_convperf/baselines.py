"""Baseline store: ``<root>/<machine>/<test_module>.yaml``, validated, merged, written atomically.

Format (DESIGN §7): ``schema: convperf/1``, ``machine: <slug>`` equal to the folder name, and
``benchmarks: {<test id>: entry}`` with sorted keys and no file-wide timestamp, so disjoint
updates merge cleanly in git. Files are read with ``yaml.safe_load`` only; anything malformed
raises ``pytest.UsageError`` naming the file, the entry and the fix, and the file is never
rewritten. Writes take a file lock, re-read the file, merge by key (never dropping an entry),
write a temporary file and ``os.replace`` it, so concurrent processes on one machine lose nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from filelock import FileLock

from pytest_convperf.entry import Entry, InvalidEntry, parse_entry

__all__ = [
    "SCHEMA",
    "BaselineFile",
    "Entry",
    "Store",
    "atomic_write",
    "dump_text",
    "lock_for",
    "merge_files",
    "parse_entry",
    "parse_text",
    "read_file",
    "resolve_machine",
    "slugify",
    "validate_tree",
]

SCHEMA = "convperf/1"
HEADER = "# pytest-convperf baselines; edit with: pytest --convperf --convperf-update-baselines\n"
LOCK_TIMEOUT_S = 120.0
_SLUG_RE = re.compile(r"[^a-z0-9]+")


def slugify(text: str) -> str:
    """Lower-case; runs of other characters become one dash ('NVIDIA H100 80GB' -> 'nvidia-h100-80gb')."""
    return _SLUG_RE.sub("-", text.lower()).strip("-")


def resolve_machine(detected: str, override: str | None, aliases: Mapping[str, str]) -> str:
    """The baseline folder: ``--convperf-machine`` if given, else the detected slug; then the alias map."""
    slug = slugify(override) if override else detected
    return slugify(aliases.get(slug, slug))


@dataclass(frozen=True)
class BaselineFile:
    """A parsed, validated file."""

    path: Path
    machine: str
    entries: Mapping[str, Entry]


def _usage(path: Path, err: InvalidEntry) -> pytest.UsageError:
    where = f"entry {err.entry!r}: " if err.entry else ""
    return pytest.UsageError(
        f"convperf baseline file {path}: {where}{err.problem}. Fix: {err.fix}. The file was left unchanged."
    )


def parse_text(text: str, path: Path, expected_machine: str | None = None) -> BaselineFile:
    """Parse and validate a file's text; ``expected_machine`` defaults to the folder name."""
    machine_dir = expected_machine if expected_machine is not None else path.parent.name
    try:
        data = yaml.safe_load(text)
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
    return HEADER + yaml.safe_dump(
        body, sort_keys=True, default_flow_style=None, width=1000, allow_unicode=True
    )


def read_file(path: Path, expected_machine: str | None = None) -> BaselineFile:
    """Load one file (``UsageError`` when invalid); a missing file has no entries."""
    if not path.exists():
        return BaselineFile(path, expected_machine or path.parent.name, {})
    return parse_text(path.read_text(encoding="utf-8"), path, expected_machine)


def atomic_write(path: Path, text: str) -> None:
    """Write a sibling temporary file, fsync it, then ``os.replace`` (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
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


def lock_for(path: Path) -> FileLock:
    """The lock guarding one baseline file.

    It lives in a per-user temporary folder, keyed by the file's absolute path, so no lock file
    ever shows up in the baselines tree (or in git); writers on one machine share it.
    """
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:20]
    folder = Path(tempfile.gettempdir()) / f"convperf-locks-{os.getuid() if hasattr(os, 'getuid') else 0}"
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / f"{digest}.lock"), timeout=LOCK_TIMEOUT_S)


def merge_into(path: Path, machine: str, updates: Mapping[str, Entry]) -> bool:
    """Under the file's lock: re-read, overlay ``updates`` by key, write if anything changed.

    Returns whether the file was written. Entries not in ``updates`` are kept as they are.
    """
    with lock_for(path):
        current = read_file(path, machine)
        merged = dict(current.entries)
        merged.update(updates)
        text = dump_text(machine, merged)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            return False
        atomic_write(path, text)
        return True


def validate_tree(root: Path) -> list[Path]:
    """Validate every ``<root>/<machine>/*.yaml``; raises ``UsageError`` at the first bad file."""
    if not root.is_dir():
        return []
    files = sorted(p for p in root.glob("*/*.yaml") if p.is_file())
    for path in files:
        read_file(path)
    return files


class Store:
    """The baselines of one machine class, loaded lazily per test module and cached."""

    def __init__(self, root: Path, machine: str) -> None:
        self.root = root
        self.machine = machine
        self._cache: dict[str, BaselineFile] = {}

    def path(self, module: str) -> Path:
        return self.root / self.machine / f"{module}.yaml"

    def load(self, module: str) -> Mapping[str, Entry]:
        if module not in self._cache:
            self._cache[module] = read_file(self.path(module), self.machine)
        return self._cache[module].entries

    def get(self, module: str, key: str) -> Entry | None:
        return self.load(module).get(key)

    def write(self, module: str, updates: Mapping[str, Entry]) -> bool:
        """Merge ``updates`` into the module's file (locked, atomic); drop the cache for it."""
        self._cache.pop(module, None)
        return merge_into(self.path(module), self.machine, updates)


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
        text = path.read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(text) if text.strip() else None
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
