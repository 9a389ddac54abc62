"""The ``convperf`` fixture: correctness, paired timing, decision, result row (DESIGN §3).

``ConvperfFixture.check`` runs, in order: correctness against the fp64 oracle (a failure fails
the test and records a CORRECTNESS_FAIL row), paired timing of candidate and reference on
identical inputs, the roofline sanity check, and then records the row. The baseline decision
(verdicts PASS/FAIL/IMPROVED/NEW/STALE/ADVISORY) is made in :meth:`ConvperfFixture._decide`,
which is added by the baselines issue; until a decision is made a row's ``verdict`` is None.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch
import torch.nn.functional as F

from pytest_convperf.correctness import CorrectnessReport, check_conv, describe
from pytest_convperf.device import is_sticky_cuda_error, roofline_facts
from pytest_convperf.parallel import timing_slot
from pytest_convperf.precision import ieee_fp32
from pytest_convperf.results import Comparison, ErrorStats, Verdict
from pytest_convperf.timing.rounds import StopRule, TimedCallError, Workload, measure_pair

if TYPE_CHECKING:
    from pytest_convperf.device import DeviceInfo
    from pytest_convperf.problem import Conv2dProblem, ConvInputs
    from pytest_convperf.session import ConvperfSession
    from pytest_convperf.timing import Timer

Candidate = Callable[..., Any]
PHASES = ("forward", "input_grad", "weight_grad", "backward")
ENV_KEYS = ("torch", "cuda", "cudnn", "driver")
# Backend and kernel names of a reference on a problem, per process: profiling once is enough.
_REFERENCE_FACTS: dict[tuple[str, str, bool, str, str], dict[str, Any]] = {}


class ImplausibleTime(AssertionError):
    """A measured time below half the roofline floor: the kernel cannot have done its work."""


def stable_seed(problem: Conv2dProblem) -> int:
    """The recorded seed of a problem's inputs: a hash of its id, so reruns repeat."""
    return zlib.crc32(problem.id.encode()) & 0x7FFFFFFF


def _check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise ValueError(f"phase={phase!r} is not one of {', '.join(PHASES)}")


def _grad_out(problem: Conv2dProblem, seed: int, device: str, like: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed ^ 0x5EED)
    g = torch.randn(tuple(like.shape), generator=gen).to(device=device, dtype=like.dtype)
    fmt = torch.channels_last if problem.layout == "nhwc" else torch.contiguous_format
    return g.contiguous(memory_format=fmt)


def phase_call(
    fn: Candidate, inputs: ConvInputs, problem: Conv2dProblem, phase: str, seed: int, device: str
) -> Callable[[], object]:
    """A zero-argument call timing ``phase`` of ``fn`` on ``inputs``.

    ``forward`` calls ``fn`` itself. The grad phases run the forward once here, with the inputs
    that the phase differentiates marked ``requires_grad``, and the returned call is
    ``torch.autograd.grad(out, wrt, grad_out, retain_graph=True)``: only backward kernels are timed.
    """
    args = problem.conv_args()
    if phase == "forward":
        x, w, b = inputs

        def forward() -> object:
            return fn(x, w, b, *args)

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
    wrt = [t for t in (x, w, b) if t is not None and t.requires_grad]
    grad_out = _grad_out(problem, seed, device, out)

    def backward() -> object:
        return torch.autograd.grad(out, wrt, grad_out, retain_graph=True)

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
def perf_settings(problem: Conv2dProblem, device: DeviceInfo) -> Iterator[dict[str, Any]]:
    """cuDNN benchmark mode on and, for fp32, TF32 off; yields the facts that describe it."""
    facts: dict[str, Any] = {"tf32": "off" if problem.dtype == "fp32" else "n/a"}
    with ExitStack() as stack:
        if problem.dtype == "fp32":
            stack.enter_context(ieee_fp32())
        saved = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = device.is_cuda
        facts["cudnn_benchmark"] = device.is_cuda
        try:
            yield facts
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


