"""A check whose candidate caches on input pointers passes correctness, is timed, then fails with a
CORRECTNESS_FAIL row saying so; the honest candidate beside it passes (fake timer calling the jobs)."""

from __future__ import annotations

import pytest

from tests.integration.test_fixtures import PROBLEM_SRC, _fake_conftest, _rows


def test_pointer_cache_fails_the_check(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    _fake_conftest(pytester, {"candidate": 0.5e-3, "reference": 1e-3})
    pytester.makepyfile(
        test_cheat=PROBLEM_SRC
        + """
CACHE = {}

def cached(x, w, b, *args):
    key = (x.data_ptr(), w.data_ptr())
    if key not in CACHE:
        CACHE[key] = F.conv2d(x, w, b, *args)
    return CACHE[key]

@pytest.mark.convperf
def test_cheat(convperf):
    convperf.check(cached, P)

@pytest.mark.convperf
def test_honest(convperf):
    convperf.check(F.conv2d, P)
"""
    )
    result = pytester.runpytest(*plugin_args, "--convperf", "--convperf-device=cpu")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*CACHED RESULT: after timing, new values written into the same input*"])
    rows = {r["nodeid"].split("::")[1]: r for r in _rows(pytester)}
    assert rows["test_cheat"]["verdict"] == "CORRECTNESS_FAIL"
    assert rows["test_cheat"]["facts"]["integrity"] == "CACHED RESULT"
    assert rows["test_honest"]["verdict"] == "NEW"
