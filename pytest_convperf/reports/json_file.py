"""``--convperf-json=FILE`` (ini ``convperf_json``): the session's ``results.json`` (pytest-benchmark's
schema, :func:`report_files.benchmark_json`) written to FILE as well, as ``--benchmark-json`` does,
so a CI step or another tool reads one known path.

Written at session end by the ``pytest_convperf_session_results`` hook, which runs with or
without a report folder: FILE stands alone, like ``--benchmark-json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.judge.check_row import CheckRow


def configure(config: pytest.Config, cfg: ConvperfConfig, *, confirm_run: bool) -> None:
    """Register the writer on the controller of a ``--convperf`` session given ``--convperf-json``."""
    value = cfg.json_file or ""
    if not value or not cfg.enabled or confirm_run or hasattr(config, "workerinput"):
        return
    path = Path(value)
    if not path.is_absolute():
        path = Path(str(config.invocation_params.dir)) / path
    if path.is_dir():
        raise pytest.UsageError(
            f"--convperf-json={value} is a folder; give the file to write, e.g. {path / 'results.json'}"
        )
    config.pluginmanager.register(JsonFile(path), "convperf-json-file")


class JsonFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def pytest_convperf_session_results(
        self,
        rows: Sequence[CheckRow],
        machine_info: Mapping[str, Any],
        commit_info: Mapping[str, Any],
        when: str,
    ) -> list[str]:
        from pytest_convperf.core.files import atomic_write
        from pytest_convperf.reports.report_files import benchmark_json

        payload = benchmark_json(rows, machine_info=machine_info, commit_info=commit_info, when=when)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(payload, indent=2, default=str) + "\n")
        return []
