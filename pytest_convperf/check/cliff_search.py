"""The ``convperf_cliffs`` fixture: a family's worst-speedup search, its shrunk cliff, pinned cliffs.

``convperf_cliffs.search(family, candidate, problems, ...)`` (issue 18 item 3), in order:

1. re-checks every cliff pinned in this test's baseline file for ``family`` with
   ``convperf.check`` (judged against its stored entry like a seed shape, one row each); in an
   update run it plans the cliff's retirement (:func:`pytest_convperf.judge.cliffs.plan_pinned`);
2. searches with Hypothesis, ``target()`` steering towards the slowest speedup. With a declared
   floor (``convperf_speedup_floor``), an example under it that is not pinned yet fails, and
   Hypothesis shrinks it to the simplest shape still under the floor. Each shape is timed once
   (``convperf.measure``) and its result reused, so the shrinker's replays agree with the search;
3. returns a :class:`SearchResult`: the shrunk cliff (or, with none, the worst shape seen), its
   speedup and a repro line; in an update run a new cliff's pin
   (:func:`~pytest_convperf.judge.cliffs.plan_found`).

:meth:`CliffSearch.enforce` then fails the test on an unpinned cliff (unless this run pinned it)
or on a failed re-check. The rules themselves are the pure :mod:`pytest_convperf.judge.cliffs`.

:class:`CliffPins` (the plugin ``convperf-cliffs``) carries the planned pin/retire/keep changes
from the test to the controller (on the test's report, so across xdist), which hands them to the
baseline update at session end (``pytest_convperf_cliff_changes``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from pytest_convperf.baselines.updates import new_entry
from pytest_convperf.core.config import is_controller
from pytest_convperf.core.env import env_from_facts
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.judge.cliffs import CLIFFS_PROPERTY, CliffChange, plan_found, plan_pinned
from pytest_convperf.judge.policy import policy_for

if TYPE_CHECKING:
    from pytest_convperf.check.context import Candidate
    from pytest_convperf.check.fixture import ConvperfFixture
    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.core.results import Comparison


class _UnderFloor(AssertionError):
    """An unpinned shape under the floor: the example Hypothesis shrinks."""

    def __init__(self, problem: Conv2dProblem, speedup: float, floor: float) -> None:
        super().__init__(f"speedup {speedup:.3f}x on {problem.id} is under the floor {floor:g}x")
        self.problem = problem


@dataclass
class SearchResult:
    """What one search found: the worst (or shrunk cliff) shape, its speedup, and what failed."""

    family: str
    worst: Conv2dProblem
    speedup: float
    timed: int  # shapes timed, shrinking included
    best: float
    floor: float | None
    cliff: bool  # an unpinned shape under the floor, shrunk
    pinned_now: bool = False  # this update run pins it
    repro: str = ""
    failures: list[str] = field(default_factory=list)  # re-checks of pinned cliffs that failed
    skipped: list[str] = field(default_factory=list)  # ... and those INCONCLUSIVE (reported, not failed)

    def line(self) -> str:
        what = "shrunk cliff" if self.cliff else "worst forward speedup"
        floor = f", floor {self.floor:g}x" if self.floor is not None else ""
        skipped = "".join(f"; {s}" for s in self.skipped)
        return (
            f"{what} {self.speedup:.2f}x on `{self.worst.id}` ({self.timed} shapes timed, best "
            f"{self.best:.2f}x{floor}); repro: {self.repro}{skipped}"
        )


class CliffSearch:
    """Object behind the ``convperf_cliffs`` fixture (one per test)."""

    def __init__(self, convperf: ConvperfFixture) -> None:
        self.convperf = convperf
        self.session = convperf.session

    @property
    def cfg(self) -> ConvperfConfig:
        return self.convperf.cfg  # the session's, not a copy

    def _where(self, key: str) -> tuple[str, str, str]:
        return (self._store().machine, self.convperf.module, key)

    def _store(self) -> Any:
        return self.convperf.store  # the fixture chooses the store once (fake timer: -fake)

    def pinned(self, family: str) -> list[tuple[str, Conv2dProblem]]:
        """(key, problem) of the cliffs pinned for ``family`` in this test's baseline file."""
        entries = self._store().load(self.convperf.module)
        out = []
        for key, entry in sorted(entries.items()):
            if entry.cliff is not None and entry.cliff["family"] == family:
                problem = Conv2dProblem.from_id(str(entry.cliff["problem"]))
                if self.convperf.key(problem, "forward") == key:  # pinned by this test
                    out.append((key, problem))
        return out

    def recheck(self, family: str, candidate: Candidate) -> tuple[list[str], list[str]]:
        """Check each pinned cliff like a seed shape; plan retirements. The messages of the re-checks
        that failed, and of those skipped (INCONCLUSIVE: never grounds to retire, nor to fail)."""
        floor = self.cfg.speedup_floors.get(family)
        failures: list[str] = []
        skipped: list[str] = []
        for key, problem in self.pinned(family):
            stored = self._store().get(self.convperf.module, key)
            assert stored is not None and stored.cliff is not None  # ``pinned`` read it just now
            try:
                comparison = self.convperf.check(candidate, problem)
            except pytest.fail.Exception as exc:  # the other pinned cliffs still run
                failures.append(f"pinned cliff {key}: {exc}")
                continue
            except pytest.skip.Exception as exc:
                skipped.append(f"pinned cliff {key} skipped: {exc}")
                continue
            change = plan_pinned(
                self.cfg.update,
                where=self._where(key),
                stored=stored.cliff,
                floor=floor,
                speedup=comparison.speedup,
            )
            if change is not None:
                CliffPins.of(self.convperf.request.config).record(self.convperf.nodeid, change)
        return failures, skipped

    def search(
        self,
        family: str,
        candidate: Candidate,
        problems: st.SearchStrategy[Conv2dProblem],
        *,
        max_examples: int,
        prepare: Callable[[Conv2dProblem], Conv2dProblem] = lambda p: p,
    ) -> SearchResult:
        """Re-check the pinned cliffs, then search ``problems`` (each passed through ``prepare``)."""
        failures, skipped = self.recheck(family, candidate)
        pinned = {problem.id for _, problem in self.pinned(family)}
        floor = self.cfg.speedup_floors.get(family)
        timed: dict[str, tuple[Comparison, Conv2dProblem]] = {}

        def measure(problem: Conv2dProblem) -> Comparison:
            if problem.id not in timed:  # once per shape: the shrinker's replays see the same number
                timed[problem.id] = (self.convperf.measure(candidate, problem, phase="forward"), problem)
            return timed[problem.id][0]

        @settings(
            max_examples=max_examples,
            deadline=None,
            database=None,
            report_multiple_bugs=False,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(problem=problems)
        def run(problem: Conv2dProblem) -> None:
            problem = prepare(problem)
            comparison = measure(problem)
            if comparison.inconclusive:  # unstable clocks: neither a cliff nor a direction to steer in
                return
            speedup = comparison.speedup
            target(math.log(1.0 / speedup), label="log slowdown vs the reference")
            if floor is not None and speedup < floor and problem.id not in pinned:
                raise _UnderFloor(problem, speedup, floor)

        cliff: Conv2dProblem | None = None
        try:
            run()
        except _UnderFloor as exc:
            cliff = exc.problem
        if not timed:
            pytest.fail(f"the {family} search timed no shape", pytrace=False)
        usable = [item for item in timed.values() if not item[0].inconclusive] or list(timed.values())
        worst = cliff or min(usable, key=lambda item: item[0].speedup)[1]
        comparison = timed[worst.id][0]
        result = SearchResult(
            family,
            worst,
            comparison.speedup,
            len(timed),
            max(c.speedup for c, _ in timed.values()),
            floor,
            cliff is not None,
            failures=failures,
            skipped=skipped,
        )
        result.repro = f'convperf.check(candidate, Conv2dProblem.from_id("{worst.id}"))'
        if cliff is not None and floor is not None:
            result.pinned_now = self._plan_pin(result, comparison, floor)
        return result

    def _plan_pin(self, result: SearchResult, comparison: Comparison, floor: float) -> bool:
        """Record the pin (or why not) of a new cliff in an update run; whether it is pinned."""
        device = self.convperf.device
        entry = new_entry(
            comparison,
            None,
            policy_for(self.cfg, device.kind, None),
            env=env_from_facts(device.facts),
            backend=comparison.facts.get("reference_backend"),
            errors=(),
        )
        cliff = {
            "family": result.family,
            "problem": result.worst.id,
            "floor": floor,
            "speedup": result.speedup,
        }
        raw = {**entry.to_yaml(), "cliff": cliff}
        key = self.convperf.key(result.worst, "forward")
        change = plan_found(
            self.cfg.update,
            where=self._where(key),
            family=result.family,
            problem=result.worst.id,
            floor=floor,
            speedup=result.speedup,
            entry=raw,
        )
        if change is None:
            return False
        CliffPins.of(self.convperf.request.config).record(self.convperf.nodeid, change)
        return change.action == "pin"

    def enforce(self, result: SearchResult) -> None:
        """Fail on an unpinned cliff (unless this update pins it) and on failed pinned re-checks."""
        problems = list(result.failures)
        if result.cliff and not result.pinned_now:
            problems.append(
                f"performance cliff: {result.family}'s speedup {result.speedup:.3f}x on {result.worst.id} "
                f"(shrunk) is under its declared floor {result.floor:g}x (convperf_speedup_floor); fix the "
                "kernel for this shape, or pin it for review with --convperf-update-baselines=cliffs "
                f'(and --convperf-reason=TEXT for the reviewers): pytest --convperf "{self.convperf.nodeid}" '
                f"--convperf-update-baselines=cliffs\nrepro: {result.repro}"
            )
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


# The name the plugin object is registered under.
PLUGIN_NAME = "convperf-cliffs"


class CliffPins:
    """A run's cliff changes (``cliffs.CliffChange``): kept by node id in the process that ran the
    search until the test's report carries them (as dicts: xdist sends them), and on the controller
    those of the whole run, which ``session.pytest_sessionfinish`` hands to the baseline update."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.pending: dict[str, list[dict[str, Any]]] = {}
        self.received: list[dict[str, Any]] = []

    @staticmethod
    def of(config: pytest.Config) -> CliffPins:
        """The session's plugin; a clear failure when ``-p no:convperf-cliffs`` left it out."""
        pins = config.pluginmanager.get_plugin(PLUGIN_NAME)
        if not isinstance(pins, CliffPins):
            pytest.fail(
                f"a cliff change needs the {PLUGIN_NAME} plugin, which this run left out "
                f"(-p no:{PLUGIN_NAME}); drop that option to pin or retire cliffs",
                pytrace=False,
            )
        return pins

    def record(self, nodeid: str, change: CliffChange) -> None:
        """A search's pin/retire/keep decision, applied by the controller's update."""
        self.pending.setdefault(nodeid, []).append(change.to_dict())

    def pytest_convperf_cliff_changes(self) -> list[CliffChange]:
        """On the controller at session end: every change of the run."""
        return [CliffChange.from_dict(change) for change in self.received]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        changes = self.pending.pop(item.nodeid, []) if call.when == "call" else []
        if changes:
            report.user_properties.append((CLIFFS_PROPERTY, changes))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect the changes of every report: this process's, or those a worker sent to the controller."""
        if not is_controller(self.config) or report.when != "call":
            return
        for name, value in report.user_properties:
            if name == CLIFFS_PROPERTY and isinstance(value, list):
                self.received.extend(value)
