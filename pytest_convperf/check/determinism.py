"""Determinism (issue 18 item 6): a check declared deterministic runs twice on the same inputs and
must agree bit for bit.

Our weight-gradient kernels sum per-slice partials in a fixed order (no atomics), so their result
does not depend on scheduling; a change that brings atomics back (or a split-K whose order varies)
shows up here as a bitwise difference, named by output, element index and the two values.
Bitwise means bitwise: the tensors are compared as integers of the same width, so NaNs with the
same payload agree and -0.0 differs from 0.0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.integrity import Finding

_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _tensors(value: object) -> list[torch.Tensor | None]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [v if isinstance(v, torch.Tensor) else None for v in value]
    raise TypeError(f"a deterministic check compares tensors, got {type(value).__name__}")


def bitwise_difference(first: object, second: object, names: Sequence[str] = ()) -> str | None:
    """None when ``first`` and ``second`` (a tensor or tensors) agree bit for bit, else where not."""
    a_list, b_list = _tensors(first), _tensors(second)
    for i, (a, b) in enumerate(zip(a_list, b_list, strict=True)):
        name = names[i] if i < len(names) else f"output {i}"
        if a is None or b is None:
            if (a is None) != (b is None):
                return f"{name}: present in one run only"
            continue
        a, b = a.detach().contiguous(), b.detach().contiguous()
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{name}: shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
        ints = _INT_OF_WIDTH[a.element_size()]
        differ = a.view(ints) != b.view(ints)
        count = int(differ.sum())
        if count:
            flat = int(differ.flatten().nonzero()[0])
            index = tuple(int(k) for k in torch.unravel_index(torch.tensor(flat), a.shape))
            x, y = float(a.flatten()[flat]), float(b.flatten()[flat])
            return (
                f"{name}: {count} of {a.numel()} elements differ bitwise; first at index {list(index)}: "
                f"{x!r} vs {y!r} (difference {abs(x - y):.3g})"
            )
    return None


def run_twice(call: Callable[[], object], names: Sequence[str] = ()) -> str | None:
    """Call ``call`` twice (same inputs, same process) and compare the results bit for bit."""
    first = call()
    kept = [t.detach().clone() if t is not None else None for t in _tensors(first)]
    if any(t is not None and t.is_cuda for t in kept):
        torch.cuda.synchronize()
    return bitwise_difference(kept, call(), names)


def nondeterminism(
    call: Callable[[], object], problem: Conv2dProblem, phase: str, seed: int
) -> Finding | None:
    """What differs when a check declared deterministic runs ``call`` (its ``phase`` on the inputs
    of ``seed``: the check's ``PhaseCalls.candidate_call``, built by the caller) twice; None when nothing."""
    names = ("output",) if phase == "forward" else ()
    diff = run_twice(call, names)
    if diff is None:
        return None
    return Finding.of(
        f"NONDETERMINISTIC: {phase} of {problem.id} was declared deterministic but two runs on the "
        f"same inputs (seed {seed}) differ: {diff}. A reduction whose order varies (atomics, "
        "split-K) breaks it; or drop deterministic=True if the kernel is not meant to be."
    )
