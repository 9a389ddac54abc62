"""``python -m pytest_convperf calibrate``: K unchanged runs in subprocesses -> each entry's noise =
between-run SD of ln(time ratio), with a floor, and its ratio pooled with the runs when they agree;
entries it did not have are created from the runs."""

from __future__ import annotations

import math
import statistics
import sys

import pytest

from pytest_convperf.baselines.calibration import calibrate_records, noise_of
from tests.integration._lifecycle import MACHINE, Suite, replay_conftest, subprocess_env
from tools.ab_scratch import git

RATIOS = [0.50, 0.52, 0.48, 0.51]


def test_calibrate_stores_between_run_noise(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    subprocess_env(monkeypatch)
    # A repository: the recording and the runs measure the same code (updates.code_state).
    # The conftest is code too (committed); the fake timer, its counter, pytester's output files and
    # the caches under its $HOME are data (ignored): an untracked file would make the runs other
    # code (updates.code_state).
    pytester.makeconftest(replay_conftest(RATIOS))
    (pytester.path / ".gitignore").write_text(
        "\n".join(["fake-timer.json", "run-counter.txt", "__pycache__/", "stdout", "stderr", ".*/", ""])
    )
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "test_suite.py", "conftest.py", ".gitignore")
    git(pytester.path, "commit", "-qm", "suite")
    # test_a has an entry already (the runs agree with it: its ratio is pooled with theirs);
    # test_b has none (calibrate creates it). The recording is the conftest's run 0 (RATIOS[0]).
    suite.run("--convperf-update-baselines", "-k", "test_a").assert_outcomes(passed=1)
    stored_ratio = suite.entries()[suite.key("test_a")]["time_ratio"]
    assert stored_ratio == pytest.approx(RATIOS[0])
    result = pytester.run(
        sys.executable,
        "-m",
        "pytest_convperf",
        "calibrate",
        "test_suite.py",
        f"--convperf-machine={MACHINE}",
        "--convperf-device=cpu",
        "--runs",
        str(len(RATIOS)),
        "--floor",
        "0.01",  # the fake timer is a quiet machine (the CPU default floor is higher)
    )
    assert result.ret == 0, result.stderr.str()
    sd = statistics.stdev(math.log(r) for r in RATIOS)
    expected = noise_of([math.log(r) for r in RATIOS], 0.01)  # SD of the spike-free runs
    entries = suite.entries()
    a, b = entries[suite.key("test_a")], entries[suite.key("test_b")]
    assert a["noise"] == pytest.approx(expected, rel=1e-2) and a["noise_runs"] == len(RATIOS)
    median_ln = statistics.median(math.log(r) for r in RATIOS)
    assert a["time_ratio"] == pytest.approx(math.exp((math.log(stored_ratio) + 4 * median_ln) / 5), rel=1e-3)
    assert a["ref_runs"] == 1 + len(RATIOS)
    assert b["noise"] == pytest.approx(expected, rel=1e-2) and b["ref_runs"] == len(RATIOS)
    assert b["correctness"]["max_abs"] >= 0  # created entries carry what a recorded one does
    assert b["time_ratio"] == pytest.approx(math.exp(median_ln), rel=1e-3)
    result.stdout.fnmatch_lines([f"*between-run SD {sd:.2%} over 4 runs -> noise {expected:.2%}*"])


