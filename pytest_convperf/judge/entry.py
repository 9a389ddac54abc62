"""One baseline entry: the :class:`Entry` a check stores, :func:`parse_entry`, which validates one
read from YAML (a bad field raises :class:`InvalidEntry` naming the field and the fix;
:mod:`pytest_convperf.baselines.store` turns it into a ``pytest.UsageError`` naming the file), and
the :class:`UpdatePlan` of an entry (the rules that make one: ``baselines.updates.plan_update``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pytest_convperf.core.clocks import SideClocks
from pytest_convperf.core.kerneldiff import KernelShare, parse_table
from pytest_convperf.core.results import FLUSH_KINDS, MEASURED_MODES, ErrorStats

FIX_RERECORD = (
    "fix the value by hand, or delete the entry and re-record it with "
    "pytest --convperf --convperf-update-baselines=new"
)


# The stored forms below are TypedDicts, not dataclasses: they are the YAML's and rows.json's
# mappings themselves (``Entry.to_yaml``, ``parse_entry``), written and read byte for byte.
class CliffPin(TypedDict):
    """A pinned performance cliff (``cliffs``): the family, the problem's id, its floor and speedup."""

    family: str
    problem: str
    floor: float
    speedup: float


class _StoredSides(TypedDict):
    candidate: float
    reference: float


class StoredTimes(_StoredSides, total=False):
    """An entry's absolute times (``us``), in microseconds: both sides paired, and on a CPU the
    reference timed alone (``witness``, ``measure.witness``)."""

    witness: float


# An entry's ``correctness``: ``{max_abs: x}`` for one output, ``{name: {max_abs: x}}`` for several.
Correctness = dict[str, float | dict[str, float]]


class _EntryYamlRequired(TypedDict):
    time_ratio: float
    noise: float
    us: StoredTimes
    env: dict[str, str]


class EntryYaml(_EntryYamlRequired, total=False):
    """One entry as its baseline file stores it (:meth:`Entry.to_yaml`); absent keys: the defaults."""

    reference_backend: str
    correctness: Correctness
    updated: dict[str, str]
    noise_runs: int
    ref_runs: int
    tolerance: float
    quality: dict[str, float]
    mode: str
    flush: str
    kernels: list[KernelShare]
    sm_mhz: dict[str, float]
    cliff: CliffPin