class _InputSets:
    """Input sets shared by candidate and reference: set 0 is the recorded seed, set i seed+i."""

    def __init__(
        self,
        candidate: Candidate,
        reference: Candidate,
        problem: Conv2dProblem,
        phase: str,
        seed: int,
        device: str,
    ) -> None:
        self.fns = (candidate, reference)
        self.problem, self.phase, self.seed, self.device = problem, phase, seed, device
        self.inputs: list[ConvInputs] = []
        self.calls: list[tuple[Callable[[], object], Callable[[], object]]] = []
        self._grow(1)

    def _grow(self, k: int) -> None:
        while len(self.calls) < k:
            seed = self.seed + len(self.calls)
            inputs = self.problem.make_inputs(seed, self.device)
            self.inputs.append(inputs)
            self.calls.append(
                (
                    phase_call(self.fns[0], inputs, self.problem, self.phase, seed, self.device),
                    phase_call(self.fns[1], inputs, self.problem, self.phase, seed, self.device),
                )
            )

    def rotation(self, side: int) -> Callable[[int], Sequence[Callable[[], object]]]:
        def rotate(k: int) -> Sequence[Callable[[], object]]:
            self._grow(k)
            return [pair[side] for pair in self.calls[:k]]

        return rotate


class ConvperfFixture:
    """Object behind the ``convperf`` fixture (see the fixture's docstring in ``plugin.py``)."""

    def __init__(self, session: ConvperfSession, request: pytest.FixtureRequest) -> None:
        self.session = session
        self.request = request
        self._timer: Timer | None = None

    # ---- collaborators --------------------------------------------------------------------------
    @property
    def device(self) -> DeviceInfo:
        return self.session.device_info()

    @property
    def timer(self) -> Timer:
        """The ``convperf_timer`` fixture's timer (a conftest may override it with a fake)."""
        if self._timer is None:
            self._timer = self.request.getfixturevalue("convperf_timer")
        assert self._timer is not None
        return self._timer

    @property
    def nodeid(self) -> str:
        return str(self.request.node.nodeid)

    @property
    def module(self) -> str:
        """The baseline file of this test: its module's stem."""
        return Path(str(self.request.node.path)).stem

    def key(self, problem: Conv2dProblem, phase: str) -> str:
        """Baseline key: the test name (plus ``@<problem id>`` when the name lacks it), ``:<phase>``.

        A test in a class is keyed ``Class::name`` so that same-named methods of two classes in one
        file get distinct keys; module-level tests keep the bare name.
        """
        name = str(self.request.node.name)
        cls = getattr(self.request.node, "cls", None)
        if cls is not None:
            name = f"{cls.__name__}::{name}"
        if problem.id not in name:
            name = f"{name}@{problem.id}"
        return name if phase == "forward" else f"{name}:{phase}"

    # ---- timing ------------------------------------------------------------------------------------
    def measure(
        self,
        candidate: Candidate,
        problem: Conv2dProblem,
        *,
        reference: Candidate | None = None,
        phase: str = "forward",
        mode: str = "auto",
        rule: StopRule | None = None,
    ) -> Comparison:
        """Time ``candidate`` against ``reference`` (default ``F.conv2d``) in paired rounds.

        No correctness check and no baseline: the raw :class:`Comparison`. ``mode`` is ``auto``,
        ``cold``, ``warm`` or ``graph`` (forward only); ``rule`` overrides rounds and caps.
        Raises :class:`ImplausibleTime` for a time under half the roofline floor.
        """
        return self._measure(candidate, problem, reference=reference, phase=phase, mode=mode, rule=rule)[0]

    def _measure(
        self,
        candidate: Candidate,
        problem: Conv2dProblem,
        *,
        reference: Candidate | None,
        phase: str,
        mode: str,
        rule: StopRule | None,
        stored_mode: str | None = None,
    ) -> tuple[Comparison, Callable[[float], Comparison]]:
        """Measure once; also return ``confirm(factor)`` that re-times with ``factor`` x the rounds.

        ``stored_mode``: the baseline entry's timing mode, which ``auto`` reuses; the confirm
        reuses the first measurement's mode, so one decision never mixes cold and graph timings.
        """
        _check_phase(phase)
        device = self.device
        device.ensure_usable()
        ref_fn: Candidate = reference if reference is not None else F.conv2d
        seed = stable_seed(problem)
        if phase != "forward" and mode == "graph":
            raise ValueError("mode='graph' times forward calls only; use cold or warm for gradient phases")
        facts: dict[str, Any] = {"seed": seed, "phase": phase, "machine": device.slug}
        if phase != "forward" and mode == "auto":
            mode = "cold" if device.is_cuda else mode
            facts["mode_note"] = "gradient phases are timed without CUDA graphs"
        timer = self.timer
        base_rule = rule or StopRule.for_timer(timer)

        def run(the_rule: StopRule, extra: dict[str, Any], sticky: str | None) -> Comparison:
            with self._device_errors(problem), perf_settings(problem, device) as settings:
                sets = _InputSets(candidate, ref_fn, problem, phase, seed, device.torch_device)
                cand = Workload("candidate", sets.calls[0][0], sets.rotation(0), problem.min_bytes)
                ref = Workload("reference", sets.calls[0][1], sets.rotation(1), problem.min_bytes)
                if phase != "forward":
                    cand = Workload("candidate", cand.call)
                    ref = Workload("reference", ref.call)
                with timing_slot(self.request.config):  # under xdist: alone on a shared device
                    comparison = measure_pair(
                        timer,
                        cand,
                        ref,
                        mode=mode,
                        rule=the_rule,
                        facts={**facts, **settings, **extra},
                        stored_mode=sticky,
                    )
            self._sanity(comparison, problem)
            return comparison

        with timing_slot(self.request.config):  # its copy-bandwidth floor is a measurement too
            extra = self._reference_facts(ref_fn, reference is None, problem, phase, seed)
            extra["memory"] = self._memory_facts(candidate, ref_fn, problem, phase, seed)
        first = run(base_rule, extra, stored_mode)

        def confirm(factor: float = 3.0) -> Comparison:
            return run(
                base_rule.scaled(factor, first.n_rounds),
                {**extra, "confirm_of_rounds": first.n_rounds},
                first.candidate.mode,
            )

        return first, confirm

    def _reference_facts(
        self, ref_fn: Candidate, default_ref: bool, problem: Conv2dProblem, phase: str, seed: int
    ) -> dict[str, Any]:
        device = self.device
        facts: dict[str, Any] = {
            "reference": describe(ref_fn),
            "env": {k: device.facts.get(k) for k in ENV_KEYS},
            "copy_bandwidth_gbs": device.copy_bandwidth() / 1e9,
        }
        key = (device.torch_device, facts["reference"], default_ref, problem.id, phase)
        cached = _REFERENCE_FACTS.get(key)
        if cached is not None:
            return {**facts, **cached}
        with self._device_errors(problem), perf_settings(problem, device):
            inputs = problem.make_inputs(seed, device.torch_device)
            facts["reference_backend"] = reference_backend(problem, inputs) if default_ref else None
            if device.is_cuda:
                from pytest_convperf.profiling import profile_kernels

                call = phase_call(ref_fn, inputs, problem, phase, seed, device.torch_device)
                call()  # cuDNN's benchmark search must not be what the profiler sees
                rows = profile_kernels(call, device, calls=1)
                facts["reference_kernels"] = [r.name for r in rows[:3]]
                cudnn = [r.name for r in rows if "cudnn" in r.name.lower() or "conv" in r.name.lower()]
                facts["cudnn_kernel"] = cudnn[0] if cudnn else (rows[0].name if rows else None)
        _REFERENCE_FACTS[key] = {
            k: facts[k] for k in ("reference_backend", "reference_kernels", "cudnn_kernel") if k in facts
        }
        return facts

    def _memory_facts(
        self, candidate: Candidate, ref_fn: Candidate, problem: Conv2dProblem, phase: str, seed: int
    ) -> dict[str, Any]:
        """Peak memory of one call of each side (allocator peak on a GPU, RSS growth on a CPU)."""
        from pytest_convperf.memory import memory_tracker

        device = self.device
        facts: dict[str, Any] = {}
        with self._device_errors(problem), perf_settings(problem, device):
            inputs = problem.make_inputs(seed, device.torch_device)
            for side, fn in (("candidate", candidate), ("reference", ref_fn)):
                call = phase_call(fn, inputs, problem, phase, seed, device.torch_device)
                with memory_tracker(device) as mem:
                    out = call()
                    del out
                facts[f"{side}_peak_bytes"] = mem.peak_bytes
                facts["source"] = mem.source
                if mem.nvml_used_bytes is not None:
                    facts["nvml_used_bytes"] = mem.nvml_used_bytes
        return facts

    def _sanity(self, comparison: Comparison, problem: Conv2dProblem) -> None:
        bandwidth = self.device.copy_bandwidth()
        floor = problem.min_bytes / bandwidth
        comparison.facts.update(roofline_facts(problem.min_bytes, self.device))
        for side, m in (("candidate", comparison.candidate), ("reference", comparison.reference)):
            if m.median < 0.5 * floor:
                raise ImplausibleTime(
                    f"{side} median {m.median * 1e6:.3f} us on {problem.id} is under half the roofline floor "
                    f"{floor * 1e6:.3f} us ({problem.min_bytes} bytes at the measured copy bandwidth "
                    f"{bandwidth / 1e9:.1f} GB/s): the kernel did not do its work (did it launch, on the "
                    "current stream, and write its whole output?)"
                )

    @contextmanager
    def _device_errors(self, problem: Conv2dProblem) -> Iterator[None]:
        """Turn errors inside timed calls into clear failures; a lost CUDA context stops CUDA tests."""
        device = self.device
        try:
            yield
        except TimedCallError as exc:
            cause = exc.__cause__ or exc
            if device.is_cuda and is_sticky_cuda_error(cause):
                device.mark_lost(self.nodeid, str(cause))
                pytest.fail(
                    f"CUDA context lost while timing {problem.id}: {exc}\n"
                    "The remaining CUDA tests of this process are skipped; rerun with CUDA_LAUNCH_BLOCKING=1 "
                    "to locate the faulting kernel.",
                    pytrace=False,
                )
            pytest.fail(f"timing {problem.id} failed: {exc}", pytrace=False)
        except Exception as exc:
            if device.is_cuda and is_sticky_cuda_error(exc):
                device.mark_lost(self.nodeid, str(exc))
                pytest.fail(
                    f"CUDA context lost on {problem.id}: {exc}\nThe remaining CUDA tests of this process are "
                    "skipped; rerun with CUDA_LAUNCH_BLOCKING=1 to locate the faulting kernel.",
                    pytrace=False,
                )
            raise

    # ---- the check -----------------------------------------------------------------------------------
    def check(
        self,
        candidate: Candidate,
        problem: Conv2dProblem,
        *,
        reference: Candidate | None = None,
        phase: str = "forward",
        mode: str = "auto",
        oracle: Candidate | None = None,
        extra_metrics: dict[str, float] | None = None,
    ) -> Comparison:
        """Correctness, then paired timing, then the baseline decision; records a result row.

        A correctness failure fails the test (row verdict CORRECTNESS_FAIL); too many rounds
        dropped for clocks skips it (INCONCLUSIVE). Returns the comparison. ``oracle`` replaces
        the fp64 ``F.conv2d`` oracle (quantized/sparse variants: their fake-quant/pruned conv);
        ``extra_metrics`` (e.g. quality drift ``rel_l2``, ``sqnr_db``) go into the row as
        ``row["extra_metrics"]``.
        """
        _check_phase(phase)
        device = self.device
        device.ensure_usable()
        seed = stable_seed(problem)
        key = self.key(problem, phase)
        with self._device_errors(problem), correctness_settings():
            report = check_conv(
                candidate,
                problem,
                reference=reference,
                seed=seed,
                device=device.torch_device,
                backward=phase != "forward",
                oracle=oracle,
            )
        if not report.ok:
            self.session.record(
                self.nodeid,
                self._row(key, problem, phase, report, None, Verdict.CORRECTNESS_FAIL, report.message()),
            )
            pytest.fail(report.message(), pytrace=False)
        if not report.reference_ok:
            self.session.record(
                self.nodeid, self._row(key, problem, phase, report, None, None, report.message())
            )
            pytest.fail(report.message(), pytrace=False)
        from pytest_convperf.gate import stored_mode

        sticky = None
        if mode == "auto":  # time it as its baseline entry was timed (cold or graph)
            sticky = stored_mode(self.session, self.module, key, timer_kind=self.timer.kind)
        comparison, confirm = self._measure(
            candidate, problem, reference=reference, phase=phase, mode=mode, rule=None, stored_mode=sticky
        )
        if self.session.cfg.trace:
            comparison.facts["traces"] = self._traces(candidate, reference, problem, phase, seed)
        inconclusive = comparison.inconclusive
        row = self._row(
            key,
            problem,
            phase,
            report,
            comparison,
            Verdict.INCONCLUSIVE if inconclusive else None,
            inconclusive or "",
        )
        if extra_metrics:
            row["extra_metrics"] = {k: float(v) for k, v in extra_metrics.items()}
        self.session.record(self.nodeid, row)
        # Inconclusive timing still goes through the decision: correctness and quality drift
        # against the stored entry are checked before timing and fail the test; otherwise it skips.
        self._decide(
            row,
            comparison,
            confirm,
            report.candidate_errors,
            skip_message=f"convperf INCONCLUSIVE on {problem.id}: {inconclusive}" if inconclusive else None,
        )
        return comparison

    def _decide(
        self,
        row: dict[str, Any],
        comparison: Comparison,
        confirm: Callable[[float], Comparison],
        errors: Sequence[ErrorStats],
        *,
        skip_message: str | None = None,
    ) -> None:
        """The baseline decision of DESIGN §7 (:mod:`pytest_convperf.gate`), made on this test item.

        Updates the recorded ``row`` in place (verdict, message, decision, planned update), then
        fails the test (FAIL confirmed by ``confirm(3)``, correctness drift, strict NEW, refused
        update) or skips it (INCONCLUSIVE, with ``skip_message`` when given); PASS/NEW/IMPROVED/
        STALE/ADVISORY pass with a note.
        """
        from pytest_convperf.gate import judge

        judgement = judge(
            self.session,
            row,
            comparison,
            confirm=confirm,
            errors=errors,
            backend=comparison.facts.get("reference_backend"),
        )
        row.update(judgement.row_fields)
        if skip_message is not None and judgement.decision.verdict is Verdict.INCONCLUSIVE:
            pytest.skip(skip_message)
        judgement.enforce()

    def _row(
        self,
        key: str,
        problem: Conv2dProblem,
        phase: str,
        report: CorrectnessReport,
        comparison: Comparison | None,
        verdict: Verdict | None,
        message: str,
    ) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "seed": report.seed,
            "candidate": report.candidate,
            "reference": report.reference,
            "machine": self.device.slug,
            "device": self.device.torch_device,
            "reference_errors": [e.to_dict() for e in report.reference_errors],
            "timer": getattr(self.timer, "kind", None),
        }
        if comparison is not None:
            facts.update(
                {
                    k: v
                    for k, v in comparison.facts.items()
                    if k in ("env", "reference_backend", "cudnn_kernel", "tf32", "memory", "clocks")
                }
            )
        return {
            "key": key,
            "nodeid": self.nodeid,
            "module": self.module,
            "problem": problem.id,
            "phase": phase,
            "comparison": comparison.to_dict() if comparison is not None else None,
            "errors": [e.to_dict() for e in report.candidate_errors],
            "verdict": verdict.value if verdict is not None else None,
            "message": message,
            "facts": facts,
        }

    def _traces(
        self, candidate: Candidate, reference: Candidate | None, problem: Conv2dProblem, phase: str, seed: int
    ) -> list[str]:
        """With --convperf-trace: a profiler trace of one call of each side, under the report dir."""
        from pytest_convperf.profiling import trace_factory

        device = self.device
        start = trace_factory(self.session.trace_dir(self.request), self.nodeid, device)
        paths = []
        with perf_settings(problem, device):
            inputs = problem.make_inputs(seed, device.torch_device)
            for name, fn in (("candidate", candidate), ("reference", reference or F.conv2d)):
                call = phase_call(fn, inputs, problem, phase, seed, device.torch_device)
                call()
                with start(f"{problem.id}-{phase}-{name}") as trace:
                    call()
                paths.append(str(trace.path))
        return paths


def log_ratio_summary(comparison: Comparison) -> str:
    """One line for messages: ratio, CI, rounds."""
    low, high = comparison.time_ratio_ci
    return (
        f"time ratio {comparison.time_ratio:.4f} [{low:.4f}, {high:.4f}] (speedup {comparison.speedup:.3f}x, "
        f"{comparison.n_rounds} rounds, se {comparison.se:.4f}{', noisy' if comparison.noisy else ''})"
    )


__all__ = ["PHASES", "ConvperfFixture", "ImplausibleTime", "log_ratio_summary", "phase_call", "stable_seed"]
