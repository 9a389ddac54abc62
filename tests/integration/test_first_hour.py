"""The first-hour traps of issue 24.4, each as a new user hits it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_convperf.core.options import bare_update_flag
from pytest_convperf.header import RECORD_HINT, baseline_lines
from tests.integration._lifecycle import Suite

SHOW_UPDATE = """
from pytest_convperf.core.config import get_config

def test_show(request):
    print("UPDATE", sorted(get_config(request.config).update))
"""


def test_bare_update_flag_before_a_path_means_failed_new() -> None:
    assert bare_update_flag(["--convperf-update-baselines", "perf_tests"]) == [
        "--convperf-update-baselines=failed,new",
        "perf_tests",
    ]
    kept = ["--convperf-update-baselines", "improved", "x.py"]
    assert bare_update_flag(kept) == kept  # a value stays a value
    assert bare_update_flag(["--convperf-update-baselines", "-q"]) == ["--convperf-update-baselines", "-q"]


def test_bare_update_flag_then_a_path_runs_that_path(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...]
) -> None:
    # What the terminal, the YAML header and the FAIL hint print, followed by a path.
    path = pytester.makepyfile(test_show=SHOW_UPDATE)
    result = pytester.runpytest(
        *plugin_args, "-s", "--convperf", "--convperf-device=cpu", "--convperf-update-baselines", str(path)
    )
    result.assert_outcomes(passed=1)
    assert "UPDATE ['failed', 'new']" in result.stdout.str()


def test_header_says_the_repositorys_baselines_are_another_machines(tmp_path: Path) -> None:
    (tmp_path / "nvidia-h100-80gb-hbm3").mkdir()
    (tmp_path / "nvidia-h100-80gb-hbm3" / "test_x.yaml").write_text("benchmarks: {}\n")
    lines = "\n".join(baseline_lines(tmp_path / "amd-epyc-1t", updating=False))
    assert "are for nvidia-h100-80gb-hbm3, not this machine (amd-epyc-1t): every check will read NEW" in lines
    assert RECORD_HINT in lines
    assert "are for" not in "\n".join(baseline_lines(tmp_path / "amd-epyc-1t", updating=True))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes any folder")
def test_header_names_an_unwritable_baselines_folder(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        lines = "\n".join(baseline_lines(tmp_path / "m", updating=False))
    finally:
        tmp_path.chmod(0o700)
    assert "--convperf-update-baselines would stop on it" in lines


def test_header_names_a_baselines_folder_under_proc() -> None:
    lines = "\n".join(baseline_lines(Path("/proc/convperf/m"), updating=False))
    assert "cannot create a file in /proc" in lines and "--convperf-baselines=DIR" in lines
    assert "is not writable (No such file" not in lines


def test_check_with_a_shape_fails_in_one_line(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(
        test_shape="""
import torch.nn.functional as F

def test_shape(convperf):
    convperf.check(F.conv2d, (8, 32, 56, 56))
"""
    )
    result = pytester.runpytest(*cpu_plugin_args, "--convperf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*TypeError: convperf.check takes a Conv2dProblem, not tuple (8, 32, 56, 56)*"]
    )
    assert "has no attribute 'id'" not in result.stdout.str()


def test_a_typo_in_the_hypothesis_profile_is_one_line(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    result = pytester.runpytest_subprocess(*plugin_args, "--hypothesis-profile=convperf-dve")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert "--hypothesis-profile=convperf-dve is not a registered Hypothesis profile; use one of" in out
    assert "convperf-dev" in out and "INTERNALERROR" not in out


SLOW_FUZZ = """
import time
from hypothesis import given, settings
from pytest_convperf.core.strategies import conv2d_problems

@settings(max_examples=3)
@given(conv2d_problems())
def test_slow_first_example(problem):
    time.sleep(0.3)  # a first call that pays for JIT on a loaded box: over Hypothesis' 200 ms
