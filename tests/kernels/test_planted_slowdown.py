"""The planted slowdown (kernels/_controls/planted.py): off by default, a clear error on a bad value,
about the asked share of extra time (measured on the CPU reference's twin as a ratio in one run), and
a control outside the kernels: their own forward calls never read the switch."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from kernels._controls import planted
from kernels.depthwise import ops, reference
from kernels.depthwise.reference import depthwise_args
from perf_tests.conftest import depthwise_candidate


def _problem(n: int = 1, c: int = 32, hw: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, c, hw, hw, generator=g), torch.randn(c, 1, 3, 3, generator=g)


def test_off_by_default_and_on_with_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    x, w = _problem()
    a = depthwise_args(x, w, None, 1, 1, 1, x.shape[1])
    seen: list[tuple[int, ...]] = []
    monkeypatch.delenv(planted.ENV, raising=False)
    planted.extra_work(lambda t: seen.append(tuple(t.shape)), a, w)
    assert seen == [] and planted.fraction() is None
    monkeypatch.setenv(planted.ENV, "0.1")
    planted.extra_work(lambda t: seen.append(tuple(t.shape)), a, w)
    assert seen == [(1, 32, 10, 96)]  # batch 1: a tenth of the rows
    # A batch large enough gives its leading samples; the result is unchanged.
    xb, _ = _problem(n=16, hw=8)
    ab = depthwise_args(xb, w, None, 1, 1, 1, 32)
    assert tuple(planted.share_of(ab, w, 0.1).shape) == (2, 32, 8, 8)
    assert torch.equal(planted.reference_forward(xb, w, None, 1, 1, 1, 32), _unplanted(xb, w, monkeypatch))


def _unplanted(x: torch.Tensor, w: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
    with monkeypatch.context() as m:
        m.delenv(planted.ENV, raising=False)
        return reference.forward(x, w, None, 1, 1, 1, x.shape[1])


def test_the_kernels_never_read_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain forwards are not on the switch's path: a value that makes every twin raise leaves
    them alone (before the control moved out of ``kernels/depthwise``, both raised here)."""
    monkeypatch.setenv(planted.ENV, "not a number")
    x, w = _problem(hw=8)
    reference.forward(x, w, None, 1, 1, 1, x.shape[1])
    with pytest.raises(ValueError, match=r"reference\.forward"):  # ops' own error, not the switch's
        ops.forward(x, w, None, 1, 1, 1, x.shape[1])
    with pytest.raises(ValueError, match=planted.ENV):
        planted.reference_forward(x, w, None, 1, 1, 1, x.shape[1])


def test_the_suite_takes_the_twin_only_when_the_switch_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(planted.ENV, raising=False)
    assert depthwise_candidate("cpu") is reference.forward
    assert planted.candidate(ops.forward) is ops.forward
    monkeypatch.setenv(planted.ENV, "0.1")
    assert depthwise_candidate("cpu") is planted.reference_forward
    assert planted.candidate(ops.forward) is planted.forward
    with pytest.raises(ValueError, match=r"no twin of .*it has of kernels\.depthwise\.ops\.forward"):
        planted.candidate(torch.nn.functional.conv2d)
    # The window's A/B: HEAD's hard-wired twin is found at REF by module and name, and there (nothing
    # hard-wired, no variable) it is the plain op.
    monkeypatch.delenv(planted.ENV)
    monkeypatch.setattr(planted, "HARDWIRED", 0.1)
    twin = depthwise_candidate("cpu")
    assert (twin.__module__, twin.__qualname__) == ("kernels._controls.planted", "reference_forward")
    monkeypatch.setattr(planted, "HARDWIRED", None)
    x, w = _problem(hw=8)
    with _ElementsWritten() as plain, torch.no_grad():
        reference.forward(x, w, None, 1, 1, 1, x.shape[1])
    with _ElementsWritten() as off, torch.no_grad():
        twin(x, w, None, 1, 1, 1, x.shape[1])
    assert off.elements == plain.elements


