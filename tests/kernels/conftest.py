"""Fixtures shared by the depthwise emulator tests."""

from __future__ import annotations

import pytest

from tests.kernels.cuda_emulation import Emulation, emulation


@pytest.fixture(scope="module")
def emulated_lib() -> Emulation:
    """The emulated depthwise kernels, built once per source hash into the extensions cache (~20 s cold)."""
    try:
        return emulation("depthwise")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
