"""Which kernel changed (issue 18 item 4): a candidate's kernel table stored with its baseline entry,
and what moved between the stored table and tonight's.

A table is what ``profiling.kernel_table`` makes of the profiler's rows over a few calls (CUDA
kernels on a GPU, aten operators by self time on a CPU), kept as ``[{name, calls, share}]``:
``calls`` per call of the candidate, ``share`` of the table's device (or CPU) time, 0..1; this
module reads a stored one back (:func:`parse_table`).
A FAIL's message then names what changed: a new or vanished kernel, a different launch count, a
share that moved by ``SHARE_MOVE`` or more. Pure: no torch, no pytest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

SHARE_MOVE = 0.10


class KernelShare(TypedDict):
    """One row of a stored kernel table, as the baseline YAML holds it (a TypedDict, not a dataclass:
    entries, rows.json and the dashboard carry it as that mapping, byte for byte)."""

    name: str
    calls: float
    share: float


def parse_table(value: Any) -> list[KernelShare] | None:
    """A stored table, or None when ``value`` is not one (the entry parser names the problem)."""
    if not isinstance(value, list):
        return None
    out: list[KernelShare] = []
    for row in value:
        if not isinstance(row, Mapping) or set(row) != {"name", "calls", "share"}:
            return None
        name, calls, share = row["name"], row["calls"], row["share"]
        if not isinstance(name, str) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in (calls, share)
        ):
            return None
        out.append(KernelShare(name=name, calls=float(calls), share=float(share)))
    return out


def changes(old: Sequence[KernelShare], new: Sequence[KernelShare]) -> list[str]:
    """What moved from the stored table ``old`` to tonight's ``new``, most telling first."""
    before = {r["name"]: r for r in old}
    after = {r["name"]: r for r in new}
    out = []
    for name in after.keys() - before.keys():
        out.append(
            f"new kernel {name} ({after[name]['share']:.0%} of the time, {after[name]['calls']:g} per call)"
        )
    for name in before.keys() - after.keys():
        out.append(f"vanished kernel {name} (was {before[name]['share']:.0%} of the time)")
    for name in sorted(before.keys() & after.keys()):
        b, a = before[name], after[name]
        if abs(a["calls"] - b["calls"]) > 1e-6:
            out.append(f"{name}: {b['calls']:g} -> {a['calls']:g} launches per call")
        if abs(a["share"] - b["share"]) >= SHARE_MOVE:
            out.append(f"{name}: share of the time {b['share']:.0%} -> {a['share']:.0%}")
    return sorted(out, key=lambda line: (not line.startswith(("new", "vanished")), line))


def describe(old: Sequence[KernelShare] | None, new: Sequence[KernelShare] | None) -> str | None:
    """One sentence for a FAIL's message, or None when there is nothing to compare or nothing moved."""
    if not old or not new:
        return None
    moved = changes(old, new)
    if not moved:
        return "kernels unchanged since the baseline (same kernels, launches and shares)"
    return "kernels changed since the baseline: " + "; ".join(moved)
