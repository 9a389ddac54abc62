"""--convperf-gpus with pytest-xdist: GPU pinning, timing serialized on a shared device, one writer."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from pytest_convperf.measure import parallel
from pytest_convperf.measure.parallel import DomainLock, assign_gpus, visible_gpus

fcntl = pytest.importorskip("fcntl", reason="the device lock uses POSIX flock")
xdist_only = pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="needs pytest-xdist")


# ---- which GPU for which worker (pure) --------------------------------------------------------------
def test_visible_gpus_prefers_the_inherited_mask() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, nvml_count=8) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-aa, GPU-bb"}, nvml_count=None) == ["GPU-aa", "GPU-bb"]
    # CUDA stops at the first invalid entry: "-1" hides everything after it.
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,2"}, nvml_count=4) == ["0"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, nvml_count=4) == []


def test_visible_gpus_from_nvml_or_unknown() -> None:
    assert visible_gpus({}, nvml_count=3) == ["0", "1", "2"]
    assert visible_gpus({}, nvml_count=0) == []
    assert visible_gpus({}, nvml_count=None) is None


def test_assign_gpus_auto_and_explicit() -> None:
    assert assign_gpus("auto", ["0", "1", "2", "3"], workers=2) == ["0", "1"]
    # Indices refer to the visible GPUs, as cuda:i would.
    assert assign_gpus((1, 3), ["4", "5", "6", "7"], workers=2) == ["5", "7"]
    # Without NVML the visible set is unknown: explicit indices are used as they are.
    assert assign_gpus((0, 2), None, workers=2) == ["0", "2"]
    # No GPU at all: nothing to pin (a CPU run; timing is serialized instead).
    assert assign_gpus("auto", [], workers=2) == []
    assert assign_gpus("auto", None, workers=2) == []


def test_more_workers_than_gpus_is_refused() -> None:
    with pytest.raises(pytest.UsageError, match=r"3 xdist workers but only 2 GPU\(s\) \(0, 1\).*use -n 2"):
        assign_gpus("auto", ["0", "1"], workers=3)
    with pytest.raises(pytest.UsageError, match=r"--convperf-gpus=0,1: 3 xdist workers"):
        assign_gpus((0, 1), None, workers=3)


def test_missing_gpu_index_is_refused() -> None:
    with pytest.raises(pytest.UsageError, match=r"GPU index 4 does not exist.*2 GPU\(s\), indices 0..1"):
        assign_gpus((0, 4), ["0", "1"], workers=2)


# ---- the device lock (threads stand in for workers: flock locks belong to each open file) -----------
def _refuses(directory: Path, domain: str, operation: int) -> bool:
    """True when a non-blocking ``flock(operation)`` on the domain's lock file is refused."""
    fd = os.open(directory / f"{domain}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _held_exclusively_elsewhere(directory: Path, domain: str) -> bool:
    """True when someone holds the domain's lock so that even a shared hold is refused."""
    return _refuses(directory, domain, fcntl.LOCK_SH)


def _held_at_all(directory: Path, domain: str) -> bool:
    """True when someone holds the domain's lock at all (an exclusive hold is refused)."""
    return _refuses(directory, domain, fcntl.LOCK_EX)


def test_timing_waits_for_running_tests_and_blocks_new_ones(tmp_path: Path) -> None:
    running, timer, late = (DomainLock(tmp_path, "host") for _ in range(3))
    events: list[str] = []
    timer_in = threading.Event()

    def measure() -> None:
        with timer.exclusive():
            events.append("timing-start")
            timer_in.set()
            time.sleep(0.2)
            events.append("timing-end")

    def late_test() -> None:
        with late.shared():
            events.append("late-test-start")

    with running.shared():
        t_timer = threading.Thread(target=measure)
        t_timer.start()
        time.sleep(0.2)
        assert not timer_in.is_set(), "a measurement started while another worker's test was running"
        # A test that starts while the measurement waits must queue behind it (no starvation).
        t_late = threading.Thread(target=late_test)
        t_late.start()
        time.sleep(0.1)
        events.append("running-test-end")
    t_timer.join(5)
    t_late.join(5)
    assert events == ["running-test-end", "timing-start", "timing-end", "late-test-start"]
    for lock in (running, timer, late):
        lock.close()


def test_exclusive_is_reentrant_and_gives_the_test_its_shared_hold_back(tmp_path: Path) -> None:
    lock = DomainLock(tmp_path, "gpu-0")
    with lock.shared():
        assert _held_at_all(tmp_path, "gpu-0") and not _held_exclusively_elsewhere(tmp_path, "gpu-0")
        with lock.exclusive():
            with lock.exclusive():
                assert _held_exclusively_elsewhere(tmp_path, "gpu-0")
            assert _held_exclusively_elsewhere(tmp_path, "gpu-0")
        assert _held_at_all(tmp_path, "gpu-0") and not _held_exclusively_elsewhere(tmp_path, "gpu-0")
    assert not _held_at_all(tmp_path, "gpu-0")
    lock.close()


def test_timing_slot_outside_xdist_is_a_no_op(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(
        """
        from pytest_convperf.measure.parallel import WORKER_KEY, timing_slot

        def test_slot(request):
            assert WORKER_KEY not in request.config.stash
            with timing_slot(request.config):
                with timing_slot(request.config):
                    pass
        """
    )
    pytester.runpytest(*plugin_args, "-p", "no:cacheprovider").assert_outcomes(passed=1)


# ---- inner sessions with -n 2 on this CPU machine --------------------------------------------------
INTERVALS = """
import json, os, time
import pytest
from pytest_convperf.measure.parallel import timing_slot

LOG = os.path.join(os.path.dirname(__file__), "log")

@pytest.mark.parametrize("i", range(6))
def test_check(request, i):
    worker = os.environ["PYTEST_XDIST_WORKER"]
    start = time.monotonic()
    time.sleep(0.03)                      # "correctness": may run beside other workers' work
    before = time.monotonic()
    with timing_slot(request.config):     # "timing": must run alone on the shared CPU
        t0 = time.monotonic()
        time.sleep(0.1)
        t1 = time.monotonic()
    after = time.monotonic()
    time.sleep(0.03)
    os.makedirs(LOG, exist_ok=True)
    with open(os.path.join(LOG, f"{worker}-{i}.json"), "w") as fh:
        json.dump({"worker": worker, "work": [[start, before], [after, time.monotonic()]],
                   "timing": [t0, t1]}, fh)
"""


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@xdist_only
def test_two_cpu_workers_serialize_timing_but_not_tests(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pytester.makepyfile(test_intervals=INTERVALS)
    run_id = f"convperf-test-{os.getpid()}-{time.monotonic_ns()}"
    result = pytester.runpytest(
        *plugin_args,
        "-n",
        "2",
        "--convperf",
        "--convperf-device=cpu",
        f"--testrunuid={run_id}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["convperf: timing serialized across 2 xdist workers on the CPU*"])
    runs = [json.loads(p.read_text()) for p in sorted((pytester.path / "log").glob("*.json"))]
    assert {r["worker"] for r in runs} == {"gw0", "gw1"}, "both workers should have run tests"
    # While a worker times, no other worker works (waiting for its own turn is not work).
    for a in runs:
        for b in runs:
            if a["worker"] != b["worker"]:
                busy = [b["timing"], *b["work"]]
                assert not any(_overlap(a["timing"], span) for span in busy), f"{a} timed while {b} ran"
    assert not parallel.lock_dir(run_id).exists(), "the controller removes the run's lock files"


@xdist_only
def test_gpus_pin_each_worker_before_its_conftest_loads(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fixed mask makes "the visible GPUs" the same on any machine, with or without NVML.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    pytester.makeconftest(
        """
        import json, os
        AT_IMPORT = os.environ.get("CUDA_VISIBLE_DEVICES")
        """
    )
    pytester.makepyfile(
        """
        import json, os
        import pytest
        from conftest import AT_IMPORT
        from pytest_convperf.measure.parallel import WORKER_KEY

        @pytest.mark.parametrize("i", range(4))
        def test_where(request, i):
            state = request.config.stash[WORKER_KEY]
            path = f"{state.workerid}-{i}.json"
            with open(path, "w") as fh:
                json.dump([state.workerid, state.gpu, AT_IMPORT, os.environ["CUDA_VISIBLE_DEVICES"]], fh)
        """
    )
    result = pytester.runpytest(*plugin_args, "-n", "2", "--convperf-gpus=auto", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        ["convperf: one GPU per xdist worker: gw0->CUDA_VISIBLE_DEVICES=5, gw1->CUDA_VISIBLE_DEVICES=7"]
    )
    seen = {tuple(json.loads(p.read_text())) for p in pytester.path.glob("gw*.json")}
    assert seen == {("gw0", "5", "5", "5"), ("gw1", "7", "7", "7")}


def test_more_workers_than_gpus_stops_the_run(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*plugin_args, "-n", "3", "--convperf-gpus=auto", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--convperf-gpus=auto: 3 xdist workers but only 2 GPU(s) (0, 1)*use -n 2*"])


@xdist_only
def test_rows_of_both_workers_reach_the_single_writer(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.integration._lifecycle import Suite

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    suite = Suite(pytester, monkeypatch, plugin_args)
    result = suite.run("-n", "2", "-v", "--convperf-update-baselines", "--convperf-report=report")
    result.stdout.fnmatch_lines_random(["[[]gw0[]]*test_suite.py::test_*", "[[]gw1[]]*test_suite.py::test_*"])
    rows = json.loads((pytester.path / "report" / "rows.json").read_text())
    assert sorted(row["key"].split("[")[0] for row in rows) == ["test_a", "test_b"]
    assert sorted(suite.entries()) == sorted(row["key"] for row in rows)


def test_gpus_without_xdist_say_they_had_no_effect(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(
        *plugin_args, "--convperf-gpus=0,1", "-p", "no:xdist", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "convperf: --convperf-gpus pins pytest-xdist workers (-n N); "
            "this single process uses CUDA_VISIBLE_DEVICES=3"
        ]
    )


def test_pinning_refuses_a_worker_whose_cuda_already_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA reads CUDA_VISIBLE_DEVICES once: pinning after it started would silently do nothing."""
    started = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", started)
    with pytest.raises(pytest.UsageError, match=r"gw1 must be pinned to GPU CUDA_VISIBLE_DEVICES=1.*already"):
        parallel._refuse_if_cuda_started("gw1", "1")
    idle = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", idle)
    parallel._refuse_if_cuda_started("gw1", "1")
