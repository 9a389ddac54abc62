"""Cheats that fooled the CPU timer (issue 25 item 1) are failed with a message naming the trick.

A cache keyed on the input's pointer plus a few values (fresh values every round leave it
nothing to hit; the integrity check names it), work handed to a worker thread (the thread CPU
clock does not see it; the process CPU time does), ``torch.set_num_threads`` inside the candidate
(checked after every call). The thread tricks need the real CPU timer; the cache's timing is
measured with it too, as a ratio in one run.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.integration.test_fixtures import PROBLEM_SRC, _fake_conftest, _rows

# A problem large enough (~1 ms) that the conv, not Python's call overhead, is a call's time.
BIG = """
import concurrent.futures
import torch
import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem

BIG = Conv2dProblem(n=1, c_in=32, h=56, w=56, c_out=32, kernel=3, padding=1)
CACHE = {}

def cached(x, w, b, *args):
    # The issue's cheat: the data pointer plus 3 element values as the key.
    flat = x.reshape(-1)
    key = (x.data_ptr(), float(flat[0]), float(flat[1]), float(flat[-1]))
    if key not in CACHE:
        CACHE.clear()
        CACHE[key] = F.conv2d(x, w, b, *args)
    return CACHE[key]

POOL = concurrent.futures.ThreadPoolExecutor(1)

def worker(x, w, b, *args):
    return POOL.submit(F.conv2d, x, w, b, *args).result()

def two_threads(x, w, b, *args):
    torch.set_num_threads(2)
    return F.conv2d(x, w, b, *args)
"""


def test_a_value_keyed_cache_gains_nothing_in_timing(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(
        test_cache=BIG
        + """
def test_cache(convperf):
    c = convperf.measure(cached, BIG)
    print(f"RATIO {c.time_ratio:.4f}")
"""
    )
    result = pytester.runpytest(*cpu_plugin_args, "--convperf", "-s")
    result.assert_outcomes(passed=1)
    match = re.search(r"RATIO ([0-9.]+)", result.stdout.str())
    assert match is not None, result.stdout.str()
    # Before fresh values per round the cache hit every call: 0.07 (issue 25). Now it computes.
    assert float(match.group(1)) > 0.7, result.stdout.str()


def test_a_value_keyed_cache_fails_the_check(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    _fake_conftest(pytester, {"candidate": 0.1e-3, "reference": 1e-3})
    pytester.makepyfile(
        test_cache=PROBLEM_SRC
        + BIG
        + """
@pytest.mark.convperf
def test_cheat(convperf):
    convperf.check(cached, P)
"""
    )
    result = pytester.runpytest(*plugin_args, "--convperf", "--convperf-device=cpu")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CACHED OUTPUT: two calls on the same input values*"])
    (row,) = _rows(pytester)
    assert row["verdict"] == "CORRECTNESS_FAIL" and row["facts"]["integrity"] == "CACHED OUTPUT"


@pytest.mark.parametrize(
    ("candidate", "words"),
    [
        ("worker", "*TIMING TRICK: during candidate's timed calls other threads of the process used*"),
        ("two_threads", "*TIMING TRICK: candidate changed torch's thread count from 1 to 2*"),
    ],
)
def test_work_the_thread_clock_cannot_see_fails(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...], candidate: str, words: str
) -> None:
    pytester.makepyfile(
        test_trick=BIG
        + f"""
def test_trick(convperf):
    convperf.measure({candidate}, BIG)
"""
    )
    result = pytester.runpytest_subprocess(*cpu_plugin_args, "--convperf", "-p", "no:xdist")
    result.stdout.fnmatch_lines([words])
    result.assert_outcomes(failed=1)


def test_a_time_under_the_roofline_is_a_failed_check_with_its_row(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    # Issue 37 item 2: the check failed but its row was missing from rows.json and the summary.
    _fake_conftest(pytester, {"candidate": 1e-12, "reference": 1e-3})
    pytester.makepyfile(
        test_fast=PROBLEM_SRC
        + """
@pytest.mark.convperf
def test_fast(convperf):
    convperf.check(F.conv2d, P)
"""
    )
    result = pytester.runpytest(*cpu_plugin_args, "--convperf", "--convperf-report=report")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*IMPLAUSIBLE TIME: candidate median*under half the roofline floor*did not do its work*",
            "*CORRECTNESS_FAIL (1)*",
            "*test_fast*",
        ]
    )
    (row,) = json.loads((pytester.path / "report" / "rows.json").read_text())
    assert row["verdict"] == "CORRECTNESS_FAIL" and row["facts"]["integrity"] == "IMPLAUSIBLE TIME"
    assert row["comparison"] is None and "test_fast" in (pytester.path / "report" / "report.md").read_text()
