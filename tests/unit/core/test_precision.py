"""fp32 pinned to IEEE for a block (``core/precision.py``): TF32 off for cuDNN convs and cuBLAS matmuls
inside, the caller's settings back after, an exception included. (In a check's settings:
``tests/unit/check/test_calls.py``.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from pytest_convperf.core.precision import ieee_fp32, tf32_enabled


def _matmul_tf32() -> bool:
    mm = torch.backends.cuda.matmul
    if hasattr(mm, "fp32_precision"):
        return str(mm.fp32_precision) == "tf32"
    return bool(mm.allow_tf32)


@pytest.fixture
def tf32_on() -> Iterator[None]:
    """TF32 allowed for both (PyTorch's default for convs), whatever the box had; restored after."""
    with ieee_fp32():  # saves and restores the caller's settings around the test
        if hasattr(torch.backends.cudnn, "conv") and hasattr(torch.backends.cudnn.conv, "fp32_precision"):
            torch.backends.cudnn.conv.fp32_precision = "tf32"
            torch.backends.cuda.matmul.fp32_precision = "tf32"
        else:
            torch.backends.cudnn.allow_tf32 = True
            torch.backends.cuda.matmul.allow_tf32 = True
        yield


def test_tf32_is_off_inside_and_back_after(tf32_on: None) -> None:
    assert tf32_enabled() and _matmul_tf32()
    with ieee_fp32():
        assert not tf32_enabled() and not _matmul_tf32()
    assert tf32_enabled() and _matmul_tf32()


def test_the_settings_come_back_after_an_exception(tf32_on: None) -> None:
    with pytest.raises(RuntimeError), ieee_fp32():
        raise RuntimeError("a candidate failed")
    assert tf32_enabled() and _matmul_tf32()
