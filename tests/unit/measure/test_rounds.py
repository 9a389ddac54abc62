"""Warm-up, adaptive paired rounds and clock handling, driven by the fake timer; CPU ratios."""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pytest_convperf.core.clocks import ClockSample, clock_facts
from pytest_convperf.core.device import resolve_device
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.core.results import Comparison
from pytest_convperf.measure.cpu import CpuTimer
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.protocol import Job
from pytest_convperf.measure.rounds import measure_one, measure_pair
from pytest_convperf.measure.rule import StopRule, TimedCallError, Workload
from pytest_convperf.measure.run import kept_rounds, warm_up
from pytest_convperf.measure.timers import MeasureOne, make_timer


def noop() -> None:
    return None


def jittered(seed: int, base: dict[str, float], jitter: float) -> Callable[[str, int], float]:
    """Durations base[name] * exp(N(0, jitter)), reproducible per (name, index)."""

    def times(name: str, index: int) -> float:
        rng = random.Random(f"{seed}-{name}-{index}")
        return base[name] * math.exp(rng.gauss(0.0, jitter))

    return times


# ---- warm-up ----------------------------------------------------------------------------------------


def test_warmup_with_steady_times_is_three_calls_plus_two_windows() -> None:
    timer = FakeTimer({"*": 1e-3})
    jobs = [timer.job("a", noop, "cold"), timer.job("b", noop, "cold")]
    result = warm_up(timer, jobs, StopRule())
    assert result.converged
    assert result.rounds == 3 + 2 * 5
    assert timer.counts == {"a": 13, "b": 13}
    assert result.medians == (1e-3, 1e-3)


def test_warmup_waits_until_two_windows_agree_within_one_percent() -> None:
    # A clock ramp: 3 ms falling to 1 ms over the first 30 calls, then steady.
    def ramp(name: str, index: int) -> float:
        return 1e-3 * (1.0 + 2.0 * max(0, 30 - index) / 30)

    timer = FakeTimer(ramp)
    result = warm_up(timer, [timer.job("a", noop, "cold")], StopRule())
    assert result.converged
    # Windows: [3,8), [8,13), ... the first pair of windows agreeing within 1 % lies past the ramp.
    assert 30 <= result.rounds <= 43
    assert result.medians[0] == pytest.approx(1e-3, rel=0.01)


def test_warmup_stops_at_its_time_cap_when_times_keep_drifting() -> None:
    # 5 % slower every call, 50 ms each: never converges, the simulated 2 s cap ends it.
    timer = FakeTimer(lambda name, i: 0.05 * 1.05**i)
    result = warm_up(timer, [timer.job("a", noop, "cold")], StopRule())
    assert not result.converged
    assert result.seconds >= 2.0
    assert result.rounds < 40


# ---- stopping ----


def test_constant_ratio_stops_after_the_minimum_21_rounds_exactly() -> None:
    timer = FakeTimer({"candidate": 0.5e-3, "reference": 1e-3})
    cmp = measure_pair(timer, noop, noop)
    assert cmp.n_rounds == 21
    assert cmp.time_ratio == pytest.approx(0.5, rel=1e-12)
    assert cmp.speedup == pytest.approx(2.0, rel=1e-12)
    assert cmp.time_ratio_ci == pytest.approx((0.5, 0.5))
    assert cmp.se == 0.0
    assert not cmp.noisy and cmp.inconclusive is None
    assert cmp.candidate.median == 0.5e-3 and cmp.reference.n == 21
    assert cmp.candidate.mode == "fake"
    assert cmp.facts["warmup"]["rounds"] == 13
    assert timer.counts["candidate"] == 13 + 21


def test_rounds_alternate_which_side_goes_first() -> None:
    order: list[str] = []
    timer = FakeTimer({"*": 1e-3})
    measure_pair(
        timer, lambda: order.append("c"), lambda: order.append("r"), rule=StopRule(warmup_min_calls=0)
    )
    pairs = ["".join(order[i : i + 2]) for i in range(0, len(order), 2)]
    assert pairs[:4] == ["cr", "rc", "cr", "rc"]
    assert set(pairs) == {"cr", "rc"}
    assert abs(pairs.count("cr") - pairs.count("rc")) <= 1


