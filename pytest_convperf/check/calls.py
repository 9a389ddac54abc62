"""The calls of one check: the phase calls, the input sets, the perf and correctness settings.

What a check (``check/pipeline.py``) times and how: :func:`phase_call` turns a candidate and one
input set into the zero-argument call of a phase (a gradient phase with the check's ``grad_out``);
:class:`InputSets` holds the input sets that candidate and reference share (set 0, the recorded
seed, is built once per check and also used by correctness, memory and traces);
:func:`perf_settings` / :func:`correctness_settings` pin cuDNN and TF32 for each;
:func:`reference_backend` probes which backend ``F.conv2d`` picks. :func:`phase_calls` builds every
phase call of one check once, with the facts measured once before timing (:class:`ReferenceFacts`),
into a :class:`PhaseCalls` that the pipeline hands to the determinism check, the timing and the
profiles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch

from pytest_convperf.check.context import Candidate
from pytest_convperf.core.precision import ieee_fp32
from pytest_convperf.core.problem import ConvInputs
from pytest_convperf.correctness.integrity import check_output
from pytest_convperf.correctness.oracle import describe
from pytest_convperf.measure.parallel import timing_slot
from pytest_convperf.measure.profiling import profile_kernels
from pytest_convperf.measure.rule import Workload

if TYPE_CHECKING:
    from pytest_convperf.check.context import CheckContext
    from pytest_convperf.core.device import DeviceInfo
    from pytest_convperf.core.problem import Conv2dProblem


@dataclass(frozen=True)
class ReferenceKernels:
    """The backend ``F.conv2d`` picks (the default reference only, else None) and, on a GPU
    (``profiled``), the reference's first kernels and its cuDNN (or first) kernel."""

    backend: str | None
    profiled: bool = False
    kernels: tuple[str, ...] = ()
    cudnn_kernel: str | None = None


# Backend and kernel names of a reference on a problem, per process: profiling once is enough.
_REFERENCE_FACTS: dict[tuple[str, str, bool, str, str], ReferenceKernels] = {}


@dataclass(frozen=True)
class MemoryFacts:
    """Peak memory of one call of each side (allocator peak on a GPU, RSS growth on a CPU), its
    ``source`` and the device memory in use per NVML (None: no NVML)."""

    candidate_peak_bytes: int
    reference_peak_bytes: int
    source: str
    nvml_used_bytes: int | None

    def to_dict(self) -> dict[str, int | str]:
        out: dict[str, int | str] = {"candidate_peak_bytes": self.candidate_peak_bytes, "source": self.source}
        if self.nvml_used_bytes is not None:
            out["nvml_used_bytes"] = self.nvml_used_bytes
        out["reference_peak_bytes"] = self.reference_peak_bytes
        return out


@dataclass(frozen=True)
class ReferenceFacts:
    """What a check measures once before timing (:func:`phase_calls`): the reference's name, the
    copy bandwidth (GB/s), its backend and kernels, the peak memory of each side, and the note when
    the reference is timed on another path (``safe_reference``)."""

    reference: str
    copy_bandwidth_gbs: float
    kernels: ReferenceKernels
    memory: MemoryFacts
    reference_note: str | None = None

    def to_facts(self) -> dict[str, object]:
        """As a comparison's facts carry them (core.results.Comparison.facts)."""
        facts: dict[str, object] = {
            "reference": self.reference,
            "copy_bandwidth_gbs": self.copy_bandwidth_gbs,
            "reference_backend": self.kernels.backend,
        }
        if self.kernels.profiled:
            facts["reference_kernels"] = list(self.kernels.kernels)
            facts["cudnn_kernel"] = self.kernels.cudnn_kernel
        facts["memory"] = self.memory.to_dict()
        if self.reference_note is not None:
            facts["reference_note"] = self.reference_note
        return facts


