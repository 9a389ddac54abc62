"""A check whose candidate caches on input pointers passes correctness, is timed, then fails with a
CORRECTNESS_FAIL row saying so; the honest candidate beside it passes (fake timer calling the jobs).
Every timed round writes fresh values into the same inputs (``InputSets.refresh``), so the last
timed call of a pointer cache returns an earlier round's result: STALE OUTPUT names it."""

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
    result.stdout.fnmatch_lines(
        ["*STALE OUTPUT: *earlier call's result (a result cached on its inputs' pointers*"]
    )
    rows = {r["nodeid"].split("::")[1]: r for r in _rows(pytester)}
    assert rows["test_cheat"]["verdict"] == "CORRECTNESS_FAIL"
    assert rows["test_cheat"]["facts"]["integrity"] == "STALE OUTPUT"
    assert rows["test_honest"]["verdict"] == "NEW"


def test_declared_deterministic_check_fails_on_a_bitwise_difference(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...]
) -> None:
    _fake_conftest(pytester, {"candidate": 0.5e-3, "reference": 1e-3})
    pytester.makepyfile(
        test_det=PROBLEM_SRC
        + """
import torch

def jittery(x, w, b, *args):
    out = F.conv2d(x, w, b, *args)
    return out + torch.randn(()) * 1e-7  # within tolerance, never twice the same bits

@pytest.mark.convperf
def test_jittery(convperf):
    convperf.check(jittery, P, deterministic=True)

@pytest.mark.convperf
def test_exact(convperf):
    convperf.check(F.conv2d, P, deterministic=True)
"""
    )
    result = pytester.runpytest(*plugin_args, "--convperf", "--convperf-device=cpu")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        ["*NONDETERMINISTIC: forward of * differ: output: * elements differ bitwise*"]
    )
    rows = {r["nodeid"].split("::")[1]: r for r in _rows(pytester)}
    assert rows["test_jittery"]["facts"]["integrity"] == "NONDETERMINISTIC"
    assert rows["test_exact"]["facts"]["deterministic"] is True and rows["test_exact"]["verdict"] == "NEW"
