"""The in-flight records (``core/inflight.py``): what a process runs is on disk while it runs, gone
after, and a record left by a process that is gone is a crash, named in one line. (The crash end to
end, a real segfault in a session: ``tests/integration/test_crash_named.py``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_convperf.core import inflight


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    before = inflight._STATE["dir"]  # this very session may record (the plugin installed): keep its folder
    yield
    inflight._STATE["dir"] = before


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    inflight.configure(tmp_path / "running")
    return tmp_path / "running"


def _on_disk(folder: Path) -> dict[str, object] | None:
    path = folder / f"{os.getpid()}.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_a_record_lives_for_its_block_and_a_nested_one_gives_way_back(folder: Path) -> None:
    with inflight.running(step="correctness", problem="p1", seed=3, repro="pytest t.py"):
        outer = _on_disk(folder)
        assert outer is not None and outer["step"] == "correctness" and outer["pid"] == os.getpid()
        with inflight.running(step="oracle", problem="p1", seed=3, repro="pytest t.py"):
            assert (_on_disk(folder) or {})["step"] == "oracle"
        assert _on_disk(folder) == outer
    assert _on_disk(folder) is None


def test_the_record_is_removed_after_an_exception_too(folder: Path) -> None:
    with pytest.raises(RuntimeError), inflight.running(step="timing", problem="p", seed=None, repro="r"):
        raise RuntimeError("boom")
    assert _on_disk(folder) is None


def test_only_records_of_dead_processes_are_leftovers_and_torn_files_are_dropped(folder: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / f"{dead.pid}.json").write_text(json.dumps({"pid": dead.pid, "step": "timing"}))
    (folder / "torn.json").write_text('{"pid": ')
    with inflight.running(step="mine", problem="p", seed=None, repro="r"):  # alive: never its own leftover
        found = inflight.leftovers()
    assert [r.pid for r in found] == [dead.pid]
    assert not (folder / "torn.json").exists()
    inflight.forget(found[0])
    assert inflight.leftovers() == []


def test_describe_names_the_test_step_problem_seed_and_sides() -> None:
    record = inflight.Running(
        pid=1,
        nodeid="t.py::c",
        step="correctness",
        problem="n1c3",
        seed=7,
        repro="pytest t.py::c",
        phase="bwd",
        candidate="mine",
        oracle="fp64",
    )
    assert (
        inflight.describe(record) == "t.py::c: correctness of n1c3 (seed 7, bwd), candidate mine, oracle fp64"
    )
    unknown = inflight.Running(pid=1, nodeid="", step="a check", problem="?", seed=None, repro="")
    assert inflight.describe(unknown) == "a test: a check of ? (seed ?)"


def test_nothing_is_written_when_not_configured(tmp_path: Path) -> None:
    inflight.configure(None)
    with inflight.running(step="x", problem="p", seed=None, repro="r"):
        assert inflight.leftovers() == []
