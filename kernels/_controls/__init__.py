"""Negative controls: deliberately wrong or slowed depthwise kernels the plugin must catch.

``cpu`` holds CPU twins built on ``kernels.depthwise.reference`` (no GPU needed); ``ops`` holds the
CUDA versions (``binding.cpp`` + ``controls.cu``, built by ``kernels._build.load("_controls")``).
Both export ``noop``, ``wrong_border``, ``wrong_odd_stride2`` and ``slowed(fraction)``. ``planted``
is the GPU window's planted slowdown: twins of the depthwise forwards the suite takes only when
``CONVPERF_PLANTED_SLOWDOWN`` (or its hard-wired switch) is set.
"""

from __future__ import annotations

CONTROL_NAMES = ("noop", "wrong_border", "wrong_odd_stride2")