def _sig(x: float, digits: int = 4) -> float:
    """Round to significant digits, so re-recording the same value does not churn the file."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


def _rounded(x: float, digits: int = 4) -> float:
    """:func:`_sig` of a float; an int (an entry made in code) is written as it is, as it always was."""
    return _sig(x, digits) if isinstance(x, float) else x


@dataclass(frozen=True)
class Entry:
    """One stored check: time ratio, noise, absolute times, environment, correctness, quality."""

    time_ratio: float
    noise: float
    us_candidate: float
    us_reference: float
    env: Mapping[str, str] = field(default_factory=dict)
    reference_backend: str | None = None
    correctness: Correctness = field(default_factory=dict)
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
    # The candidate's kernel table when recorded (``kerneldiff``: [{name, calls, share}]); () unknown.
    kernels: tuple[KernelShare, ...] = ()
    # A pinned performance cliff (``cliffs``): {family, problem, floor, speedup} when pinned; None: not one.
    cliff: CliffPin | None = None
    # The SM clocks it was recorded at (GPU with NVML); None: unknown (a CPU, or recorded before
    # entries stored them), and the check is judged in time as before (``judge.cycles``).
    sm_mhz: SideClocks | None = None
    # The reference timed alone when recorded (CPU, ``measure.witness``); None: not timed (a GPU,
    # or recorded before entries stored it), and the machine's shift is read from the paired
    # reference as before (``judge.decision.reference_shift``).
    us_witness: float | None = None

    def stored_max_abs(self, name: str, *, single: bool) -> float | None:
        """The stored max_abs for an output: flat ``{max_abs}`` for one output, ``{name: {max_abs}}`` else."""
        flat = self.correctness.get("max_abs")
        if isinstance(flat, (int, float)) and single:
            return float(flat)
        sub = self.correctness.get(name)
        if isinstance(sub, Mapping) and isinstance(sub.get("max_abs"), (int, float)):
            return float(sub["max_abs"])
        return None

    def to_yaml(self) -> EntryYaml:
        us = StoredTimes(candidate=_sig(self.us_candidate), reference=_sig(self.us_reference))
        if self.us_witness is not None:
            us["witness"] = _sig(self.us_witness)
        out = EntryYaml(
            time_ratio=_sig(self.time_ratio),
            noise=_sig(self.noise, 3),
            us=us,
            env={k: str(v) for k, v in sorted(self.env.items())},
        )
        if self.reference_backend is not None:
            out["reference_backend"] = self.reference_backend
        if self.correctness:
            out["correctness"] = {
                k: {kk: _rounded(vv, 3) for kk, vv in sorted(v.items())}
                if isinstance(v, dict)
                else _rounded(v, 3)
                for k, v in sorted(self.correctness.items())
            }
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
        if self.kernels:
            out["kernels"] = [
                KernelShare(name=r["name"], calls=r["calls"], share=r["share"]) for r in self.kernels
            ]
        if self.sm_mhz is not None:
            out["sm_mhz"] = self.sm_mhz.to_yaml()
        if self.cliff is not None:
            c = self.cliff  # keys in sorted order, as the file has always had them
            out["cliff"] = CliffPin(
                family=c["family"],
                floor=_rounded(c["floor"]),
                problem=c["problem"],
                speedup=_rounded(c["speedup"]),
            )
        return out

    def same_values(self, other: Entry) -> bool:
        """Equal once rounded as stored (what a rewrite would change)."""
        return self.to_yaml() == other.to_yaml()


def correctness_of(errors: Sequence[ErrorStats]) -> Correctness:
    """What an entry (and a history record) stores about correctness: flat for one output, per
    output name for several."""
    if len(errors) == 1:
        return {"max_abs": errors[0].max_abs, "max_rel": errors[0].max_rel}
    return {str(e.name): {"max_abs": e.max_abs, "max_rel": e.max_rel} for e in errors}


def entry_digest(stored: EntryYaml | None) -> str | None:
    """A short digest of a stored entry's YAML form (``Entry.to_yaml``; a row's ``baseline``), None
    for no entry: ``calibrate`` writes over an entry only while the file still holds the entry its
    runs were judged against (history.jsonl's ``entry``)."""
    if stored is None:
        return None
    text = json.dumps(stored, sort_keys=True, default=str, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _UpdatePlanRequired(TypedDict):
    action: str
    why: str
    slower: bool
    entry: EntryYaml | None


class UpdatePlanDict(_UpdatePlanRequired, total=False):
    """An update plan as a row's dict form holds it (:meth:`UpdatePlan.to_dict`)."""

    written: bool


@dataclass(frozen=True)
class UpdatePlan:
    """What ``--convperf-update-baselines`` will do with this check's entry.

    ``action``: ``write`` (the controller writes ``entry``), ``keep`` (inside the noise band),
    ``refused`` (slower without ``--convperf-reason``), or ``skip`` (verdict not selected).
    ``written``: set at session end on a planned write (``update_outcome.mark_written``): whether
    the entry reached its file; None before.
    """

    action: str
    why: str
    entry: Entry | None = None
    slower: bool = False
    written: bool | None = None

    def to_dict(self) -> UpdatePlanDict:
        out = UpdatePlanDict(
            action=self.action,
            why=self.why,
            slower=self.slower,
            entry=self.entry.to_yaml() if self.entry is not None else None,
        )
        if self.written is not None:
            out["written"] = self.written
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], key: str) -> UpdatePlan:
        entry = data.get("entry")
        written = data.get("written")
        return cls(
            action=str(data.get("action", "")),
            why=str(data.get("why", "")),
            entry=parse_entry(key, entry) if entry is not None else None,
            slower=bool(data.get("slower", False)),
            written=bool(written) if written is not None else None,
        )


