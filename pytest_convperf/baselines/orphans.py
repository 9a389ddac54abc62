"""Orphaned baseline entries (issue 24.5): entries of a test module that no collected test produced.

A renamed or deleted test leaves its entries behind, judged by nothing and carried forever. In a
run that collected a whole module (no ``-k``/``-m`` deselection, no ``file.py::test`` selection)
and where every convperf test of that module either recorded a row or passed, an entry of the
module's baseline file (this machine's folder) whose key no row of the run has is an orphan: the
terminal summary names them, and ``--convperf-update-baselines=prune`` removes them, listed in
``convperf-update.md`` like any other change (syrupy's unused snapshots). Entries of pinned
performance cliffs (``cliff``) are the cliff search's to retire and are never orphans. Runs under
xdist do not report orphans: the controller does not see the workers' collection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_convperf.baselines.store import Store
from pytest_convperf.core.config import CONFIG_KEY
from pytest_convperf.core.markdown_safe import code_span
from pytest_convperf.judge.check_row import CheckRow

PRUNE = "prune"
# The name this plugin object is registered under (``-p no:convperf-orphans`` leaves it out).
PLUGIN_NAME = "convperf-orphans"
Orphans = dict[tuple[str, str], tuple[str, ...]]  # (machine, module) -> keys


def _module(nodeid: str) -> str:
    return Path(nodeid.split("::")[0]).stem


class OrphanWatch:
    """Which modules a run collected whole and whether each convperf test of them reached a row."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.partial: set[str] = set()  # modules with a deselected or unselected test
        self.tests: dict[str, list[str]] = {}  # module -> node ids of its convperf tests
        self.passed: set[str] = set()
        self.found: Orphans = {}

    @property
    def pruning(self) -> bool:
        """``--convperf-update-baselines=prune``, read from the session's config (``CONFIG_KEY``)."""
        return PRUNE in self.config.stash[CONFIG_KEY].update

    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        self.partial.update(_module(item.nodeid) for item in items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.partial.update(_module(arg) for arg in self.config.args if "::" in arg)
        for item in session.items:
            if item.get_closest_marker("convperf") is not None:
                self.tests.setdefault(_module(item.nodeid), []).append(item.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.passed:
            self.passed.add(report.nodeid)

    def find(self, store_root: Path, rows: Sequence[CheckRow]) -> Orphans:
        """The orphans of this run's whole modules, per baseline file; kept in ``found``."""
        if hasattr(self.config, "workerinput") or self.config.pluginmanager.hasplugin("dsession"):
            return {}
        produced: dict[str, set[str]] = {}
        machines: dict[str, str] = {}
        for row in rows:
            produced.setdefault(row.module, set()).add(row.key)
            if row.machine:
                machines[row.module] = row.machine
        with_rows = {row.nodeid for row in rows}
        self.found = {}
        for module, nodeids in self.tests.items():
            complete = all(n in with_rows or n in self.passed for n in nodeids)
            if module in self.partial or not complete or module not in machines:
                continue
            entries = Store(store_root, machines[module]).load(module)
            keys = tuple(
                sorted(k for k, e in entries.items() if k not in produced[module] and e.cliff is None)
            )
            if keys:
                self.found[(machines[module], module)] = keys
        return self.found

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.found:
            return
        for line in summary_lines(self.found, pruned=self.pruning):
            terminalreporter.write_line(line, yellow=not self.pruning)


def summary_lines(orphans: Mapping[tuple[str, str], Sequence[str]], *, pruned: bool) -> list[str]:
    """The terminal's lines: each orphan, and how to remove them (or that they were removed)."""
    count = sum(len(keys) for keys in orphans.values())
    noun = "entry" if count == 1 else "entries"
    what = f"convperf: {count} orphaned baseline {noun} (no collected test produced them)"
    how = (
        "removed by --convperf-update-baselines=prune (see convperf-update.md)"
        if pruned
        else "remove them with --convperf-update-baselines=prune"
    )
    lines = [f"{what}: {how}"]
    for (machine, module), keys in sorted(orphans.items()):
        lines += [f"  {machine}/{module}.yaml: {key}" for key in keys]
    return lines


def render_md(orphans: Mapping[tuple[str, str], Sequence[str]], store_root: Path) -> list[str]:
    """``convperf-update.md``'s section of pruned entries."""
    if not orphans:
        return []
    lines = [
        "## Removed: orphaned entries (no collected test produced them; --convperf-update-baselines=prune)",
        "",
    ]
    for (machine, module), keys in sorted(orphans.items()):
        path = code_span(Store(store_root, machine).path(module))
        lines += [f"- {path}: " + ", ".join(code_span(k) for k in keys)]  # ids: code (core.markdown_safe)
    return [*lines, ""]
