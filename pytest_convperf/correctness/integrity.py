"""Cheats and lazy outputs, looked for after timing (issue 18 item 5).

Correctness runs before timing on copies of the inputs; a candidate can pass it and still not
compute during timing. After the first timed measurement :func:`after_timing` checks, in order:

1. **stale**: the output of the last timed call (kept by ``calls.phase_call(keep=)``), copied
   at once, against the fp64 oracle of that call's inputs. A candidate that returns an earlier
   call's result, or a tensor it fills later (lazily, or on a stream nobody waits for), fails.
2. **cached**: fresh values written *into the same input tensors* (same data pointers, same
   shapes), one more call, its output against the oracle of the new values. A candidate that
   caches results keyed on input pointers (or shapes) returns the old result and fails.
3. **aliased**: the last timed call's output again: if the call in step 2 changed it, the
   candidate returns a buffer that later calls overwrite.
4. **cached output**: one more call on the same values as step 2: an output in the same storage
   as step 2's (still held, so no allocator could have reused it) is a stored result returned
   again (a cache keyed on pointers plus a few values, issue 25 item 1). The timing itself gives
   such a cache nothing to hit: every round's input values are fresh (``InputSets.refresh``).

The check's input values are restored afterwards (the confirm run times them again). Forward
phase only: a gradient phase's timed call returns gradients that step 1 cannot compare without
the forward (its correctness was checked before timing).

Every timed forward call's output must be a plain dense tensor (issue 37 item 2): exactly
``torch.Tensor``, not a subclass. A subclass can defer its work until its values are read (a lazy
tensor computed on first use, returned only when a timing frame is on the stack), and every read
comes after the timed region. :func:`lazy_output` is checked in each timed call (the exact type,
cheap enough to leave in the timed region of both sides) and, in full (strided layout, the input's
device, a storage, no Python dispatch), on the last timed call's output after timing.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from pytest_convperf.core.device import DeviceInfo
from pytest_convperf.core.precision import ieee_fp32
from pytest_convperf.core.problem import Conv2dProblem, ConvInputs
from pytest_convperf.core.results import ErrorStats, Verdict
from pytest_convperf.correctness.case import Candidate, build_case
from pytest_convperf.measure.rule import TimingTrick

# The fresh values' seed: far from the check's own seed and from graph mode's seed + i sets.
FRESH_SEED_OFFSET = 0x5EED5


@dataclass(frozen=True)
class Finding:
    """What a candidate did wrong around timing: ``tag`` (the message's first words), why, errors."""

    tag: str
    message: str
    errors: tuple[ErrorStats, ...] = ()
    verdict: Verdict | None = Verdict.CORRECTNESS_FAIL

    @classmethod
    def of(cls, message: str, errors: Sequence[ErrorStats] = ()) -> Finding:
        return cls(message.split(":")[0], message, tuple(errors))


def _worst(errors: Sequence[ErrorStats]) -> str:
    bad = [e for e in errors if not e.ok]
    e = max(bad, key=lambda e: e.max_abs) if bad else errors[0]
    return f"max abs error {e.max_abs:.3g} (allowed {e.atol:.3g} + {e.rtol:.3g} x |expected|)"


def lazy_output(out: object, device_type: str, full: bool = True) -> str | None:
    """Why ``out`` is not a plain dense tensor on ``device_type`` (a ``LAZY OUTPUT:`` message), else
    None. ``full=False``: the exact type only (the check inside each timed call)."""
    if type(out) is torch.Tensor:
        if not full:
            return None
        why = None
        if out.layout is not torch.strided or out.is_nested:
            why = f"a {out.layout} tensor{' (nested)' if out.is_nested else ''}, not a dense strided one"
        elif out.device.type != device_type:
            why = f"a tensor on device {out.device.type!r}, not on the inputs' {device_type!r}"
        elif torch._C._dispatch_keys(out).has(torch._C.DispatchKey.Python):
            why = "a tensor whose operations run Python code (a subclass in disguise)"
        else:
            try:
                out.untyped_storage().data_ptr()
            except (RuntimeError, NotImplementedError):
                why = "a tensor without a storage of its own (a wrapper)"
        if why is None:
            return None
    else:
        name = f"{type(out).__module__}.{type(out).__qualname__}"[:200]
        why = f"a torch.Tensor subclass ({name})" if isinstance(out, torch.Tensor) else f"a {name}"
    return (
        f"LAZY OUTPUT: a timed call returned {why}: its values need not exist when the call returns (a "
        "subclass can compute them on first use, after the timed region). Return a plain dense "
        "torch.Tensor (exactly torch.Tensor) holding the finished result."
    )


def check_output(out: object, device_type: str, full: bool = True) -> object:
    """``out`` itself when it is a plain dense tensor (:func:`lazy_output`), else :class:`TimingTrick`."""
    why = lazy_output(out, device_type, full)
    if why is not None:
        raise TimingTrick(why)
    return out


def after_timing(
    candidate: Candidate,
    problem: Conv2dProblem,
    inputs: ConvInputs,
    last: tuple[ConvInputs, object] | None,
    seed: int,
    device_info: DeviceInfo,
    oracle: Candidate | None = None,
) -> Finding | None:
    """None when the candidate computed honestly, else what it did."""
    device = device_info.torch_device
    # Step 2's values, and each step's fp64 oracle (``case.build_case``) on the inputs it checks.
    fresh = problem.make_inputs(seed + FRESH_SEED_OFFSET, device)
    snap: torch.Tensor | None = None
    last_out: torch.Tensor | None = None
    if last is not None:
        lazy = lazy_output(last[1], torch.device(device).type)
        if lazy is not None:
            return Finding.of(lazy)
    if last is not None and isinstance(last[1], torch.Tensor):
        last_inputs, last_out = last[0], last[1]
        if last_out.device.type == "cuda":
            torch.cuda.synchronize(last_out.device)  # what the caller would see after a sync
        snap = last_out.detach().clone()
        errors = build_case(problem, last_inputs, seed, device, False, oracle).errors({"output": snap})
        if not all(e.ok for e in errors):
            return Finding.of(
                f"STALE OUTPUT: the output of the last timed call on {problem.id} is wrong "
                f"({_worst(errors)}): the candidate returned an earlier call's result (a result cached on "
                "its inputs' pointers: each timed round writes fresh values into the same inputs) or a "
                "tensor not yet written when it returned. Return the finished result of each call "
                "(work on the current stream).",
                errors,
            )
    saved = [t.detach().clone() if t is not None else None for t in inputs]
    try:
        with torch.no_grad():
            for dst, src in zip(inputs, fresh):
                if dst is not None and src is not None:
                    dst.copy_(src)
        with _pinned(problem), torch.no_grad():
            out = candidate(inputs.input, inputs.weight, inputs.bias, *problem.conv_args())
        errors = build_case(problem, fresh, seed, device, False, oracle).errors({"output": out.detach()})
        if not all(e.ok for e in errors):
            return Finding.of(
                f"CACHED RESULT: after timing, new values written into the same input tensors (same data "
                f"pointers and shapes; seed {seed + FRESH_SEED_OFFSET}) gave a wrong output on {problem.id} "
                f"({_worst(errors)}): the candidate returns results cached on its inputs' pointers or "
                "shapes instead of computing them.",
                errors,
            )
        if last_out is not None and snap is not None and not torch.equal(last_out, snap):
            return Finding.of(
                f"ALIASED OUTPUT: the tensor returned by the last timed call on {problem.id} changed when "
                "the candidate was called again: it returns a buffer that later calls overwrite. Return "
                "a new tensor from each call."
            )
        with _pinned(problem), torch.no_grad():
            again = candidate(inputs.input, inputs.weight, inputs.bias, *problem.conv_args())
        if _same_storage(out, again):
            return Finding.of(
                f"CACHED OUTPUT: two calls on the same input values of {problem.id} returned the same "
                "tensor (one storage, the first still held): the candidate returns a stored result "
                "instead of computing it (a cache keyed on its inputs' pointers or values). Return a new "
                "tensor from each call."
            )
    finally:
        with torch.no_grad():
            for dst, old in zip(inputs, saved):
                if dst is not None and old is not None:
                    dst.copy_(old)
    return None


def _pinned(problem: Conv2dProblem) -> AbstractContextManager[object]:
    """IEEE fp32 for an fp32 problem (as correctness ran it); a fresh context per call."""
    return ieee_fp32() if problem.dtype == "fp32" else nullcontext()


def _same_storage(a: object, b: object) -> bool:
    """Two outputs in one storage: ``b`` came while ``a`` was alive, so no allocator could reuse it."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.numel() == 0:
        return False
    return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
