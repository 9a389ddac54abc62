"""``--convperf-against=REF``: every convperf check also times its candidate at REF (pytest glue).

Per check (the ``pytest_convperf_check_timed`` hook, which ``ConvperfFixture.check`` calls after its
own timing and before its gate; :meth:`ABSession.compare`): REF's candidate is found by the contract
of :mod:`pytest_convperf.ab.refimport` in a worktree of REF (:mod:`pytest_convperf.ab.revisions`),
called once (a REF whose kernel does not build fails here with the compiler's first lines), then
timed against A's candidate in paired, alternating rounds on the check's own inputs (one process:
the drift both share cancels) and judged by :func:`pytest_convperf.ab.rule.decide_ab`; REF's
candidate is also timed against the check's reference, for REF's speedup. The result rides in the
row's ``facts["ab"]``; the terminal summary, ``ab.md``, ``ab.png`` and ``results.json`` show it
(:mod:`pytest_convperf.ab.ab_report`). The A/B never fails a test by itself (a pull-request job
reads the table); bad input fails with a message.
The session registers an :class:`ABSession` as the plugin ``convperf-ab`` only with
``--convperf-against`` (``ConvperfConfig.against``); without it, or with ``-p no:convperf-ab``, the
checks run without the A/B.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import pytest

from pytest_convperf.ab.distinct import NotDistinct, OpLedger, library_collision, same_callable
from pytest_convperf.ab.refimport import CandidateLookupError, ref_candidate
from pytest_convperf.ab.revisions import Checkouts, RevisionError, repo_root, resolve, working_tree
from pytest_convperf.ab.rule import ABResultDict, ab_policy, decide_ab

if TYPE_CHECKING:
    from pytest_convperf.check.context import CheckContext
    from pytest_convperf.check.fixture import ConvperfFixture
    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.core.results import Comparison
    from pytest_convperf.judge.check_row import CheckRow

# The names the plugin objects are registered under (``-p no:<name>`` leaves one out).
PLUGIN_NAME = "convperf-ab"
HINT_NAME = "convperf-ab-hint"


class RefMeasurement(TypedDict):
    """REF's candidate against the reference: what results.json's ``candidate@ref`` benchmark shows."""

    samples: list[float]
    median: float
    mode: str
    l2: str


class ABFact(TypedDict):
    """A row's ``facts["ab"]`` (:meth:`ABSession.compare`): a mapping, since it rides in the row's
    facts through xdist, the journal and rows.json."""

    a: str
    ref: str
    ref_sha: str
    result: ABResultDict
    a_speedup: float
    a_speedup_ci: list[float]
    ref_speedup: float
    ref_speedup_ci: list[float]
    ref_measurement: RefMeasurement


class ABSession:
    """The REF side of one pytest process: the resolved revision, its worktree, the policy."""

    def __init__(self, config: pytest.Config, spec: str) -> None:
        try:
            self.repo = repo_root(Path(str(config.rootpath)))
            self.ref = resolve(self.repo, spec)
            self.a = working_tree(self.repo)
        except RevisionError as exc:
            raise pytest.UsageError(f"--convperf-against={spec}: {exc}") from None
        self.config = config
        self.checkouts = Checkouts(self.repo)
        self.rows: list[CheckRow] = []  # on the controller at session end: the run's rows
        self._ledger: OpLedger | None = None  # made with REF's worktree (its path names REF's side)

    def _ledger_for(self, tree: Path) -> OpLedger:
        if self._ledger is None:
            self._ledger = OpLedger(self.repo, tree)
        return self._ledger

    def _distinct(self, ledger: OpLedger, when: str) -> None:
        try:
            ledger.note(when)
        except NotDistinct as exc:
            self._fail(str(exc))

    @property
    def tree(self) -> Path:
        return self.checkouts.path(self.ref)

    def _fail(self, message: str) -> None:
        pytest.fail(f"--convperf-against={self.ref.spec}: {message}", pytrace=False)

    def compare(
        self,
        fixture: ConvperfFixture,
        ctx: CheckContext,
        *,
        a_speedup: tuple[float, tuple[float, float]],
    ) -> ABFact:
        """Time A's candidate (``ctx.candidate``) against REF's; return the row's ``facts["ab"]``."""

        from pytest_convperf.check.calls import phase_call

        candidate, problem, phase, inputs = ctx.candidate, ctx.problem, ctx.phase, ctx.inputs
        test_file = Path(str(fixture.request.node.path)).resolve()
        try:
            rel_test = test_file.relative_to(self.repo.resolve()).as_posix()
        except ValueError:
            rel_test = None
        try:
            tree = self.tree
        except RevisionError as exc:
            self._fail(str(exc))
        if rel_test is not None and not (tree / rel_test).is_file():
            self._fail(
                f"revision {self.ref.label} has no {rel_test} (this test's file): the test is new since REF, "
                "so there is nothing to compare; deselect it or pick a REF that has it"
            )
        # Two implementations or no answer (issue 37 item 1): the ops each side registered are noted
        # before REF's import, after REF's first call and after the timing (distinct.OpLedger).
        fixture.progress.at(f"REF {self.ref.label}'s candidate: its import (--convperf-against)")
        ledger = self._ledger_for(tree)
        self._distinct(ledger, "before REF's import")
        try:
            ref_fn = ref_candidate(candidate, self.repo, tree, self.ref.sha, self.ref.label)
        except (CandidateLookupError, NotDistinct) as exc:
            self._fail(str(exc))
        shared = same_callable(candidate, ref_fn, self.repo, tree)
        if shared is not None:
            self._fail(shared)
        device = ctx.device
        fixture.progress.at(f"REF {self.ref.label}'s candidate's first call (--convperf-against)")
        try:  # one call first: a REF kernel that does not build fails here, named, not mid-timing
            phase_call(ref_fn, inputs, problem, phase, ctx.grad_out)()
        except Exception as exc:
            self._fail(
                library_collision(str(exc))
                or f"REF's candidate failed on {problem.id}: {type(exc).__name__}: {exc}"
            )
        self._distinct(ledger, "after REF's first call")
        # imports torch: not at plugin load
        from pytest_convperf.check.calls import phase_calls
        from pytest_convperf.check.paired_timing import PairedTiming

        fixture.progress.at(f"timing against REF {self.ref.label}'s candidate (--convperf-against)")
        timing = PairedTiming.for_check(ctx, phase_calls(ctx.against(ref_fn)))
        first = timing.measure()
        confirm = timing.confirm_of(first)
        cfg = fixture.session.cfg
        policy = ab_policy(device.kind, tolerance=cfg.tolerance, noise_floor=cfg.noise_floor)
        result = decide_ab(first, confirm, policy)
        fixture.progress.at(f"timing REF {self.ref.label}'s candidate against the reference")
        # REF's candidate in A's place, against the check's reference, on the check's inputs.
        ref_ctx = ctx.with_candidate(ref_fn)
        ref_vs_reference = PairedTiming.for_check(ref_ctx, phase_calls(ref_ctx)).measure()
        self._distinct(ledger, "after the A/B's timing")
        ref_meas = first.reference
        return ABFact(
            a=self.a.label,
            ref=self.ref.label,
            ref_sha=self.ref.sha,
            result=result.to_dict(),
            a_speedup=a_speedup[0],
            a_speedup_ci=list(a_speedup[1]),
            ref_speedup=ref_vs_reference.speedup,
            ref_speedup_ci=list(ref_vs_reference.speedup_ci),
            ref_measurement=RefMeasurement(
                samples=list(ref_meas.samples), median=ref_meas.median, mode=ref_meas.mode, l2=ref_meas.l2
            ),
        )

    # ---- hooks ------------------------------------------------------------------------------------
    def pytest_convperf_check_timed(
        self, convperf: ConvperfFixture, context: CheckContext, comparison: Comparison
    ) -> dict[str, ABFact]:
        """The same candidate at REF, timed here: the row's ``facts["ab"]``."""
        convperf.progress.at(f"the A/B against --convperf-against={self.ref.label}")
        ab = self.compare(convperf, context, a_speedup=(comparison.speedup, comparison.speedup_ci))
        return {"ab": ab}

    def pytest_convperf_modify_rows(self, rows: list[CheckRow]) -> None:
        """Keep the run's rows for the terminal summary (the A/B changes none)."""
        self.rows = list(rows)

    @pytest.hookimpl(wrapper=True)
    def pytest_convperf_write_report(
        self,
        rows: Sequence[CheckRow],
        report_dir: Path,
        machine_info: Mapping[str, Any],
        commit_info: Mapping[str, Any],
        when: str,
    ) -> Generator[None, list[list[str]], list[list[str]]]:
        """After the built-in reports: ab.md, ab.png, REF's side in results.json."""
        from pytest_convperf.ab import ab_report

        notes = yield
        return [*notes, ab_report.write(report_dir, rows)]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_convperf.ab.ab_report import terminal_lines

        lines = terminal_lines(self.rows)
        if lines:
            terminalreporter.write_sep("=", "convperf A/B")
            for line in lines:
                terminalreporter.write_line(line)

    def pytest_unconfigure(self) -> None:
        self.checkouts.close()


