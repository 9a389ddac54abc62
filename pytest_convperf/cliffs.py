"""Performance cliffs (issue 18 item 3): a family's worst-speedup search against a declared floor.

``convperf_speedup_floor`` (ini, lines ``family = speedup``; default off) declares the lowest
speedup over the reference a family accepts anywhere in its search space. The targeted search
(``perf_tests``) reports its worst shape; :func:`floor_message` says whether that shape breaks the
floor. Pure: no torch, no pytest.
"""

from __future__ import annotations

from collections.abc import Mapping


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
