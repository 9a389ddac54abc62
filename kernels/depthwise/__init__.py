"""Depthwise conv2d: CUDA kernels (``ops``) and the same algorithm in PyTorch ops (``reference``)."""

from __future__ import annotations