def test_floor_applies_and_bad_runs_are_refused(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    subprocess_env(monkeypatch)
    records = [
        [
            {
                "ln_ratio": -0.693,
                "baselines_file": "f.yaml",
                "machine": "m",
                "key": "k",
                "device_kind": "cpu",
                "us": {"candidate": 1, "reference": 2},
                "env": {},
            }
        ]
        for _ in range(3)
    ]
    folded = calibrate_records(records)
    check = folded["f.yaml"]["checks"]["k"]
    assert check["sd"] == 0.0 and check["noise"] == check["floor"] > 0
    assert calibrate_records(records, floor=0.004)["f.yaml"]["checks"]["k"]["noise"] == 0.004
    result = pytester.run(sys.executable, "-m", "pytest_convperf", "calibrate", "--runs", "1")
    assert result.ret == 2 and "at least 2" in result.stderr.str()


def test_inconclusive_records_are_not_folded() -> None:
    def rec(ln: float, verdict: str) -> dict[str, object]:
        return {"ln_ratio": ln, "verdict": verdict, "baselines_file": "f.yaml", "machine": "m", "key": "k"}

    runs = [[rec(-0.693, "PASS")], [rec(-0.693, "PASS")], [rec(0.5, "INCONCLUSIVE")]]
    check = calibrate_records(runs)["f.yaml"]["checks"]["k"]
    assert check["runs"] == 2 and check["sd"] == 0.0


def test_calibrate_keeps_the_ratio_of_a_candidate_in_an_untracked_module(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    # Issue 25.2: the candidate lived in an untracked module that then became 30 % slower; calibrate
    # saw a clean HEAD, said it measured the recorded code and replaced the ratio 1.012 -> 1.319.
    suite = Suite(pytester, monkeypatch, plugin_args)
    subprocess_env(monkeypatch)
    (pytester.path / ".gitignore").write_text(
        "\n".join(["fake-timer.json", "__pycache__/", "stdout", "stderr", ".*/", ""])
    )
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "test_suite.py", ".gitignore")
    git(pytester.path, "commit", "-qm", "suite")
    (pytester.path / "fast_conv.py").write_text("def candidate(*args): ...\n")  # never committed
    suite.set_ratio(1.012)
    suite.run("--convperf-update-baselines", "-k", "test_a").assert_outcomes(passed=1)
    suite.set_ratio(1.319)  # the untracked module's regression
    result = pytester.run(
        sys.executable, "-m", "pytest_convperf", "calibrate", "test_suite.py", "-k", "test_a",
        f"--convperf-machine={MACHINE}", "--convperf-device=cpu", "--runs", "3", "--floor", "0.01",
    )  # fmt: skip
    assert result.ret == 0, result.stderr.str()
    assert suite.entries()[suite.key("test_a")]["time_ratio"] == pytest.approx(1.012)
    result.stdout.fnmatch_lines(["*ratio kept: the runs measured other code than the recording (*+dirty*"])


UNTIMED = """
import pathlib

def test_fuzz_like():  # no convperf check: calibrate must not run it (issue 38.3)
    with open(pathlib.Path(__file__).with_name("untimed-ran.txt"), "a") as fh:
        fh.write("ran\\n")
"""


def test_calibrate_runs_the_timed_checks_only_and_says_what_each_run_measured(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    Suite(pytester, monkeypatch, plugin_args)  # test_a, test_b: checks at ratio 0.5 (fake timer)
    subprocess_env(monkeypatch)
    pytester.makepyfile(test_untimed=UNTIMED)
    result = pytester.run(
        sys.executable, "-m", "pytest_convperf", "calibrate", "test_suite.py", "test_untimed.py",
        f"--convperf-machine={MACHINE}", "--convperf-device=cpu", "--runs", "2", "--floor", "0.01",
    )  # fmt: skip
    assert result.ret == 0, result.stderr.str()
    assert not (pytester.path / "untimed-ran.txt").exists()
    result.stdout.fnmatch_lines(
        [
            "calibrate: run 1/2 (load *): * -m convperf *",
            "calibrate: run 1/2 took * s; about * left",
            "    test_a?*?: ratio 0.5 (speedup 2.000x), NEW",
            "    test_b?*?: ratio 0.5 (speedup 2.000x), NEW",
            "calibrate: run 2/2 took * s; the last run",
        ]
    )


def test_calibrate_of_a_selection_without_checks_says_so(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    subprocess_env(monkeypatch)
    pytester.makepyfile(test_untimed=UNTIMED)
    result = pytester.run(
        sys.executable, "-m", "pytest_convperf", "calibrate", "test_untimed.py", "--runs", "2"
    )
    assert result.ret == 5
    assert "the selection has no convperf checks" in result.stderr.str()
    assert not (pytester.path / "untimed-ran.txt").exists()