"""


def test_default_settings_have_no_deadline(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    pytester.makepyfile(test_fuzz=SLOW_FUZZ)
    result = pytester.runpytest_subprocess(*plugin_args, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "DeadlineExceeded" not in result.stdout.str()


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env["GIT_CEILING_DIRECTORIES"] = str(folder.parent)  # no repository above the folder counts
    return subprocess.run(
        [sys.executable, "-m", "pytest_convperf", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_review_and_bisect_outside_git_say_so_in_one_line(tmp_path: Path) -> None:
    review = _cli(tmp_path, "review", "HEAD~1")
    assert review.returncode == 2 and "Traceback" not in review.stderr, review.stderr
    assert "is not inside a git repository (or git is missing); review compares" in review.stderr
    bisect = _cli(tmp_path, "bisect", "HEAD~2", "HEAD", "--", "-q")
    assert (
        "bisect walks the commits between GOOD and BAD: run it in a git clone"
        in bisect.stderr + bisect.stdout
    )
    assert "--convperf-against" not in bisect.stderr + bisect.stdout


def test_ctrl_c_before_any_check_is_named_and_the_report_folder_says_so(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    # Ctrl-C while collecting (importing torch, the first seconds of a session): nothing measured.
    pytester.makepyfile(test_slow="raise KeyboardInterrupt\n")
    report = pytester.path / "rep"
    result = pytester.runpytest_subprocess(*cpu_plugin_args, "--convperf", f"--convperf-report={report}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["convperf: interrupted (Ctrl-C) before any check was measured: no result, no baseline written;*"]
    )
    assert "interrupted (Ctrl-C) before any check was measured" in (report / "report.md").read_text()


# ---- issue 38: errors that mislead, and words that do ------------------------------------------


def test_a_collection_error_is_not_called_a_ctrl_c(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    # pytest's exit status for a collection error is INTERRUPTED too; only a KeyboardInterrupt is a Ctrl-C.
    pytester.makepyfile(
        test_bad="from pytest_convperf import Conv2dProblem\n"
        "P = Conv2dProblem(n=1, c_in=4, h=2, w=2, c_out=4, kernel=5)\n"
    )
    result = pytester.runpytest(*cpu_plugin_args, "--convperf", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert "ValueError" in out and "error during collection" in out
    assert "Ctrl-C" not in out and "interrupted (" not in out


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_a_one_line_usage_error(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_a="def test_a(convperf):\n    pass\n")
    result = pytester.runpytest_subprocess(*plugin_args, "--convperf", "--convperf-device=cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # as --convperf-device=gpu is
    err = result.stderr.str()
    assert "ERROR: --convperf-device=cuda but torch.cuda.is_available() is False" in err
    assert "use --convperf-device=cpu" in err and "Traceback" not in err + result.stdout.str()


SECTION = """
def test_section(convperf_report):
    convperf_report.section("models.md", "| a |", title="Models")
"""


def test_a_judged_check_names_its_measurement_and_a_cpu_run_names_no_cuda(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    pytester.makepyfile(test_section=SECTION)
    recorded = suite.run("--convperf-update-baselines=new", "-k", "test_a or test_section")
    recorded.assert_outcomes(passed=2)
    update_md = (pytester.path / "convperf-update.md").read_text()
    assert "| ` torch 2" in update_md and "cuda " not in update_md and "cudnn" not in update_md  # a CPU run
    assert "cuda" not in suite.entries()[suite.key("test_a")]["env"]
    # Without --convperf-report: the sections are named with the option, not paths into a temp folder.
    recorded.stdout.fnmatch_lines(
        ["convperf: report sections not written (models.md): --convperf-report=DIR writes them*"]
    )
    assert "convperf report section:" not in recorded.stdout.str()
    # The entry exists now: the verdict line names the screen, not a "first measurement".
    judged = suite.run("-k", "test_a")
    judged.stdout.fnmatch_lines(
        ["  PASS  test_a?*?  speedup 2.000x*  (screen, * rounds)", "*1 check judged together;*"]
    )
    assert "first measurement" not in judged.stdout.str() and "1 checks" not in judged.stdout.str()


def test_a_missing_ruptures_is_one_note(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    pytest.importorskip("sqlalchemy")
    suite = Suite(pytester, monkeypatch, plugin_args)
    monkeypatch.setitem(sys.modules, "ruptures", None)  # import ruptures raises ImportError
    url = f"sqlite:///{pytester.path / 's.sqlite'}"
    result = suite.run("-k", "test_a", "--convperf-report=report", f"--convperf-store={url}")
    result.assert_outcomes(passed=1)
    notes = [line for line in result.stdout.lines if "needs ruptures" in line]
    assert len(notes) == 1, notes
