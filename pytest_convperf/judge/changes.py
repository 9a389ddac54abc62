"""What changed since a baseline entry was recorded, and the words of a STALE verdict: the timing
mode / L2 flush and the environment that differ (:func:`changes_since`), and which side's absolute
time moved (:func:`moved_side`, :func:`us_line`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pytest_convperf.core.env import env_diff, timing_of

if TYPE_CHECKING:
    from pytest_convperf.core.results import Comparison
    from pytest_convperf.judge.entry import Entry


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
