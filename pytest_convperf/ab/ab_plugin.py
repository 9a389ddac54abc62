"""``--convperf-against=REF``: every convperf check also times its candidate at REF (pytest glue).

Per check (``ConvperfFixture.check`` calls :meth:`ABSession.compare` after its own timing and
before its gate): REF's candidate is found by the contract of :mod:`pytest_convperf.ab.refimport`
in a worktree of REF (:mod:`pytest_convperf.ab.revisions`), called once (a REF whose kernel does not
build fails here with the compiler's first lines), then timed against A's candidate in paired,
alternating rounds on the check's own inputs (one process: the drift both share cancels) and
judged by :func:`pytest_convperf.ab.rule.decide_ab`; REF's candidate is also timed against the check's
reference, for REF's speedup. The result rides in the row's ``facts["ab"]``; the terminal summary,
``ab.md``, ``ab.png`` and ``results.json`` show it (:mod:`pytest_convperf.ab.ab_report`). The A/B
never fails a test by itself (a pull-request job reads the table); bad input fails with a message.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_convperf.ab.refimport import CandidateLookupError, ref_candidate
from pytest_convperf.ab.revisions import Checkouts, RevisionError, repo_root, resolve, working_tree
from pytest_convperf.ab.rule import ab_policy, decide_ab

if TYPE_CHECKING:
    from pytest_convperf.check.context import CheckContext
    from pytest_convperf.core.results import CheckRow

OPTION = "convperf_against"


def add_option(group: Any) -> None:
    group.addoption(
        "--convperf-against",
        default=None,
        dest=OPTION,
        metavar="REF",
        help="also time every check's candidate at git revision REF (branch, tag, HEAD~1, a hash) and "
        "report FASTER/SLOWER/SAME/INCONCLUSIVE per check; REF is checked out in a temporary worktree",
    )


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

    @property
    def tree(self) -> Path:
        return self.checkouts.path(self.ref)

    def _fail(self, message: str) -> None:
        pytest.fail(f"--convperf-against={self.ref.spec}: {message}", pytrace=False)

    def compare(
        self,
        fixture: Any,  # check.ConvperfFixture (check imports this module)
        ctx: CheckContext,
        *,
        a_speedup: tuple[float, tuple[float, float]],
    ) -> dict[str, Any]:
        """Time A's candidate (``ctx.candidate``) against REF's; return the row's ``facts["ab"]``."""
        from dataclasses import replace

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
        try:
            ref_fn = ref_candidate(candidate, self.repo, tree, self.ref.sha, self.ref.label)
        except CandidateLookupError as exc:
            self._fail(str(exc))
        device = ctx.device
        fixture.progress.at(f"REF {self.ref.label}'s candidate's first call (--convperf-against)")
        try:  # one call first: a REF kernel that does not build fails here, named, not mid-timing
            phase_call(ref_fn, inputs, problem, phase, ctx.seed, device.torch_device)()
        except Exception as exc:
            self._fail(f"REF's candidate failed on {problem.id}: {type(exc).__name__}: {exc}")
        from pytest_convperf.check.pairing import time_pair  # imports torch: not at plugin load

        fixture.progress.at(f"timing against REF {self.ref.label}'s candidate (--convperf-against)")
        timed = time_pair(ctx, reference=ref_fn)
        first, confirm = timed.first, timed.confirm
        cfg = fixture.session.cfg
        policy = ab_policy(device.kind, tolerance=cfg.tolerance, noise_floor=cfg.noise_floor)
        result = decide_ab(first, confirm, policy)
        fixture.progress.at(f"timing REF {self.ref.label}'s candidate against the reference")
        # REF's candidate in A's place, against the check's reference, on the check's inputs.
        ref_vs_reference = time_pair(replace(ctx, candidate=ref_fn)).first
        ref_meas = first.reference
        return {
            "a": self.a.label,
            "ref": self.ref.label,
            "ref_sha": self.ref.sha,
            "result": result.to_dict(),
            "a_speedup": a_speedup[0],
            "a_speedup_ci": list(a_speedup[1]),
            "ref_speedup": ref_vs_reference.speedup,
            "ref_speedup_ci": list(ref_vs_reference.speedup_ci),
            "ref_measurement": {
                "samples": list(ref_meas.samples),
                "median": ref_meas.median,
                "mode": ref_meas.mode,
                "l2": ref_meas.l2,
            },
        }

    # ---- hooks ------------------------------------------------------------------------------------
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
        from pytest_convperf.session import SESSION_KEY, is_controller

        if not is_controller(self.config):
            return
        lines = terminal_lines(self.config.stash[SESSION_KEY].rows)
        if lines:
            terminalreporter.write_sep("=", "convperf A/B")
            for line in lines:
                terminalreporter.write_line(line)

    def pytest_unconfigure(self) -> None:
        self.checkouts.close()


AB_KEY = pytest.StashKey["ABSession | None"]()


def configure(config: pytest.Config) -> None:
    """Set up the A/B when ``--convperf-against`` is given (a clear UsageError for a bad REF)."""
    spec = config.getoption(OPTION, default=None)
    if spec is None:
        config.stash[AB_KEY] = None
        return
    if not str(spec).strip():  # "--convperf-against=" (an unset variable) would run no A/B, silently
        raise pytest.UsageError(
            "--convperf-against is empty: give the revision to compare against (a branch, tag, hash or "
            "HEAD~1), or drop the option"
        )
    session = ABSession(config, str(spec))
    config.stash[AB_KEY] = session
    config.pluginmanager.register(session, "convperf-ab")


def ab_session(config: pytest.Config) -> ABSession | None:
    return config.stash.get(AB_KEY, None)
