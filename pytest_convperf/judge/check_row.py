"""The judged row of one check: :class:`CheckRow`, recorded once after its judgement, and its dict
form :class:`RowDict` (xdist, the journal, ``rows.json``).

A :class:`CheckRow` holds its parts typed (``Comparison``, ``ErrorStats``, ``Verdict``, the
``Decision``, the stored ``Entry``, the ``UpdatePlan``); dicts exist only where a row crosses a
process or reaches a file (:meth:`CheckRow.to_dict` / :meth:`CheckRow.from_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from pytest_convperf.core import json_fields as jf
from pytest_convperf.core.json_fields import JsonObject
from pytest_convperf.core.results import Comparison, ComparisonDict, ErrorStats, ErrorStatsDict, Verdict
from pytest_convperf.core.row_format import ROW_FORMAT, current_format
from pytest_convperf.judge.entry import Entry, EntryYaml, UpdatePlan, UpdatePlanDict, parse_entry
from pytest_convperf.judge.outcome import Decision, DecisionDetails

# The rows of one test on its report (``user_properties``: a list of ``CheckRow.to_dict()``).
ROWS_PROPERTY = "convperf_rows"


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
            errors=tuple(ErrorStats.from_dict(e) for e in jf.objects(data, "errors")),
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
