"""PCILT (precomputed lookup-table) conv2d: CUDA kernels (``ops``), tables (``tables``) and the torch-ops
twin (``reference``). Importing this builds nothing."""

from __future__ import annotations
