"""Argument traps of issue 24.4: one value where a sequence is expected, a shape where a problem is."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import given, settings

from perf_tests import cpu_main
from pytest_convperf.core.problem import Conv2dProblem, require_problem
from pytest_convperf.core.strategies import conv2d_problems


@settings(max_examples=5, deadline=None, database=None)
@given(conv2d_problems(dtypes=torch.float32, kinds="dense", layouts="nhwc"))
def test_a_single_dtype_kind_or_layout_means_that_one(problem: Conv2dProblem) -> None:
    assert (problem.dtype, problem.layout, problem.kernel != (1, 1)) == ("fp32", "nhwc", True)


def test_a_shape_where_a_problem_goes_names_the_fix() -> None:
    with pytest.raises(TypeError, match=r"convperf.check takes a Conv2dProblem, not tuple \(8, 32, 56, 56\)"):
        require_problem((8, 32, 56, 56), "convperf.check")
    p = Conv2dProblem(n=1, c_in=2, h=5, w=5, c_out=3, kernel=3)
    assert require_problem(p, "x") is p


def test_calibrate_selects_the_timed_checks_within_a_given_marker_expression() -> None:
    from pytest_convperf.__main__ import timed_only

    assert timed_only(["t.py", "-k", "x"]) == ["t.py", "-k", "x", "-m", "convperf"]
    assert timed_only(["-m", "not slow", "t.py"]) == ["t.py", "-m", "(not slow) and convperf"]
    assert timed_only(["-mfast", "t.py"]) == ["t.py", "-m", "(fast) and convperf"]


def test_the_selection_must_match_collected_tests() -> None:
    job = cpu_main.CpuMainJob("m", Path("b/m"), Path("s"), ("/x/perf_tests/test_a.py::t[1]",))
    items: Any = [
        SimpleNamespace(nodeid="perf_tests/test_a.py::t[1]"),
        SimpleNamespace(nodeid="perf_tests/test_a.py::u"),
    ]
    kept, dropped = cpu_main.select(items, job)
    assert [i.nodeid for i in kept] == ["perf_tests/test_a.py::t[1]"] and len(dropped) == 1
    with pytest.raises(
        pytest.UsageError, match=r"SELECTION names tests that were not collected: test_a\.py::t"
    ):
        cpu_main.select(items[1:], job)


def test_a_bare_pytest_is_the_fast_tier_and_named_paths_run_what_is_named() -> None:
    # Issue 38.11: README's `pytest` ran all 2,588 tests (~21 min quiet); the slow tiers now run in
    # .ci/run's own step (`pytest --tier=slow`), and still whenever they are named.
    from tests.conftest import chosen_tier, slow_tier

    def config(tier: str | None, source: object) -> Any:
        return SimpleNamespace(getoption=lambda name: tier, args_source=source)

    testpaths, named = pytest.Config.ArgsSource.TESTPATHS, pytest.Config.ArgsSource.ARGS
    assert chosen_tier(config(None, testpaths)) == "fast" and chosen_tier(config(None, named)) == "all"
    assert chosen_tier(config("slow", testpaths)) == "slow"
    assert slow_tier("tests/kernels/test_sass.py::test_x") and slow_tier("tests/integration/test_ab.py::t")
    assert not slow_tier("tests/unit/core/test_stats.py::t") and not slow_tier(
        "perf_tests/test_depthwise.py::t"
    )
