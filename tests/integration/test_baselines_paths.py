"""Issue 15, item 10 and 7 through a whole session: bad output paths stop the run before any test, a
missing baselines folder is named in the header, and an empty machine slug is refused."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import MACHINE, Suite


def test_report_path_that_is_a_file_fails_before_any_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    (pytester.path / "report").write_text("a file, not a folder")
    result = suite.run("--convperf-update-baselines", "--convperf-report=report")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--convperf-report" in err and "is a file" in err and "Traceback" not in err
    assert not suite.file.exists()  # nothing ran, nothing was written


def test_missing_baselines_folder_is_said_in_the_header(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    result = suite.run("--convperf-baselines=nowhere")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*baselines*nowhere*does not exist yet*NEW*"])


@pytest.mark.parametrize("machine", ["", "..."])
def test_empty_machine_slug_is_refused(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...], machine: str
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    result = suite.run(f"--convperf-machine={machine}", "--convperf-update-baselines")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--convperf-machine" in result.stderr.str()
    assert not list(pytester.path.rglob("*.yaml"))  # nothing written, in no folder
    assert not (pytester.path / "baselines" / MACHINE).exists()


def test_only_the_runs_files_are_validated(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    """Item 11: a broken file of another module is never read; the run's own broken file stops it."""
    suite = Suite(pytester, monkeypatch, plugin_args)
    unrelated = pytester.path / "baselines" / MACHINE / "test_unrelated.yaml"
    unrelated.parent.mkdir(parents=True)
    unrelated.write_text("benchmarks: [ not valid\n")
    suite.run().assert_outcomes(passed=2)
    suite.file.write_text("benchmarks: [ not valid\n")
    result = suite.run("-k", "test_a")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert str(suite.file) in result.stderr.str() and str(unrelated) not in result.stderr.str()


def test_broken_file_under_xdist_is_a_clear_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    """The xdist controller validates the run's files: a worker stopping at collection lost the message."""
    pytest.importorskip("xdist")
    from tests.integration._lifecycle import subprocess_env

    suite = Suite(pytester, monkeypatch, plugin_args)
    subprocess_env(monkeypatch)
    suite.file.parent.mkdir(parents=True)
    suite.file.write_text("benchmarks: [ not valid\n")
    result = pytester.runpytest_subprocess(
        *plugin_args,
        "--convperf",
        f"--convperf-machine={MACHINE}",
        "--convperf-device=cpu",
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "ERROR: convperf baseline file" in err and str(suite.file) in err and "INTERNALERROR" not in err


def test_non_utf8_baseline_file_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    """Item 10: it was an INTERNALERROR; now the corrupt-file error, and the file is left as it was."""
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=2)
    suite.file.write_bytes(suite.file.read_bytes() + b"# caf\xe9\n")
    before = suite.file.read_bytes()
    result = suite.run("--convperf-update-baselines=all", "--convperf-reason=x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "not UTF-8" in err and str(suite.file) in err and "INTERNALERROR" not in err
    assert suite.file.read_bytes() == before


def test_same_named_tests_in_same_named_files_of_two_folders_are_refused_before_any_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    """Issue 25.5: they share a baseline file and key, so each was judged against the other's entry."""
    suite = Suite(pytester, monkeypatch, plugin_args)
    text = (pytester.path / "test_suite.py").read_text()
    for folder in ("fast", "slow"):
        (pytester.path / folder).mkdir()
        (pytester.path / folder / "__init__.py").write_text("")
        (pytester.path / folder / "test_suite.py").write_text(text)
    result = suite.run("fast", "slow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "fast/test_suite.py::test_a[" in err and "slow/test_suite.py::test_a[" in err
    assert "rename one of the tests or test files" in err and "Traceback" not in err
    suite.run("fast", "slow", "-k", "fast and test_a or slow and test_b").assert_outcomes(passed=2)
