"""STALE: a changed torch/cuDNN/driver/backend makes the comparison stale, never a FAIL; the
message names what changed and which side (candidate or reference) moved."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import REF_S, Suite, assert_speed_fails


def _baselined(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> tuple[Suite, str]:
    """The lifecycle suite with baselines stored for both tests, and ``test_a``'s key."""
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=2)
    return suite, suite.key("test_a")


def test_env_change_is_stale_and_says_which_side_moved(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite, key = _baselined(pytester, monkeypatch, plugin_args)
    torch_now = suite.entries()[key]["env"]["torch"]
    suite.edit(key, env={**suite.entries()[key]["env"], "torch": "1.0.0"})
    # Candidate unchanged (500 us), the reference got faster (1000 -> 800 us): ratio 0.625.
    suite.set_ratio(0.625, ref_s=0.8 * REF_S)
    result = suite.run()
    # test_b kept its environment: the same numbers are a real slowdown there (+25 %), so it fails
    # (kept across the session: its test counts failed; the STALE check is outside the family).
    assert_speed_fails(result, 1, passed=1)
    out = result.stdout.str()
    assert f"STALE: environment changed (torch 1.0.0 -> {torch_now})" in out
    assert "the reference moved" in out and "reference 1000 -> 800 us" in out


def test_backend_change_is_stale(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite, key = _baselined(pytester, monkeypatch, plugin_args)
    if suite.entries()[key].get("reference_backend") is None:
        pytest.skip("this torch does not report the conv backend (torch._C._select_conv_backend)")
    suite.edit(key, reference_backend="SomeOtherBackend")
    result = suite.run("-k", "test_a")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["STALE (1)", "*reference_backend SomeOtherBackend -> *"])
    # The default update refreshes a stale entry (same ratio: no reason needed).
    suite.run("--convperf-update-baselines", "-k", "test_a").assert_outcomes(passed=1)
    assert suite.entries()[key]["reference_backend"] != "SomeOtherBackend"
    suite.run("-k", "test_a").stdout.fnmatch_lines(["PASS (1)"])
