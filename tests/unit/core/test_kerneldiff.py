"""Which kernel changed (issue 18 item 4): the stored table, and what a FAIL says moved."""

from __future__ import annotations

from pytest_convperf.core.kerneldiff import changes, describe, parse_table
from pytest_convperf.measure.profiling import KernelRow, kernel_table

OLD = [
    {"name": "dw_fwd_tile8", "calls": 1.0, "share": 0.9},
    {"name": "bias_add", "calls": 1.0, "share": 0.1},
]


def test_table_from_profiler_rows_is_per_call_and_drops_crumbs() -> None:
    rows = [
        KernelRow("dw_fwd_tile8", 3, 30.0, 10.0, 0.895),
        KernelRow("bias_add", 3, 3.0, 1.0, 0.1),
        KernelRow("memset", 3, 0.1, 0.03, 0.005),
    ]
    assert kernel_table(rows, calls=3) == [
        {"name": "dw_fwd_tile8", "calls": 1.0, "share": 0.895},
        {"name": "bias_add", "calls": 1.0, "share": 0.1},
    ]
    assert parse_table(kernel_table(rows, calls=3)) is not None
    assert parse_table([{"name": "x", "calls": "1", "share": 0.5}]) is None
    assert parse_table("dw_fwd") is None


def test_unchanged_kernels_say_so() -> None:
    assert changes(OLD, OLD) == []
    assert describe(OLD, OLD) == "kernels unchanged since the baseline (same kernels, launches and shares)"
    assert describe(None, OLD) is None and describe(OLD, []) is None


def test_each_kind_of_change_is_named() -> None:
    new = [
        {"name": "dw_fwd_tile4", "calls": 2.0, "share": 0.7},  # new (the tile-8 path vanished)
        {"name": "bias_add", "calls": 2.0, "share": 0.3},  # launches 1 -> 2, share 10 -> 30 %
    ]
    text = describe(OLD, new)
    assert text is not None and text.startswith("kernels changed since the baseline: new kernel dw_fwd_tile4")
    assert "vanished kernel dw_fwd_tile8 (was 90% of the time)" in text
    assert "bias_add: 1 -> 2 launches per call" in text
    assert "bias_add: share of the time 10% -> 30%" in text
    # A share that moved less than 10 points is noise, not news.
    assert changes(OLD, [{**OLD[0], "share": 0.85}, {**OLD[1], "share": 0.15}]) == []
