"""The declared per-family speedup floor of the worst-speedup search (issue 18 item 3, part)."""

from __future__ import annotations

import pytest

from pytest_convperf.cliffs import floor_message
from pytest_convperf.config import parse_floors


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