@dataclass(frozen=True)
class PerfSettings:
    """The perf settings a timed call runs under (:func:`perf_settings`): TF32 ``off`` for fp32
    (``n/a`` otherwise) and whether cuDNN's benchmark mode is on (on a GPU)."""

    tf32: str
    cudnn_benchmark: bool

    def to_facts(self) -> dict[str, object]:
        return {"tf32": self.tf32, "cudnn_benchmark": self.cudnn_benchmark}


def phase_call(
    fn: Candidate,
    inputs: ConvInputs,
    problem: Conv2dProblem,
    phase: str,
    grad_out: torch.Tensor | None,
    keep: list[object] | None = None,
) -> Callable[[], object]:
    """A zero-argument call timing ``phase`` of ``fn`` on ``inputs``.

    ``forward`` calls ``fn`` itself. The grad phases run the forward once here, with the inputs
    that the phase differentiates marked ``requires_grad``, and the returned call is
    ``torch.autograd.grad(out, wrt, grad_out, retain_graph=True)``: only backward kernels are timed.
    ``grad_out``: the check's (``CheckContext.grad_out``, the one correctness checked gradients
    with), None for ``forward``.
    ``keep`` (forward): each call stores its output in ``keep[0]``, so the last timed call's
    output can be checked after timing (``integrity``); one store, on both sides alike. Each forward
    call refuses an output that is not exactly ``torch.Tensor`` (``integrity.check_output``: a
    subclass can defer its work past the timed region), on both sides alike.
    """
    args = problem.conv_args()
    if phase == "forward":
        x, w, b = inputs
        kind = x.device.type
        if keep is not None:
            held = keep

            def forward_kept() -> object:
                held[0] = out = check_output(fn(x, w, b, *args), kind, full=False)
                return out

            return forward_kept

        def forward() -> object:
            return check_output(fn(x, w, b, *args), kind, full=False)

        return forward
    x = inputs.input.detach().requires_grad_(phase in ("input_grad", "backward"))
    w = inputs.weight.detach().requires_grad_(phase in ("weight_grad", "backward"))
    b = inputs.bias
    if b is not None:
        b = b.detach().requires_grad_(phase == "backward")
    with torch.enable_grad():
        out = fn(x, w, b, *args)
    if not isinstance(out, torch.Tensor) or out.grad_fn is None:
        raise TypeError(
            f"{describe(fn)} returned an output without autograd history, so phase {phase!r} cannot be "
            "timed: register an autograd formula (torch.library.register_autograd) for the candidate"
        )
    if grad_out is None:
        raise ValueError(f"phase {phase!r} needs the check's grad_out (CheckContext.grad_out)")
    wrt = [t for t in (x, w, b) if t is not None and t.requires_grad]
    gy = grad_out

    def backward() -> object:
        return torch.autograd.grad(out, wrt, gy, retain_graph=True)

    return backward


def reference_backend(problem: Conv2dProblem, inputs: ConvInputs) -> str | None:
    """The backend ``F.conv2d`` picks for these inputs (``torch._C._select_conv_backend``).

    A private API: None when this torch does not have it or it refuses the arguments.
    """
    select = getattr(torch._C, "_select_conv_backend", None)
    if select is None:
        return None
    stride, padding, dilation, groups = problem.conv_args()
    try:
        backend = select(
            inputs.input,
            inputs.weight,
            inputs.bias,
            list(stride),
            list(padding),
            list(dilation),
            False,
            [0, 0],
            groups,
        )
    except Exception:
        return None
    return str(backend).rsplit(".", 1)[-1]


@contextmanager
def perf_settings(problem: Conv2dProblem, device: DeviceInfo) -> Iterator[PerfSettings]:
    """cuDNN benchmark mode on and, for fp32, TF32 off; yields what describes it."""
    with ExitStack() as stack:
        if problem.dtype == "fp32":
            stack.enter_context(ieee_fp32())
        saved = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = device.is_cuda
        try:
            yield PerfSettings("off" if problem.dtype == "fp32" else "n/a", device.is_cuda)
        finally:
            torch.backends.cudnn.benchmark = saved


