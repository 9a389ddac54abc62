"""Orphaned baseline entries (issue 24.5): a whole-module run names the entries no collected test
produced; ``--convperf-update-baselines=prune`` removes them and lists them in convperf-update.md."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import MACHINE, Suite


def test_orphans_are_named_then_pruned(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines=new").assert_outcomes(passed=2)
    gone = suite.key("test_b")
    # test_b is renamed: its entry is produced by no test any more.
    suite_py = pytester.path / "test_suite.py"
    suite_py.write_text(suite_py.read_text().replace("def test_b(", "def test_c("))

    partial = suite.run("-k", "test_a")  # not the whole module: nothing is called an orphan
    assert "orphaned" not in partial.stdout.str()

    whole = suite.run()
    whole.stdout.fnmatch_lines(
        [
            "convperf: 1 orphaned baseline entry (no collected test produced them): remove them with "
            "--convperf-update-baselines=prune",
            f"  {MACHINE}/test_suite.yaml: {gone}",
        ]
    )
    assert gone in suite.entries()

    pruned = suite.run("--convperf-update-baselines=prune")
    pruned.stdout.fnmatch_lines(["*1 orphaned baseline entry*removed by --convperf-update-baselines=prune*"])
    assert gone not in suite.entries() and suite.key("test_a") in suite.entries()
    review = (pytester.path / "convperf-update.md").read_text()
    assert "Removed: orphaned entries" in review and f"` {gone} `" in review
