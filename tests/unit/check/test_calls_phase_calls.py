"""A check's phase calls (``calls.phase_calls``): built once, shared by every step, each
measurement seeing only its own calls."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from pytest_convperf.check import calls
from pytest_convperf.core.device import DeviceInfo
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.case import make_grad_out

P = Conv2dProblem(n=1, c_in=3, h=6, w=6, c_out=4, kernel=(3, 3), padding=(1, 1))


def _ctx(candidate: Any, phase: str) -> Any:
    """The parts of a ``CheckContext`` that ``phase_calls`` reads (no pytest session needed)."""
    seed = 5
    return SimpleNamespace(
        problem=P,
        phase=phase,
        seed=seed,
        candidate=candidate,
        reference=None,
        timed_reference=F.conv2d,
        timed_reference_name="torch.nn.functional:conv2d",
        reference_note=None,
        inputs=P.make_inputs(seed, "cpu"),
        mode="cold",
        device=DeviceInfo(kind="cpu", torch_device="cpu", name="cpu", slug="cpu-1t", threads=1),
        config=SimpleNamespace(stash={}),  # no xdist worker state: the timing slot is a no-op
        nodeid="t.py::test",
        grad_out=None if phase == "forward" else make_grad_out(P, seed, "cpu"),
    )


def test_a_gradient_phase_runs_its_forward_once_for_every_step_and_measurement() -> None:
    forwards: list[int] = []

    def counted(*args: Any) -> torch.Tensor:
        forwards.append(1)
        return F.conv2d(*args)

    built = calls.phase_calls(_ctx(counted, "input_grad"))
    assert len(forwards) == 1  # built once: the one forward the backward differentiates
    built.candidate_call()  # the determinism check, memory, kernel table, traces: the same call
    assert set(built.facts.to_facts()) >= {"reference", "copy_bandwidth_gbs", "reference_backend", "memory"}
    for _ in range(2):  # the first measurement and its confirm time the same calls
        with built.measurement() as (cand, ref, settings):
            assert cand.call is built.candidate_call and ref.call is built.reference_call
            assert settings["tf32"] == "off"
            cand.call()
    assert len(forwards) == 1


def test_a_measurement_keeps_only_its_own_last_output() -> None:
    """An output kept before timing (the memory facts' call) is not the last timed call's: a
    measurement that calls nothing (a fake timer) has no last output to check."""
    built = calls.phase_calls(_ctx(F.conv2d, "forward"))  # the memory facts call each side once
    assert built.sets.kept[0][0][0] is not None
    with built.measurement():
        pass
    assert built.last is None
    with built.measurement() as (cand, _ref, _settings):
        out = cand.call()
    assert built.last is not None and built.last[1] is out
