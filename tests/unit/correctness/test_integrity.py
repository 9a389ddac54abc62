"""After-timing integrity (issue 18 item 5): each cheat is caught with its own message, and an
honest candidate passes. The timed calls go through ``InputSets`` (``phase_call(keep=)``) as in a check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from pytest_convperf.check.calls import InputSets
from pytest_convperf.core.device import resolve_device
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.case import make_grad_out
from pytest_convperf.correctness.integrity import after_timing
from pytest_convperf.correctness.oracle import stable_seed

P = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, padding=(1, 1))
CPU = resolve_device("cpu")


def _judge(candidate: Callable[..., Any], timed_calls: int = 5) -> str | None:
    """Correctness-style first call on copies, then ``timed_calls`` timed calls, then the check."""
    seed = stable_seed(P)
    inputs = P.make_inputs(seed, "cpu")
    x, w, b = (t.clone() if t is not None else None for t in inputs)
    candidate(x, w, b, *P.conv_args())  # correctness runs on copies (new pointers)
    sets = InputSets(candidate, F.conv2d, P, "forward", seed, "cpu", inputs)
    for _ in range(timed_calls):
        sets.calls[0][0]()
        sets.calls[0][1]()
    before = [t.clone() for t in inputs if t is not None]
    found = after_timing(candidate, P, inputs, sets.last_output(), seed, CPU)
    # The check's own inputs are restored: the confirm run times them again.
    assert all(torch.equal(a, b) for a, b in zip(before, [t for t in inputs if t is not None]))
    return found.message if found is not None else None


def test_honest_candidate_passes() -> None:
    assert _judge(F.conv2d) is None


def test_pointer_keyed_cache_is_caught() -> None:
    cache: dict[tuple[int, int], torch.Tensor] = {}

    def cached(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *args: Any) -> torch.Tensor:
        key = (x.data_ptr(), w.data_ptr())
        if key not in cache:
            cache[key] = F.conv2d(x, w, b, *args)
        return cache[key]

    message = _judge(cached)
    assert message is not None and message.startswith("CACHED RESULT:")
    assert "cached on its inputs' pointers or shapes" in message


def test_aliased_output_buffer_is_caught() -> None:
    buf: list[torch.Tensor] = []

    def aliased(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *args: Any) -> torch.Tensor:
        out = F.conv2d(x, w, b, *args)
        if not buf:
            buf.append(torch.empty_like(out))
        return buf[0].copy_(out)  # right values, but one buffer for every call

    message = _judge(aliased)
    assert message is not None and message.startswith("ALIASED OUTPUT:")
    assert "a buffer that later calls overwrite" in message


def test_stale_lazy_output_is_caught() -> None:
    # Honest for the first calls (correctness passes), then lazy: returns a tensor it fills only at
    # the next call, so the last timed call's output is never written.
    calls = [0]
    pending: list[tuple[torch.Tensor, Callable[[], torch.Tensor]]] = []

    def lazy(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *args: Any) -> torch.Tensor:
        calls[0] += 1
        if calls[0] <= 2:
            return F.conv2d(x, w, b, *args)
        while pending:
            out, work = pending.pop()
            out.copy_(work())
        result = torch.zeros(P.output_shape)
        pending.append((result, lambda: F.conv2d(x, w, b, *args)))
        return result

    message = _judge(lazy)
    assert message is not None and message.startswith("STALE OUTPUT:")
    assert "earlier call's result" in message and "or a tensor not yet written" in message


def test_without_a_timed_output_only_the_fresh_values_are_checked() -> None:
    # The fake timer with call_jobs=False never calls the candidate: nothing to check but fresh values.
    seed = stable_seed(P)
    inputs = P.make_inputs(seed, "cpu")
    assert after_timing(F.conv2d, P, inputs, None, seed, CPU) is None


@pytest.mark.parametrize("calls", [0, 1])
def test_last_output_is_known_only_when_called(calls: int) -> None:
    seed = stable_seed(P)
    sets = InputSets(F.conv2d, F.conv2d, P, "forward", seed, "cpu", P.make_inputs(seed, "cpu"))
    for _ in range(calls):
        sets.calls[0][0]()
    last = sets.last_output()
    assert (last is None) == (calls == 0)


def _value_keyed_cache() -> Callable[..., torch.Tensor]:
    """Issue 25's cheat: the output cached on the input's pointer plus 3 of its values."""
    cache: dict[tuple[int, float, float, float], torch.Tensor] = {}

    def cached(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *args: Any) -> torch.Tensor:
        flat = x.reshape(-1)
        key = (x.data_ptr(), float(flat[0]), float(flat[1]), float(flat[-1]))
        if key not in cache:
            cache.clear()
            cache[key] = F.conv2d(x, w, b, *args)
        return cache[key]

    return cached


def test_value_keyed_cache_is_named() -> None:
    message = _judge(_value_keyed_cache())
    assert message is not None and message.startswith("CACHED OUTPUT:"), message
    assert "returned the same tensor" in message


def test_every_round_gets_fresh_values_on_both_sides_and_restore_puts_them_back() -> None:
    seed = stable_seed(P)
    inputs = P.make_inputs(seed, "cpu")
    original = inputs.input.clone()
    sets = InputSets(F.conv2d, F.conv2d, P, "forward", seed, "cpu", inputs)
    refresh = [sets.refresh(0), sets.refresh(1)]
    assert refresh[0] is not None and refresh[1] is not None
    seen = []
    for r in range(4):
        refresh[0](r)
        refresh[1](r)
        assert torch.equal(sets.inputs[0].input, sets.reference_inputs[0].input)  # same work both sides
        seen.append(sets.inputs[0].input.clone())
    assert all(not torch.equal(a, b) for i, a in enumerate(seen) for b in seen[i + 1 :])
    last = sets.restore()
    assert last is not None and torch.equal(last.input, seen[-1])
    assert torch.equal(inputs.input, original) and torch.equal(sets.reference_inputs[0].input, original)
    # A gradient phase differentiates a forward run once: its inputs cannot change under it.
    gy = make_grad_out(P, seed, "cpu")
    grads = InputSets(F.conv2d, F.conv2d, P, "input_grad", seed, "cpu", P.make_inputs(seed, "cpu"), gy)
    assert grads.refresh(0) is None
