"""Hooks a conftest or plugin may implement to extend convperf (registered by ``pytest_addhooks``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_convperf.core.results import CheckRow


@pytest.hookspec
def pytest_convperf_write_report(
    rows: Sequence[CheckRow],
    report_dir: Path,
    machine_info: Mapping[str, Any],
    commit_info: Mapping[str, Any],
    when: str,
    night: Mapping[str, Any],
) -> list[str] | None:
    """Write the session's report files into ``report_dir`` (``--convperf-report``); return notes.

    Called once, on the controller, at session end, with every check's row (a ``results.CheckRow``;
    ``row.to_dict()`` is the JSON-able form that rows.json holds). Every implementation runs; the
    built-in one (``plugin.py``) writes report.md, results.json, rows.json, history.jsonl and
    speedup.png. An implementation may take any subset of the arguments (``rows`` and
    ``report_dir`` are enough for most). ``night`` is the session's false-alarm control
    (``multiplicity.NightControl.to_dict()``: method, level, family size, kept and cleared FAILs,
    adjusted p-values, ``summary``); the rows already carry its decision (a cleared FAIL's verdict
    is ``SUSPECT``).
    """
