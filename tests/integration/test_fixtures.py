"""The plugin's measurement fixtures in inner pytest sessions (pytester), on the CPU.

Exact timings come from the fake timer, injected by overriding ``convperf_timer`` in the inner
conftest (or through ``$CONVPERF_FAKE_TIMER``); the real CPU timer is used where only the shape
of the result matters.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

# Inner sessions run in this process. pytester restores sys.modules after each one, so a module
# first imported inside an inner session is dropped and re-imported by the next; re-importing
# torch's C extension that way corrupts the interpreter (a segfault in the GC). Importing
# everything the inner sessions use here keeps it loaded once.
import torch
import torch._inductor
import torch.profiler

from pytest_convperf.measure import cpu, fake, profiling, rounds  # noqa: F401

PROBLEM_SRC = """
import pytest
import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem

P = Conv2dProblem(n=1, c_in=4, h=10, w=10, c_out=4, padding=(1, 1))
"""

FAKE_CONFTEST = """
import json
from pathlib import Path

import pytest
from pytest_convperf.core.device import ClockSample
from pytest_convperf.session import SESSION_KEY
from pytest_convperf.measure.fake import FakeTimer

TIMES = {times}
CLOCKS = {clocks}


@pytest.fixture
def convperf_timer():
    return FakeTimer(TIMES, clocks=CLOCKS)


def pytest_sessionfinish(session):
    rows = [row.to_dict() for row in session.config.stash[SESSION_KEY].rows.run]
    Path("rows.json").write_text(json.dumps(rows, default=str))
"""


def _fake_conftest(pytester: pytest.Pytester, times: dict[str, float], clocks: str = "None") -> None:
    pytester.makeconftest(FAKE_CONFTEST.format(times=repr(times), clocks=clocks))


def _rows(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((pytester.path / "rows.json").read_text())
    return rows


def test_fixtures_are_listed_with_docstrings(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    result = pytester.runpytest(*plugin_args, "--fixtures")
    out = result.stdout.str()
    for name, words in (
        ("convperf", "Check a conv2d candidate"),
        ("convperf_device", "The device in use"),
        ("convperf_timer", "The Timer that"),
        ("gpu_timer", "Time a no-argument callable"),
        ("gpu_memory", "Peak memory of a block"),
        ("profiler_trace", "Profile a block"),
    ):
        assert f"{name} -- " in out or f"\n{name}\n" in out or f"{name} [" in out, name
        assert words in out, name


def test_gpu_timer_with_a_fake_timer_is_exact(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    _fake_conftest(pytester, {"timed": 2e-3})
    pytester.makepyfile(
        """
        def test_t(gpu_timer):
            calls = []
            m = gpu_timer(lambda: calls.append(1))
            assert m.median == 2e-3 and m.ci == (2e-3, 2e-3)
            assert m.n == 21 and m.mode == "fake" and not m.noisy
            assert len(calls) == 13 + 21  # warm-up rounds, then the timed ones: the callable really ran
        """
    )
    pytester.runpytest(*cpu_plugin_args).assert_outcomes(passed=1)


def test_gpu_timer_on_the_cpu_times_with_the_cpu_clock(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_t(gpu_timer, convperf_device):
            x = torch.randn(64, 64)
            m = gpu_timer(lambda: x @ x, max_time_s=0.5, warmup_cap_s=0.2)
            assert convperf_device.kind == "cpu"
            assert m.mode == "cpu-thread" and m.l2 == "n/a"
            assert m.n >= 21 and m.ci[0] <= m.median <= m.ci[1]
            assert m.median > 0
        """
    )
    pytester.runpytest(*cpu_plugin_args).assert_outcomes(passed=1)


