"""pytest-convperf: keep custom conv2d kernels correct and fast against cuDNN.

The public face: the names in ``__all__`` are the supported API for test code (the problem and its
Hypothesis strategies, the correctness helpers, the fixtures' types, the result types a test reads,
and :func:`check_pair`, the paired check for model-level benchmarks). Everything under the layer
subpackages is internal and may move.

Importing this package is cheap: each name is imported from its module on first use (PEP 562
``__getattr__``), so loading the plugin never imports torch. The ``TYPE_CHECKING`` imports below
give type checkers and IDEs the same names from the same modules (``tests/ci/test_public_api.py``
checks that the two lists agree).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_convperf.check.cliff_search import CliffSearch, SearchResult
    from pytest_convperf.check.fixture import ConvperfFixture
    from pytest_convperf.check.model_check import check_pair
    from pytest_convperf.core.device import DeviceInfo, resolve_device
    from pytest_convperf.core.precision import ieee_fp32, tf32_enabled
    from pytest_convperf.core.problem import Conv2dProblem, ConvInputs
    from pytest_convperf.core.results import Comparison, ErrorStats, Measurement, Verdict
    from pytest_convperf.core.roofline import ImplausibleTime, spec_peak
    from pytest_convperf.core.strategies import conv2d_problems, seeds
    from pytest_convperf.correctness.correctness_report import CorrectnessReport
    from pytest_convperf.correctness.oracle import (
        assert_conv_close,
        check_conv,
        reproduce,
        stable_seed,
    )
    from pytest_convperf.correctness.tolerance import Ruling, judge_against_stock
    from pytest_convperf.measure.cuda import read_flush
    from pytest_convperf.measure.fake import FakeTimer
    from pytest_convperf.measure.memory import MemoryUsage, TrackMemory
    from pytest_convperf.measure.profiling import KernelRow, StartTrace, Trace
    from pytest_convperf.measure.protocol import Timer
    from pytest_convperf.measure.rule import StopRule
    from pytest_convperf.measure.timers import MeasureOne
    from pytest_convperf.reports.sections import ReportSections
    from pytest_convperf.session import machine_folder

# Each public name and the module that defines it (the TYPE_CHECKING imports above, for runtime).
_EXPORTS: dict[str, str] = {
    # the problem and its Hypothesis strategies
    "Conv2dProblem": "pytest_convperf.core.problem",
    "ConvInputs": "pytest_convperf.core.problem",
    "conv2d_problems": "pytest_convperf.core.strategies",
    "seeds": "pytest_convperf.core.strategies",
    # correctness
    "assert_conv_close": "pytest_convperf.correctness.oracle",
    "check_conv": "pytest_convperf.correctness.oracle",
    "reproduce": "pytest_convperf.correctness.oracle",
    "stable_seed": "pytest_convperf.correctness.oracle",
    "CorrectnessReport": "pytest_convperf.correctness.correctness_report",
    "judge_against_stock": "pytest_convperf.correctness.tolerance",
    "Ruling": "pytest_convperf.correctness.tolerance",
    "ieee_fp32": "pytest_convperf.core.precision",
    "tf32_enabled": "pytest_convperf.core.precision",
    # the fixtures' types: convperf, convperf_device, convperf_timer, convperf_measure_one,
    # gpu_memory, profiler_trace, convperf_report, convperf_cliffs
    "ConvperfFixture": "pytest_convperf.check.fixture",
    "DeviceInfo": "pytest_convperf.core.device",
    "Timer": "pytest_convperf.measure.protocol",
    "MeasureOne": "pytest_convperf.measure.timers",
    "TrackMemory": "pytest_convperf.measure.memory",
    "MemoryUsage": "pytest_convperf.measure.memory",
    "StartTrace": "pytest_convperf.measure.profiling",
    "Trace": "pytest_convperf.measure.profiling",
    "KernelRow": "pytest_convperf.measure.profiling",
    "ReportSections": "pytest_convperf.reports.sections",
    "CliffSearch": "pytest_convperf.check.cliff_search",
    "SearchResult": "pytest_convperf.check.cliff_search",
    # timing: the replaying timer a conftest may return from convperf_timer, the stop rule
    "FakeTimer": "pytest_convperf.measure.fake",
    "StopRule": "pytest_convperf.measure.rule",
    # results a test may read
    "Comparison": "pytest_convperf.core.results",
    "Measurement": "pytest_convperf.core.results",
    "ErrorStats": "pytest_convperf.core.results",
    "Verdict": "pytest_convperf.core.results",
    "ImplausibleTime": "pytest_convperf.core.roofline",
    # the paired check of two arbitrary callables (whole models, fused blocks)
    "check_pair": "pytest_convperf.check.model_check",
    # for tools that time kernels outside pytest (kernels.sweep): the device's fingerprint, its
    # datasheet bandwidth, the suite's L2 flush
    "resolve_device": "pytest_convperf.core.device",
    "spec_peak": "pytest_convperf.core.roofline",
    "read_flush": "pytest_convperf.measure.cuda",
    # the baselines folder a session's options point at (the suite's CPU main job decides with it)
    "machine_folder": "pytest_convperf.session",
}

__all__ = [
    "CliffSearch",
    "Comparison",
    "Conv2dProblem",
    "ConvInputs",
    "ConvperfFixture",
    "CorrectnessReport",
    "DeviceInfo",
    "ErrorStats",
    "FakeTimer",
    "ImplausibleTime",
    "KernelRow",
    "MeasureOne",
    "Measurement",
    "MemoryUsage",
    "ReportSections",
    "Ruling",
    "SearchResult",
    "StartTrace",
    "StopRule",
    "Timer",
    "Trace",
    "TrackMemory",
    "Verdict",
    "assert_conv_close",
    "check_conv",
    "check_pair",
    "conv2d_problems",
    "ieee_fp32",
    "judge_against_stock",
    "machine_folder",
    "read_flush",
    "reproduce",
    "resolve_device",
    "seeds",
    "spec_peak",
    "stable_seed",
    "tf32_enabled",
]
__version__ = "0.1.0"

if not TYPE_CHECKING:  # type checkers see the imports above, and an unknown name stays an error

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(
                f"module 'pytest_convperf' has no attribute {name!r}; the public names are "
                f"pytest_convperf.__all__ ({', '.join(__all__)})"
            )
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # imported once: later lookups never reach __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
