"""The device kind a suite run measures on, known at collection (shared by the suite's conftest, its
test modules and the CPU main job, ``perf_tests/cpu_main.py``, which must not import the conftest:
the conftest imports it)."""

from __future__ import annotations

import pytest
import torch


def collection_device_kind(config: pytest.Config) -> str:
    """The device kind a run will measure on, known at collection (before ``convperf_device`` exists):
    ``cpu`` when --convperf-device / ini says so or no GPU is visible, else ``cuda``. Test ids that
    name a problem use it, so that a CPU run's ids name the scaled problem it measures."""
    if (config.getoption("convperf_device", None) or config.getini("convperf_device") or "auto") == "cpu":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"
