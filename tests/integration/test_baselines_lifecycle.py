"""The main lifecycle, transition by transition: missing -> NEW; update -> written; PASS; drift ->
FAIL with the file untouched; a slower update needs a reason; with it, rewritten; next run PASS."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import PROBLEM, Suite, assert_speed_fails


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]) -> Suite:
    return Suite(pytester, monkeypatch, plugin_args)


def test_full_lifecycle(suite: Suite) -> None:
    # 1. No baseline: NEW passes with a visible note; nothing is written without an update flag.
    result = suite.run()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*convperf: NEW 2*", "NEW (2)", "  test_suite: 2 new checks*not recorded*"])
    assert not suite.file.exists()

    # 2. Update (bare flag = failed,new): both entries recorded, convperf-update.md written.
    result = suite.run("--convperf-update-baselines")
    result.assert_outcomes(passed=2)
    entries = suite.entries()
    assert len(entries) == 2
    entry = entries[suite.key()]
    assert entry["time_ratio"] == pytest.approx(0.5)
    assert entry["us"] == {"candidate": pytest.approx(500.0), "reference": pytest.approx(1000.0)}
    assert set(entry["env"]) >= {"torch"}
    update_md = (suite.pytester.path / "convperf-update.md").read_text()
    assert "(new) -> 0.5" in update_md

    # 3. Same speed: PASS.
    result = suite.run()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["PASS (2)"])

    # 4. 20 % slower: FAIL, confirmed and kept across the night (the session fails naming both
    # checks); the message has delta, CI, times, tolerance, noise.
    before = suite.file.read_bytes()
    suite.set_ratio(0.6)
    result = suite.run()
    assert_speed_fails(result, 2)
    result.stdout.fnmatch_lines(
        [
            "*FAIL (confirmed): slower than the baseline by more than 5.0 %*",
            "*delta +20.0 %*",
        ]
    )
    out = result.stdout.str()
    for part in ("candidate 500 -> 600 us", "reference 1000 -> 1000 us", "tolerance 5.0 %", "noise"):
        assert part in out
    assert suite.file.read_bytes() == before

    # 5. Recording the slower ratio without a reason is refused: the test fails, the file stays.
    result = suite.run("--convperf-update-baselines")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*needs --convperf-reason=TEXT*"])
    assert suite.file.read_bytes() == before

    # 6. With a reason: rewritten, the reason stored with the entry and in convperf-update.md.
    result = suite.run("--convperf-update-baselines", "--convperf-reason=trade speed for accuracy")
    result.assert_outcomes(passed=2)
    entry = suite.entries()[suite.key()]
    assert entry["time_ratio"] == pytest.approx(0.6)
    assert entry["updated"]["reason"] == "trade speed for accuracy"
    update_md = (suite.pytester.path / "convperf-update.md").read_text()
    assert (
        "0.5 (speedup 2x) -> 0.6 (speedup 1.67x) (+20.0 %" in update_md
        and "trade speed for accuracy" in update_md
    )

    # 7. Next run at the new speed: PASS.
    suite.run().assert_outcomes(passed=2)


CLASSES = f"""
import pytest
import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem

P = {PROBLEM}


class TestA:
    @pytest.mark.convperf
    def test_x(self, convperf):
        convperf.check(F.conv2d, P)


class TestB:
    @pytest.mark.convperf
    def test_x(self, convperf):
        convperf.check(F.conv2d, P)
"""

DUP = f"""
import pytest
import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem


@pytest.mark.convperf
def test_x(convperf):
    convperf.check(F.conv2d, {PROBLEM})
"""


def test_same_named_methods_of_two_classes_get_two_keys(suite: Suite) -> None:
    (suite.pytester.path / "test_suite.py").write_text(CLASSES)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=2)
    keys = sorted(suite.entries())
    assert [k.split("@")[0] for k in keys] == ["TestA::test_x", "TestB::test_x"]


def test_two_same_named_test_files_sharing_a_baseline_file_are_a_usage_error(suite: Suite) -> None:
    (suite.pytester.path / "test_suite.py").unlink()
    for sub in ("a", "b"):
        (suite.pytester.path / sub).mkdir()
        (suite.pytester.path / sub / "test_dup.py").write_text(DUP)
    result = suite.run("--convperf-update-baselines", "--import-mode=importlib")
    result.stderr.fnmatch_lines(["*same baseline key*a/test_dup.py::test_x*b/test_dup.py::test_x*"])
    assert not (suite.pytester.path / "baselines" / "testbox" / "test_dup.yaml").exists()
