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
    result.stdout.fnmatch_lines(["*baselines folder*nowhere does not exist*NEW*"])


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
