"""The fused depthwise-separable EDSR block kernel (``ops``) and its PyTorch twin (``reference``).

The EDSR models and the depthwise swap that use it live beside the suite: ``perf_tests/edsr_models.py``,
``perf_tests/swap.py``. Importing this builds nothing."""

from __future__ import annotations
