"""The ``convperf`` fixture: correctness, paired timing, judgement, result row (docs/design.md §3).

``ConvperfFixture.check`` builds the check's context once (:meth:`CheckContext.start`) and hands
it to :func:`pytest_convperf.check.pipeline.run_check`, which runs, in order: correctness against
the fp64 oracle (a failure fails the test and records a CORRECTNESS_FAIL row), paired timing of
candidate and reference on identical inputs, the roofline sanity check, and then the judgement that
:meth:`ConvperfFixture.judge` also gives (:mod:`pytest_convperf.check.judgement`, verdicts
PASS/FAIL/IMPROVED/NEW/STALE/ADVISORY), the one recorded
:class:`~pytest_convperf.judge.check_row.CheckRow`, and the test's outcome.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_convperf.check.calls import phase_calls
from pytest_convperf.check.context import (
    BaselineSlot,
    Candidate,
    CheckContext,
    CheckSession,
    baseline_key,
    check_phase,
)
from pytest_convperf.check.faults import CheckProgress, device_errors
from pytest_convperf.check.judgement import judge_and_record
from pytest_convperf.check.paired_timing import PairedTiming
from pytest_convperf.check.pipeline import run_check
from pytest_convperf.core.problem import require_problem
from pytest_convperf.core.results import Comparison, ErrorStats
from pytest_convperf.measure.rule import StopRule
from pytest_convperf.reports.progress import ProgressTimer

if TYPE_CHECKING:
    from pytest_convperf.baselines.store import Store
    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.core.device import DeviceInfo
    from pytest_convperf.core.problem import Conv2dProblem
    from pytest_convperf.measure.protocol import Timer


class ConvperfFixture:
    """Object behind the ``convperf`` fixture (see the fixture's docstring in ``plugin.py``) with
    ``--convperf``; without it the fixture is a ``check.disabled.DisabledConvperf``."""

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
    def cfg(self) -> ConvperfConfig:
        return self.session.cfg

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
        ctx = CheckContext.start(
            candidate, problem, host=self, reference=reference, phase=phase, mode=mode, look_up=False
        )
        with device_errors(ctx.device, ctx.nodeid, problem.id):  # as a check's pipeline runs its steps
            return PairedTiming.for_check(ctx, phase_calls(ctx), rule=rule).measure()

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
        ctx = CheckContext.start(candidate, problem, host=self, reference=reference, phase=phase, mode=mode)
        self.progress = CheckProgress()
        return run_check(
            ctx,
            self.session,
            self.progress,
            convperf=self,
            oracle=oracle,
            extra_metrics=extra_metrics,
            deterministic=deterministic,
        )

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
        key = key if key is not None else self.key_for(name, phase)
        slot = BaselineSlot.look_up(self.store, self.module, key, cfg=self.cfg, device=self.device)
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


__all__ = ["ConvperfFixture"]
