"""im2col + GEMM conv2d: CUDA column builders (``ops``), the torch-ops twin (``reference``), LSQ int8 and
sparse variants (``variants``). Importing this builds nothing."""

from __future__ import annotations