class InvalidEntry(Exception):
    """A field of one entry is malformed: ``entry`` (its key), ``problem`` and ``fix`` for the message."""

    def __init__(self, entry: str | None, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.entry, self.problem, self.fix = entry, problem, fix


def _num(entry: str, name: str, value: Any, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidEntry(
            entry, f"field {name!r} must be a number, got {value!r} ({type(value).__name__})", FIX_RERECORD
        )
    if positive and value <= 0:
        raise InvalidEntry(entry, f"field {name!r} must be > 0, got {value!r}", FIX_RERECORD)
    if not positive and value < 0:
        raise InvalidEntry(entry, f"field {name!r} must be >= 0, got {value!r}", FIX_RERECORD)
    return float(value)


def _tolerance(entry: str, value: Any) -> float:
    tol = _num(entry, "tolerance", value)
    if not tol < 1.0:
        raise InvalidEntry(
            entry,
            f"field 'tolerance' must be a fraction between 0 and 1, got {value!r}",
            "write a fraction (0.02 means 2 %) or delete the field to use the device default",
        )
    return tol


def _int(entry: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidEntry(entry, f"field {name!r} must be a positive integer, got {value!r}", FIX_RERECORD)
    return value


def _map(entry: str | None, name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InvalidEntry(
            entry, f"field {name!r} must be a mapping, got {value!r} ({type(value).__name__})", FIX_RERECORD
        )
    return value


def _str_map(entry: str, name: str, value: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in _map(entry, name, value).items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise InvalidEntry(
                entry, f"field '{name}.{k}' must be a string, got {v!r} ({type(v).__name__})", FIX_RERECORD
            )
        out[str(k)] = str(v)
    return out


def _correctness_map(entry: str, value: Any) -> Correctness:
    out: Correctness = {}
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
            raise InvalidEntry(
                entry,
                f"unknown field {name!r}",
                f"remove it; quality holds {', '.join(QUALITY_FIELDS)} (re-record with "
                "pytest --convperf --convperf-update-baselines)",
            )
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise InvalidEntry(
                entry, f"field {name!r} must be a number, got {v!r} ({type(v).__name__})", FIX_RERECORD
            )
        if k == "rel_l2" and v < 0:
            raise InvalidEntry(entry, f"field {name!r} must be >= 0, got {v!r}", FIX_RERECORD)
        out[str(k)] = float(v)
    return out


def _choice(entry: str, name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidEntry(
            entry,
            f"field {name!r} must be one of {', '.join(allowed)}, got {value!r}",
            "write one of those, or delete the field and re-record the entry with "
            "pytest --convperf --convperf-update-baselines",
        )
    return value


ENTRY_FIELDS = {
    "cliff",
    "sm_mhz",
    "kernels",
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
    """Validate one ``benchmarks`` block; raises ``InvalidEntry`` naming the field."""
    block = _map(key, "(entry)", raw)
    unknown = sorted(set(block) - ENTRY_FIELDS)
    if unknown:
        raise InvalidEntry(
            key,
            f"unknown field(s) {', '.join(map(repr, unknown))}",
            f"remove them; allowed fields are {', '.join(sorted(ENTRY_FIELDS))}",
        )
    for required in ("time_ratio", "noise", "us"):
        if required not in block:
            raise InvalidEntry(key, f"missing field {required!r}", FIX_RERECORD)
    us = _map(key, "us", block["us"])
    for side in ("candidate", "reference"):
        if side not in us:
            raise InvalidEntry(key, f"field 'us' lacks {side!r}", FIX_RERECORD)
    extra = sorted(set(us) - {"candidate", "reference", "witness"})
    if extra:
        raise InvalidEntry(
            key,
            f"field 'us' has unknown key(s) {', '.join(map(repr, extra))}",
            "remove them; 'us' holds candidate, reference and witness",
        )
    backend = block.get("reference_backend")
    if backend is not None and not isinstance(backend, str):
        raise InvalidEntry(key, f"field 'reference_backend' must be a string, got {backend!r}", FIX_RERECORD)
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
        kernels=_kernels(key, block["kernels"]) if "kernels" in block else (),
        cliff=_cliff(key, block["cliff"]) if block.get("cliff") is not None else None,
        sm_mhz=_sm_mhz(key, block["sm_mhz"]) if block.get("sm_mhz") is not None else None,
        us_witness=_num(key, "us.witness", us["witness"]) if "witness" in us else None,
    )


def _sm_mhz(key: str, value: Any) -> SideClocks:
    """``sm_mhz: {candidate: > 0, reference: > 0}`` (MHz), both required."""
    block = _map(key, "sm_mhz", value)
    if set(block) != {"candidate", "reference"}:
        raise InvalidEntry(
            key,
            f"field 'sm_mhz' must hold exactly candidate and reference, got {sorted(block)}",
            FIX_RERECORD,
        )
    candidate = _num(key, "sm_mhz.candidate", block["candidate"])
    return SideClocks(candidate, _num(key, "sm_mhz.reference", block["reference"]))


CLIFF_FIELDS = ("family", "problem", "floor", "speedup")


def _cliff(key: str, value: Any) -> CliffPin:
    """``cliff: {family: str, problem: <Conv2dProblem id>, floor: > 0, speedup: > 0}``, all required."""
    block = _map(key, "cliff", value)
    fix = (
        "restore the field from git, or delete the entry and pin it again with "
        "--convperf-update-baselines=cliffs"
    )
    if set(block) != set(CLIFF_FIELDS):
        raise InvalidEntry(
            key, f"field 'cliff' must hold exactly {', '.join(CLIFF_FIELDS)}, got {sorted(block)}", fix
        )
    for name in ("family", "problem"):
        if not isinstance(block[name], str) or not block[name]:
            raise InvalidEntry(
                key, f"field 'cliff.{name}' must be a non-empty string, got {block[name]!r}", fix
            )
    return CliffPin(
        family=block["family"],
        problem=block["problem"],
        floor=_num(key, "cliff.floor", block["floor"]),
        speedup=_num(key, "cliff.speedup", block["speedup"]),
    )


def _kernels(key: str, value: Any) -> tuple[KernelShare, ...]:
    table = parse_table(value)
    if table is None:
        raise InvalidEntry(
            key, "field 'kernels' must be a list of {name, calls, share}", "remove the field or re-record it"
        )
    return tuple(table)