@contextmanager
def correctness_settings() -> Iterator[None]:
    """cuDNN benchmark mode off for the correctness run: the default algorithms, as in fuzzing."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


class InputSets:
    """Input sets of candidate and reference: set 0 is the recorded seed (``first``, the check's
    own inputs), set i seed+i, built when graph mode rotates over more sets.

    The reference times copies (``reference_inputs``) of the candidate's: a candidate that writes
    its inputs in place (correctness fails it, but a timing-only ``measure`` does not check) must
    not change what the reference computes on.

    Fresh values each round (forward, floating point): :meth:`refresh` is each side's untimed
    ``Workload.refresh``; before round k it writes ``base + c_k`` into set 0's input (``c_k`` a
    different small constant each round, the same for both sides), so a candidate caching its
    output on the input's pointer and a few of its values misses every round, as the reference
    never can (issue 25 item 1). Adding a constant costs one pass over the input, outside the
    timed region, and changes no kernel's work. :meth:`restore` puts the check's values back.
    """

    def __init__(
        self,
        candidate: Candidate,
        reference: Candidate,
        problem: Conv2dProblem,
        phase: str,
        seed: int,
        device: str,
        first: ConvInputs,
        grad_out: torch.Tensor | None = None,
    ) -> None:
        self.fns = (candidate, reference)
        self.problem, self.phase, self.seed, self.device = problem, phase, seed, device
        # A gradient phase times set 0 only (graph mode, which rotates sets, is forward only).
        self.grad_out = grad_out
        self.inputs: list[ConvInputs] = []
        self.reference_inputs: list[ConvInputs] = []
        self.calls: list[tuple[Callable[[], object], Callable[[], object]]] = []
        # The last output of each side's calls, per input set (forward: ``phase_call(keep=)``).
        self.kept: list[tuple[list[object], list[object]]] = []
        self._add(first)
        x = first.input
        fresh = phase == "forward" and x.is_floating_point()
        self._base: torch.Tensor | None = x.detach().clone() if fresh else None
        self._refreshed = [0, 0]  # rounds refreshed per side: round k of both sides gets c_k
        # The candidate's last timed call of the most recent measurement (:meth:`end_measurement`).
        self.last: tuple[ConvInputs, object] | None = None

    def refresh(self, side: int) -> Callable[[int], object] | None:
        """Side ``side``'s untimed refresh of set 0's input before each round (None: not refreshed)."""
        base = self._base
        if base is None:
            return None
        target = (self.inputs if side == 0 else self.reference_inputs)[0].input

        def refresh(_round: int) -> None:
            k = self._refreshed[side] = self._refreshed[side] + 1
            # Golden-ratio steps: every round's constant differs; |c| <= 1/8 keeps values in range.
            c = ((k * 0.6180339887498949) % 1.0 - 0.5) / 4
            with torch.no_grad():
                torch.add(base, c, out=target)

        return refresh

    def restore(self) -> ConvInputs | None:
        """Put the check's own values back; returns a copy of set 0's inputs as the last round saw
        them (what the last kept output was computed from), None when nothing was refreshed."""
        if self._base is None or self._refreshed == [0, 0]:
            return None
        first = self.inputs[0]
        seen = ConvInputs(first.input.detach().clone(), first.weight, first.bias)
        with torch.no_grad():
            first.input.copy_(self._base)
            self.reference_inputs[0].input.copy_(self._base)
        self._refreshed = [0, 0]
        return seen

    def last_output(self, seen: ConvInputs | None = None) -> tuple[ConvInputs, object] | None:
        """The input set and output of the candidate's most recent call, when one is known.

        With several sets (graph mode rotates) only a single called set is unambiguous. ``seen``:
        set 0's inputs as the last round saw them (:meth:`restore`), when they were refreshed."""
        called = [
            (seen if i == 0 and seen is not None else self.inputs[i], kept[0][0])
            for i, kept in enumerate(self.kept)
            if kept[0][0] is not None
        ]
        return called[0] if len(called) == 1 else None

    def end_measurement(self) -> None:
        """After a measurement: the check's own values back, and its last timed call in ``last``."""
        self.last = self.last_output(self.restore())

    def _grow(self, k: int) -> None:
        """Sets up to ``k``: set i of seed + i (graph mode's rotation)."""
        while len(self.calls) < k:
            self._add(self.problem.make_inputs(self.seed + len(self.calls), self.device))

    def _add(self, inputs: ConvInputs) -> None:
        """One more set: ``inputs``, the reference's copies of them, and each side's phase call."""
        bias = inputs.bias.detach().clone() if inputs.bias is not None else None
        copies = ConvInputs(inputs.input.detach().clone(), inputs.weight.detach().clone(), bias)
        self.inputs.append(inputs)
        kept: tuple[list[object], list[object]] = ([None], [None])
        self.kept.append(kept)
        self.reference_inputs.append(copies)
        self.calls.append(
            (
                phase_call(self.fns[0], inputs, self.problem, self.phase, self.grad_out, kept[0]),
                phase_call(self.fns[1], copies, self.problem, self.phase, self.grad_out, kept[1]),
            )
        )

    def rotation(self, side: int) -> Callable[[int], Sequence[Callable[[], object]]]:
        def rotate(k: int) -> Sequence[Callable[[], object]]:
            self._grow(k)
            return [pair[side] for pair in self.calls[:k]]

        return rotate