def test_gpu_memory_on_the_cpu_reports_rss_growth(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_m(gpu_memory):
            with gpu_memory() as mem:
                block = torch.ones(16 * 2**20)  # 64 MiB, written (above glibc's mmap threshold)
                del block
            assert mem.source.startswith("cpu-rss")
            assert mem.peak_bytes >= 48 * 2**20
            assert mem.nvml_used_bytes is None
        """
    )
    pytester.runpytest(*cpu_plugin_args).assert_outcomes(passed=1)


def test_profiler_trace_writes_a_safely_named_json_and_a_kernel_table(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(
        test_prof="""
        import json
        import pytest
        import torch
        import torch.nn.functional as F

        @pytest.mark.parametrize("shape", ["n1/c4::x[y]"])
        def test_p(profiler_trace, shape):
            x, w = torch.randn(1, 4, 16, 16), torch.randn(8, 4, 3, 3)
            with profiler_trace("conv") as tr:
                for _ in range(3):
                    F.conv2d(x, w, padding=1)
            with profiler_trace("conv") as again:
                F.conv2d(x, w, padding=1)
            assert tr.path.exists() and tr.path.suffix == ".json"
            assert again.path != tr.path
            assert "traceEvents" in json.loads(tr.path.read_text())
            names = [row.name for row in tr.kernels]
            assert any("conv" in n for n in names), names
            conv = next(r for r in tr.kernels if r.name == "aten::conv2d" or "convolution" in r.name)
            assert conv.calls >= 3
            assert abs(sum(r.share for r in tr.kernels) - 1.0) < 1e-6
            print("TRACE", tr.path)
        """
    )
    result = pytester.runpytest(*cpu_plugin_args, "--convperf-report=report", "-s")
    result.assert_outcomes(passed=1)
    traces = sorted((pytester.path / "report" / "traces").glob("*.json"))
    assert [t.name for t in traces] == [
        "test_prof.py_test_p_n1_c4_x_y_-conv-2.json",
        "test_prof.py_test_p_n1_c4_x_y_-conv.json",
    ]


def test_convperf_device_fixture(pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]) -> None:
    pytester.makepyfile(
        """
        def test_d(convperf_device):
            assert convperf_device.torch_device == "cpu"
            assert convperf_device.slug.endswith("-1t")
            assert "torch" in convperf_device.facts
        """
    )
    pytester.runpytest(*cpu_plugin_args).assert_outcomes(passed=1)


def test_cpu_plugin_args_keep_the_cpu_path_where_a_gpu_is_available(
    pytester: pytest.Pytester,
    plugin_args: tuple[str, ...],
    cpu_plugin_args: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tests above ran on the GPU of the first H100 session (auto picks CUDA there) and failed:
    a machine that claims a GPU must leave them on the CPU. Inner sessions run in this process, so
    the claim reaches their device choice."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    pytester.makepyfile(
        """
        def test_d(convperf_device):
            assert convperf_device.kind == "cpu"
        """
    )
    pytester.runpytest(*cpu_plugin_args).assert_outcomes(passed=1)
    # The control: without the flag, auto takes the (claimed) GPU, which this machine cannot open.
    assert pytester.runpytest(*plugin_args).ret != pytest.ExitCode.OK


# ---- convperf.check / measure ----


def test_check_records_a_row_with_the_exact_fake_ratio_and_writes_traces(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    _fake_conftest(pytester, {"candidate": 0.5e-3, "reference": 1e-3})
    pytester.makepyfile(
        test_chk=PROBLEM_SRC
        + """
@pytest.mark.convperf
def test_fast(convperf):
    cmp = convperf.check(F.conv2d, P)
    assert cmp.time_ratio == 0.5 and cmp.speedup == 2.0
"""
    )
    result = pytester.runpytest(
        *cpu_plugin_args, "--convperf", "--convperf-report=report", "--convperf-trace"
    )
    result.assert_outcomes(passed=1)
    (row,) = _rows(pytester)
    assert row["key"] == "test_fast@n1-ci4-h10-w10-co4-k3x3-s1-p1-d1-g1-fp32-nchw"
    assert row["module"] == "test_chk" and row["phase"] == "forward"
    assert row["nodeid"] == "test_chk.py::test_fast"
    assert row["problem"] == "n1-ci4-h10-w10-co4-k3x3-s1-p1-d1-g1-fp32-nchw"
    cmp = row["comparison"]
    assert cmp["time_ratio"] == 0.5 and cmp["n_rounds"] == 21 and cmp["se"] == 0.0
    assert cmp["candidate"]["samples"] == [0.5e-3] * 21
    assert cmp["facts"]["tf32"] == "off"
    # The seed and the machine are the row's own facts, written once: not again in the comparison's.
    assert isinstance(row["facts"]["seed"], int) and row["facts"]["machine"]
    assert "seed" not in cmp["facts"] and "machine" not in cmp["facts"]
    assert isinstance(cmp["facts"]["reference_backend"], str)
    assert cmp["facts"]["roofline_floor_us"] > 0
    mem = row["facts"]["memory"]
    assert mem["source"].startswith("cpu-rss")
    assert mem["candidate_peak_bytes"] >= 0 and mem["reference_peak_bytes"] >= 0
    assert [e["name"] for e in row["errors"]] == ["output"] or row["errors"]
    assert all(math.isfinite(e["max_abs"]) for e in row["errors"])
    assert row["verdict"] in (None, "NEW")  # no baseline stored: no decision, or NEW once baselines decide
    # The row holds its env, verdict, message and seed once (rows.json format 3): not again in its
    # facts, its comparison's facts or its decision.
    text = json.dumps({k: v for k, v in row.items() if k not in ("baseline", "update")})  # entries
    assert row["format"] == 3 and row["env"]["torch"]
    assert [text.count(k) for k in ('"env"', '"verdict"', '"message"', '"seed"')] == [1, 1, 1, 1]
    traces = cmp["facts"]["traces"]
    assert len(traces) == 2 and all(Path(t).exists() for t in traces)
    assert all(Path(t).parent == pytester.path / "report" / "traces" for t in traces)


def test_wrong_candidate_fails_with_the_correctness_message(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    _fake_conftest(pytester, {"candidate": 0.5e-3, "reference": 1e-3})
    pytester.makepyfile(
        test_bad=PROBLEM_SRC
        + """
def off_by_one_percent(*args):
    return F.conv2d(*args) * 1.01

@pytest.mark.convperf
def test_bad(convperf):
    convperf.check(off_by_one_percent, P)
"""
    )
    result = pytester.runpytest(*cpu_plugin_args, "--convperf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*candidate test_bad:off_by_one_percent is wrong on n1-ci4-h10-w10*", "*repro:*"]
    )
    (row,) = _rows(pytester)
    assert row["verdict"] == "CORRECTNESS_FAIL" and row["comparison"] is None
    assert not all(e["violations"] == 0 for e in row["errors"])


def test_unstable_clocks_make_the_check_inconclusive(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    _fake_conftest(
        pytester,
        {"candidate": 0.5e-3, "reference": 1e-3},
        clocks="[ClockSample(sm_mhz=1980.0)] * 2 + [ClockSample(sm_mhz=1200.0)]",  # a third of rounds slow
    )
    pytester.makepyfile(
        test_inc=PROBLEM_SRC
        + """
@pytest.mark.convperf
def test_inc(convperf):
    convperf.check(F.conv2d, P)
"""
    )
    result = pytester.runpytest(*cpu_plugin_args, "--convperf", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*convperf INCONCLUSIVE on n1-ci4-h10-w10*timing rounds dropped*"])
    (row,) = _rows(pytester)
    assert row["verdict"] == "INCONCLUSIVE"
    assert row["comparison"]["dropped_rounds"] > 0


def test_impossibly_fast_time_is_an_error(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    _fake_conftest(pytester, {"candidate": 1e-12, "reference": 1e-3})
    pytester.makepyfile(
        test_fast=PROBLEM_SRC
        + """
def test_m(convperf):
    convperf.measure(F.conv2d, P)
"""
    )
    result = pytester.runpytest(*cpu_plugin_args, "--convperf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*ImplausibleTime*candidate median*under half the roofline floor*did not do its work*"]
    )


def test_gradient_phases_time_the_backward_and_key_by_phase(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    _fake_conftest(pytester, {"candidate": 2e-3, "reference": 1e-3})
    pytester.makepyfile(
        test_grad=PROBLEM_SRC
        + """
@pytest.mark.convperf
@pytest.mark.parametrize("phase", ["input_grad", "weight_grad", "backward"])
def test_g(convperf, phase):
    cmp = convperf.check(F.conv2d, P, phase=phase)
    assert cmp.time_ratio == 2.0
"""
    )
    result = pytester.runpytest(*cpu_plugin_args, "--convperf")
    result.assert_outcomes(passed=3)
    rows = _rows(pytester)
    assert sorted(r["phase"] for r in rows) == ["backward", "input_grad", "weight_grad"]
    for r in rows:
        assert r["key"].endswith(":" + r["phase"])
        names = sorted(e["name"] for e in r["errors"])
        assert "grad_input" in names or "grad_weight" in names


def test_fake_timer_from_the_environment(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    replay = pytester.path / "replay.json"
    replay.write_text(json.dumps({"times": {"candidate": [0.25e-3], "reference": [1e-3]}}))
    monkeypatch.setenv("CONVPERF_FAKE_TIMER", str(replay))
    pytester.makepyfile(
        test_env=PROBLEM_SRC
        + """
def test_m(convperf):
    cmp = convperf.measure(F.conv2d, P)
    assert cmp.time_ratio == 0.25 and cmp.facts["timer"].startswith("fake")
"""
    )
    pytester.runpytest(*cpu_plugin_args, "--convperf").assert_outcomes(passed=1)


def test_measure_on_the_cpu_sees_a_doubled_candidate(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(
        test_cpu=PROBLEM_SRC
        + """
from pytest_convperf.measure.rounds import StopRule

Q = Conv2dProblem(n=2, c_in=16, h=24, w=24, c_out=16, padding=(1, 1))

def twice(*args):
    F.conv2d(*args)
    return F.conv2d(*args)

def test_m(convperf):
    cmp = convperf.measure(twice, Q, rule=StopRule(max_time_s=1.0, warmup_cap_s=0.3))
    assert 1.4 < cmp.time_ratio < 3.0, cmp.facts["stop"]
    assert cmp.candidate.mode == "cpu-thread"
"""
    )
    pytester.runpytest(*cpu_plugin_args, "--convperf").assert_outcomes(passed=1)


def test_gpu_timer_is_a_deprecated_alias_of_convperf_measure_one(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    # One name per concept: the fixture times on the CPU too, so it is convperf_measure_one; the
    # old name still works, with a warning naming the new one.
    _fake_conftest(pytester, {"timed": 2e-3})
    pytester.makepyfile(
        """
        import pytest

        def test_t(request, convperf_measure_one):
            assert convperf_measure_one(lambda: None).median == 2e-3
            with pytest.warns(DeprecationWarning, match="renamed convperf_measure_one"):
                old = request.getfixturevalue("gpu_timer")
            assert old is convperf_measure_one
        """
    )
    pytester.runpytest(*cpu_plugin_args).assert_outcomes(passed=1)
    out = pytester.runpytest(*cpu_plugin_args, "--fixtures").stdout.str()
    assert "convperf_measure_one -- " in out or "convperf_measure_one [" in out, out
    assert "Deprecated alias of ``convperf_measure_one``" in out
