"""``python -m pytest_convperf``'s argument errors, in process (the commands end to end:
tests/integration/test_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_convperf.__main__ import main


def test_merge_baselines_names_a_missing_input_or_a_folder_as_output_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "a.yaml"
    good.write_text("schema: convperf/1\nmachine: box\nbenchmarks: {}\n")
    missing = tmp_path / "missing.yaml"
    for argv, named in (
        ([str(good), str(missing), "-o", str(tmp_path / "out.yaml")], f"input {missing} does not exist"),
        ([str(good), "-o", str(tmp_path)], f"-o {tmp_path} is a folder"),
    ):
        assert main(["merge-baselines", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"merge-baselines: {named}") and err.count("\n") == 1
    assert not (tmp_path / "out.yaml").exists()
