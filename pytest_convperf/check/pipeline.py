"""One check as a straight pipeline: correctness, timing, integrity, profiles, judgement, row.

``ConvperfFixture.check`` builds the check's :class:`~pytest_convperf.check.context.CheckContext`
once and hands it to :func:`run_check`, which calls each layer once, in this order, and passes
typed results down: the correctness run (:mod:`pytest_convperf.correctness`), the check's phase
calls built once with the facts before timing (:func:`~pytest_convperf.check.calls.phase_calls`),
the determinism check (``deterministic=True``), the paired timing
(:meth:`~pytest_convperf.check.paired_timing.PairedTiming.measure`), the integrity check after
timing, the kernel table and traces (:func:`~pytest_convperf.measure.profiling.profile_facts`), the plugins'
``pytest_convperf_check_timed``, then the judgement and the one recorded row
(:func:`~pytest_convperf.check.judgement.judge_and_record`). No step calls back into the fixture.

The whole check runs under its time limit (:func:`~pytest_convperf.check.faults.deadline`), its
in-flight record (a crash is named) and :func:`~pytest_convperf.check.faults.device_errors` (errors
in timed calls and a lost CUDA context become clear failures), each entered once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from pytest_convperf.check.calls import correctness_settings, phase_calls
from pytest_convperf.check.determinism import nondeterminism
from pytest_convperf.check.faults import CheckProgress, CheckTimeout, deadline, device_errors
from pytest_convperf.check.judgement import CheckRecord, judge_and_record
from pytest_convperf.check.paired_timing import PairedTiming
from pytest_convperf.core import inflight
from pytest_convperf.core.results import Comparison, ErrorStats, Verdict
from pytest_convperf.core.roofline import ImplausibleTime
from pytest_convperf.correctness.integrity import Finding, after_timing
from pytest_convperf.correctness.oracle import check_conv
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.measure.profiling import profile_facts
from pytest_convperf.measure.rule import StopRule, TimingTrick
from pytest_convperf.reports import journal

if TYPE_CHECKING:
    from pytest_convperf.check.context import Candidate, CheckContext, CheckSession

# Comparison facts a check's row carries in its own ``facts`` (the env: the row's own ``env``; the
# seed and the machine: the row's own :class:`CheckFacts`, which the comparison does not carry).
ROW_FACTS = ("reference_backend", "cudnn_kernel", "tf32", "memory", "clocks")


@dataclass(frozen=True)
class CheckFacts:
    """What a check's row says about the check itself, known once correctness has run: the seed,
    the candidate's and reference's names, the machine, the torch device, the reference's own
    errors against fp64, the timer's kind and whether the check was declared deterministic."""

    seed: int
    candidate: str
    reference: str
    machine: str
    device: str
    reference_errors: tuple[ErrorStats, ...]
    timer: str | None
    deterministic: bool

    def to_facts(self) -> dict[str, object]:
        """As the row carries them (``CheckRow.facts``, judge.check_row)."""
        facts: dict[str, object] = {
            "seed": self.seed,
            "candidate": self.candidate,
            "reference": self.reference,
            "machine": self.machine,
            "device": self.device,
            "reference_errors": [e.to_dict() for e in self.reference_errors],
            "timer": self.timer,
        }
        if self.deterministic:
            facts["deterministic"] = True
        return facts


