"""Result types shared by timing, correctness, baselines and reports.

Plain frozen dataclasses with no torch or pytest import, so every module (and the xdist
controller, which receives them as dicts) can use them. Times are in seconds.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_convperf.core.stats import log_ratios

# How a measurement was timed (``Measurement.mode``), what a baseline entry stores, and the CUDA
# L2 flush kinds of a cold sample (``timing.cuda.CudaTimer(flush=...)``, ``$CONVPERF_L2_FLUSH``).
MEASURED_MODES = ("cold", "warm", "graph", "cpu", "cpu-thread", "fake")
FLUSH_KINDS = ("read", "write")
# The rows of one test on its report (``user_properties``: a list of ``CheckRow.to_dict()``).
ROWS_PROPERTY = "convperf_rows"


def entry_digest(stored: dict[str, Any] | None) -> str | None:
    """A short digest of a stored entry's YAML form (``Entry.to_yaml``; a row's ``baseline``), None
    for no entry: ``calibrate`` writes over an entry only while the file still holds the entry its
    runs were judged against (history.jsonl's ``entry``)."""
    if stored is None:
        return None
    text = json.dumps(stored, sort_keys=True, default=str, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Measurement:
    """Timings of one callable: raw samples (seconds) and their summary.

    ``mode`` is how it was timed (``cold``, ``warm``, ``graph``, ``cpu``, ``fake``); ``l2`` is the
    cache state (``flushed``, ``warm`` or ``n/a`` on a CPU). ``ci`` is the 95 % confidence
    interval of the median. ``dropped`` counts samples discarded for clock or throttle reasons.
    ``inconclusive`` (``gpu_timer`` only) gives the reason when too many rounds were dropped
    (over 25 %) or fewer than 6 were kept; the samples are then all rounds, throttled ones included.
    """

    samples: tuple[float, ...]
    median: float
    ci: tuple[float, float]
    n: int
    dropped: int = 0
    mode: str = "cold"
    l2: str = "flushed"
    noisy: bool = False
    inconclusive: str | None = None

    @property
    def median_us(self) -> float:
        return self.median * 1e6


def ratio_text(time_ratio: float) -> str:
    """A stored ``time_ratio`` with the speedup the terminal speaks: ``1.32 (speedup 0.758x)``.

    Files store ``time_ratio`` = t_candidate / t_reference (lower is faster); the terminal and the
    reports say speedup = 1 / time_ratio. Where a stored ratio is shown, both are, so that a
    reader of the YAML and a reader of the terminal see one number in two units."""
    return f"{time_ratio:.4g} (speedup {1 / time_ratio:.3g}x)" if time_ratio > 0 else f"{time_ratio:.4g}"


@dataclass(frozen=True)
class Comparison:
    """A candidate and a reference timed in paired rounds.

    ``log_ratios`` holds ln(t_candidate / t_reference) per kept round; ``time_ratio`` is
    exp(median log ratio) with ``time_ratio_ci`` its 95 % CI; ``speedup`` = 1 / time_ratio.
    ``se`` is the standard error of the median log ratio (used by the baseline decision).
    ``inconclusive`` gives the reason when too many rounds were dropped (clocks, throttling).
    ``facts`` carries what reports need: backend chosen, tf32 state, clocks, flush bytes, ...
    """

    candidate: Measurement
    reference: Measurement
    log_ratios: tuple[float, ...]
    time_ratio: float
    time_ratio_ci: tuple[float, float]
    se: float
    n_rounds: int
    dropped_rounds: int = 0
    noisy: bool = False
    inconclusive: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return 1.0 / self.time_ratio

    @property
    def speedup_ci(self) -> tuple[float, float]:
        low, high = self.time_ratio_ci
        return (1.0 / high, 1.0 / low)

    @property
    def median_log_ratio(self) -> float:
        return math.log(self.time_ratio)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form, with each raw sample once: ``log_ratios`` are the paired samples'
        ratios, so they are left out and :meth:`from_dict` derives them again."""
        out = asdict(self)
        del out["log_ratios"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Comparison:
        data = dict(data)
        data["candidate"] = _measurement(data["candidate"])
        data["reference"] = _measurement(data["reference"])
        data.pop("log_ratios", None)  # rows.json written before the ratios were derived
        data["log_ratios"] = tuple(log_ratios(data["candidate"].samples, data["reference"].samples))
        data["time_ratio_ci"] = tuple(data["time_ratio_ci"])
        return cls(**data)


def _measurement(data: dict[str, Any]) -> Measurement:
    data = dict(data)
    data["samples"] = tuple(data["samples"])
    data["ci"] = tuple(data["ci"])
    return Measurement(**data)


@dataclass(frozen=True)
class ErrorStats:
    """Error of an output (or gradient) against the fp64 oracle.

    ``ok`` is the verdict of ``|out - ref| <= atol + rtol * |ref|`` everywhere with no NaN/Inf.
    ``worst_index`` is the multi-index of the largest violation (or of the largest error).
    """

    name: str
    max_abs: float
    max_rel: float
    rel_l2: float
    atol: float
    rtol: float
    worst_index: tuple[int, ...]
    worst_value: float
    worst_expected: float
    nonfinite: int
    violations: int
    numel: int

    @property
    def ok(self) -> bool:
        return self.nonfinite == 0 and self.violations == 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Verdict(str, enum.Enum):
    """Outcome of one convperf check against its baseline."""

    PASS = "PASS"
    FAIL = "FAIL"
    IMPROVED = "IMPROVED"
    NEW = "NEW"
    STALE = "STALE"
    ADVISORY = "ADVISORY"
    INCONCLUSIVE = "INCONCLUSIVE"
    CORRECTNESS_FAIL = "CORRECTNESS_FAIL"
    TIMEOUT = "TIMEOUT"  # stopped by --convperf-check-timeout; facts["timeout"] says how far it got


@dataclass(frozen=True)
class CheckRow:
    """The result of one check, recorded once, after its judgement.

    ``key`` is the baseline key, ``module`` the test file's stem (the baseline file), ``problem``
    the workload's name (a ``Conv2dProblem`` id or a model-level label), ``phase`` the part timed.
    ``comparison`` is None when correctness failed before timing. ``verdict`` is a
    :class:`Verdict` value (None when no decision was made, e.g. a defective reference). The
    judgement's fields (``machine`` .. ``update``) are None without a judgement. ``to_dict`` /
    ``from_dict`` are the JSON-able form used at the xdist boundary and in ``rows.json``.
    """

    key: str
    nodeid: str
    module: str
    problem: str
    phase: str
    comparison: Comparison | None
    errors: tuple[ErrorStats, ...]
    verdict: str | None
    message: str
    facts: dict[str, Any] = field(default_factory=dict)
    extra_metrics: dict[str, float] | None = None
    machine: str | None = None
    baselines_file: str | None = None
    device_kind: str | None = None
    env: dict[str, str] | None = None
    # How the judged comparison was timed (``env.timing_of``: ``mode``, ``flush`` for cold).
    timing: dict[str, str] | None = None
    decision: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    update: dict[str, Any] | None = None
    # The night's decision at session end (``night.judge_night``: ``adjusted_p``, ``kept``, ...).
    night: dict[str, Any] | None = None

    # Fields a row without a judgement leaves out of its dict (as rows always have).
    _JUDGED = ("machine", "baselines_file", "device_kind", "env", "timing", "decision", "baseline", "update")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "nodeid": self.nodeid,
            "module": self.module,
            "problem": self.problem,
            "phase": self.phase,
            "comparison": self.comparison.to_dict() if self.comparison is not None else None,
            "errors": [e.to_dict() for e in self.errors],
            "verdict": self.verdict,
            "message": self.message,
            "facts": self.facts,
        }
        if self.extra_metrics is not None:
            out["extra_metrics"] = dict(self.extra_metrics)
        if self.machine is not None:
            out.update({name: getattr(self, name) for name in self._JUDGED})
        if self.night is not None:
            out["night"] = self.night
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckRow:
        comparison = data.get("comparison")
        return cls(
            key=str(data["key"]),
            nodeid=str(data.get("nodeid", "")),
            module=str(data.get("module", "")),
            problem=str(data.get("problem", "")),
            phase=str(data.get("phase", "forward")),
            comparison=Comparison.from_dict(comparison) if comparison is not None else None,
            errors=tuple(_error_stats(e) for e in data.get("errors") or ()),
            verdict=data.get("verdict"),
            message=str(data.get("message", "")),
            facts=dict(data.get("facts") or {}),
            extra_metrics=data.get("extra_metrics"),
            night=data.get("night"),
            **{name: data.get(name) for name in cls._JUDGED},
        )


def _error_stats(data: dict[str, Any]) -> ErrorStats:
    data = dict(data)
    data["worst_index"] = tuple(data["worst_index"])
    return ErrorStats(**data)
