"""The ``convperf`` fixture: correctness, paired timing, judgement, result row (docs/design.md §3).

``ConvperfFixture.check`` runs, in order: correctness against the fp64 oracle (a failure fails
the test and records a CORRECTNESS_FAIL row), paired timing of candidate and reference on
identical inputs, the roofline sanity check, and then :meth:`ConvperfFixture.judge`: the baseline
judgement (:mod:`pytest_convperf.check.judgement`, verdicts PASS/FAIL/IMPROVED/NEW/STALE/ADVISORY), the one
recorded :class:`~pytest_convperf.core.results.CheckRow`, and the test's outcome.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch.nn.functional as F

from pytest_convperf.check.calls import (
    PHASES,
    check_phase,
    correctness_settings,
    perf_settings,
    phase_call,
    trace_facts,
)
from pytest_convperf.check.context import BaselineSlot, Candidate, CheckContext, CheckSession, baseline_key
from pytest_convperf.check.determinism import nondeterminism
from pytest_convperf.check.disabled import TIMING_DISABLED, correctness_only
from pytest_convperf.check.faults import CheckProgress, CheckTimeout, deadline, device_errors
from pytest_convperf.check.judgement import judge_and_record
from pytest_convperf.check.pairing import ImplausibleTime, time_pair
from pytest_convperf.core import inflight
from pytest_convperf.core.problem import require_problem
from pytest_convperf.core.results import CheckRow, Comparison, ErrorStats, Verdict
from pytest_convperf.correctness.integrity import Finding, after_timing
from pytest_convperf.correctness.oracle import CorrectnessReport, check_conv, describe, stable_seed
from pytest_convperf.measure.profiling import candidate_kernels
from pytest_convperf.measure.rounds import StopRule
from pytest_convperf.reports import journal
from pytest_convperf.reports.progress import ProgressTimer

if TYPE_CHECKING:
    from pytest_convperf.baselines.store import Store
    from pytest_convperf.core.device import DeviceInfo
    from pytest_convperf.core.problem import Conv2dProblem
    from pytest_convperf.measure.timers import Timer

# Comparison facts a check's row carries in its own ``facts``.
_ROW_FACTS = ("env", "reference_backend", "cudnn_kernel", "tf32", "memory", "clocks")


class ConvperfFixture:
    """Object behind the ``convperf`` fixture (see the fixture's docstring in ``plugin.py``)."""

    def __init__(self, session: CheckSession, request: pytest.FixtureRequest) -> None:
        self.session = session
        self.request = request
        self._timer: Timer | None = None
        self.progress = CheckProgress()  # of the check running now: what a timeout row says

    # ---- collaborators --------------------------------------------------------------------------
    @property
    def device(self) -> DeviceInfo:
        return self.session.device_info()

    @property
    def timer(self) -> Timer:
        """The ``convperf_timer`` fixture's timer (a conftest may override it with a fake)."""
        if self._timer is None:
            # Watched by the live progress line and the check's own progress (proxies; the
            # measurement is the timer's own).
            live = self.session.progress().wrap(
                self.request.getfixturevalue("convperf_timer"), self.nodeid, str(self.request.node.name)
            )

            def on_round(stage: str, index: int, names: Sequence[str], times: Sequence[float]) -> None:
                self.progress.observe_round(stage, index, names, times)
                live.observe_round(stage, index, names, times)

            self._timer = ProgressTimer(live, on_round)
        assert self._timer is not None
        return self._timer

    @property
    def store(self) -> Store:
        """This machine's baseline store, chosen once from the timer (fake numbers: ``-fake``)."""
        return self.session.store(fake=getattr(self.timer, "kind", None) == "fake")

    @property
    def nodeid(self) -> str:
        return str(self.request.node.nodeid)

    @property
    def module(self) -> str:
        """The test file's stem: the baseline file of this test's checks."""
        return Path(str(self.request.node.path)).stem

    def key(self, problem: Conv2dProblem, phase: str) -> str:
        """Baseline key of ``problem``'s check: :meth:`key_for` its id."""
        return self.key_for(problem.id, phase)

    def key_for(self, name: str, phase: str) -> str:
        """Baseline key: the test name (plus ``@<name>`` when the test name lacks it), ``:<phase>``.

        A test in a class is keyed ``Class::name`` so that same-named methods of two classes in one
        file get distinct keys; module-level tests keep the bare name.
        """
        return baseline_key(self.request.node, name, phase)

    # ---- timing ------------------------------------------------------------------------------------
    def measure(
        self,
        candidate: Candidate,
        problem: Conv2dProblem,
        *,
        reference: Candidate | None = None,
        phase: str = "forward",
        mode: str = "auto",
        rule: StopRule | None = None,
    ) -> Comparison:
        """Time ``candidate`` against ``reference`` (default ``F.conv2d``) in paired rounds.

        No correctness check and no baseline: the raw :class:`Comparison`. ``mode`` is ``auto``,
        ``cold``, ``warm`` or ``graph`` (forward only); ``rule`` overrides rounds and caps.
        Raises :class:`ImplausibleTime` for a time under half the roofline floor.
        """
        problem = require_problem(problem, "convperf.measure")
        if not self.session.cfg.enabled:
            pytest.skip(TIMING_DISABLED)
        ctx = self.context(candidate, problem, reference=reference, phase=phase, mode=mode, look_up=False)
        return time_pair(ctx, rule=rule).first

    def context(
        self,
        candidate: Candidate,
        problem: Conv2dProblem,
        *,
        reference: Candidate | None,
        phase: str,
        mode: str,
        look_up: bool = True,
    ) -> CheckContext:
        """The context of one check, each part derived once: the phase validated, the device made
        usable, the seed, the key, the one input set, the store and (``look_up``) the stored entry."""
        check_phase(phase)
        device = self.device
        device.ensure_usable()
        seed = stable_seed(problem)
        key = self.key(problem, phase)
        slot = (
            BaselineSlot.look_up(self.store, self.module, key)
            if look_up
            else BaselineSlot(self.store, self.module, key, None)
        )
        return CheckContext(
            problem=problem,
            phase=phase,
            seed=seed,
            candidate=candidate,
            reference=reference,
            # One input set of the recorded seed for the whole check: correctness, timing, memory, traces.
            inputs=problem.make_inputs(seed, device.torch_device),
            mode=mode,
            device=device,
            timer=self.timer,
            config=self.request.config,
            nodeid=self.nodeid,
            slot=slot,
        )

    # ---- the check -----------------------------------------------------------------------------------
    def check(
        self,
        candidate: Candidate,
        problem: Conv2dProblem,
        *,
        reference: Candidate | None = None,
        phase: str = "forward",
        mode: str = "auto",
        oracle: Candidate | None = None,
        extra_metrics: dict[str, float] | None = None,
        deterministic: bool = False,
    ) -> Comparison:
        """Correctness, then paired timing, then the baseline decision; records a result row.

        ``deterministic``: two runs of the phase must agree bit for bit (``determinism``).
        A correctness failure fails the test (row verdict CORRECTNESS_FAIL); too many rounds
        dropped for clocks skips it (INCONCLUSIVE). Returns the comparison. ``oracle`` replaces
        the fp64 ``F.conv2d`` oracle (quantized/sparse variants: their fake-quant/pruned conv);
        ``extra_metrics`` (e.g. quality drift ``rel_l2``, ``sqnr_db``) go into the row as
        ``row["extra_metrics"]``. A check that runs past ``--convperf-check-timeout`` (default
        from the round caps, :meth:`StopRule.check_timeout_s`) fails as hung with a TIMEOUT row.
        """
        problem = require_problem(problem, "convperf.check")
        if not self.session.cfg.enabled:
            correctness_only(
                candidate, problem, self.device, self.nodeid, reference=reference, phase=phase, oracle=oracle
            )
        ctx = self.context(candidate, problem, reference=reference, phase=phase, mode=mode)
        cfg_limit = self.session.cfg.check_timeout
        limit = cfg_limit if cfg_limit is not None else StopRule.for_timer(ctx.timer).check_timeout_s()
        self.progress = CheckProgress()
        recorded = len(self.session.pending.get(self.nodeid, []))

        def timeout_row(message: str) -> CheckRow:
            progress = self.progress
            stopped = {
                "limit_s": progress.limit(limit),
                "stage": progress.stage,
                "rounds": progress.describe(),
                "slowest_call_s": progress.slowest_call_s,
            }
            return ctx.unjudged_row(Verdict.TIMEOUT, message, (), {"timeout": stopped})

        def on_overrun(message: str) -> None:  # the watchdog thread, before it ends the process
            if self.session.cfg.report_dir is not None:
                journal.append(self.session.cfg.report_dir, timeout_row(message).to_dict())
            capman = self.request.config.pluginmanager.get_plugin("capturemanager")
            if capman is not None:  # the watchdog's last line goes to the real stderr, not a capture
                capman.suspend_global_capture(in_=False)

        what = f"the convperf check of {problem.id} ({phase})"
        try:
            with (
                deadline(limit, what, self.progress, on_overrun),
                inflight.running(
                    step="the timed check",
                    problem=problem.id,
                    seed=ctx.seed,
                    phase=phase,
                    candidate=describe(candidate),
                    reference=describe(reference or F.conv2d),
                    repro=f"pytest '{self.nodeid}' --convperf",
                ),
            ):
                return self._check(
                    ctx, oracle=oracle, extra_metrics=extra_metrics, deterministic=deterministic
                )
        except CheckTimeout as exc:
            if len(self.session.pending.get(self.nodeid, [])) == recorded:  # not judged yet: its row
                self.session.record(self.nodeid, timeout_row(str(exc)))
            pytest.fail(str(exc), pytrace=False)

    def _check(
        self,
        ctx: CheckContext,
        *,
        oracle: Candidate | None,
        extra_metrics: dict[str, float] | None,
        deterministic: bool,
    ) -> Comparison:
        candidate, problem, phase, device = ctx.candidate, ctx.problem, ctx.phase, ctx.device
        self.progress.at("correctness")
        with device_errors(device, ctx.nodeid, problem.id), correctness_settings():
            report = check_conv(
                candidate,
                problem,
                reference=ctx.reference,
                seed=ctx.seed,
                device=device.torch_device,
                backward=phase != "forward",
                oracle=oracle,
                inputs=ctx.inputs,
            )
        facts = self._correctness_facts(report)
        if deterministic:
            facts["deterministic"] = True
        if not report.ok or not report.reference_ok:
            # A correctness failure is recorded without a judgement: there is no timing to judge.
            verdict = Verdict.CORRECTNESS_FAIL if not report.ok else None
            errors = tuple(report.candidate_errors)
            self._record_failure(ctx, facts, Finding("", report.message(), errors, verdict))
        if deterministic:
            self.progress.at("the determinism check")
            with device_errors(device, ctx.nodeid, problem.id), perf_settings(problem, device):
                found = nondeterminism(candidate, problem, phase, ctx.inputs, ctx.seed, device.torch_device)
            self._record_failure(ctx, facts, found)
        self.progress.at("the first measurement")
        timed = time_pair(ctx, stored_mode=ctx.stored_mode)  # auto: time as stored
        comparison, confirm = timed.first, timed.confirm
        if phase == "forward":  # cheats and lazy outputs: correctness again, after timing
            self.progress.at("the integrity check after timing")
            with device_errors(device, ctx.nodeid, problem.id), correctness_settings():
                found = after_timing(
                    candidate, problem, ctx.inputs, timed.last_output, ctx.seed, device, oracle
                )
            self._record_failure(ctx, facts, found)
        if self.session.cfg.updating or (ctx.entry is not None and ctx.entry.kernels):  # which kernel changed
            self.progress.at("the kernel table")
            call = phase_call(candidate, ctx.inputs, problem, phase, ctx.seed, device.torch_device)
            with device_errors(device, ctx.nodeid, problem.id), perf_settings(problem, device):
                kernels = candidate_kernels(call, device)
            comparison = dataclasses.replace(comparison, facts={**comparison.facts, "kernels": kernels})
        if self.session.cfg.trace:
            from pytest_convperf.measure.profiling import trace_factory

            start = trace_factory(self.session.trace_dir(), ctx.nodeid, device)
            traces = trace_facts(ctx, start, ctx.reference or F.conv2d)
            comparison = dataclasses.replace(comparison, facts={**comparison.facts, "traces": traces})
        facts.update({k: v for k, v in comparison.facts.items() if k in _ROW_FACTS})
        # Plugins that time more around the check (the A/B of --convperf-against): facts for the row.
        for extra in self.request.config.hook.pytest_convperf_check_timed(
            convperf=self, context=ctx, comparison=comparison
        ):
            facts.update(extra or {})
        self.progress.at("the judgement (its confirm measurement)")
        judge_and_record(
            self.session,
            ctx.nodeid,
            ctx.slot,
            device,
            comparison,
            name=problem.id,
            phase=phase,
            errors=report.candidate_errors,
            confirm=confirm,
            facts=facts,
            extra_metrics=extra_metrics,
        )
        return comparison

    def _record_failure(self, ctx: CheckContext, facts: dict[str, Any], found: Finding | None) -> None:
        """A check that failed with nothing to judge: its row without timings, then the test fails."""
        if found is None:
            return
        facts = {**facts, "integrity": found.tag} if found.tag else facts
        self.session.record(ctx.nodeid, ctx.unjudged_row(found.verdict, found.message, found.errors, facts))
        pytest.fail(found.message, pytrace=False)

    # ---- the judgement ----------------------------------------------------------------------------
    def judge(
        self,
        comparison: Comparison,
        *,
        name: str,
        phase: str,
        errors: Sequence[ErrorStats] = (),
        confirm: Callable[[int], Comparison],
        key: str | None = None,
        facts: Mapping[str, Any] | None = None,
        extra_metrics: Mapping[str, float] | None = None,
    ) -> Comparison:
        """Judge a measured comparison against its baseline, record its row, pass/fail/skip the test.

        The last step of :meth:`check`, public for comparisons ``check`` cannot make (whole models,
        fused blocks). ``name`` names the workload (the row's ``problem``); ``errors`` are the
        candidate's correctness stats (checked by the caller; their drift is gated too);
        ``confirm(n_rounds)`` re-times the same pair with ``n_rounds`` paired rounds.
        ``key`` defaults to :meth:`key_for` of ``name``; ``facts`` go into the row;
        ``extra_metrics`` (``rel_l2``/``sqnr_db``) are the quality stored and gated with the entry.

        Fails the test on a confirmed regression, correctness or quality drift, strict NEW or a
        refused update; skips it when the timing is INCONCLUSIVE (after the drift checks);
        PASS/NEW/IMPROVED/STALE/ADVISORY pass with a note. Returns ``comparison``.
        """
        check_phase(phase)
        if not self.session.cfg.enabled:
            pytest.skip(TIMING_DISABLED)
        key = key if key is not None else self.key_for(name, phase)
        slot = BaselineSlot.look_up(self.store, self.module, key)
        return judge_and_record(
            self.session,
            self.nodeid,
            slot,
            self.device,
            comparison,
            name=name,
            phase=phase,
            errors=errors,
            confirm=confirm,
            facts=facts,
            extra_metrics=extra_metrics,
        )

    def gate(self, comparison: Comparison, **kwargs: Any) -> Comparison:
        """The old name of :meth:`judge` (one name per concept: the act is judging); warns."""
        warnings.warn("convperf.gate() is now convperf.judge() (same arguments)", DeprecationWarning, 2)
        return self.judge(comparison, **kwargs)

    def _correctness_facts(self, report: CorrectnessReport) -> dict[str, Any]:
        return {
            "seed": report.seed,
            "candidate": report.candidate,
            "reference": report.reference,
            "machine": self.device.slug,
            "device": self.device.torch_device,
            "reference_errors": [e.to_dict() for e in report.reference_errors],
            "timer": getattr(self.timer, "kind", None),
        }


__all__ = ["PHASES", "ConvperfFixture", "ImplausibleTime"]
