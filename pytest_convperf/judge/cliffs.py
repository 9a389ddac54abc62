"""Performance cliffs (issue 18 item 3): the floor, and the rules that pin and retire worst shapes.

``convperf_speedup_floor`` (ini, lines ``family = speedup``; default off) declares the lowest
speedup over the reference a family accepts anywhere in its search space. A family's targeted
search (:mod:`pytest_convperf.check.cliff_search`) fails on a shape under the floor, and Hypothesis
shrinks it to the simplest shape still under it: a *cliff*.

A cliff is pinned into the module's baseline file as an ordinary entry with a ``cliff`` field, so
every later run re-measures it and judges it against its stored ratio like a seed shape. The
review rules (``--convperf-update-baselines``):

* a new cliff is pinned only by an update that selects ``cliffs`` (or ``all``), and is listed in
  ``convperf-update.md`` with its shape, speedup, floor and the reason;
* a pinned cliff is retired (its entry removed) only when such an update measures it at or above
  the floor, and the review file says so; an update without ``cliffs`` lists what it would do.

Nothing here touches files: :func:`pytest_convperf.baselines.updates.apply_updates` writes what these plan.
Pure: no torch, no pytest.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_convperf.core.markdown_safe import code_span

CLIFF_KIND = "cliffs"  # the --convperf-update-baselines kind that pins and retires cliffs
CLIFFS_PROPERTY = "convperf_cliffs"  # the cliff changes of one test, on its report

# What a change does at session end: ``pin`` writes the entry, ``retire`` removes it; ``keep`` and
# ``unpinned`` only go into the review file (an update run says what it did not do, and why).
ACTIONS = ("pin", "retire", "keep", "unpinned")


def floor_message(family: str, speedup: float, shape: str, floors: Mapping[str, float]) -> str | None:
    """The failure message when ``speedup`` on ``shape`` is under ``family``'s floor; None otherwise."""
    floor = floors.get(family)
    if floor is None or speedup >= floor:
        return None
    return (
        f"performance cliff: {family}'s worst speedup {speedup:.3f}x on {shape} is under its declared "
        f"floor {floor:g}x (convperf_speedup_floor); fix the kernel for this shape, or lower the floor "
        "in the ini with a reason in the commit"
    )


def pins_cliffs(update: Collection[str]) -> bool:
    """Whether an update run with these kinds pins and retires cliffs."""
    return CLIFF_KIND in update or "all" in update


@dataclass(frozen=True)
class CliffChange:
    """One cliff's fate in an update run; travels from the worker to the controller as a dict."""

    action: str
    machine: str
    module: str
    key: str
    family: str
    problem: str
    floor: float
    speedup: float  # measured tonight
    why: str
    entry: Mapping[str, Any] | None = None  # the YAML form of the entry a ``pin`` writes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CliffChange:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def plan_found(
    update: Collection[str],
    *,
    where: tuple[str, str, str],
    family: str,
    problem: str,
    floor: float,
    speedup: float,
    entry: Mapping[str, Any],
) -> CliffChange | None:
    """A new cliff (under the floor, not pinned yet) in an update run: pinned only under ``cliffs``.

    ``where`` is (machine, module, key). None outside an update run: the test fails on it instead.
    """
    if not update:
        return None
    machine, module, key = where
    if pins_cliffs(update):
        return CliffChange("pin", machine, module, key, family, problem, floor, speedup, "new cliff", entry)
    why = (
        f"not pinned: --convperf-update-baselines={','.join(sorted(update))} does not select "
        f"{CLIFF_KIND}; pin it with --convperf-update-baselines={CLIFF_KIND}"
    )
    return CliffChange("unpinned", machine, module, key, family, problem, floor, speedup, why)


def plan_pinned(
    update: Collection[str],
    *,
    where: tuple[str, str, str],
    stored: Mapping[str, Any],
    floor: float | None,
    speedup: float,
) -> CliffChange | None:
    """A pinned cliff re-measured at ``speedup`` in an update run: retired only at or above the floor.

    ``floor`` is the family's declared floor tonight; without one the floor it was pinned under
    (``stored["floor"]``) applies. None outside an update run.
    """
    if not update:
        return None
    machine, module, key = where
    limit = floor if floor is not None else float(stored["floor"])
    family, problem = str(stored["family"]), str(stored["problem"])
    if speedup < limit:
        why = f"still under the floor {limit:g}x (pinned at {float(stored['speedup']):.3f}x)"
        return CliffChange("keep", machine, module, key, family, problem, limit, speedup, why)
    if pins_cliffs(update):
        pinned_at = float(stored["speedup"])
        why = f"fixed: {speedup:.3f}x is at or above the floor {limit:g}x (pinned at {pinned_at:.3f}x)"
        return CliffChange("retire", machine, module, key, family, problem, limit, speedup, why)
    why = (
        f"at or above the floor {limit:g}x, but kept: retire it with --convperf-update-baselines={CLIFF_KIND}"
    )
    return CliffChange("keep", machine, module, key, family, problem, limit, speedup, why)


def render_md(changes: Sequence[CliffChange], reason: str | None) -> list[str]:
    """The ``convperf-update.md`` section of the night's cliffs (empty when there are none)."""
    if not changes:
        return []
    lines = [
        "## Performance cliffs",
        "",
        "| action | check | family | shape | speedup now | floor | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in sorted(changes, key=lambda c: (ACTIONS.index(c.action), c.module, c.key)):
        why = c.why + (f"; reason: {reason}" if reason and c.action in ("pin", "retire") else "")
        lines.append(
            f"| {c.action} | {code_span(f'{c.key} ({c.machine}/{c.module}.yaml)', table=True)} | "
            f"{code_span(c.family, table=True)} | {code_span(c.problem, table=True)} "
            f"| {c.speedup:.3f}x | {c.floor:g}x | {code_span(why, table=True)} |"
        )
    return [*lines, ""]


def file_changes(
    changes: Sequence[CliffChange],
) -> tuple[dict[tuple[str, str], dict[str, Mapping[str, Any]]], dict[tuple[str, str], set[str]]]:
    """Per (machine, module): the entries (YAML form) pins write, and the keys retirements remove."""
    pins: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    retired: dict[tuple[str, str], set[str]] = {}
    for c in changes:
        if c.action == "pin" and c.entry is not None:
            pins.setdefault((c.machine, c.module), {})[c.key] = c.entry
        elif c.action == "retire":
            retired.setdefault((c.machine, c.module), set()).add(c.key)
    return pins, retired