def run_check(
    ctx: CheckContext,
    session: CheckSession,
    progress: CheckProgress,
    *,
    convperf: object,
    oracle: Candidate | None,
    extra_metrics: dict[str, float] | None,
    deterministic: bool,
) -> Comparison:
    """Correctness, timing, integrity, profiles and the judgement of ``ctx``'s check; records its row.

    ``progress`` is the check's own (the fixture's timer reports its rounds there); ``convperf``
    the fixture, for ``pytest_convperf_check_timed``. Returns the first measurement.
    """
    candidate, problem, phase, device, nodeid = ctx.candidate, ctx.problem, ctx.phase, ctx.device, ctx.nodeid
    config, cfg = ctx.config, session.cfg
    limit = (
        cfg.check_timeout
        if cfg.check_timeout is not None
        else StopRule.for_timer(ctx.timer).check_timeout_s()
    )
    recorded = CheckRecord()  # this check's row, once it has one

    def timeout_row(message: str) -> CheckRow:
        stopped = {
            "limit_s": progress.limit(limit),
            "stage": progress.stage,
            "rounds": progress.describe(),
            "slowest_call_s": progress.slowest_call_s,
        }
        return unjudged_row(ctx, Verdict.TIMEOUT, message, (), {"timeout": stopped})

    def on_overrun(message: str) -> None:  # the watchdog thread, before it ends the process
        if cfg.report_dir is not None:
            journal.append(cfg.report_dir, timeout_row(message).to_dict())
        capman = config.pluginmanager.get_plugin("capturemanager")
        if capman is not None:  # the watchdog's last line goes to the real stderr, not a capture
            capman.suspend_global_capture(in_=False)

    def failed(facts: dict[str, object], found: Finding | None) -> None:
        """A check that failed with nothing to judge: its row without timings, then the test fails."""
        if found is None:
            return
        facts = {**facts, "integrity": found.tag} if found.tag else facts
        recorded.record(session, nodeid, unjudged_row(ctx, found.verdict, found.message, found.errors, facts))
        pytest.fail(found.message, pytrace=False)

    try:
        with (
            device_errors(device, nodeid, problem.id),
            deadline(limit, f"the convperf check of {problem.id} ({phase})", progress, on_overrun),
            inflight.running(
                step="the timed check",
                problem=problem.id,
                seed=ctx.seed,
                phase=phase,
                candidate=ctx.candidate_name,
                reference=ctx.reference_name,
                repro=f"pytest '{nodeid}' --convperf",
            ),
        ):
            progress.at("correctness")
            with correctness_settings():
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
            known = CheckFacts(
                report.seed,
                report.candidate,
                report.reference,
                device.slug,
                device.torch_device,
                tuple(report.reference_errors),
                getattr(ctx.timer, "kind", None),
                deterministic,
            )
            # The row's facts: the check's own, then (once timed) the comparison's and the plugins'.
            facts = known.to_facts()
            if not report.ok or not report.reference_ok:
                # A correctness failure is recorded without a judgement: there is no timing to judge.
                verdict = Verdict.CORRECTNESS_FAIL if not report.ok else None
                failed(facts, Finding("", report.message(), tuple(report.candidate_errors), verdict))
            # A trick or a time no kernel can reach, caught while timing (the determinism check, the
            # facts' calls, a measurement or its confirm), is the check's failure with its row, as
            # an integrity finding is: never judged, never a baseline (issue 37 item 2).
            try:
                # Every phase call of the check, built once, and the facts measured before timing.
                progress.at("the first measurement")
                calls = phase_calls(ctx)
                if deterministic:
                    progress.at("the determinism check")
                    with calls.settings():
                        found = nondeterminism(calls.candidate_call, problem, phase, ctx.seed)
                    failed(facts, found)
                    progress.at("the first measurement")
                timing = PairedTiming.for_check(ctx, calls, stored_mode=ctx.stored_mode)  # auto: as stored
                first = comparison = timing.measure()
                last_output = calls.last  # the candidate's last timed call of the first measurement
                if phase == "forward":  # cheats and lazy outputs: correctness again, after timing
                    progress.at("the integrity check after timing")
                    with correctness_settings():
                        found = after_timing(
                            candidate, problem, ctx.inputs, last_output, ctx.seed, device, oracle
                        )
                    failed(facts, found)
                # Which kernels ran (updating, or the stored entry has a table) and --convperf-trace.
                kernels = cfg.updating or (ctx.entry is not None and bool(ctx.entry.kernels))
                if kernels or cfg.trace:
                    if kernels:
                        progress.at("the kernel table")
                    sides = (("candidate", calls.candidate_call), ("reference", calls.reference_call))
                    comparison = comparison.with_facts(
                        profile_facts(
                            calls.candidate_call if kernels else None,
                            sides,
                            device,
                            calls.settings,
                            trace_dir=session.trace_dir() if cfg.trace else None,
                            nodeid=nodeid,
                            label=f"{problem.id}-{phase}",
                        )
                    )
                facts.update({k: v for k, v in comparison.facts.items() if k in ROW_FACTS})
                # Plugins that time more around the check (the A/B of --convperf-against): facts for the row.
                for extra in config.hook.pytest_convperf_check_timed(
                    convperf=convperf, context=ctx, comparison=comparison
                ):
                    facts.update(extra or {})
                progress.at("the judgement (its confirm measurement)")
                return judge_and_record(
                    session,
                    nodeid,
                    ctx.slot,
                    device,
                    comparison,
                    name=problem.id,
                    phase=phase,
                    errors=report.candidate_errors,
                    confirm=timing.confirm_of(first),
                    facts=facts,
                    extra_metrics=extra_metrics,
                    record=recorded,
                )
            except (TimingTrick, ImplausibleTime) as exc:
                if recorded.row is not None:  # judged already: its row stands
                    raise
                message = str(exc) if isinstance(exc, TimingTrick) else f"IMPLAUSIBLE TIME: {exc}"
                failed(facts, Finding.of(message))
                raise  # not reached: failed() ends the test
    except CheckTimeout as exc:
        if recorded.row is None:  # not judged yet: its row
            recorded.record(session, nodeid, timeout_row(str(exc)))
        pytest.fail(str(exc), pytrace=False)


def unjudged_row(
    ctx: CheckContext,
    verdict: Verdict | None,
    message: str,
    errors: tuple[ErrorStats, ...],
    facts: Mapping[str, object],
) -> CheckRow:
    """The row of a check stopped before its judgement (correctness, integrity, a timeout)."""
    return CheckRow(
        key=ctx.key,
        nodeid=ctx.nodeid,
        module=ctx.slot.module,
        problem=ctx.problem.id,
        phase=ctx.phase,
        comparison=None,
        errors=errors,
        verdict=verdict,
        message=message,
        facts=dict(facts),
    )
