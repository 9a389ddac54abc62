"""The baseline judgement of one check: decide against the stored entry, plan the update, act on it.

``ConvperfFixture.judge`` calls :func:`judge` once per check with the config, the check's
:class:`~pytest_convperf.check.context.BaselineSlot` (the machine's store, the key and the entry
looked up once), the device, the measured comparison and a way to re-measure; it makes
its row (:meth:`Judgement.row`), records it, then calls ``Judgement.enforce()``,
which fails (FAIL, correctness, refused update, strict NEW) or skips (INCONCLUSIVE) the running
test; a speed FAIL under session-wide false-alarm control is reported as "speed FAIL pending"
(``night.decide.pending_speed_fail``) and decided at session end. Nothing is written here: the
controller writes the planned updates once at session end (:mod:`pytest_convperf.baselines.updates`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from pytest_convperf.baselines.updates import new_entry, plan_update, quality_of
from pytest_convperf.check.matched_confirm import MatchedConfirm
from pytest_convperf.core.env import timing_of
from pytest_convperf.core.results import Comparison, ErrorStats, Verdict
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.judge.entry import Entry, UpdatePlan
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.judge.policy import decision_of

if TYPE_CHECKING:
    from pytest_convperf.check.context import BaselineSlot, CheckSession
    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.core.device import DeviceInfo


@dataclass
class CheckRecord:
    """The row one check recorded, None until it records one (judged, or stopped with its finding):
    a check that times out or meets a timing trick after this has its row already. Said by the check
    itself, not inferred from how many rows its test has (a hook may record rows of its own)."""

    row: CheckRow | None = None

    def record(self, session: CheckSession, nodeid: str, row: CheckRow) -> None:
        session.record(nodeid, row)
        self.row = row  # after: a stop in between records a second row rather than none


@dataclass(frozen=True)
class Judgement:
    """The decision of one check, its planned update, and what the judgement adds to the check's
    row: the baseline store's ``machine`` class and ``baselines_file``, the ``device_kind``, the
    ``env`` judged under, how the judged comparison was timed (``timing``) and the stored entry it
    was judged against (``baseline``). :meth:`row` is the one constructor of a judged row."""

    decision: Decision
    update: UpdatePlan | None
    machine: str
    baselines_file: str
    device_kind: str
    env: dict[str, str]
    timing: dict[str, str]
    baseline: Entry | None
    # Speed FAILs are decided across the session at its end (``night.py``), not here.
    deferred: bool = False

    def row(
        self,
        *,
        key: str,
        nodeid: str,
        module: str,
        problem: str,
        phase: str,
        comparison: Comparison,
        errors: Sequence[ErrorStats],
        facts: Mapping[str, Any],
        extra_metrics: Mapping[str, float] | None,
    ) -> CheckRow:
        """The judged row of the check named by ``key`` .. ``phase``: its first ``comparison``, the
        candidate's ``errors``, the row's ``facts``, and this judgement's word and fields."""
        return CheckRow(
            key=key,
            nodeid=nodeid,
            module=module,
            problem=problem,
            phase=phase,
            comparison=comparison,
            errors=tuple(errors),
            verdict=self.decision.verdict,
            message=self.decision.message,
            facts=dict(facts),
            extra_metrics=dict(extra_metrics) if extra_metrics is not None else None,
            machine=self.machine,
            baselines_file=self.baselines_file,
            device_kind=self.device_kind,
            env=self.env,
            timing=self.timing,
            decision=self.decision,
            baseline=self.baseline,
            update=self.update,
        )

    def enforce(self) -> None:
        """Fail or skip the running test as the decision (and update plan) says.

        A speed FAIL under session-wide control is not raised here: the controller decides it with
        every other check of the session. Its test is reported "speed FAIL pending" at once (its row
        says FAIL; ``night.pending_speed_fail``) and counted failed at session end if kept.
        """
        plan, decision = self.update, self.decision
        if plan is not None and plan.action == "refused":
            pytest.fail(f"{decision.message}\nconvperf update refused: {plan.why}", pytrace=False)
        if plan is not None and plan.action == "write":
            return  # the update acknowledges the change; the summary lists it
        if self.deferred and decision.verdict is Verdict.FAIL:
            return
        if decision.outcome == "fail":
            pytest.fail(decision.message, pytrace=False)
        if decision.outcome == "skip":
            pytest.skip(decision.message)


