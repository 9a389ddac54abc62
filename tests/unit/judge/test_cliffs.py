"""Performance cliffs (issue 18 item 3): the declared floor, and the pin/retire rules (pure functions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_convperf.baselines.store import Store, read_file
from pytest_convperf.baselines.updates import new_entry
from pytest_convperf.core.options import parse_floors
from pytest_convperf.judge.cliffs import (
    CliffChange,
    file_changes,
    floor_message,
    plan_found,
    plan_pinned,
    render_md,
)
from pytest_convperf.judge.entry import InvalidEntry, parse_entry
from pytest_convperf.judge.verdict import default_policy
from tests.unit.judge.test_verdict import ENV, comparison


def test_floor_is_off_by_default_and_fails_below() -> None:
    assert floor_message("depthwise", 0.1, "shape", {}) is None  # no floor declared: never fails
    floors = parse_floors("depthwise = 0.8\n# a comment\nim2col = 1.5")
    assert floors == {"depthwise": 0.8, "im2col": 1.5}
    assert floor_message("depthwise", 0.85, "s", floors) is None
    message = floor_message("depthwise", 0.5, "n1-ci4", floors)
    assert (
        message is not None and "worst speedup 0.500x on n1-ci4 is under its declared floor 0.8x" in message
    )


@pytest.mark.parametrize("text", ["depthwise 0.8", "depthwise = fast", "depthwise = 0", "= 0.8"])
def test_bad_floor_lines_are_usage_errors(text: str) -> None:
    with pytest.raises(pytest.UsageError, match="convperf_speedup_floor: bad line"):
        parse_floors(text)


def test_the_fixture_fails_the_search_below_the_floor(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nconvperf_speedup_floor = depthwise = 0.8\n")
    pytester.makepyfile(
        """
        def test_cliff(convperf_speedup_floor):
            convperf_speedup_floor("depthwise", 0.5, "n1-ci4")

        def test_fine(convperf_speedup_floor):
            convperf_speedup_floor("depthwise", 0.9, "n1-ci4")
            convperf_speedup_floor("pcilt", 0.1, "n1-ci4")  # no floor for this family
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*performance cliff: depthwise's worst speedup 0.500x*"])


# ---- pin and retire rules (pure) ------------------------------------------------------------------

WHERE = ("testbox", "test_dw", "test_search@n1-ci5")
STORED = {"family": "depthwise", "problem": "n1-ci5", "floor": 0.8, "speedup": 0.3}
RAW: dict[str, Any] = {
    "time_ratio": 3.0,
    "noise": 0.04,
    "us": {"candidate": 3.0, "reference": 1.0},
    "cliff": STORED,
}


def _found(kinds: set[str]) -> CliffChange | None:
    return plan_found(
        frozenset(kinds), where=WHERE, family="depthwise", problem="n1-ci5", floor=0.8, speedup=0.3, entry=RAW
    )


def test_a_new_cliff_is_pinned_only_by_the_cliffs_kind() -> None:
    assert _found(set()) is None  # not an update run: the test fails instead
    for kinds in ({"cliffs"}, {"all"}, {"new", "cliffs"}):
        change = _found(kinds)
        assert change is not None and change.action == "pin" and change.entry == RAW
    unpinned = _found({"failed", "new"})
    assert unpinned is not None and unpinned.action == "unpinned" and unpinned.entry is None
    assert "--convperf-update-baselines=cliffs" in unpinned.why


@pytest.mark.parametrize(
    ("kinds", "floor", "speedup", "action"),
    [
        ({"cliffs"}, None, 0.5, "keep"),  # still under the floor it was pinned under (0.8)
        ({"cliffs"}, 0.4, 0.5, "retire"),  # tonight's declared floor rules
        ({"cliffs"}, None, 0.8, "retire"),  # at the floor is not under it
        ({"all"}, None, 1.2, "retire"),
        ({"improved"}, None, 1.2, "keep"),  # fixed, but this update does not select cliffs
    ],
)
def test_a_pinned_cliff_is_retired_only_at_or_above_the_floor_by_the_cliffs_kind(
    kinds: set[str], floor: float | None, speedup: float, action: str
) -> None:
    assert plan_pinned(frozenset(), where=WHERE, stored=STORED, floor=floor, speedup=speedup) is None
    change = plan_pinned(frozenset(kinds), where=WHERE, stored=STORED, floor=floor, speedup=speedup)
    assert change is not None and change.action == action and change.speedup == speedup
    if action == "keep" and speedup >= 0.8:
        assert "retire it with --convperf-update-baselines=cliffs" in change.why


