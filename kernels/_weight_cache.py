"""Values derived from a tensor (lookup tables, pruned weights, CSR matrices), built once per weight.

A conv's weight changes rarely and its derived forms are costly or host-synchronizing to build
(``to_sparse_csr`` reads the non-zero count back to the host, which also breaks CUDA-graph
capture), so kernels build them outside the hot path and look them up here. An entry is keyed by
the tensor's identity, its ``_version`` (bumped by every in-place write, e.g. an optimizer step),
its shape/dtype/device and the caller's settings; a weak reference guards against a new tensor
that reuses a freed tensor's ``id``. Least recently used entries are dropped past ``size``.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import torch

T = TypeVar("T")


class WeightCache(Generic[T]):
    """LRU of ``build()`` results per (tensor, version, settings); ``builds`` counts misses."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.builds = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[Hashable, ...], tuple[weakref.ref[torch.Tensor], T]] = OrderedDict()

    def get(self, tensor: torch.Tensor, settings: tuple[Hashable, ...], build: Callable[[], T]) -> T:
        """The cached value for ``tensor`` as it is now and ``settings``, building it on a miss."""
        key = (id(tensor), tensor._version, tuple(tensor.shape), tensor.dtype, str(tensor.device), *settings)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0]() is tensor:
                self._entries.move_to_end(key)
                return hit[1]
        value = build()  # outside the lock: a build may take long; a racing twin only costs time
        with self._lock:
            self.builds += 1
            self._entries[key] = (weakref.ref(tensor), value)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        """Drop every entry and restart the ``builds`` count."""
        with self._lock:
            self._entries.clear()
            self.builds = 0

    def __len__(self) -> int:
        return len(self._entries)