class OrderEffectTimer(FakeTimer):
    """Both sides take 1 ms x exp(N(0, 1 %)); the first call of each round is 2-8 % slower,
    the amount moving with a simulated load (as on the 2-core CPU box: 1.5 % quiet, up to 10 %
    beside busy loops). The true time ratio is 1."""

    def __init__(self, seed: int) -> None:
        super().__init__({"*": 1e-3})
        self.rng = random.Random(seed)

    def run_round(self, jobs: Sequence[Job]) -> list[float]:
        delta = 0.05 + 0.03 * math.sin(self.rounds / 15.0)
        out = []
        for position in range(len(jobs)):
            t = 1e-3 * math.exp(self.rng.gauss(0.0, 0.01) + (delta if position == 0 else 0.0))
            self.elapsed += t
            out.append(t)
        self.rounds += 1
        return out


def test_an_order_effect_cancels_and_the_ci_covers_the_true_ratio() -> None:
    # Per-round log ratios form two humps +-delta apart; their median wandered in the valley
    # between them (ratios 0.97-1.09 at 5.7 % CI half-width under load on the CPU box). Over AB/BA
    # pairs delta cancels: every ratio close to 1, the target met, the CI covering 1 near 95 %.
    seeds = range(100)
    cmps = [measure_pair(OrderEffectTimer(seed), noop, noop) for seed in seeds]
    assert max(abs(c.time_ratio - 1.0) for c in cmps) < 0.01
    assert not any(c.noisy for c in cmps)
    covering = sum(c.time_ratio_ci[0] <= 1.0 <= c.time_ratio_ci[1] for c in cmps)
    assert covering >= 90, f"the 95 % CI covered the true ratio in {covering} of 100"


def test_noisy_ratio_runs_until_the_ci_target_is_met() -> None:
    timer = FakeTimer(jittered(3, {"candidate": 0.8e-3, "reference": 1e-3}, 0.02))
    cmp = measure_pair(timer, noop, noop)
    assert cmp.n_rounds > 21
    assert not cmp.noisy
    assert cmp.facts["ci_halfwidth"] <= 0.005
    assert cmp.facts["target_halfwidth"] == 0.005
    low, high = cmp.time_ratio_ci
    assert low <= cmp.time_ratio <= high
    assert cmp.time_ratio == pytest.approx(0.8, rel=0.01)
    assert 0 < cmp.se < 0.005
    assert len(cmp.log_ratios) == cmp.n_rounds


def test_a_row_ships_each_raw_sample_once() -> None:
    # The log ratios are the paired samples' ratios: the dict form (xdist, rows.json) leaves them out
    # and reading it back derives the same ones.
    cmp = measure_pair(FakeTimer(jittered(3, {"candidate": 0.8e-3, "reference": 1e-3}, 0.02)), noop, noop)
    data = cmp.to_dict()
    assert "log_ratios" not in data
    assert len(data["candidate"]["samples"]) == len(data["reference"]["samples"]) == cmp.n_rounds
    assert Comparison.from_dict(data) == cmp
    assert Comparison.from_dict({**data, "log_ratios": [0.0]}) == cmp  # an older rows.json reads the same


def test_target_is_one_percent_under_ten_microseconds() -> None:
    timer = FakeTimer(jittered(4, {"candidate": 4e-6, "reference": 5e-6}, 0.02))
    cmp = measure_pair(timer, noop, noop)
    assert cmp.facts["target_halfwidth"] == 0.01
    assert cmp.facts["ci_halfwidth"] <= 0.01


def test_round_cap_flags_noisy() -> None:
    timer = FakeTimer(jittered(5, {"candidate": 1e-3, "reference": 1e-3}, 0.5))
    cmp = measure_pair(timer, noop, noop, rule=StopRule(max_rounds=60))
    assert cmp.n_rounds == 60
    assert cmp.noisy and cmp.candidate.noisy
    assert cmp.facts["stop"] == "round cap 60"


def test_time_cap_uses_the_timer_clock() -> None:
    timer = FakeTimer(jittered(6, {"candidate": 0.02, "reference": 0.02}, 0.5))
    cmp = measure_pair(timer, noop, noop, rule=StopRule(max_time_s=5.0))
    assert cmp.noisy
    assert cmp.facts["stop"].startswith("time cap 5.0 s")
    assert 5.0 <= cmp.facts["timing_seconds"] < 5.2