def test_changes_travel_as_dicts_and_become_file_writes_and_removals() -> None:
    pin = plan_found(
        frozenset({"cliffs"}),
        where=WHERE,
        family="depthwise",
        problem="n1-ci5",
        floor=0.8,
        speedup=0.3,
        entry=RAW,
    )
    retire = plan_pinned(
        frozenset({"cliffs"}),
        where=(*WHERE[:2], "test_search@n1-ci7"),
        stored=STORED,
        floor=None,
        speedup=1.0,
    )
    keep = plan_pinned(frozenset({"cliffs"}), where=WHERE, stored=STORED, floor=None, speedup=0.2)
    assert pin is not None and retire is not None and keep is not None
    changes = [CliffChange.from_dict(c.to_dict()) for c in (pin, retire, keep)]
    assert changes == [pin, retire, keep]
    pins, retired = file_changes(changes)
    assert pins == {("testbox", "test_dw"): {WHERE[2]: RAW}}
    assert retired == {("testbox", "test_dw"): {"test_search@n1-ci7"}}
    md = "\n".join(render_md(changes, "known cliff"))
    # Each change is listed with its shape, speedup, floor and why; the reason only where the file
    # changes. Ids and texts from test code are code spans (issue 37.8: no ping, link or broken row).
    assert (
        "| pin | ` test_search@n1-ci5 (testbox/test_dw.yaml) ` | ` depthwise ` | ` n1-ci5 ` | 0.300x | 0.8x |"
        in md
    )
    assert "new cliff; reason: known cliff" in md
    assert "| retire | ` test_search@n1-ci7" in md and "fixed: 1.000x is at or above the floor 0.8x" in md
    assert "| keep |" in md and "still under the floor" in md and md.count("reason: known cliff") == 2
    assert render_md([], "x") == []


def test_the_cliff_field_round_trips_and_is_validated() -> None:
    entry = parse_entry("k", RAW)
    assert entry.cliff == STORED and entry.to_yaml()["cliff"] == STORED
    assert parse_entry("k", {k: v for k, v in RAW.items() if k != "cliff"}).cliff is None  # old entries
    for bad in ({**STORED, "floor": 0}, {**STORED, "problem": ""}, {"family": "depthwise"}, "x"):
        with pytest.raises(InvalidEntry, match="cliff"):
            parse_entry("k", {**RAW, "cliff": bad})


def test_a_write_removes_only_the_retired_keys_under_the_lock(tmp_path: Path) -> None:
    store = Store(tmp_path, "testbox")
    keep = parse_entry("a", {k: v for k, v in RAW.items() if k != "cliff"})
    store.write("test_dw", {"a": keep, "cliff": parse_entry("cliff", RAW)})
    store.write("test_dw", {}, remove=["cliff", "absent"])
    assert dict(store.load("test_dw")) == {"a": keep}


def test_the_h100_baselines_still_load() -> None:
    """The real H100 files (recorded before cliffs existed) stay loadable: the field is optional."""
    folder = Path(__file__).resolve().parents[3] / "baselines" / "nvidia-h100-80gb-hbm3"
    files = sorted(folder.glob("*.yaml"))
    assert files, f"no baseline files under {folder}"
    for path in files:
        assert read_file(path).entries


def test_a_re_recorded_cliff_stays_pinned() -> None:
    """An ordinary update of a pinned cliff's entry (=failed, =improved) keeps its ``cliff`` field."""
    old = parse_entry("k", RAW)
    entry = new_entry(comparison(2.0), old, default_policy("cpu"), env=ENV, backend=None, errors=())
    assert entry.cliff == STORED and entry.time_ratio == 2.0
