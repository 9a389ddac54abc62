"""Measured data shared by timing, correctness and everything above them: a :class:`Measurement`,
a paired :class:`Comparison`, an output's :class:`ErrorStats` and the :class:`Verdict` words.

Plain frozen dataclasses with no torch or pytest import, so every module (and the xdist controller,
which receives them as dicts) can use them. Times are in seconds. The judge's outcome and the row
that holds it live above: ``judge.outcome.Decision``, ``judge.check_row.CheckRow``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypedDict

from pytest_convperf.core import json_fields as jf
from pytest_convperf.core.json_fields import JsonObject
from pytest_convperf.core.stats import log_ratios

# How a measurement was timed (``Measurement.mode``, what a baseline entry stores) and the CUDA L2
# flush kinds of a cold sample (``measure.cuda.CudaTimer(flush=...)``, ``$CONVPERF_L2_FLUSH``).
MEASURED_MODES = ("cold", "warm", "graph", "cpu", "cpu-thread", "fake")
FLUSH_KINDS = ("read", "write")


# The dict forms below (``to_dict``) are TypedDicts: they are what rows.json, the journal and an
# xdist report hold, key for key and in this order; ``from_dict`` reads one back through
# ``json_fields``, each field checked.


class MeasurementDict(TypedDict):
    samples: tuple[float, ...]
    median: float
    ci: tuple[float, float]
    n: int
    dropped: int
    mode: str
    l2: str
    noisy: bool
    inconclusive: str | None


class ComparisonDict(TypedDict):
    candidate: MeasurementDict
    reference: MeasurementDict
    time_ratio: float
    time_ratio_ci: tuple[float, float]
    se: float
    n_rounds: int
    dropped_rounds: int
    noisy: bool
    inconclusive: str | None
    facts: dict[str, object]


class ErrorStatsDict(TypedDict):
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


@dataclass(frozen=True)
class Measurement:
    """Timings of one callable: raw samples (seconds) and their summary.

    ``mode`` is how it was timed (``cold``, ``warm``, ``graph``, ``cpu``, ``fake``); ``l2`` is the
    cache state (``flushed``, ``warm`` or ``n/a`` on a CPU). ``ci`` is the 95 % confidence
    interval of the median. ``dropped`` counts samples discarded for clock or throttle reasons.
    ``inconclusive`` (``convperf_measure_one`` only) gives the reason when too many rounds were dropped
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
    # The median SM clock (MHz) read right before this side's slot in the rounds used; None where
    # the timer reads none (a CPU, no NVML). ``judge.cycles`` turns time into cycles with it.
    sm_mhz: float | None = None

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
    exp(median log ratio) over the rounds' AB/BA pairs (``stats.paired_summary``) with
    ``time_ratio_ci`` its 95 % CI; ``speedup`` = 1 / time_ratio.
    ``se`` is the standard error of that median log ratio (used by the baseline decision).
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

    def with_facts(self, facts: Mapping[str, Any]) -> Comparison:
        """This comparison with ``facts`` added (a new one: a comparison is never mutated)."""
        return replace(self, facts={**self.facts, **facts})

    def to_dict(self) -> ComparisonDict:
        """The JSON-able form, with each raw sample once: ``log_ratios`` are the paired samples'
        ratios, so they are left out and :meth:`from_dict` derives them again."""
        d = asdict(self)  # deep copies, as the form always was
        return ComparisonDict(
            candidate=d["candidate"],
            reference=d["reference"],
            time_ratio=d["time_ratio"],
            time_ratio_ci=d["time_ratio_ci"],
            se=d["se"],
            n_rounds=d["n_rounds"],
            dropped_rounds=d["dropped_rounds"],
            noisy=d["noisy"],
            inconclusive=d["inconclusive"],
            facts=d["facts"],
        )

    @classmethod
    def from_dict(cls, data: JsonObject) -> Comparison:
        # ``log_ratios`` of rows.json written before the ratios were derived is ignored.
        candidate = _measurement(jf.obj(data, "candidate"))
        reference = _measurement(jf.obj(data, "reference"))
        return cls(
            candidate=candidate,
            reference=reference,
            log_ratios=tuple(log_ratios(candidate.samples, reference.samples)),
            time_ratio=jf.number(data, "time_ratio"),
            time_ratio_ci=jf.pair(data, "time_ratio_ci"),
            se=jf.number(data, "se"),
            n_rounds=jf.integer(data, "n_rounds"),
            dropped_rounds=jf.integer(data, "dropped_rounds", 0),
            noisy=jf.flag(data, "noisy", False),
            inconclusive=jf.opt_text(data, "inconclusive"),
            facts=dict(jf.opt_obj(data, "facts") or {}),
        )


def _measurement(data: JsonObject) -> Measurement:
    return Measurement(
        samples=jf.numbers(data, "samples"),
        median=jf.number(data, "median"),
        ci=jf.pair(data, "ci"),
        n=jf.integer(data, "n"),
        dropped=jf.integer(data, "dropped", 0),
        mode=jf.text(data, "mode", "cold"),
        l2=jf.text(data, "l2", "flushed"),
        noisy=jf.flag(data, "noisy", False),
        inconclusive=jf.opt_text(data, "inconclusive"),
    )


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

    def to_dict(self) -> ErrorStatsDict:
        return ErrorStatsDict(
            name=self.name,
            max_abs=self.max_abs,
            max_rel=self.max_rel,
            rel_l2=self.rel_l2,
            atol=self.atol,
            rtol=self.rtol,
            worst_index=self.worst_index,
            worst_value=self.worst_value,
            worst_expected=self.worst_expected,
            nonfinite=self.nonfinite,
            violations=self.violations,
            numel=self.numel,
        )

    @classmethod
    def from_dict(cls, data: JsonObject) -> ErrorStats:
        return cls(
            name=jf.text(data, "name"),
            max_abs=jf.number(data, "max_abs"),
            max_rel=jf.number(data, "max_rel"),
            rel_l2=jf.number(data, "rel_l2"),
            atol=jf.number(data, "atol"),
            rtol=jf.number(data, "rtol"),
            worst_index=tuple(int(i) for i in jf.numbers(data, "worst_index")),
            worst_value=jf.number(data, "worst_value"),
            worst_expected=jf.number(data, "worst_expected"),
            nonfinite=jf.integer(data, "nonfinite"),
            violations=jf.integer(data, "violations"),
            numel=jf.integer(data, "numel"),
        )


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
    # A per-check FAIL the session's false-alarm control did not keep (``night.decide``).
    SUSPECT = "SUSPECT"

    # Printed as its value (``FAIL``, not ``Verdict.FAIL``) on every Python, in f-strings too, so a
    # typed verdict reads as the string rows carried before.
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
