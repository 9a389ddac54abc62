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
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from filelock import FileLock

from pytest_convperf.timing import FLUSH_KINDS, MEASURED_MODES

SCHEMA = "convperf/1"
HEADER = "# pytest-convperf baselines; edit with: pytest --convperf --convperf-update-baselines\n"
FIX_RERECORD = (
    "fix the value by hand, or delete the entry and re-record it with "
    "pytest --convperf --convperf-update-baselines=new"
)
LOCK_TIMEOUT_S = 120.0
_SLUG_RE = re.compile(r"[^a-z0-9]+")  # the same rule as device.slugify


def slugify(text: str) -> str:
    """Lower-case; runs of other characters become one dash ('NVIDIA H100 80GB' -> 'nvidia-h100-80gb')."""
    return _SLUG_RE.sub("-", text.lower()).strip("-")


def resolve_machine(detected: str, override: str | None, aliases: Mapping[str, str]) -> str:
    """The baseline folder: ``--convperf-machine`` if given, else the detected slug; then the alias map."""
    slug = slugify(override) if override else detected
    return slugify(aliases.get(slug, slug))


def _sig(x: float, digits: int = 4) -> float:
    """Round to significant digits, so re-recording the same value does not churn the file."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


@dataclass(frozen=True)
class Entry:
    """One stored check: time ratio, noise, absolute times, environment, correctness, quality."""

    time_ratio: float
    noise: float
    us_candidate: float
    us_reference: float
    env: Mapping[str, str] = field(default_factory=dict)
    reference_backend: str | None = None
    correctness: Mapping[str, Any] = field(default_factory=dict)
    updated: Mapping[str, str] | None = None
    noise_runs: int | None = None
    ref_runs: int = 1
    tolerance: float | None = None
    # Quality against the float conv (quantized/sparse variants): {rel_l2, sqnr_db}; empty: none.
    quality: Mapping[str, float] = field(default_factory=dict)
    # How it was timed (``Measurement.mode``) and, for ``cold``, the CUDA L2 flush kind. Entries
    # recorded before these existed have None: unknown, never a mismatch.
    mode: str | None = None
    flush: str | None = None

    def stored_max_abs(self, name: str, *, single: bool) -> float | None:
        """The stored max_abs for an output: flat ``{max_abs}`` for one output, ``{name: {max_abs}}`` else."""
        flat = self.correctness.get("max_abs")
        if isinstance(flat, (int, float)) and single:
            return float(flat)
        sub = self.correctness.get(name)
        if isinstance(sub, Mapping) and isinstance(sub.get("max_abs"), (int, float)):
            return float(sub["max_abs"])
        return None

    def to_yaml(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "time_ratio": _sig(self.time_ratio),
            "noise": _sig(self.noise, 3),
            "us": {"candidate": _sig(self.us_candidate), "reference": _sig(self.us_reference)},
            "env": {k: str(v) for k, v in sorted(self.env.items())},
        }
        if self.reference_backend is not None:
            out["reference_backend"] = self.reference_backend
        if self.correctness:
            out["correctness"] = _round_tree(self.correctness)
        if self.updated is not None:
            out["updated"] = dict(self.updated)
        if self.noise_runs is not None:
            out["noise_runs"] = self.noise_runs
        if self.ref_runs != 1:
            out["ref_runs"] = self.ref_runs
        if self.tolerance is not None:
            out["tolerance"] = self.tolerance
        if self.quality:
            out["quality"] = {k: _sig(float(v)) for k, v in sorted(self.quality.items())}
        if self.mode is not None:
            out["mode"] = self.mode
        if self.flush is not None:
            out["flush"] = self.flush
        return out

    def same_values(self, other: Entry) -> bool:
        """Equal once rounded as stored (what a rewrite would change)."""
        return self.to_yaml() == other.to_yaml()

    def with_(self, **changes: Any) -> Entry:
        return replace(self, **changes)


def _round_tree(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _round_tree(v) for k, v in sorted(value.items())}
    if isinstance(value, float):
        return _sig(value, 3)
    return value


@dataclass(frozen=True)
class BaselineFile:
    """A parsed, validated file."""

    path: Path
    machine: str
    entries: Mapping[str, Entry]


class _Invalid(Exception):
    def __init__(self, entry: str | None, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.entry, self.problem, self.fix = entry, problem, fix


def _usage(path: Path, err: _Invalid) -> pytest.UsageError:
    where = f"entry {err.entry!r}: " if err.entry else ""
    return pytest.UsageError(
        f"convperf baseline file {path}: {where}{err.problem}. Fix: {err.fix}. The file was left unchanged."
    )


def _num(entry: str, name: str, value: Any, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Invalid(
            entry, f"field {name!r} must be a number, got {value!r} ({type(value).__name__})", FIX_RERECORD
        )
    if positive and value <= 0:
        raise _Invalid(entry, f"field {name!r} must be > 0, got {value!r}", FIX_RERECORD)
    if not positive and value < 0:
        raise _Invalid(entry, f"field {name!r} must be >= 0, got {value!r}", FIX_RERECORD)
    return float(value)


def _tolerance(entry: str, value: Any) -> float:
    tol = _num(entry, "tolerance", value)
    if not tol < 1.0:
        raise _Invalid(
            entry,
            f"field 'tolerance' must be a fraction between 0 and 1, got {value!r}",
            "write a fraction (0.02 means 2 %) or delete the field to use the device default",
        )
    return tol


def _int(entry: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Invalid(entry, f"field {name!r} must be a positive integer, got {value!r}", FIX_RERECORD)
    return value


def _map(entry: str | None, name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(
            entry, f"field {name!r} must be a mapping, got {value!r} ({type(value).__name__})", FIX_RERECORD
        )
    return value


def _str_map(entry: str, name: str, value: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in _map(entry, name, value).items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise _Invalid(
                entry, f"field '{name}.{k}' must be a string, got {v!r} ({type(v).__name__})", FIX_RERECORD
            )
        out[str(k)] = str(v)
    return out


def _correctness_map(entry: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in _map(entry, "correctness", value).items():
        if isinstance(v, dict):
            out[str(k)] = {
                str(kk): _num(entry, f"correctness.{k}.{kk}", vv, positive=False) for kk, vv in v.items()
            }
        else:
            out[str(k)] = _num(entry, f"correctness.{k}", v, positive=False)
    return out


QUALITY_FIELDS = ("rel_l2", "sqnr_db")


def _quality_map(entry: str, value: Any) -> dict[str, float]:
    """``quality: {rel_l2: >= 0, sqnr_db: number}``; ``.inf`` allowed (an exact variant), NaN not."""
    out: dict[str, float] = {}
    for k, v in _map(entry, "quality", value).items():
        name = f"quality.{k}"
        if k not in QUALITY_FIELDS:
            raise _Invalid(
                entry,
                f"unknown field {name!r}",
                f"remove it; quality holds {', '.join(QUALITY_FIELDS)} (re-record with "
                "pytest --convperf --convperf-update-baselines)",
            )
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise _Invalid(
                entry, f"field {name!r} must be a number, got {v!r} ({type(v).__name__})", FIX_RERECORD
            )
        if k == "rel_l2" and v < 0:
            raise _Invalid(entry, f"field {name!r} must be >= 0, got {v!r}", FIX_RERECORD)
        out[str(k)] = float(v)
    return out


def _choice(entry: str, name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _Invalid(
            entry,
            f"field {name!r} must be one of {', '.join(allowed)}, got {value!r}",
            "write one of those, or delete the field and re-record the entry with "
            "pytest --convperf --convperf-update-baselines",
        )
    return value


ENTRY_FIELDS = {
    "mode",
    "flush",
    "quality",
    "time_ratio",
    "noise",
    "us",
    "env",
    "reference_backend",
    "correctness",
    "updated",
    "noise_runs",
    "ref_runs",
    "tolerance",
}


def parse_entry(key: str, raw: Any) -> Entry:
    """Validate one ``benchmarks`` block; raises ``_Invalid`` naming the field."""
    block = _map(key, "(entry)", raw)
    unknown = sorted(set(block) - ENTRY_FIELDS)
    if unknown:
        raise _Invalid(
            key,
            f"unknown field(s) {', '.join(map(repr, unknown))}",
            f"remove them; allowed fields are {', '.join(sorted(ENTRY_FIELDS))}",
        )
    for required in ("time_ratio", "noise", "us"):
        if required not in block:
            raise _Invalid(key, f"missing field {required!r}", FIX_RERECORD)
    us = _map(key, "us", block["us"])
    for side in ("candidate", "reference"):
        if side not in us:
            raise _Invalid(key, f"field 'us' lacks {side!r}", FIX_RERECORD)
    backend = block.get("reference_backend")
    if backend is not None and not isinstance(backend, str):
        raise _Invalid(key, f"field 'reference_backend' must be a string, got {backend!r}", FIX_RERECORD)
    updated = block.get("updated")
    tol = block.get("tolerance")
    return Entry(
        time_ratio=_num(key, "time_ratio", block["time_ratio"]),
        noise=_num(key, "noise", block["noise"], positive=False),
        us_candidate=_num(key, "us.candidate", us["candidate"]),
        us_reference=_num(key, "us.reference", us["reference"]),
        env=_str_map(key, "env", block.get("env", {})),
        reference_backend=backend,
        correctness=_correctness_map(key, block.get("correctness", {})),
        updated=_str_map(key, "updated", updated) if updated is not None else None,
        noise_runs=_int(key, "noise_runs", block["noise_runs"]) if "noise_runs" in block else None,
        ref_runs=_int(key, "ref_runs", block["ref_runs"]) if "ref_runs" in block else 1,
        tolerance=_tolerance(key, tol) if tol is not None else None,
        quality=_quality_map(key, block["quality"]) if block.get("quality") is not None else {},
        mode=_choice(key, "mode", block["mode"], MEASURED_MODES) if "mode" in block else None,
        flush=_choice(key, "flush", block["flush"], FLUSH_KINDS) if "flush" in block else None,
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
            _Invalid(
                None,
                f"is not valid YAML{where} ({getattr(exc, 'problem', exc)})",
                "repair the YAML (an unfinished merge or truncated write?) or delete "
                "the file and re-record with pytest --convperf --convperf-update-baselines",
            ),
        ) from None
    try:
        if not isinstance(data, dict):
            raise _Invalid(
                None,
                f"top level must be a mapping with schema/machine/benchmarks, got {type(data).__name__}",
                "restore the file from git or delete and re-record it",
            )
        schema = data.get("schema")
        if schema != SCHEMA:
            raise _Invalid(
                None,
                f"unknown schema {schema!r} (this plugin reads {SCHEMA!r})",
                f"set 'schema: {SCHEMA}' if the content matches, or upgrade pytest-convperf",
            )
        machine = data.get("machine")
        if machine != machine_dir:
            raise _Invalid(
                None,
                f"machine {machine!r} does not match its folder {machine_dir!r}",
                f"move the file to {path.parent.parent / str(machine)}/ or set 'machine: "
                f"{machine_dir}' if it was measured on this machine class",
            )
        extra = sorted(set(data) - {"schema", "machine", "benchmarks"})
        if extra:
            raise _Invalid(
                None,
                f"unknown top-level key(s) {', '.join(map(repr, extra))}",
                "remove them (per-entry fields go under benchmarks)",
            )
        benchmarks = data.get("benchmarks") or {}
        if not isinstance(benchmarks, dict):
            raise _Invalid(
                None,
                f"'benchmarks' must be a mapping of test id -> entry, got {type(benchmarks).__name__}",
                "restore the file from git",
            )
        entries = {str(k): parse_entry(str(k), v) for k, v in benchmarks.items()}
    except _Invalid as err:
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