@dataclass(frozen=True)
class PhaseCalls:
    """The phase calls of one check, built once (:func:`phase_calls`) and handed to every step.

    ``sets`` holds the calls each measurement times (set 0: the check's inputs, ``ctx.inputs``);
    ``candidate_call`` / ``reference_call`` are set 0's, which the determinism check, the peak
    memory, the reference's kernels, the candidate's kernel table and the traces call too (a
    gradient phase's forward runs once, when the calls are built). ``reference``: the reference
    timed (the check's, REF's candidate in an A/B, or the path ``safe_reference`` chose);
    ``facts``: what was measured once before timing (:class:`ReferenceFacts`). ``settings()``: the
    perf settings (:func:`perf_settings`) every timed or profiled call runs under.

    Frozen: what a step is handed does not change. What each measurement changes (the kept
    outputs, the refreshed values, the last timed call: :attr:`last`) is ``sets``'s, the one
    mutable object that owns those calls.
    """

    ctx: CheckContext
    sets: InputSets
    reference: Candidate
    facts: ReferenceFacts
    settings: Callable[[], AbstractContextManager[PerfSettings]]

    @property
    def last(self) -> tuple[ConvInputs, object] | None:
        """The candidate's last timed call of the most recent measurement (None: none known)."""
        return self.sets.last

    @property
    def candidate_call(self) -> Callable[[], object]:
        return self.sets.calls[0][0]

    @property
    def reference_call(self) -> Callable[[], object]:
        return self.sets.calls[0][1]

    @contextmanager
    def measurement(self) -> Iterator[tuple[Workload, Workload, dict[str, object]]]:
        """The two workloads of one paired measurement, under the perf settings (their facts
        yielded); on exit the check's own input values are put back and the candidate's last
        timed call is kept in ``last`` (integrity, the confirm). Errors of the timed calls become
        clear failures in the caller's :func:`~pytest_convperf.check.faults.device_errors`, as for
        :func:`phase_calls` (the pipeline's around the whole check, its confirm included; ``measure()``'s)."""
        problem, sets = self.ctx.problem, self.sets
        for kept in sets.kept:  # only this measurement's calls: not the facts' or the determinism's
            kept[0][0] = kept[1][0] = None
        with self.settings() as settings:
            cand = Workload(
                "candidate", sets.calls[0][0], sets.rotation(0), problem.min_bytes, sets.refresh(0)
            )
            ref = Workload(
                "reference", sets.calls[0][1], sets.rotation(1), problem.min_bytes, sets.refresh(1)
            )
            if self.ctx.phase != "forward":  # a gradient phase times set 0 only, never refreshed
                cand, ref = Workload("candidate", cand.call), Workload("reference", ref.call)
            try:
                yield cand, ref, settings.to_facts()
            finally:
                sets.end_measurement()


