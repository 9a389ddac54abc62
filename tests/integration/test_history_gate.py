"""Issue 36 item 2, end to end: sessions each ADVISORY (too noisy to gate alone) whose series steps
30 % slower fail the night once the step has persisted 3 sessions: the summary says HISTORY_FAIL with
the commit range, ``history_findings.json`` holds it for the alerts, and the exit status is 1."""

from __future__ import annotations

import json

import pytest

from tests.integration._lifecycle import Suite

pytest.importorskip("ruptures")


def test_a_step_across_advisory_sessions_fails_the_night(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.noise_floor = "0.3"  # every session alone is ADVISORY: too noisy to catch 30 %
    report = pytester.path / "report"
    suite.run("--convperf-update-baselines", f"--convperf-report={report}").assert_outcomes(passed=2)
    outcomes = []
    for ratio in (0.5, 0.502, 0.499, 0.65, 0.652, 0.649):
        suite.set_ratio(ratio)
        result = suite.run(f"--convperf-report={report}")
        outcomes.append(result.ret)
        assert "FAIL (" not in result.stdout.str()  # no session alone fails
    assert outcomes[:5] == [0] * 5, outcomes  # the step has not persisted 3 sessions yet
    assert outcomes[5] == 1, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["convperf history: HISTORY_FAIL: *slower by 30.0 %*3 runs after 4 before*", "*the session FAILS*"]
    )
    # Tonight's sessions taught the gate this machine's noise (the jitter of the ratios above).
    result.stdout.fnmatch_lines(
        ["convperf: machine noise * % (10 check-session pairs, df 3), learned from *"]
    )
    saved = json.loads((report / "history_findings.json").read_text())
    assert len(saved) == 2 and {f["verdict"] for f in saved} == {"HISTORY_FAIL"}