def judge(
    cfg: ConvperfConfig,
    slot: BaselineSlot,
    device: DeviceInfo,
    comparison: Comparison,
    *,
    confirm: Callable[[int], Comparison],
    errors: Sequence[ErrorStats] = (),
    backend: str | None = None,
    quality: Mapping[str, float] | None = None,
) -> Judgement:
    """Decide one check against the entry of its baseline ``slot`` (looked up once, by the fixture,
    with the policy and env the check is judged by).

    ``confirm(n_rounds)`` re-times the same pair with ``n_rounds`` rounds.
    """
    store, old, policy, env = slot.store, slot.entry, slot.policy, slot.env
    quality = dict(quality or {})
    decision = decision_of(
        comparison, old, policy, errors=errors, env=env, backend=backend, confirm=confirm, quality=quality
    )
    final = decision.confirm if decision.confirm is not None else comparison
    kernels = comparison.facts.get("kernels")
    plan: UpdatePlan | None
    if comparison.inconclusive:
        # Decided for correctness/quality drift only: the timing must never be recorded.
        plan = UpdatePlan("skip", "inconclusive measurements are never recorded") if cfg.update else None
    else:
        proposed = new_entry(
            final, old, policy, env=env, backend=backend, errors=errors, quality=quality, kernels=kernels
        )
        plan = plan_update(cfg, decision, old, proposed, policy)
    return Judgement(
        decision,
        plan,
        machine=store.machine,
        baselines_file=str(store.path(slot.module)),
        device_kind=device.kind,
        env=env,
        timing=timing_of(final),
        baseline=old,
        deferred=cfg.false_alarms != "none",
    )


def judge_and_record(
    session: CheckSession,
    nodeid: str,
    slot: BaselineSlot,
    device: DeviceInfo,
    comparison: Comparison,
    *,
    name: str,
    phase: str,
    errors: Sequence[ErrorStats],
    confirm: Callable[[int], Comparison],
    facts: Mapping[str, Any] | None,
    extra_metrics: Mapping[str, float] | None,
    record: CheckRecord | None = None,
) -> Comparison:
    """``ConvperfFixture.judge`` on a check's slot: :func:`judge`, record the row once (keywords,
    typed; in ``record`` too, the check's own record), then skip (INCONCLUSIVE timing) or
    :meth:`Judgement.enforce`. In a fresh-process confirm run the comparison is only measured
    again, nothing is judged."""
    # A CPU confirm on a machine away from the entry's state waits and measures again (issue 36).
    confirm = MatchedConfirm(slot.entry, slot.policy).wrap(confirm)
    confirm_run = session.confirm_run
    if confirm_run is not None:  # a fresh-process confirm: measure, judge nothing
        confirm_run.measure(nodeid, slot.key, confirm)
        return comparison
    metrics = {k: float(v) for k, v in extra_metrics.items()} if extra_metrics else None
    judgement = judge(
        session.cfg,
        slot,
        device,
        comparison,
        confirm=confirm,
        errors=errors,
        backend=comparison.facts.get("reference_backend"),
        quality=quality_of(metrics or {}),
    )
    row = judgement.row(
        key=slot.key,
        nodeid=nodeid,
        module=slot.module,
        problem=name,
        phase=phase,
        comparison=comparison,
        errors=errors,
        facts=facts or {},
        extra_metrics=metrics,
    )
    (record if record is not None else CheckRecord()).record(session, nodeid, row)
    if comparison.inconclusive and judgement.decision.verdict is Verdict.INCONCLUSIVE:
        pytest.skip(f"convperf INCONCLUSIVE on {name}: {comparison.inconclusive}")
    judgement.enforce()
    return comparison
