"""``--convperf-json=FILE`` (``reports/json_file.py``): registered only on a ``--convperf`` session's
controller, a folder refused with the fix, a relative FILE under the invocation folder, and the file
pytest-benchmark's schema. (In a session, with and without a report folder:
``tests/integration/test_results_store.py``.)"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_convperf.reports.json_file import JsonFile, configure
from tests.rows import check_row


class _Config(SimpleNamespace):
    """A pytest.Config stand-in: its invocation folder and a plugin manager that records."""

    def __init__(self, folder: Path, worker: bool = False) -> None:
        super().__init__(invocation_params=SimpleNamespace(dir=folder), registered=[])
        self.pluginmanager = SimpleNamespace(
            register=lambda plugin, name: self.registered.append((name, plugin))
        )
        if worker:
            self.workerinput = {}


def _cfg(json_file: str | None, enabled: bool = True) -> Any:
    return SimpleNamespace(json_file=json_file, enabled=enabled)


def test_a_relative_file_is_under_the_invocation_folder(tmp_path: Path) -> None:
    config = _Config(tmp_path)
    configure(config, _cfg("out/results.json"), confirm_run=False)  # type: ignore[arg-type]
    [(name, plugin)] = config.registered
    assert name == "convperf-json-file" and plugin.path == tmp_path / "out" / "results.json"


@pytest.mark.parametrize(
    ("json_file", "enabled", "confirm_run", "worker"),
    [
        (None, True, False, False),
        ("r.json", False, False, False),
        ("r.json", True, True, False),
        ("r.json", True, False, True),
    ],
    ids=["no option", "no --convperf", "a confirm run", "an xdist worker"],
)
def test_nothing_is_registered_off_a_convperf_controller(
    tmp_path: Path, json_file: str | None, enabled: bool, confirm_run: bool, worker: bool
) -> None:
    config = _Config(tmp_path, worker)
    configure(config, _cfg(json_file, enabled), confirm_run=confirm_run)  # type: ignore[arg-type]
    assert config.registered == []


def test_a_folder_is_refused_naming_the_file_to_give(tmp_path: Path) -> None:
    with pytest.raises(pytest.UsageError, match=r"--convperf-json=\. is a folder; give the file to write"):
        configure(_Config(tmp_path), _cfg("."), confirm_run=False)  # type: ignore[arg-type]


def test_the_file_is_pytest_benchmarks_schema_in_a_new_folder(tmp_path: Path) -> None:
    row = check_row(
        {
            "key": "test_x[p]",
            "nodeid": "m.py::test_x[p]",
            "verdict": "NEW",
            "message": "NEW",
            "comparison": {"time_ratio": 2.0, "candidate": {"median": 2e-3}, "reference": {"median": 1e-3}},
        }
    )
    path = tmp_path / "deep" / "results.json"
    assert JsonFile(path).pytest_convperf_session_results([row], {"node": "box"}, {"id": "abc"}, "now") == []
    data = json.loads(path.read_text())
    assert data["machine_info"] == {"node": "box"} and data["commit_info"] == {"id": "abc"}
    assert [b["name"] for b in data["benchmarks"]] == ["test_x[p][candidate]", "test_x[p][reference]"]
