"""Issue 15 item 3: CPU candidates are timed by thread CPU time; calibration is robust to load spikes."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest
import torch

from pytest_convperf.baselines.calibration import calibrate_records, noise_of
from pytest_convperf.core.device import resolve_device
from pytest_convperf.core.results import MEASURED_MODES
from pytest_convperf.measure.cpu import CpuTimer
from pytest_convperf.measure.protocol import Job
from pytest_convperf.measure.rule import TimingTrick
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


# ---- issue 37 item 2: waiting elsewhere, a changed clock, a lazy output ----


def _rounds(timer: CpuTimer, jobs: list[Job], n: int) -> None:
    with timer.pinned():
        timer.warmed_up()
        for _ in range(n):
            timer.run_round(jobs)


def test_a_side_that_waits_for_work_done_elsewhere_is_refused() -> None:
    timer = CpuTimer(resolve_device("cpu"))
    honest = timer.job("reference", lambda: _spin(0.002), "cold")
    # A candidate that spins a little and waits on another process's work: a sleep to the thread.
    waits = timer.job("candidate", lambda: (_spin(0.0002), time.sleep(0.002)), "cold")
    with pytest.raises(TimingTrick, match=r"^WORK ELSEWHERE: candidate's timed calls waited off the CPU"):
        _rounds(timer, [waits, honest], 10)
    assert timer.waited_share()["candidate"] > 5 and timer.waited_share()["reference"] < 0.5


def test_two_honest_sides_pass_beside_busy_threads_and_their_waiting_is_a_fact() -> None:
    timer = CpuTimer(resolve_device("cpu"))
    a = timer.job("candidate", lambda: _spin(0.001), "cold")
    b = timer.job("reference", lambda: _spin(0.001), "cold")
    _rounds(timer, [a, b], 20)  # no trick raised
    facts = timer.facts()["waited_share"]
    assert set(facts) == {"candidate", "reference"} and max(facts.values()) < 0.5


def test_no_op_calls_are_not_a_changed_clock() -> None:
    # The twin's two nested reads are all of a no-op call's time: 63 % of it, before they were allowed.
    timer = CpuTimer(resolve_device("cpu"))
    jobs = [timer.job("candidate", lambda: None, "cold"), timer.job("reference", lambda: None, "cold")]
    _rounds(timer, jobs, 200)


def test_a_replaced_thread_clock_is_refused_as_a_changed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_convperf.measure.cpu as cpu

    real = time.thread_time_ns
    hidden = [0]
    monkeypatch.setattr(time, "thread_time_ns", lambda: real() - hidden[0])
    patched = cpu._call_timer()  # what a candidate reaching into the closure gets: the clock replaced
    monkeypatch.undo()
    monkeypatch.setattr(cpu, "_time_call", patched)

    def cheat() -> None:
        t0 = real()
        _spin(0.001)
        hidden[0] += (real() - t0) * 9 // 10

    timer = CpuTimer(resolve_device("cpu"))
    jobs = [timer.job("candidate", cheat, "cold"), timer.job("reference", lambda: _spin(0.001), "cold")]
    with pytest.raises(TimingTrick, match=r"^CLOCK CHANGED: during candidate.s timed calls"):
        _rounds(timer, jobs, 10)


def test_only_a_plain_dense_tensor_is_an_output() -> None:
    from pytest_convperf.correctness.integrity import check_output, lazy_output

    class Sub(torch.Tensor):
        pass

    plain = torch.ones(2, 3)
    assert lazy_output(plain, "cpu") is None and check_output(plain, "cpu") is plain
    for out, words in (
        (plain.as_subclass(Sub), "a torch.Tensor subclass (tests.unit.measure.test_cpu."),
        (plain.to_sparse(), "torch.sparse_coo tensor, not a dense strided one"),
        (torch.empty(2, device="meta"), "on device 'meta', not on the inputs' 'cpu'"),
        ((plain,), "a builtins.tuple"),
    ):
        why = lazy_output(out, "cpu")
        assert why is not None and why.startswith("LAZY OUTPUT: a timed call returned") and words in why, why
    assert lazy_output(plain.to_sparse(), "cpu", full=False) is None  # inside timed calls: the type only
    with pytest.raises(TimingTrick, match=r"^LAZY OUTPUT"):
        check_output(plain.as_subclass(Sub), "cpu", full=False)
