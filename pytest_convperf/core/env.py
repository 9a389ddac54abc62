"""What a baseline's timing depends on: the software environment (torch, CUDA, cuDNN, driver major),
how it was timed (mode and, for ``cold``, the L2 flush kind) and the machine's load. What changed
since an entry was recorded is the judge's (``judge.changes``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_convperf.core.results import Comparison

ENV_KEYS = ("torch", "cuda", "cudnn", "driver")


def env_from_facts(facts: Mapping[str, Any]) -> dict[str, str]:
    """The versions a baseline depends on (torch, CUDA, cuDNN, driver major) from device facts."""
    env: dict[str, str] = {}
    for key in ENV_KEYS:
        value = facts.get(key)
        if value is None or value == "":
            continue
        text = str(value)
        env[key] = text.split(".")[0] if key == "driver" else text
    return env


def env_diff(
    stored: Mapping[str, str], current: Mapping[str, str]
) -> dict[str, tuple[str | None, str | None]]:
    """Keys of the environment whose value changed: {key: (stored, current)}."""
    keys = sorted(set(stored) | set(current))
    out: dict[str, tuple[str | None, str | None]] = {}
    for key in keys:
        old, new = stored.get(key), current.get(key)
        if old is not None and new is not None and str(old) != str(new):
            out[key] = (str(old), str(new))
    return out


def timing_of(comparison: Comparison) -> dict[str, str]:
    """How a comparison was timed, as an entry stores it: ``mode`` and, for ``cold``, ``flush``."""
    out = {"mode": comparison.candidate.mode}
    flush = comparison.facts.get("flush")
    if comparison.candidate.mode == "cold" and isinstance(flush, str):
        out["flush"] = flush
    return out


def load_avg() -> list[float]:
    """The machine's 1/5/15-minute load averages (``os.getloadavg``), [] where the OS has none:
    CPU timings and calibration runs report the load they were measured under."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []
