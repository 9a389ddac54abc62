"""Issue 15 item 3: CPU candidates are timed by thread CPU time; calibration is robust to load spikes."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest
import torch

from pytest_convperf.baselines.calibration import calibrate_records, noise_of
from pytest_convperf.core.device import resolve_device
from pytest_convperf.core.entry import MEASURED_MODES
from pytest_convperf.measure.cpu import CpuTimer
from pytest_convperf.measure.protocol import Job
from pytest_convperf.measure.timers import make_timer


def _spin(seconds: float) -> None:
    """Use ``seconds`` of this thread's CPU time (however long that takes on a loaded box)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_thread_clock_ignores_time_off_the_cpu() -> None:
    timer = make_timer(resolve_device("cpu"))
    assert isinstance(timer, CpuTimer) and timer.threads == 1
    job = timer.job("candidate", lambda: time.sleep(0.05), "cold")
    with timer.pinned():
        assert torch.get_num_threads() == 1  # intra-op work stays on the timed thread
        (asleep,) = timer.run_round([job])
        (busy,) = timer.run_round([timer.job("candidate", lambda: _spin(0.02), "cold")])
    # A sleeping (or preempted) thread uses no CPU time; a busy one uses about its wall time.
    assert asleep < 0.01
    assert busy >= 0.02
    assert job.mode == "cpu-thread" and "cpu-thread" in MEASURED_MODES


def test_the_clock_and_the_load_are_facts() -> None:
    facts = make_timer(resolve_device("cpu")).facts()
    assert facts["clock"] == "thread"
    assert "CLOCK_THREAD_CPUTIME_ID" in facts["timer"]
    load = facts["load_avg"]
    assert len(load) == 3 and all(x >= 0 for x in load)


def test_several_threads_fall_back_to_the_wall_clock_and_say_so() -> None:
    device = replace(resolve_device("cpu"), threads=2)
    timer = CpuTimer(device)
    assert timer.job("c", lambda: None, "cold").mode == "cpu"
    assert timer.facts()["clock"] == "wall"
    assert "perf_counter_ns" in timer.facts()["timer"]
    assert isinstance(timer.job("c", lambda: None, "cold"), Job)


def test_one_load_spike_does_not_inflate_the_calibrated_noise() -> None:
    quiet = [0.0, 0.01, -0.01, 0.005, -0.005]
    spiked = [*quiet[:4], 0.6]  # one run under a load spike: 80 % slower
    assert noise_of(spiked, 0.0) < 2 * noise_of(quiet, 0.0)
    assert noise_of(spiked, 0.0) < 0.05
    # Two runs have no robust spread: the plain SD of the pair.
    assert noise_of([0.0, 0.02], 0.0) == pytest.approx(0.02 / math.sqrt(2))


def test_calibration_folds_the_runs_robustly_and_keeps_their_load() -> None:
    def rec(ln: float, load: float) -> dict[str, object]:
        return {
            "ln_ratio": ln,
            "baselines_file": "f.yaml",
            "machine": "box",
            "key": "k",
            "device_kind": "cpu",
            "timing": {"mode": "cpu-thread"},
            "load_avg": [load, load, load],
        }

    runs = [[rec(x, 0.5)] for x in (0.0, 0.01, -0.01, 0.005)] + [[rec(0.6, 9.0)]]
    check = calibrate_records(runs, floor=0.0)["f.yaml"]["checks"]["k"]
    assert check["noise"] < 0.05
    assert check["time_ratio"] == pytest.approx(math.exp(0.005))
    assert check["load_max"] == 9.0
