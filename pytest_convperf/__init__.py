"""pytest-convperf: keep custom conv2d kernels correct and fast against cuDNN.

Importing this package is cheap: torch is imported only by the modules that need it.
"""

from __future__ import annotations

from pytest_convperf.core.problem import Conv2dProblem

__all__ = ["Conv2dProblem"]
__version__ = "0.1.0"
