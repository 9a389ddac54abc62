"""Helpers of the model/layer benchmarks (perf_tests/models.py) and the model-level gate (paired.py)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from perf_tests import models as mb
from pytest_convperf.core.results import Measurement

CPU = torch.device("cpu")


def _m(median: float, noisy: bool = False) -> Measurement:
    return Measurement(samples=(median,), median=median, ci=(median, median), n=1, mode="cpu", noisy=noisy)


def test_seed_table_has_seed_004_layout() -> None:
    lines = mb.seed_table(
        [("VGG16", {p: _m(0.02451) for p in mb.MODEL_PHASES})], mb.MODEL_PHASES, "s", "Model"
    )
    assert lines[0] == "|Model|Framework|Forward Pass|Backward Pass|Total Time|Inference|"
    assert lines[1] == "|:---:|:---:|:---:|:---:|:---:|:---:|"
    assert lines[2] == f"|VGG16|{mb.framework()}|0.0245 s|0.0245 s|0.0245 s|0.0245 s|"


def test_fmt_time_units_and_noisy_mark() -> None:
    assert mb.fmt_time(_m(2.312e-4), "ms") == "0.2312 ms"
    assert mb.fmt_time(_m(16.036), "s") == "16.04 s"
    assert mb.fmt_time(_m(0.5, noisy=True), "s") == "0.5000 s*"
    assert mb.fmt_time(None, "s") == "-"


def test_sizes_follow_the_seed_on_gpu_and_shrink_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(mb.FULL_ENV, raising=False)
    assert mb.model_input_shape("resnet152", CPU) == (1, 3, 64, 64)
    assert mb.rule_for(CPU) == mb.CPU_RULE
    monkeypatch.setenv(mb.FULL_ENV, "1")
    assert mb.model_input_shape("resnet152", CPU) == (4, 3, 224, 224)
    assert mb.model_input_shape("resnet101", CPU) == (4, 3, 224, 224)
    assert mb.model_input_shape("vgg16_bn", CPU) == (8, 3, 224, 224)
    assert {s.name for s in mb.LAYERS} == {
        "Conv3x3/1",
        "Conv5x5/1",
        "Conv3x3/2",
        "Conv5x5/2",
        "Dense",
        "BatchNorm",
    }


def test_phase_callables_run_each_phase() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))
    calls = mb.phase_callables(model, torch.randn(2, 3, 6, 6))
    assert set(calls) == set(mb.MODEL_PHASES)
    out = calls["forward"]()
    assert isinstance(out, torch.Tensor) and out.grad_fn is not None
    calls["backward"]()
    calls["backward"]()  # retain_graph: repeatable, and grads are reset, not accumulated
    first = model[0].weight.grad
    assert first is not None
    calls["total"]()
    inf = calls["inference"]()
    assert isinstance(inf, torch.Tensor) and inf.grad_fn is None and model.training


def test_layer_callables_time_input_and_weight_grads() -> None:
    layer = nn.Linear(8, 3)
    calls = mb.layer_callables(layer, torch.randn(4, 8))
    calls["backward"]()
    assert layer.weight.grad is not None
    calls["total"]()


INNER = """
import os
import pytest
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf import check_pair

@pytest.fixture
def convperf_timer():
    return FakeTimer({"candidate": float(os.environ["CAND_S"]), "reference": 1e-3})

@pytest.mark.convperf
def test_model_pair(convperf):
    c = check_pair(convperf, name="toy-model", phase="forward", candidate=lambda: None,
                   reference=lambda: None, rule={"min_rounds": 7})
    assert abs(c.time_ratio - float(os.environ["CAND_S"]) / 1e-3) < 1e-9
"""


def test_check_pair_records_new_then_fails_a_regression(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CPU's noise floor makes every CPU check ADVISORY; a GPU-like floor lets the gate decide,
    # which is what this test is about (the wiring of check_pair, not the CPU policy).
    from pytest_convperf.judge import verdict

    monkeypatch.setattr(verdict, "CPU_NOISE_FLOOR", verdict.GPU_NOISE_FLOOR)
    pytester.makepyfile(test_inner=INNER)
    base = [
        *plugin_args,
        "--convperf",
        "--convperf-device=cpu",  # the CPU floor patched above applies to CPU checks only
        f"--convperf-baselines={pytester.path / 'b'}",
        "-p",
        "no:cacheprovider",
    ]
    monkeypatch.setenv("CAND_S", "0.5e-3")
    result = pytester.runpytest(*base, "--convperf-update-baselines")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*convperf: NEW 1*"])
    stored = list((pytester.path / "b").rglob("test_inner.yaml"))
    assert len(stored) == 1 and "test_model_pair" in stored[0].read_text()
    result = pytester.runpytest(*base, "--convperf-report=r")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*convperf: PASS 1*"])
    # The machine is the row's own fact, written once: not again in the comparison's facts.
    (row,) = json.loads((pytester.path / "r" / "rows.json").read_text())
    assert row["facts"]["machine"] and "machine" not in row["comparison"]["facts"]
    monkeypatch.setenv("CAND_S", "0.75e-3")  # 50 % slower than the stored ratio 0.5
    result = pytester.runpytest(*base)
    result.assert_outcomes(failed=1)  # a speed FAIL decided across the session, at its end
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*FAIL*test_model_pair*", "FAILED *test_model_pair*"])
