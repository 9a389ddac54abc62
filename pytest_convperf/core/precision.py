"""Pin fp32 convolutions and matmuls to IEEE (TF32 off) for a block, and say what was in force.

PyTorch >= 2.9 has ``fp32_precision`` knobs and warns when they are mixed with the older
``allow_tf32`` flags, so we use the new knobs where they exist and the old flags otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def _new_api() -> bool:
    conv = getattr(torch.backends.cudnn, "conv", None)
    return conv is not None and hasattr(conv, "fp32_precision")


def tf32_enabled() -> bool:
    """Whether cuDNN convolutions may use TF32 right now (PyTorch's default is yes)."""
    if _new_api():
        return str(torch.backends.cudnn.conv.fp32_precision) == "tf32"  # type: ignore[attr-defined]
    return bool(torch.backends.cudnn.allow_tf32)


@contextmanager
def ieee_fp32() -> Iterator[None]:
    """Run the block with TF32 disabled for cuDNN convs and cuBLAS matmuls, then restore."""
    if _new_api():
        conv = torch.backends.cudnn.conv  # type: ignore[attr-defined]
        mm = torch.backends.cuda.matmul
        saved = (conv.fp32_precision, mm.fp32_precision)
        conv.fp32_precision = "ieee"
        mm.fp32_precision = "ieee"
        try:
            yield
        finally:
            conv.fp32_precision, mm.fp32_precision = saved
    else:
        saved_flags = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            yield
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved_flags
