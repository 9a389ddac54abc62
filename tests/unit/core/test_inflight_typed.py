"""core.inflight: a record written while running reads back typed; a foreign file is dropped."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pytest_convperf.core import inflight


def _dead_pid() -> int:
    pid = 2**22 - 7  # above the default pid_max of most systems: no such process
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


def test_a_record_left_by_a_gone_process_reads_back_and_is_named(tmp_path: Path) -> None:
    inflight.configure(tmp_path)
    try:
        with inflight.running(
            step="the timed check", problem="p1", seed=7, phase="forward", repro="pytest x"
        ):
            (written,) = tmp_path.glob("*.json")
            data = json.loads(written.read_text())
    finally:
        inflight.configure(None)
    assert not list(tmp_path.glob("*.json"))  # removed after the block
    data["pid"] = _dead_pid()
    (tmp_path / "1.json").write_text(json.dumps(data))
    (tmp_path / "2.json").write_text(json.dumps({"pid": "12", "step": 3}))  # foreign: a string pid
    (record,) = inflight.leftovers(tmp_path)
    assert (record.step, record.problem, record.seed, record.repro) == (
        "the timed check",
        "p1",
        7,
        "pytest x",
    )
    assert inflight.describe(record).endswith("the timed check of p1 (seed 7, forward)")
    assert not (tmp_path / "2.json").exists()
    inflight.forget(record)
    assert not list(tmp_path.glob("*.json"))