def test_plateau_stops_when_the_ci_does_not_shrink() -> None:
    # Noise that grows with the round index: more rounds do not narrow the CI. It is random:
    # signs alternating with the round would cancel in every AB/BA pair.
    def growing(name: str, index: int) -> float:
        if name == "reference":
            return 1e-3
        return 1e-3 * math.exp(random.Random(index).gauss(0.0, 0.01) * (1 + index / 10))

    timer = FakeTimer(growing)
    cmp = measure_pair(timer, noop, noop, rule=StopRule(warmup_min_calls=0, warmup_cap_s=0.0))
    assert cmp.noisy
    assert cmp.facts["stop"].startswith("plateau")
    assert cmp.n_rounds < 2000


def test_scaled_rule_gives_three_times_the_rounds() -> None:
    rule = StopRule()
    confirm = rule.scaled(3, rounds_done=40)
    assert confirm.min_rounds == 120
    assert confirm.max_time_s == 15.0
    timer = FakeTimer({"candidate": 0.5e-3, "reference": 1e-3})
    assert measure_pair(timer, noop, noop, rule=confirm).n_rounds == 120


# ---- clocks ----


def test_rounds_under_ninety_percent_of_the_median_clock_are_dropped_and_replaced() -> None:
    clocks = [ClockSample(sm_mhz=1980.0)] * 9 + [ClockSample(sm_mhz=1500.0)]

    # In slow-clock rounds the candidate looks 3x slower: dropping them must keep the ratio exact.
    def times(name: str, index: int) -> float:
        if name == "candidate":
            return 1.5e-3 if index % 10 == 9 else 0.5e-3
        return 1e-3

    timer = FakeTimer(times, clocks=clocks)
    rule = StopRule(warmup_min_calls=0, warmup_window=5)
    # Clocks are indexed by round and durations by sample: one sample per side per round keeps
    # them in step through warm-up and timing alike.
    cmp = measure_pair(timer, noop, noop, rule=rule)
    assert cmp.time_ratio == pytest.approx(0.5, rel=1e-12)
    assert cmp.n_rounds >= 21
    assert cmp.dropped_rounds >= 2
    assert cmp.candidate.dropped == cmp.dropped_rounds
    assert cmp.inconclusive is None
    assert cmp.facts["clocks"]["sm_mhz_min"] == 1500.0
    assert cmp.facts["clocks"]["sm_mhz_kept_median"] == 1980.0


def test_hardware_slowdown_reason_drops_a_round_even_at_full_clock() -> None:
    hw = ClockSample(sm_mhz=1980.0, reasons=0x8)
    clocks = [ClockSample(sm_mhz=1980.0)] * 4 + [hw]
    assert kept_rounds(clocks * 2, 0.9) == [0, 1, 2, 3, 5, 6, 7, 8]
    assert kept_rounds([ClockSample(sm_mhz=1980.0, reasons=0x4)], 0.9) == [0]  # SW power cap is kept
    assert kept_rounds([None, None], 0.9) == [0, 1]  # clocks unknown: keep everything
    # Reasons unknown (NVML read failed): kept, but the SM clock floor still applies.
    unknown = [ClockSample(sm_mhz=1980.0, reasons=None)] * 3 + [ClockSample(sm_mhz=1000.0, reasons=None)]
    assert kept_rounds(unknown, 0.9) == [0, 1, 2]
    facts = clock_facts(unknown, [0, 1, 2])
    assert isinstance(facts, dict) and facts["reasons_unknown_rounds"] == 4


def test_over_a_quarter_dropped_is_inconclusive() -> None:
    clocks = [ClockSample(sm_mhz=1980.0), ClockSample(sm_mhz=1980.0, reasons=0x40)]
    timer = FakeTimer({"candidate": 0.5e-3, "reference": 1e-3}, clocks=clocks)
    cmp = measure_pair(timer, noop, noop)
    assert cmp.inconclusive is not None
    assert "hw_thermal" in cmp.inconclusive
    assert "over 25%" in cmp.inconclusive
    assert cmp.dropped_rounds > 0.25 * (cmp.n_rounds + cmp.dropped_rounds)


