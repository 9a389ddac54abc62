"""Result types shared by timing, correctness, judgement, baselines and reports.

Plain frozen dataclasses with no torch or pytest import, so every module (and the xdist
controller, which receives them as dicts) can use them. Times are in seconds. A
:class:`CheckRow` holds its parts typed (:class:`Verdict`, :class:`Decision`, the stored
``Entry``, the ``UpdatePlan``); dicts exist only where a row crosses a process or reaches a file
(:meth:`CheckRow.to_dict` / :meth:`CheckRow.from_dict`: xdist, the journal, ``rows.json``).
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, TypedDict

from pytest_convperf.core import json_fields as jf
from pytest_convperf.core.entry import Correctness, Entry, EntryYaml, UpdatePlan, UpdatePlanDict, parse_entry
from pytest_convperf.core.json_fields import JsonObject
from pytest_convperf.core.row_format import ROW_FORMAT, current_format
from pytest_convperf.core.stats import log_ratios

Outcome = Literal["pass", "fail", "skip"]
# The rows of one test on its report (``user_properties``: a list of ``CheckRow.to_dict()``).
ROWS_PROPERTY = "convperf_rows"


def entry_digest(stored: EntryYaml | None) -> str | None:
    """A short digest of a stored entry's YAML form (``Entry.to_yaml``; a row's ``baseline``), None
    for no entry: ``calibrate`` writes over an entry only while the file still holds the entry its
    runs were judged against (history.jsonl's ``entry``)."""
    if stored is None:
        return None
    text = json.dumps(stored, sort_keys=True, default=str, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


class DecisionDetails(TypedDict):
    """A row's decision: :meth:`Decision.details` (the row holds the verdict and message once)."""

    outcome: Outcome
    stage: str | None
    tolerance: float
    noise: float | None
    delta: float | None
    delta_ci: list[float] | None
    sigma: float | None
    mde: float | None
    rounds_needed: int | None
    env_diff: dict[str, list[str | None]]
    notes: list[str]
    confirm: ComparisonDict | None
    p_value: float | None


class DecisionDict(DecisionDetails):
    verdict: str
    message: str


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


def correctness_of(errors: Sequence[ErrorStats]) -> Correctness:
    """What an entry (and a history record) stores about correctness: flat for one output, per
    output name for several."""
    if len(errors) == 1:
        return {"max_abs": errors[0].max_abs, "max_rel": errors[0].max_rel}
    return {str(e.name): {"max_abs": e.max_abs, "max_rel": e.max_rel} for e in errors}


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


@dataclass(frozen=True)
class Decision:
    """The verdict for one check and everything a message or a report needs."""

    verdict: Verdict
    outcome: Outcome
    message: str
    stage: str | None = None
    tolerance: float = 0.0
    noise: float | None = None
    delta: float | None = None
    delta_ci: tuple[float, float] | None = None
    sigma: float | None = None
    mde: float | None = None
    rounds_needed: int | None = None
    env_diff: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    confirm: Comparison | None = None
    # One-sided p-value of H0 "slowdown <= tolerance" from the last stage that ran for a suspect:
    # the confirm stage (or the screen when there was no confirm); None when no suspect was tested.
    p_value: float | None = None

    def to_dict(self) -> DecisionDict:
        return DecisionDict(verdict=self.verdict.value, message=self.message, **self.details())

    def details(self) -> DecisionDetails:
        """The decision less the verdict and message: a row's decision (the row holds those once)."""
        return DecisionDetails(
            outcome=self.outcome,
            stage=self.stage,
            tolerance=self.tolerance,
            noise=self.noise,
            delta=self.delta,
            delta_ci=list(self.delta_ci) if self.delta_ci else None,
            sigma=self.sigma,
            mde=self.mde,
            rounds_needed=self.rounds_needed,
            env_diff={k: list(v) for k, v in self.env_diff.items()},
            notes=list(self.notes),
            confirm=self.confirm.to_dict() if self.confirm is not None else None,
            p_value=self.p_value,
        )

    @classmethod
    def from_dict(cls, data: JsonObject, verdict: Verdict | None = None, message: str = "") -> Decision:
        """The decision of :meth:`to_dict`. A row's decision (:meth:`CheckRow.to_dict`) and a
        hand-written partial dict (a test's row) take the defaults, and ``verdict`` and ``message``
        (the row's) where they have none."""
        confirm = jf.opt_obj(data, "confirm")
        said = jf.opt_text(data, "verdict")
        outcome = data.get("outcome", "pass")
        return cls(
            verdict=Verdict(said) if said is not None else verdict or Verdict.PASS,
            outcome="fail" if outcome == "fail" else "skip" if outcome == "skip" else "pass",
            message=str(data.get("message", message)),
            stage=jf.opt_text(data, "stage"),
            tolerance=jf.number(data, "tolerance", 0.0),
            noise=jf.opt_number(data, "noise"),
            delta=jf.opt_number(data, "delta"),
            delta_ci=jf.opt_pair(data, "delta_ci"),
            sigma=jf.opt_number(data, "sigma"),
            mde=jf.opt_number(data, "mde"),
            rounds_needed=jf.opt_integer(data, "rounds_needed"),
            env_diff=_env_diff(jf.opt_obj(data, "env_diff") or {}),
            notes=jf.strings(data, "notes"),
            confirm=Comparison.from_dict(confirm) if confirm is not None else None,
            p_value=jf.opt_number(data, "p_value"),
        )


def _env_diff(data: JsonObject) -> dict[str, tuple[str | None, str | None]]:
    """A decision's ``env_diff``: ``{name: [stored, now]}``, each a string or null."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for name, value in data.items():
        if not (
            isinstance(value, (list, tuple))
            and len(value) == 2
            and all(v is None or isinstance(v, str) for v in value)
        ):
            raise ValueError(f"field 'env_diff.{name}' must be [stored, now], each a string or null")
        out[name] = (value[0], value[1])
    return out


class NightMark(TypedDict, total=False):
    """The night's decision on a family row (``night.decide.judge_night``); a test's row may hold
    only some of it."""

    method: str
    alpha: float
    adjusted_p: float
    kept: bool


class _RowDictRequired(TypedDict):
    format: int
    key: str
    nodeid: str
    module: str
    problem: str
    phase: str
    comparison: ComparisonDict | None
    errors: list[ErrorStatsDict]
    verdict: str | None
    message: str
    facts: dict[str, object]


class RowDict(_RowDictRequired, total=False):
    """A row's dict form (:meth:`CheckRow.to_dict`): the judgement's keys only on a judged row,
    ``extra_metrics`` and ``night`` only where the row has them."""

    extra_metrics: dict[str, float]
    machine: str
    baselines_file: str | None
    device_kind: str | None
    env: dict[str, str] | None
    timing: dict[str, str] | None
    decision: DecisionDetails | None
    baseline: EntryYaml | None
    update: UpdatePlanDict | None
    night: NightMark


@dataclass(frozen=True)
class CheckRow:
    """The result of one check, recorded once, after its judgement.

    ``key`` is the baseline key, ``module`` the test file's stem (the baseline file), ``problem``
    the workload's name (a ``Conv2dProblem`` id or a model-level label), ``phase`` the part timed.
    ``comparison`` is None when correctness failed before timing. ``verdict`` is None only without
    a decision (e.g. a defective reference). The judgement's fields (``machine`` .. ``update``) are
    None without a judgement: ``decision``, ``baseline`` (the stored entry it was judged against)
    and ``update`` (the update plan) are typed. ``to_dict`` / ``from_dict`` are the JSON-able form
    used at the xdist boundary, in the journal and in ``rows.json``.

    Each thing is held once: ``env`` (the versions the check was judged under; the comparison's and
    the row's ``facts`` carry none) and ``verdict`` + ``message``, the row's word, which a judged
    row's ``decision`` shares (made so when the row is made); the dict form writes them once, at
    the row's level, and :meth:`from_dict` gives them back to the decision.
    """

    key: str
    nodeid: str
    module: str
    problem: str
    phase: str
    comparison: Comparison | None
    errors: tuple[ErrorStats, ...]
    verdict: Verdict | None
    message: str
    facts: dict[str, Any] = field(default_factory=dict)
    extra_metrics: dict[str, float] | None = None
    machine: str | None = None
    baselines_file: str | None = None
    device_kind: str | None = None
    env: dict[str, str] | None = None
    # How the judged comparison was timed (``env.timing_of``: ``mode``, ``flush`` for cold).
    timing: dict[str, str] | None = None
    decision: Decision | None = None
    baseline: Entry | None = None
    update: UpdatePlan | None = None
    # The night's decision at session end (``night.judge_night``: ``adjusted_p``, ``kept``, ...).
    night: NightMark | None = None

    def __post_init__(self) -> None:
        # A row and its decision never say two things: the row's verdict and message (a night's
        # SUSPECT, a fresh confirm's word, made with ``dataclasses.replace``) are its decision's, and a
        # row given a decision without a verdict takes its word (readers never look in the decision).
        d = self.decision
        if d is not None and self.verdict is None:
            object.__setattr__(self, "verdict", d.verdict)
            object.__setattr__(self, "message", self.message or d.message)
        said = (self.verdict, self.message)
        if d is not None and said[0] is not None and said != (d.verdict, d.message):
            object.__setattr__(self, "decision", replace(d, verdict=said[0], message=said[1]))

    @property
    def stage(self) -> str | None:
        """The stage of the decision that gave the verdict (``screen``, ``confirm``, ...), if any."""
        return self.decision.stage if self.decision is not None else None

    @property
    def planned(self) -> str | None:
        """The update plan's action (``write``, ``keep``, ``refused``, ``skip``), None without one."""
        return self.update.action if self.update is not None else None

    def to_dict(self) -> RowDict:
        out = RowDict(
            format=ROW_FORMAT,
            key=self.key,
            nodeid=self.nodeid,
            module=self.module,
            problem=self.problem,
            phase=self.phase,
            comparison=self.comparison.to_dict() if self.comparison is not None else None,
            errors=[e.to_dict() for e in self.errors],
            verdict=self.verdict.value if self.verdict is not None else None,
            message=self.message,
            facts=self.facts,
        )
        if self.extra_metrics is not None:
            out["extra_metrics"] = dict(self.extra_metrics)
        if self.machine is not None:
            out["machine"] = self.machine
            out["baselines_file"] = self.baselines_file
            out["device_kind"] = self.device_kind
            out["env"] = self.env
            out["timing"] = self.timing
            out["decision"] = self.decision.details() if self.decision is not None else None
            out["baseline"] = self.baseline.to_yaml() if self.baseline is not None else None
            out["update"] = self.update.to_dict() if self.update is not None else None
        if self.night is not None:
            out["night"] = self.night
        return out

    @classmethod
    def from_dict(cls, data: JsonObject) -> CheckRow:
        """The row of :meth:`to_dict`; a row of an older format (rows.json, a journal) is converted
        (format 1 stored ``env`` again in ``facts`` and the comparison's facts: dropped), a newer one
        is a ``ValueError`` naming the fix; a field of the wrong type is a ``ValueError`` naming it."""
        data = current_format(data)
        key = str(data["key"])
        comparison = jf.opt_obj(data, "comparison")
        said = jf.opt_text(data, "verdict")
        verdict = Verdict(said) if said is not None else None
        message = str(data.get("message", ""))
        decision, update = jf.opt_obj(data, "decision"), jf.opt_obj(data, "update")
        baseline = data.get("baseline")
        night = jf.opt_obj(data, "night")
        return cls(
            key=key,
            nodeid=str(data.get("nodeid", "")),
            module=str(data.get("module", "")),
            problem=str(data.get("problem", "")),
            phase=str(data.get("phase", "forward")),
            comparison=Comparison.from_dict(comparison) if comparison is not None else None,
            errors=tuple(_error_stats(e) for e in jf.objects(data, "errors")),
            verdict=verdict,
            message=message,
            facts=dict(jf.opt_obj(data, "facts") or {}),
            extra_metrics=jf.opt_number_map(data, "extra_metrics"),
            machine=jf.opt_text(data, "machine"),
            baselines_file=jf.opt_text(data, "baselines_file"),
            device_kind=jf.opt_text(data, "device_kind"),
            env=jf.opt_str_map(data, "env"),
            timing=jf.opt_str_map(data, "timing"),
            decision=Decision.from_dict(decision, verdict, message) if decision is not None else None,
            baseline=parse_entry(key, baseline) if baseline is not None else None,
            update=UpdatePlan.from_dict(update, key) if update is not None else None,
            night=_night(night) if night is not None else None,
        )


def _error_stats(data: JsonObject) -> ErrorStats:
    return ErrorStats(
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


def _night(data: JsonObject) -> NightMark:
    """The night's mark as stored, each field it has checked."""
    out = NightMark()
    if "method" in data:
        out["method"] = jf.text(data, "method")
    if "alpha" in data:
        out["alpha"] = jf.number(data, "alpha")
    if "adjusted_p" in data:
        out["adjusted_p"] = jf.number(data, "adjusted_p")
    if "kept" in data:
        out["kept"] = jf.flag(data, "kept", False)
    return out