def phase_calls(ctx: CheckContext) -> PhaseCalls:
    """Build the check's phase calls once and measure the facts taken once before timing.

    The candidate is timed against ``ctx.timed_reference`` (a default reference on a path known to
    crash upstream is timed on another path, named in the ``reference_note`` fact; an A/B times
    against REF's candidate: ``CheckContext.against``). The facts (what a row says about
    the reference: its name, copy bandwidth, backend and, on a GPU, its kernels, profiled once per
    process and problem; the peak memory of one call of each side) are measured under the timing
    slot: the copy-bandwidth floor and the peak memory are measurements too. The backend is probed
    for the default reference only. A gradient phase's building forward and the facts' calls run
    here: the caller runs this under :func:`~pytest_convperf.check.faults.device_errors` (the
    pipeline's, around the whole check; ``measure()``'s own), so their CUDA errors get the same
    clear failure as the timed calls'."""
    from pytest_convperf.measure.memory import memory_tracker

    problem, phase, device, inputs = ctx.problem, ctx.phase, ctx.device, ctx.inputs
    if phase != "forward" and ctx.mode == "graph":
        raise ValueError("mode='graph' times forward calls only; use cold or warm for gradient phases")
    ref_fn, name = ctx.timed_reference, ctx.timed_reference_name
    default_ref = ctx.reference is None
    settings = partial(perf_settings, problem, device)
    key = (device.torch_device, name, default_ref, problem.id, phase)
    cached = _REFERENCE_FACTS.get(key)
    sets = InputSets(
        ctx.candidate, ref_fn, problem, phase, ctx.seed, device.torch_device, inputs, ctx.grad_out
    )
    backend = None
    if cached is None and default_ref:  # probed once per process and problem, with the kernels
        with settings():
            backend = reference_backend(problem, inputs)
    with timing_slot(ctx.config):
        copy_bandwidth_gbs = device.copy_bandwidth() / 1e9
        kernels = cached if cached is not None else ReferenceKernels(backend)
        if cached is None:
            if device.is_cuda:
                with settings():
                    call = sets.calls[0][1]
                    call()  # cuDNN's benchmark search must not be what the profiler sees
                    rows = profile_kernels(call, device, calls=1)
                cudnn = [r.name for r in rows if "cudnn" in r.name.lower() or "conv" in r.name.lower()]
                kernels = ReferenceKernels(
                    backend,
                    profiled=True,
                    kernels=tuple(r.name for r in rows[:3]),
                    cudnn_kernel=cudnn[0] if cudnn else (rows[0].name if rows else None),
                )
            _REFERENCE_FACTS[key] = kernels
        # Peak memory of one call of each side (allocator peak on a GPU, RSS growth on a CPU).
        peaks = []
        with settings():
            for call in sets.calls[0]:
                with memory_tracker(device) as mem:
                    out = call()
                    del out
                peaks.append(mem)
        cand_mem, ref_mem = peaks
        memory = MemoryFacts(
            cand_mem.peak_bytes,
            ref_mem.peak_bytes,
            ref_mem.source,
            ref_mem.nvml_used_bytes if ref_mem.nvml_used_bytes is not None else cand_mem.nvml_used_bytes,
        )
    facts = ReferenceFacts(name, copy_bandwidth_gbs, kernels, memory, ctx.reference_note)
    return PhaseCalls(ctx, sets, ref_fn, facts, settings)
