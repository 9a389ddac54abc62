"""The software environment a baseline depends on (torch, CUDA, cuDNN, driver major) and its changes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
