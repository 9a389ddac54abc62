"""What the CUDA kernel tests need to know about compute-sanitizer.

``sanitize(family)`` marks the few small CUDA tests (one small shape per family, forward and backward
where the family has a backward kernel, and its controls) that ``scripts/gpu-suite`` (stage
``check``) and ``scripts/gpu-session.sh`` (phase ``build``) run under memcheck and racecheck with
``-m sanitize``. The sanitizer slows a kernel 10-100x, so the set stays small enough for each tool
to finish in about 90 s on an H100; tests/ci/test_gpu_suite.py checks every family has one.

``under_compute_sanitizer()`` says whether this process runs under it: the scripts set
``CONVPERF_UNDER_SANITIZER=1`` when they wrap pytest (the reliable signal, as cuda-python's tests
use ``CUDA_PYTHON_SANITIZER_RUNNING``); a sanitizer's injection library in
``CUDA_INJECTION64_PATH`` is taken as the same signal for a hand-made run.
"""

from __future__ import annotations

import os

import pytest

SANITIZER_ENV = "CONVPERF_UNDER_SANITIZER"


def sanitize(family: str) -> pytest.MarkDecorator:
    """Mark a small CUDA test of ``family`` (a folder of ``kernels/``) to run under compute-sanitizer."""
    return pytest.mark.sanitize(family)


def under_compute_sanitizer() -> bool:
    if os.environ.get(SANITIZER_ENV) == "1":
        return True
    return "sanitizer" in os.path.basename(os.environ.get("CUDA_INJECTION64_PATH", "")).lower()


# The sanitizer's own device allocations and its instrumentation change what the caching allocator
# reports, so a test that bounds torch.cuda.max_memory_allocated() proves nothing under it.
skip_under_sanitizer = pytest.mark.skipif(
    under_compute_sanitizer(),
    reason="measures torch.cuda.max_memory_allocated(), which compute-sanitizer's instrumentation changes; "
    "it runs in the plain CUDA test step",
)