class GateHint:
    """Without ``--convperf-against``: a check ADVISORY against its stored baseline (the machine too
    noisy between sessions for that gate) gets the other gate named in the summary: the A/B, which
    pairs both revisions in one session and so gates on a shared or noisy machine (issue 36 item 3)."""

    def pytest_convperf_summary_lines(self, rows: Sequence[CheckRow]) -> list[str]:
        from pytest_convperf.core.results import Verdict

        advisory = [row for row in rows if row.verdict == Verdict.ADVISORY]
        if not advisory:
            return []
        return [
            f"convperf: {len(advisory)} check(s) ADVISORY: too noisy between sessions for the stored "
            "baseline to gate here; the A/B gate judges them in one session: run with "
            "--convperf-against=auto (the pull request's merge base) or --convperf-against=REF"
        ]


def configure(config: pytest.Config, cfg: ConvperfConfig) -> None:
    """Register the A/B plugin when ``--convperf-against`` is given (a clear UsageError for a bad REF),
    else the :class:`GateHint`; not the one the run leaves out (``-p no:convperf-ab[-hint]``)."""
    if cfg.against is None:
        if not config.pluginmanager.is_blocked(HINT_NAME):
            config.pluginmanager.register(GateHint(), HINT_NAME)
        return
    if not config.pluginmanager.is_blocked(PLUGIN_NAME):
        config.pluginmanager.register(ABSession(config, cfg.against), PLUGIN_NAME)