def test_rows_never_fewer_than_the_kernel_needs() -> None:
    x = torch.zeros(1, 4, 20, 20)
    w = torch.zeros(4, 1, 5, 5)
    a = depthwise_args(x, w, None, 1, 0, 1, 4)  # no padding: a 5x5 kernel needs 5 rows
    assert planted.share_of(a, w, 0.05).shape[2] == 5


@pytest.mark.parametrize("value", ["abc", "0", "-0.1", "1.5", "nan", "inf"])
def test_a_bad_value_names_the_variable_and_the_fix(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(planted.ENV, value)
    x, w = _problem(hw=8)
    with pytest.raises(ValueError, match=rf"^{planted.ENV}=.* must be a fraction in \(0, 1\].*unset it"):
        planted.reference_forward(x, w, None, 1, 1, 1, x.shape[1])
    with pytest.raises(ValueError, match=rf"^{planted.ENV}=.* must be a fraction"):
        depthwise_candidate("cpu")


class _ElementsWritten(TorchDispatchMode):
    """Counts the elements every PyTorch op writes: the reference's work, free of the box's noise."""

    def __init__(self) -> None:
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if getattr(func, "is_view", False):  # a view writes nothing
            return out
        self.elements += sum(t.numel() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def _work(x: torch.Tensor, w: torch.Tensor) -> int:
    with _ElementsWritten() as mode:
        planted.reference_forward(x, w, None, 1, 1, 1, x.shape[1])
    return mode.elements


@pytest.mark.parametrize("share", [0.1, 0.5])
def test_the_extra_work_is_the_asked_share(monkeypatch: pytest.MonkeyPatch, share: float) -> None:
    """The work each forward does, as a ratio to the unplanted call's: 1 + the share of rows (a tenth
    of 128 rows is 13), within the padding's rows (2 more of the share's 13 + 2 than of 128 + 2)."""
    x, w = _problem(c=16, hw=128)
    monkeypatch.delenv(planted.ENV, raising=False)
    base = _work(x, w)
    monkeypatch.setenv(planted.ENV, str(share))
    _work(x, w)  # the first call makes the share's copy
    assert _work(x, w) / base == pytest.approx(1 + round(share * 128) / 128, abs=0.015)


@pytest.fixture
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_the_switch_makes_the_call_slower_measured_as_a_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of calls with the switch off, at 0.1 and at 0.5, alternating in one process (as a night
    runs with the variable set for the whole process), CPU time of this thread, the fastest block of
    each. Only the order is asserted: on the shared 2-core box one block can take 4x its time, and
    on a CPU the extra call has a fixed overhead (about 20 small PyTorch ops, 1.2-1.5x at 0.1 here);
    the share itself is what ``test_the_extra_work_is_the_asked_share`` pins."""
    x, w = _problem(c=32, hw=64)

    def block(value: str | None, calls: int = 10) -> float:
        if value is None:
            monkeypatch.delenv(planted.ENV, raising=False)
        else:
            monkeypatch.setenv(planted.ENV, value)
        planted.reference_forward(x, w, None, 1, 1, 1, x.shape[1])  # the scratch copy, allocations settle
        times = []
        for _ in range(calls):
            start = time.thread_time()
            planted.reference_forward(x, w, None, 1, 1, 1, x.shape[1])
            times.append(time.thread_time() - start)
        return statistics.median(times)

    blocks: dict[str | None, list[float]] = {None: [], "0.1": [], "0.5": []}
    for _ in range(7):
        for value, seen in blocks.items():
            seen.append(block(value))
    base = min(blocks[None])
    r10, r50 = (min(blocks[v]) / base for v in ("0.1", "0.5"))
    assert 1.0 < r10 < r50, f"off 1x, 0.1 {r10:.3f}x, 0.5 {r50:.3f}x: the switch should add time in order"
