"""Which kernel changed (issue 18 item 4): an update stores the candidate's kernel table (aten ops
on a CPU), and a FAIL names what moved against it."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import Suite, assert_speed_fails


def test_entry_stores_the_kernel_table_and_a_fail_names_the_change(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines", "-k", "test_a").assert_outcomes(passed=1)
    table = suite.entries()[suite.key()]["kernels"]
    assert table and all(set(row) == {"name", "calls", "share"} for row in table)
    assert any(row["name"].startswith("aten::") for row in table)  # CPU: aten operators
    # Shares are stored rounded to 3 decimals (profiling.kernel_table): each may be 0.0005 high.
    assert sum(row["share"] for row in table) <= 1.0 + 0.0005 * len(table)
    # The stored table names a kernel tonight's candidate no longer runs: the FAIL says so.
    suite.edit(suite.key(), kernels=[{"name": "dw_fwd_tile8", "calls": 1, "share": 1.0}])
    suite.set_ratio(0.6)
    result = suite.run("-k", "test_a")
    assert_speed_fails(result, 1)
    out = result.stdout.str()
    assert "kernels changed since the baseline: new kernel aten::" in out
    assert "vanished kernel dw_fwd_tile8 (was 100% of the time)" in out
