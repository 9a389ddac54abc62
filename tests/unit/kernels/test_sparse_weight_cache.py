"""Sparse variants prune and convert once per weight version, never inside the timed call.

Runs the CPU path (torch-ops im2col, CPU CSR). Unverified without a GPU: that the CUDA call
(cuSPARSE CSR x dense, cuSPARSELt 2:4) then captures in a CUDA graph and never syncs the host.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from kernels._weight_cache import WeightCache
from kernels.im2col_gemm import reference, variants

# Ops that prune (sort), convert to CSR or read a value back to the host (a sync).
BUILD_OPS = ("sort", "to_sparse_csr", "_local_scalar_dense", "nonzero", "topk")


class Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def inputs() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 6, 6, generator=gen)
    w = torch.randn(8, 4, 3, 3, generator=gen)  # groups=2
    variants._sparse.clear()
    yield x, w
    variants._sparse.clear()


CASES = [
    ("sparse", {"density": 0.4}, "unstructured"),
    ("structured", {"pattern": "2:4"}, "2:4"),
    ("structured", {"pattern": "filter", "density": 0.5}, "filter"),
]


def _call(which: str, x: torch.Tensor, w: torch.Tensor, kw: dict[str, Any]) -> torch.Tensor:
    fn = reference.sparse_forward if which == "sparse" else reference.structured_forward
    return fn(x, w, None, 1, 1, 1, 2, **kw)


@pytest.mark.parametrize(("which", "kw", "kind"), CASES, ids=[c[2] for c in CASES])
def test_a_second_call_prunes_and_converts_nothing(
    inputs: tuple[torch.Tensor, torch.Tensor], which: str, kw: dict[str, Any], kind: str
) -> None:
    x, w = inputs
    first = _call(which, x, w, kw)
    assert variants._sparse.builds == 1
    with Ops() as ops:
        second = _call(which, x, w, kw)
    assert variants._sparse.builds == 1
    built = [n for n in ops.names if any(b in n for b in BUILD_OPS)]
    assert built == [], f"the timed call still runs {built}"
    assert torch.equal(first, second)
    pruned = variants.pruned_weight(w, 2, kind=kind, density=kw.get("density", 0.5))
    torch.testing.assert_close(second, F.conv2d(x, pruned, None, 1, 1, 1, 2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("which", "kw", "kind"), CASES, ids=[c[2] for c in CASES])
def test_an_in_place_weight_change_rebuilds(
    inputs: tuple[torch.Tensor, torch.Tensor], which: str, kw: dict[str, Any], kind: str
) -> None:
    x, w = inputs
    _call(which, x, w, kw)
    version = w._version
    with torch.no_grad():
        w[0].neg_().mul_(3.0)  # an optimizer-like in-place step: the pruning pattern can change
    assert w._version > version
    out = _call(which, x, w, kw)
    assert variants._sparse.builds == 2
    density = kw.get("density", 0.5)
    pruned = variants.pruned_weight(w, 2, kind=kind, density=density)
    torch.testing.assert_close(out, F.conv2d(x, pruned, None, 1, 1, 1, 2), rtol=1e-5, atol=1e-5)
    _call(which, x, w, kw)
    assert variants._sparse.builds == 2  # cached again at the new version


def test_gradients_still_reach_the_kept_weights_through_the_cached_mask(
    inputs: tuple[torch.Tensor, torch.Tensor],
) -> None:
    x, w = inputs
    w = w.clone().requires_grad_(True)
    for _ in range(2):  # the second backward runs through a cache hit
        w.grad = None
        _call("sparse", x, w, {"density": 0.4}).sum().backward()
        assert w.grad is not None
        mask = variants.magnitude_mask(w, 0.4)
        assert torch.all(w.grad[~mask] == 0) and torch.any(w.grad[mask] != 0)
    assert variants._sparse.builds == 1


def test_the_cache_tells_a_new_tensor_from_a_freed_one_with_the_same_id() -> None:
    cache: WeightCache[int] = WeightCache(size=2)
    a = torch.ones(3)
    assert cache.get(a, (), lambda: 1) == 1
    assert cache.get(a, (), lambda: 2) == 1  # hit
    assert cache.get(a, ("other",), lambda: 3) == 3  # settings are part of the key
    b = torch.ones(3)
    assert cache.get(b, (), lambda: 4) == 4  # another tensor: miss (LRU drops a's first entry)
    assert len(cache) == 2 and cache.builds == 3
