"""Crashes named, not lost (issue 24.3): the hooks over :mod:`pytest_convperf.core.inflight`'s records.

- At the start of a session (the controller's), each record a gone process left is printed with
  its test, problem, seed and repro line, and its repro line is run first in a separate process
  (a crash there is reported with its return code, never ends this session). A Hypothesis test
  that replays a saved example crashing each run is named with the way out (delete the example
  database, ``.hypothesis/``).
- Under xdist, a worker that crashed mid-test: the controller adds the worker's record (the
  problem and repro line) to the crashed test's failure (``pytest_handlecrashitem``).

The retry is bounded by ``RETRY_TIMEOUT_S`` (a hang is stopped and named as one).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_convperf.core import inflight

RETRY_TIMEOUT_S = 300.0


def retry(record: inflight.Running, rootdir: Path, timeout_s: float = RETRY_TIMEOUT_S) -> str:
    """Run a crash record's repro line again, in its own process; what happened, in words."""
    repro = record.repro
    if not repro.startswith("python -c "):
        return f"run it again with: {repro}" if repro else "no repro line was recorded"
    code = shlex.split(repro)[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(rootdir), *sys.path]))}
    try:
        res = subprocess.run(
            [sys.executable, "-c", code], cwd=rootdir, env=env, capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"retried in its own process: still running after {timeout_s:.0f} s (a hang), stopped"
    if res.returncode < 0:
        return f"retried in its own process: it crashes again (signal {-res.returncode}): still a crash"
    if res.returncode == 0:
        return "retried in its own process: it passes now (the crash is gone or depends on earlier state)"
    last = (res.stderr.strip().splitlines() or ["?"])[-1]
    return f"retried in its own process: it exits {res.returncode} without a crash ({last[:200]})"


def crash_lines(record: inflight.Running, retried: str | None) -> list[str]:
    """The lines that name one crash record."""
    lines = [
        f"convperf: a previous session's process {record.pid} died (segfault, abort or kill) in "
        + inflight.describe(record),
        f"  repro: {record.repro or '?'}",
    ]
    if retried:
        lines.append(f"  {retried}")
    lines.append(
        "  a Hypothesis test replays its saved failing examples first: if it dies on this example at "
        "every run, fix the crash or delete the example database (.hypothesis/)"
    )
    return lines


class CrashWatch:
    """Registered by the plugin in every process: records on, crashes named."""

    def __init__(self, config: pytest.Config, retry_timeout_s: float = RETRY_TIMEOUT_S) -> None:
        self.config = config
        self.retry_timeout_s = retry_timeout_s
        inflight.configure(inflight.folder_for(Path(str(config.rootpath))))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):  # the controller names them, once
            return
        records = inflight.leftovers()
        if not records:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for record in records:
            inflight.forget(record)
            retried = (
                retry(record, self.config.rootpath, self.retry_timeout_s) if self.retry_timeout_s else None
            )
            for line in crash_lines(record, retried):
                if reporter is not None:
                    reporter.write_line(line, yellow=True)
                else:
                    print(line, file=sys.stderr)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """xdist: the crashed worker's record, added to its test's failure."""
        for record in inflight.leftovers():
            if record.nodeid == crashitem:
                inflight.forget(record)
                report.sections.append(("convperf: the crash", "\n".join(crash_lines(record, None))))

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        inflight.configure(None)