def test_gpu_timer_measurement_is_marked_inconclusive_when_rounds_are_dropped() -> None:
    clocks = [ClockSample(sm_mhz=1980.0), ClockSample(sm_mhz=1980.0, reasons=0x40)]
    m = measure_one(FakeTimer({"timed": 1e-3}, clocks=clocks), noop)
    assert m.inconclusive is not None and "over 25%" in m.inconclusive and m.dropped > 0
    assert measure_one(FakeTimer({"timed": 1e-3}), noop).inconclusive is None


def test_clocks_unknown_is_reported_not_fatal() -> None:
    timer = FakeTimer({"candidate": 0.5e-3, "reference": 1e-3}, clocks=[None])
    cmp = measure_pair(timer, noop, noop)
    assert cmp.facts["clocks"] == "clocks unknown"
    assert cmp.dropped_rounds == 0


# ---- errors and the fake itself ----


def test_a_raising_callable_is_a_clear_timing_error() -> None:
    calls = {"n": 0}

    def flaky() -> None:
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(
        TimedCallError, match=r"candidate and reference raised during warm-up round 4: CUDA error"
    ):
        measure_pair(FakeTimer({"*": 1e-3}), flaky, noop)


def test_non_positive_samples_are_rejected() -> None:
    with pytest.raises(TimedCallError, match="positive finite"):
        measure_pair(FakeTimer({"candidate": 0.0, "reference": 1e-3}), noop, noop)


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="not one of auto, cold, warm, graph"):
        measure_pair(FakeTimer({"*": 1e-3}), noop, noop, mode="hot")


def test_graph_mode_without_cuda_says_what_it_timed() -> None:
    cmp = measure_pair(FakeTimer({"*": 1e-6}), noop, noop, mode="graph")
    assert "graph mode needs CUDA" in cmp.facts["graph"]


def test_fake_timer_from_file(tmp_path: Path) -> None:
    path = tmp_path / "replay.json"
    path.write_text(
        json.dumps(
            {"times": {"candidate": [2e-3], "reference": 1e-3}, "clocks": [{"sm_mhz": 1980, "reasons": 8}]}
        )
    )
    timer = FakeTimer.from_file(path)
    assert timer.run_round([Job("candidate", noop), Job("reference", noop)]) == [2e-3, 1e-3]
    assert timer.clocks() == ClockSample(sm_mhz=1980, reasons=8)
    assert timer.now() == pytest.approx(3e-3)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="cannot read it as JSON"):
        FakeTimer.from_file(tmp_path / "bad.json")
    (tmp_path / "shape.json").write_text("[]")
    with pytest.raises(ValueError, match=re.escape('expected {"times"')):
        FakeTimer.from_file(tmp_path / "shape.json")
    with pytest.raises(KeyError, match="no durations for job 'other'"):
        timer.run_round([Job("other", noop)])


def test_env_var_selects_the_fake_timer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"times": {"*": 1e-3}}))
    monkeypatch.setenv("CONVPERF_FAKE_TIMER", str(path))
    assert isinstance(make_timer(resolve_device("cpu")), FakeTimer)
    monkeypatch.delenv("CONVPERF_FAKE_TIMER")
    assert isinstance(make_timer(resolve_device("cpu")), CpuTimer)


def test_timer_callable_measures_one_function() -> None:
    m = MeasureOne(FakeTimer({"timed": [1e-3, 1.01e-3, 0.99e-3]}))(noop)
    assert m.median == pytest.approx(1e-3)
    assert m.n >= 21 and m.mode == "fake"
    assert m.ci[0] <= m.median <= m.ci[1]


# ---- the real CPU timer ----

CPU_RULE = StopRule(max_time_s=1.0, warmup_cap_s=0.3)


def _conv_calls() -> tuple[Callable[[], object], Callable[[], object]]:
    p = Conv2dProblem(n=2, c_in=16, h=24, w=24, c_out=16, padding=(1, 1))
    x, w, b = p.make_inputs(0)
    args = p.conv_args()

    def once() -> object:
        return F.conv2d(x, w, b, *args)

    def twice() -> object:
        F.conv2d(x, w, b, *args)
        return F.conv2d(x, w, b, *args)

    return once, twice


