"""A defect planted in a Triton kernel's source, run under the interpreter: the control of the Triton
tests (a check that cannot catch a wrong kernel proves nothing). Import after ``importorskip("triton")``."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest
from triton.runtime.interpreter import InterpretedFunction


def plant(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str, old: str, new: str, key: object
) -> None:
    """For this test, ``module._compiled[key]`` interprets ``module.<name>`` with ``old`` replaced by ``new``
    in its source; fails when ``old`` is no longer there (the control must then be updated)."""
    src = inspect.getsource(getattr(module, name))
    planted = src.replace(old, new)
    assert planted != src, f"the planted defect ({old!r}) no longer applies to {name}: update the control"
    scope = dict(vars(module))
    exec(compile(planted, f"<planted {name}>", "exec"), scope)
    monkeypatch.setitem(module._compiled, key, InterpretedFunction(scope[name]))
