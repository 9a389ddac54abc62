"""Options and ini keys of the store: --convperf-baselines, --convperf-machine with the ini alias
map, --convperf-tolerance (and a per-entry tolerance)."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import Suite, assert_speed_fails


def test_baselines_dir_machine_alias_and_tolerance(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    pytester.makeini("[pytest]\nconvperf_machine_aliases =\n    testbox = lab-class\n    other = lab-class\n")
    suite.run("--convperf-baselines=store", "--convperf-update-baselines", "-k", "test_a").assert_outcomes(
        passed=1
    )
    path = pytester.path / "store" / "lab-class" / "test_suite.yaml"
    assert path.exists() and "machine: lab-class" in path.read_text()
    assert not (pytester.path / "baselines").exists()

    # 20 % slower: a FAIL at the CPU default (5 %), inside --convperf-tolerance=0.3.
    suite.set_ratio(0.6)
    assert_speed_fails(suite.run("--convperf-baselines=store", "-k", "test_a"), 1)
    result = suite.run("--convperf-baselines=store", "-k", "test_a", "--convperf-tolerance=0.3")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*tolerance 30.0 %*"])
    # A per-entry tolerance applies when the command line gives none.
    text = path.read_text().replace("    time_ratio:", "    tolerance: 0.3\n    time_ratio:")
    path.write_text(text)
    suite.run("--convperf-baselines=store", "-k", "test_a").assert_outcomes(passed=1)


def test_bad_tolerance_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    result = suite.run("--convperf-tolerance=5%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is not a number" in result.stderr.str()


def test_cpu_noise_floor_default_and_option(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    from pytest_convperf.judge.verdict import CPU_NOISE_FLOOR

    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines", "-k", "test_a").assert_outcomes(passed=1)
    suite.set_ratio(0.6)  # +20 %: FAIL under the default CPU floor (2 %, docs/statistics.md)...
    suite.noise_floor = None
    result = suite.run("-k", "test_a")
    assert_speed_fails(result, 1)
    result.stdout.fnmatch_lines([f"*noise {CPU_NOISE_FLOOR * 100:.2f} %*"])
    suite.noise_floor = "0.04"  # ...and within the noise of a machine that says it has 4 %: ADVISORY
    result = suite.run("-k", "test_a")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["ADVISORY (1)", "*noise 4.00 %*"])
    suite.noise_floor = "two"
    result = suite.run("-k", "test_a")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--convperf-noise-floor='two' is not a number" in result.stderr.str()


def test_fake_timer_numbers_never_land_in_a_detected_machines_folder(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    Suite(pytester, monkeypatch, plugin_args)  # sets $CONVPERF_FAKE_TIMER
    args = (*plugin_args, "--convperf", "--convperf-device=cpu", "-p", "no:cacheprovider")
    result = pytester.runpytest(*args, "--convperf-noise-floor=0.02", "--convperf-update-baselines")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["convperf: device cpu*timer fake timer*", "timer: fake timer*"])
    folders = [p.name for p in (pytester.path / "baselines").iterdir()]
    assert len(folders) == 1 and folders[0].endswith("-fake"), folders
    assert "(new) -> 0.5" in (pytester.path / "convperf-update.md").read_text()
