"""Our CUDA conv kernels, one folder per family; importing this builds nothing."""

from __future__ import annotations
