"""The CUDA timer's L2 flush kinds and its launch gate re-sized after warm-up, on any machine.

CUDA events and ``torch.cuda._sleep`` are replaced by a scripted recorder and the flush buffer
lives on the CPU, so the real flush code runs (its torch ops are device-agnostic). What stays
unverified without a GPU: the flush's effect on L2 (clean vs dirty lines), its time, and the
``_sleep`` rate of a real GPU at idle and boost clocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_convperf.core.environment import FLUSH_ENV
from pytest_convperf.measure import cuda as cuda_timing
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.protocol import Job
from pytest_convperf.measure.rounds import measure_one
from pytest_convperf.measure.rule import StopRule
from tests.unit.measure._cuda_stub import Recorder, stub_timer

L2_BYTES = 1 << 16  # 64 KiB: the flush buffer is 128 KiB of int32
LINE_FLOATS = 128 // 4  # float32 elements per 128-byte L2 line


def _timer(monkeypatch: pytest.MonkeyPatch, script: Recorder, **kwargs: Any) -> cuda_timing.CudaTimer:
    return stub_timer(monkeypatch, script, torch_device="cpu", l2_bytes=L2_BYTES, **kwargs)


def _constant(ms: float) -> Iterator[float]:
    while True:
        yield ms


class OpLog(TorchDispatchMode):
    """Records each aten op with its tensor arguments' (data_ptr, numel)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, list[tuple[int, int]]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        every = (*args, *kwargs.values())
        tensors = [(a.data_ptr(), a.numel()) for a in every if isinstance(a, torch.Tensor)]
        self.ops.append((str(func), tensors))
        return func(*args, **kwargs)


# ---- flush kind selection --------------------------------------------------------------------------


def test_flush_defaults_to_read_and_follows_the_env_and_the_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FLUSH_ENV, raising=False)
    assert cuda_timing.flush_kind() == "read"
    monkeypatch.setenv(FLUSH_ENV, "write")
    assert cuda_timing.flush_kind() == "write"
    assert cuda_timing.flush_kind("read") == "read"  # the argument wins over the env
    timer = _timer(monkeypatch, Recorder(_constant(0.25)))
    assert timer.flush == "write" and timer.facts()["flush"] == "write"
    assert _timer(monkeypatch, Recorder(_constant(0.25)), flush="read").facts()["flush"] == "read"


def test_an_unknown_flush_kind_is_an_error_naming_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FLUSH_ENV, "evict")
    with pytest.raises(ValueError, match=r"\$CONVPERF_L2_FLUSH='evict' is not an L2 flush kind.*'read'"):
        cuda_timing.flush_kind()
    with pytest.raises(ValueError, match=r"flush='zero' is not an L2 flush kind"):
        _timer(monkeypatch, Recorder(_constant(0.25)), flush="zero")


# ---- what each flush does ------------------------------------------------------------------------


def test_read_flush_reads_the_whole_2x_l2_buffer_into_one_scalar_and_writes_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timer = _timer(monkeypatch, Recorder(_constant(0.04)), flush="read")
    evict = timer._evictor()
    buffer = timer._flush
    assert buffer is not None and buffer.numel() * buffer.element_size() == 2 * L2_BYTES
    assert timer.facts()["flush_us"] == pytest.approx(40.0)
    # One 1 in every 128-byte line: the sum counts the lines, so a skipped line would show.
    buffer[::LINE_FLOATS] = 1.0
    before = buffer.clone()
    with OpLog() as log:
        evict()
    (op, tensors), *rest = log.ops
    assert rest == [] and op.startswith("aten.sum")
    assert (buffer.data_ptr(), buffer.numel()) in tensors  # the full buffer, not a view of part of it
    sink = [t for t in tensors if t[1] == 1]
    assert len(sink) == 1  # the only output: one scalar
    assert torch.equal(buffer, before)  # a read flush leaves the buffer (and its lines) clean
    sum_out = torch.zeros(())
    cuda_timing.read_flush(buffer, sum_out)
    assert float(sum_out) == 2 * L2_BYTES // 128  # every line contributed (exact in float32)


def test_write_flush_zeroes_the_whole_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    timer = _timer(monkeypatch, Recorder(_constant(0.04)), flush="write")
    evict = timer._evictor()
    buffer = timer._flush
    assert buffer is not None
    buffer.fill_(7)
    with OpLog() as log:
        evict()
    assert [op for op, _ in log.ops] == ["aten.zero_.default"]
    assert int(buffer.count_nonzero()) == 0


@pytest.mark.parametrize("kind", ["read", "write"])
def test_the_flush_is_queued_before_the_gate_of_each_cold_sample_only(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    script = Recorder(_constant(0.25))
    timer = _timer(monkeypatch, script, flush=kind)
    calls: list[str] = []
    timer._evictor()  # allocate and time it first
    inner = timer._evict
    assert inner is not None
    timer._evict = lambda: (calls.append("flush"), inner())[1]
    cold = timer.job("c", lambda: calls.append("cold"), "cold")
    warm = timer.job("w", lambda: calls.append("warm"), "warm")
    timer.run_round([cold, warm])
    assert calls == ["flush", "cold", "warm"]


# ---- launch gate re-sized after warm-up --------------------------------------------------------------


def test_the_gate_is_resized_when_warm_up_brings_the_clocks_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """First calibration at idle clocks (1M cycles in 2.9 ms: 345 MHz), after warm-up at boost
    (1M cycles in 0.505 ms: 1980 MHz): the gate's cycle count must follow the second rate."""
    rounds = 13  # warm-up of constant durations: 3 rounds + 2 windows of 5
    elapsed = iter([2.9] + [0.25] * (2 * rounds) + [0.505] + [0.25] * 2)
    script = Recorder(elapsed)
    timer = _timer(monkeypatch, script)
    # A host clock that never moves: enqueue time 0, so the gate stays at its 20 us floor.
    monkeypatch.setattr(cuda_timing, "time", SimpleNamespace(perf_counter=lambda: 0.0))
    jobs = [Job("candidate", lambda: None, flush=False), Job("reference", lambda: None, flush=False)]

    def gates() -> list[str]:
        return [e for e in script.log if e.startswith("sleep:") and e not in ("sleep:1000", "sleep:1000000")]

    for _ in range(rounds):
        timer.run_round(jobs)
    idle = int(cuda_timing.MIN_GATE_S * (1e6 / (2.9 * 1e-3)))
    assert idle == 6896 and set(gates()) == {f"sleep:{idle}"}  # 20 us at 345 MHz
    script.log.clear()
    timer.warmed_up()
    timer.run_round(jobs)
    boost = int(cuda_timing.MIN_GATE_S * (1e6 / (0.505 * 1e-3)))
    assert boost == 39603 and gates() == [f"sleep:{boost}"] * 2  # 20 us at 1980 MHz
    facts = timer.facts()
    assert facts["sleep_cycles_per_us_measured"] == [pytest.approx(344.8), pytest.approx(1980.2)]
    assert facts["sleep_cycles_per_us"] == pytest.approx(1980.2, abs=0.1)


def test_warm_up_tells_the_timer_once_per_warm_up() -> None:
    class Counting(FakeTimer):
        warmups = 0

        def warmed_up(self) -> None:
            self.warmups += 1

    timer = Counting({"*": 1e-3})
    measure_one(timer, lambda: None, rule=StopRule(min_rounds=21, max_rounds=21))
    assert timer.warmups == 1
