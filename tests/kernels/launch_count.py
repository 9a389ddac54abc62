"""Count the device kernels and allocations one call would issue, on the CPU (no GPU, no compute).

The call runs on ``meta`` tensors: every torch op still goes through the dispatcher, where a
``TorchDispatchMode`` sees it. An op that produces a meta tensor without being a view, an ``empty``
or a metadata op is one kernel launch on a GPU; every new (non-view) meta output is an allocation.
Ops on CPU tensors (e.g. a 0-d step's reciprocal) are host work and not counted. Triton kernels and
the CUDA im2col cannot run on meta: :func:`stub_triton` and :func:`stub_im2col` replace their launch
with a record of it (name, and the output the real op allocates), so their call sites still count.
What this cannot see: work inside one launch (cuBLAS may run a split-K reduction as a second kernel).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

ALLOC_ONLY = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}
NO_LAUNCH = ALLOC_ONLY | {"detach", "alias", "lift_fresh", "_local_scalar_dense", "set_", "resize_"}


@dataclass
class Record:
    launches: list[str] = field(default_factory=list)
    allocations: list[tuple[str, int]] = field(default_factory=list)  # (op, bytes)
    # per launch, the bytes of every tensor it reads or writes, each once: the HBM traffic if nothing
    # stays in L2 between launches (an upper bound; within a launch re-reads are not counted)
    traffic: list[int] = field(default_factory=list)

    @property
    def bytes_moved(self) -> int:
        return sum(self.traffic)

    def big_allocations(self, limit: int, exempt: tuple[torch.Tensor, ...] = ()) -> list[tuple[str, int]]:
        """Allocations above ``limit`` bytes other than the sizes of ``exempt`` (the call's outputs)."""
        sizes = {t.numel() * t.element_size() for t in exempt}
        return [(op, b) for op, b in self.allocations if b > limit and b not in sizes]


class _Mode(TorchDispatchMode):
    def __init__(self, rec: Record) -> None:
        super().__init__()
        self.rec = rec
        self.paused = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.paused:
            return out
        name = func.overloadpacket.__name__
        outs = [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]
        if not any(t.device.type == "meta" for t in outs):
            return out
        if func.is_view or name in ("view", "_unsafe_view", "as_strided", "expand", "t", "transpose"):
            return out
        mutable = any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)
        if not mutable:
            for t in outs:
                self.rec.allocations.append((name, t.numel() * t.element_size()))
        if name not in NO_LAUNCH:
            self.rec.launches.append(name)
            flat = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
            seen = {id(t) for t in flat}
            self.rec.traffic.append(_nbytes(flat) + _nbytes([t for t in outs if id(t) not in seen]))
        return out


def _nbytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the meta tensors (a 0-d CPU step is a kernel argument, not traffic)."""
    return sum(t.numel() * t.element_size() for t in tensors if t.device.type == "meta")


@contextmanager
def counting() -> Iterator[tuple[Record, _Mode]]:
    rec = Record()
    mode = _Mode(rec)
    with mode:
        yield rec, mode


@contextmanager
def paused(mode: _Mode) -> Iterator[None]:
    mode.paused = True
    try:
        yield
    finally:
        mode.paused = False


class Launcher:
    """Stands in for a jitted Triton kernel: ``launcher[grid](...)`` records one launch named
    ``triton:<name>`` and the bytes of its tensor arguments, and runs nothing."""

    def __init__(self, rec: Record, name: str) -> None:
        self.rec = rec
        self.name = name

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.rec.launches.append(f"triton:{self.name}")
            tensors = {id(a): a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)}
            self.rec.traffic.append(_nbytes(list(tensors.values())))

        return launch


def stub_triton(monkeypatch: pytest.MonkeyPatch, module: Any, rec: Record) -> None:
    """``module.kernel(name, interpret)`` returns a :class:`Launcher` for ``name``."""
    monkeypatch.setattr(module, "kernel", lambda name, interpret: Launcher(rec, name))


class OpsStub:
    """Stands in for a family's ``LazyOps`` (``module._cuda_ops``): ``_cuda_ops().name(...)`` records one
    launch ``name`` with the bytes of its tensor arguments and of the output ``fakes[name]`` allocates
    (the op's registered shape function), and runs nothing."""

    def __init__(self, rec: Record, fakes: dict[str, Callable[..., torch.Tensor]]) -> None:
        self.rec = rec
        self.fakes = fakes

    def __call__(self) -> OpsStub:
        return self

    def __getattr__(self, name: str) -> Callable[..., torch.Tensor]:
        fake = self.fakes[name]

        def launch(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = fake(*args, **kwargs)
            self.rec.launches.append(name)
            tensors = {id(a): a for a in (*args, *kwargs.values(), out) if isinstance(a, torch.Tensor)}
            self.rec.traffic.append(_nbytes(list(tensors.values())))
            return out

        return launch


def stub_im2col(monkeypatch: pytest.MonkeyPatch, ops: Any, rec: Record, mode: _Mode) -> None:
    """``ops.im2col`` (one CUDA kernel on a GPU) records one launch and allocates its column buffer."""
    real = ops.columns.im2col

    def im2col(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        with paused(mode):
            shape_of = real(torch.empty(x.shape, dtype=torch.float32, device="meta"), *args, **kwargs)
        rec.launches.append("im2col")
        out = torch.empty(shape_of.shape, dtype=x.dtype, device=x.device)  # counted as its allocation
        rec.traffic.append(_nbytes([x, out]))
        return out

    monkeypatch.setattr(ops, "im2col", im2col)
