"""A fresh pytest process with this session's convperf settings (``core/rerun.py``): which options
go along, which stay (a re-run records and reports nothing), paths made absolute for a re-run that
starts elsewhere, and this checkout's code first on PYTHONPATH. (The re-runs themselves:
``tests/unit/night/test_fresh_confirm.py`` and ``tests/integration/test_calibrate.py``.)"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import pytest_convperf
from pytest_convperf.core import rerun


def _config(args: list[str], folder: Path, options: dict[str, Any]) -> Any:
    return SimpleNamespace(
        invocation_params=SimpleNamespace(args=tuple(args), dir=folder),
        getoption=lambda name, default=None: options.get(name, default),
    )


def test_convperf_options_go_along_but_not_those_that_record_or_report(tmp_path: Path) -> None:
    options = {
        "convperf": True,
        "convperf_device": "cpu",
        "convperf_strict": False,  # off: nothing to say
        "convperf_update_baselines": "all",
        "convperf_reason": "why",
        "convperf_report": "out",
        "convperf_trace": True,
    }
    out = rerun.forwarded_args(_config([], tmp_path, options))
    assert out == ["--convperf", "--convperf-device=cpu"]


def test_pytest_pairs_go_along_with_relative_paths_made_absolute(tmp_path: Path) -> None:
    args = ["-p", "no:xdist", "-c", "sub/pytest.ini", "--rootdir=/abs/root", "--hypothesis-seed=3", "-k", "x"]
    out = rerun.forwarded_args(_config(args, tmp_path, {}))
    assert out == ["-p", "no:xdist", "-c", str(tmp_path / "sub/pytest.ini"), "--rootdir=/abs/root",
                   "--hypothesis-seed=3"]  # fmt: skip


def test_the_plugin_is_named_only_when_pytest_would_not_load_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rerun.plugin_args(["-p", "pytest_convperf.plugin"]) == []
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [])
    assert rerun.plugin_args(["-x"]) == ["-p", "pytest_convperf.plugin"]


def test_this_checkout_comes_first_on_pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/elsewhere", ""]))
    root = str(Path(pytest_convperf.__file__).resolve().parents[1])
    assert rerun.subprocess_env()["PYTHONPATH"] == os.pathsep.join([root, "/elsewhere"])
