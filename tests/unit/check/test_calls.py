"""Helpers of the convperf check: phase calls, backend facts, precision settings, device errors."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from pytest_convperf.check import calls, context
from pytest_convperf.check import fixture as check
from pytest_convperf.check.faults import device_errors
from pytest_convperf.core.device import DeviceInfo
from pytest_convperf.core.precision import tf32_enabled
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.case import make_grad_out
from pytest_convperf.correctness.oracle import stable_seed
from pytest_convperf.measure.rule import TimedCallError

PROBLEM = Conv2dProblem(n=2, c_in=4, h=9, w=8, c_out=6, kernel=(3, 3), padding=(1, 1), stride=(2, 1))


def _reference_grads(problem: Conv2dProblem, seed: int) -> tuple[torch.Tensor, ...]:
    x, w, b = problem.make_inputs(seed)
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    assert b is not None
    b = b.clone().requires_grad_()
    out = F.conv2d(x, w, b, *problem.conv_args())
    grad_out = make_grad_out(problem, seed, "cpu")
    return torch.autograd.grad(out, [x, w, b], grad_out)


@pytest.mark.parametrize(
    ("phase", "which"), [("input_grad", [0]), ("weight_grad", [1]), ("backward", [0, 1, 2])]
)
def test_phase_call_times_exactly_the_requested_gradients(phase: str, which: list[int]) -> None:
    seed = 7
    grad_out = make_grad_out(PROBLEM, seed, "cpu")
    call = calls.phase_call(F.conv2d, PROBLEM.make_inputs(seed), PROBLEM, phase, grad_out)
    expected = _reference_grads(PROBLEM, seed)
    got = call()
    assert isinstance(got, tuple) and len(got) == len(which)
    for g, i in zip(got, which):
        torch.testing.assert_close(g, expected[i])
    call()  # retain_graph: the timed call can repeat


def test_forward_phase_call_is_the_candidate_itself() -> None:
    inputs = PROBLEM.make_inputs(1)
    out = calls.phase_call(F.conv2d, inputs, PROBLEM, "forward", None)()
    stride, padding, dilation, groups = PROBLEM.conv_args()
    expected = F.conv2d(inputs.input, inputs.weight, inputs.bias, stride, padding, dilation, groups)
    torch.testing.assert_close(out, expected)


def test_gradient_phase_of_a_candidate_without_autograd_is_a_clear_error() -> None:
    def detached(*args: Any) -> torch.Tensor:
        return F.conv2d(*args).detach()

    with pytest.raises(TypeError, match="register an autograd formula"):
        calls.phase_call(
            detached, PROBLEM.make_inputs(0), PROBLEM, "weight_grad", make_grad_out(PROBLEM, 0, "cpu")
        )


def test_reference_backend_is_recorded_and_tolerates_a_missing_private_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = calls.reference_backend(PROBLEM, PROBLEM.make_inputs(0))
    assert isinstance(backend, str) and backend and "." not in backend
    monkeypatch.delattr(torch._C, "_select_conv_backend")
    assert calls.reference_backend(PROBLEM, PROBLEM.make_inputs(0)) is None


def test_perf_settings_pin_ieee_fp32_and_restore() -> None:
    info = DeviceInfo(kind="cpu", torch_device="cpu", name="cpu", slug="cpu-1t", threads=1)
    before = (tf32_enabled(), torch.backends.cudnn.benchmark)
    with calls.perf_settings(PROBLEM, info) as settings:
        assert settings.to_facts() == {"tf32": "off", "cudnn_benchmark": False}
        assert not tf32_enabled()
    assert (tf32_enabled(), torch.backends.cudnn.benchmark) == before
    with calls.perf_settings(PROBLEM.replace(dtype="bf16"), info) as settings:
        assert settings.tf32 == "n/a"


def test_seed_is_stable_and_problem_specific() -> None:
    assert stable_seed(PROBLEM) == stable_seed(Conv2dProblem.from_id(PROBLEM.id))
    assert stable_seed(PROBLEM) != stable_seed(PROBLEM.replace(n=3))


def test_phase_is_validated() -> None:
    with pytest.raises(ValueError, match="phase='grad' is not one of forward, input_grad"):
        context.check_phase("grad")


def _fixture(kind: str) -> tuple[check.ConvperfFixture, DeviceInfo]:
    info = DeviceInfo(
        kind=kind, torch_device="cuda:0" if kind == "cuda" else "cpu", name="x", slug="x", threads=1
    )
    session: Any = SimpleNamespace(device_info=lambda: info)
    request: Any = SimpleNamespace(
        node=SimpleNamespace(nodeid="tests/test_k.py::test_k[a]", name="test_k[a]")
    )
    return check.ConvperfFixture(session, request), info


def test_sticky_cuda_error_in_a_timed_call_fails_once_and_marks_the_context_lost() -> None:
    fixture, info = _fixture("cuda")
    cause = RuntimeError("CUDA error: an illegal memory access was encountered")
    with (
        pytest.raises(pytest.fail.Exception, match="CUDA context lost while timing"),
        device_errors(info, fixture.nodeid, PROBLEM.id),
    ):
        raise TimedCallError("candidate and reference raised during timing round 3") from cause
    assert info.lost is not None and "tests/test_k.py::test_k[a]" in info.lost
    with pytest.raises(pytest.skip.Exception, match="CUDA tests after it cannot run"):
        info.ensure_usable()


def test_other_timing_errors_fail_the_test_with_the_problem_id() -> None:
    fixture, info = _fixture("cpu")
    failed = pytest.raises(pytest.fail.Exception, match=f"timing {PROBLEM.id} failed: candidate raised")
    with failed, device_errors(info, fixture.nodeid, PROBLEM.id):
        raise TimedCallError("candidate raised during timing round 0: boom") from ValueError("boom")
    assert info.lost is None


def test_key_names_the_problem_and_phase() -> None:
    fixture, _ = _fixture("cpu")
    assert fixture.key(PROBLEM, "forward") == f"test_k[a]@{PROBLEM.id}"
    assert fixture.key(PROBLEM, "weight_grad") == f"test_k[a]@{PROBLEM.id}:weight_grad"


def test_key_of_a_test_in_a_class_names_the_class() -> None:
    class TestA:
        pass

    fixture, _ = _fixture("cpu")
    fixture.request.node.cls = TestA
    assert fixture.key(PROBLEM, "forward") == f"TestA::test_k[a]@{PROBLEM.id}"
    assert fixture.key(PROBLEM, "weight_grad") == f"TestA::test_k[a]@{PROBLEM.id}:weight_grad"


def test_a_lone_surrogate_in_a_test_id_is_escaped_in_its_key() -> None:
    fixture, _ = _fixture("cpu")
    fixture.request.node.name = "test_k[\ud800]"
    key = fixture.key(PROBLEM, "forward")
    assert key == f"test_k[\\ud800]@{PROBLEM.id}"
    key.encode("utf-8")  # storable in a baseline file
