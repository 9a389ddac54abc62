"""What a baseline's timing depends on, and its changes: the software environment (torch, CUDA,
cuDNN, driver major) and how it was timed (mode and, for ``cold``, the L2 flush kind); the words of
a STALE verdict (what changed, which side moved)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_convperf.core.entry import Entry
    from pytest_convperf.core.results import Comparison

ENV_KEYS = ("torch", "cuda", "cudnn", "driver")


def env_from_facts(facts: Mapping[str, Any]) -> dict[str, str]:
    """The versions a baseline depends on (torch, CUDA, cuDNN, driver major) from device facts."""
    env: dict[str, str] = {}
    for key in ENV_KEYS:
        value = facts.get(key)
        if value is None or value == "":
            continue
        text = str(value)
        env[key] = text.split(".")[0] if key == "driver" else text
    return env


def env_diff(
    stored: Mapping[str, str], current: Mapping[str, str]
) -> dict[str, tuple[str | None, str | None]]:
    """Keys of the environment whose value changed: {key: (stored, current)}."""
    keys = sorted(set(stored) | set(current))
    out: dict[str, tuple[str | None, str | None]] = {}
    for key in keys:
        old, new = stored.get(key), current.get(key)
        if old is not None and new is not None and str(old) != str(new):
            out[key] = (str(old), str(new))
    return out


def timing_of(comparison: Comparison) -> dict[str, str]:
    """How a comparison was timed, as an entry stores it: ``mode`` and, for ``cold``, ``flush``."""
    out = {"mode": comparison.candidate.mode}
    flush = comparison.facts.get("flush")
    if comparison.candidate.mode == "cold" and isinstance(flush, str):
        out["flush"] = flush
    return out


def timing_diff(entry: Entry, now: Mapping[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """Timing mode / L2 flush (``now``: :func:`timing_of`'s form) that differ from the entry's:
    {"mode": (stored, now)}; unknown never differs."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for key, old in (("mode", entry.mode), ("flush", entry.flush)):
        new = now.get(key)
        if old is not None and new is not None and old != new:
            out[key] = (old, new)
    return out


Changes = dict[str, tuple[str | None, str | None]]


def changes_since(
    entry: Entry, comparison: Comparison, *, env: Mapping[str, str], backend: str | None
) -> tuple[Changes, Changes]:
    """What changed since ``entry`` was recorded: (timing mode / flush, environment incl. backend)."""
    diff = env_diff(entry.env, env)
    if backend is not None and entry.reference_backend is not None and backend != entry.reference_backend:
        diff["reference_backend"] = (entry.reference_backend, backend)
    return timing_diff(entry, timing_of(comparison)), diff


def describe_changes(timing: Changes, env: Changes) -> str:
    """``timing changed (mode cold -> graph); environment changed (torch 2.1 -> 2.2)``."""
    return "; ".join(
        f"{what} changed ({', '.join(f'{k} {a} -> {b}' for k, (a, b) in d.items())})"
        for what, d in (("timing", timing), ("environment", env))
        if d
    )


def us_line(entry: Entry, comparison: Comparison) -> str:
    """The absolute times of both sides, stored -> now (the times a ratio change comes from)."""
    cand_old, ref_old = entry.us_candidate, entry.us_reference
    cand_new, ref_new = comparison.candidate.median_us, comparison.reference.median_us
    return (
        f"candidate {cand_old:.4g} -> {cand_new:.4g} us ({(cand_new / cand_old - 1) * 100:+.1f} %), "
        f"reference {ref_old:.4g} -> {ref_new:.4g} us ({(ref_new / ref_old - 1) * 100:+.1f} %)"
    )


def moved_side(entry: Entry, comparison: Comparison) -> str:
    """Which side's absolute time moved since the entry (a STALE message says it)."""
    cand = comparison.candidate.median_us / entry.us_candidate - 1
    ref = comparison.reference.median_us / entry.us_reference - 1
    if abs(cand) >= 2 * abs(ref):
        return "the candidate moved"
    if abs(ref) >= 2 * abs(cand):
        return "the reference moved"
    return "both sides moved"


def load_avg() -> list[float]:
    """The machine's 1/5/15-minute load averages (``os.getloadavg``), [] where the OS has none:
    CPU timings and calibration runs report the load they were measured under."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []
