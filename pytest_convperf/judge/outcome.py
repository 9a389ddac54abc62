"""The judge's outcome for one check: the :class:`Decision` (verdict, message and everything a
report needs to explain it) and its dict forms (:class:`DecisionDict`, a row's :class:`DecisionDetails`).

Plain data, made by ``judge.verdict.decide``; the rules that make one live there and in
``judge.decision``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict

from pytest_convperf.core import json_fields as jf
from pytest_convperf.core.json_fields import JsonObject
from pytest_convperf.core.results import Comparison, ComparisonDict, Verdict

Outcome = Literal["pass", "fail", "skip"]


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
