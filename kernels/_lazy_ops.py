"""Load a family's CUDA extension on first use (once, thread-safe) and return its op namespace."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch


class LazyOps:
    """``LazyOps(family, register)()`` builds/loads ``family`` through ``kernels._build`` the first
    time it is called, runs ``register`` (fake/autograd rules for the ops) once, and returns
    ``torch.ops.convperf_<family>``."""

    def __init__(self, family: str, register: Callable[[], None]) -> None:
        self.family = family
        self._register = register
        self._lock = threading.Lock()
        self._ready = False

    def __call__(self) -> Any:
        if not self._ready:
            with self._lock:
                if not self._ready:
                    from kernels import _build

                    _build.load(self.family)
                    self._register()
                    self._ready = True
        return getattr(torch.ops, f"convperf_{self.family}")
