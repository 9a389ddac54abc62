"""Load a family's CUDA extension on first use (once, thread-safe) and return its op namespace."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

# At module level, not inside __call__: a revision's renamed copy of this module (an A/B) must bind
# its own tree's loader, and imports run later inside functions resolve to the working tree's.
from kernels import _build


class LazyOps:
    """``LazyOps(family, register)()`` builds/loads ``family`` through ``kernels._build`` the first
    time it is called, runs ``register`` (fake/autograd rules for the ops) once, and returns
    ``torch.ops.<namespace>`` (``convperf_<family>``; see ``kernels._build.namespace``)."""

    def __init__(self, family: str, register: Callable[[], None]) -> None:
        self.family = family
        self._register = register
        self._lock = threading.Lock()
        self._ready = False

    def __call__(self) -> Any:
        if not self._ready:
            with self._lock:
                if not self._ready:
                    _build.load(self.family)
                    self._register()
                    self._ready = True
        return getattr(torch.ops, _build.namespace(self.family))