def test_cpu_candidate_doing_the_conv_twice_measures_about_twice_the_time() -> None:
    once, twice = _conv_calls()
    timer = make_timer(resolve_device("cpu"))
    cmp = measure_pair(timer, twice, once, rule=CPU_RULE)
    assert 1.4 < cmp.time_ratio < 3.0, cmp.facts["stop"]
    assert cmp.candidate.mode == "cpu-thread" and cmp.candidate.l2 == "n/a"
    assert cmp.facts["threads"] >= 1


def test_cpu_identical_candidate_measures_about_one() -> None:
    once, _ = _conv_calls()
    timer = make_timer(resolve_device("cpu"))
    saved = torch.get_num_threads()
    cmp = measure_pair(timer, once, once, rule=CPU_RULE)
    assert 0.75 < cmp.time_ratio < 1.33, cmp.facts["stop"]
    assert torch.get_num_threads() == saved  # the pinned thread count is restored


def test_cpu_single_measurement_median_is_inside_its_ci() -> None:
    once, _ = _conv_calls()
    m = measure_one(make_timer(resolve_device("cpu")), once, rule=CPU_RULE)
    assert m.ci[0] <= m.median <= m.ci[1]
    assert m.n >= 21


# ---- graph-mode planning (the capture itself needs CUDA; see test_cuda_timing.py) ----


class GraphFake(FakeTimer):
    """A fake that "captures" by calling the rotated calls in a Python loop, recording the plan."""

    supports_graphs = True

    def __init__(self, *args: object, fail: bool = False, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.plans: list[tuple[str, int, int, str]] = []
        self.fail = fail

    def graph_job(self, name: str, calls: Sequence[Callable[[], object]], per_replay: int, l2: str) -> Job:
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.plans.append((name, len(calls), per_replay, l2))

        def replay() -> None:
            for i in range(per_replay):
                calls[i % len(calls)]()

        return Job(name, replay, calls_per_sample=per_replay, flush=False, mode="graph", l2=l2)


def _rotating(name: str, made: list[int]) -> Workload:
    def rotation(k: int) -> list[Callable[[], object]]:
        made.append(k)
        return [noop] * k

    return Workload(name, noop, rotation, bytes_per_call=1 << 20)  # 1 MiB per input set


def test_auto_mode_switches_short_kernels_to_rotated_graphs() -> None:
    made: list[int] = []
    timer = GraphFake({"*": 5e-6}, l2_bytes=50 << 20)  # 5 us kernels, 50 MiB L2
    cmp = measure_pair(timer, _rotating("candidate", made), _rotating("reference", made))
    assert cmp.candidate.mode == "graph" and cmp.reference.l2 == "rotated"
    # 1 ms / 5 us = 200 calls; 2 x 50 MiB / 1 MiB + 1 = 101 input sets, within one replay.
    assert timer.plans == [("candidate", 101, 200, "rotated"), ("reference", 101, 200, "rotated")]
    assert cmp.facts["graph"] == {
        "calls_per_replay": 200,
        "input_sets": 101,
        "rotated_bytes": 101 << 20,
        "l2": "rotated",
    }
    assert made == [101, 101]


def test_graph_replay_count_is_clamped_and_kept_under_five_ms() -> None:
    timer = GraphFake({"candidate": 1e-7, "reference": 1e-4})  # 0.1 us vs 100 us per call
    measure_pair(timer, noop, noop, mode="graph")
    # 1 ms / 0.1 us would be 10000 calls; the slower side caps a replay at 5 ms / 100 us = 50.
    assert [p[2] for p in timer.plans] == [50, 50]
    assert all(p[3] == "warm" for p in timer.plans)  # plain callables cannot rotate inputs


def test_long_kernels_stay_cold_in_auto_mode() -> None:
    timer = GraphFake({"*": 1e-3})
    cmp = measure_pair(timer, noop, noop)
    assert timer.plans == [] and cmp.candidate.mode == "fake"


def test_failed_capture_falls_back_and_says_so() -> None:
    timer = GraphFake({"*": 5e-6}, fail=True)
    cmp = measure_pair(timer, noop, noop)
    assert cmp.facts["graph"].startswith("capture failed, timed cold instead: RuntimeError")
    with pytest.raises(TimedCallError, match="CUDA graph capture failed"):
        measure_pair(GraphFake({"*": 5e-6}, fail=True), noop, noop, mode="graph")
