"""The first-hour traps of issue 24.4, each as a new user hits it."""

from __future__ import annotations

import pytest

from pytest_convperf.config import bare_update_flag

SHOW_UPDATE = """
from pytest_convperf.config import get_config

def test_show(request):
    print("UPDATE", sorted(get_config(request.config).update))
"""


def test_bare_update_flag_before_a_path_means_failed_new() -> None:
    assert bare_update_flag(["--convperf-update-baselines", "perf_tests"]) == [
        "--convperf-update-baselines=failed,new",
        "perf_tests",
    ]
    kept = ["--convperf-update-baselines", "improved", "x.py"]
    assert bare_update_flag(kept) == kept  # a value stays a value
    assert bare_update_flag(["--convperf-update-baselines", "-q"]) == ["--convperf-update-baselines", "-q"]


def test_bare_update_flag_then_a_path_runs_that_path(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...]
) -> None:
    # What the terminal, the YAML header and the FAIL hint print, followed by a path.
    path = pytester.makepyfile(test_show=SHOW_UPDATE)
    result = pytester.runpytest(
        *plugin_args, "-s", "--convperf", "--convperf-device=cpu", "--convperf-update-baselines", str(path)
    )
    result.assert_outcomes(passed=1)
    assert "UPDATE ['failed', 'new']" in result.stdout.str()
