"""One check's context, built once: what every step of a check shares (issue 26 item 1).

:class:`CheckContext` is made by ``ConvperfFixture`` when a check starts (the phase validated,
the device made usable, the seed derived, the key, the one input set, the baseline store chosen
and the stored entry looked up with the policy and env it is judged by, a gradient phase's
``grad_out``, the reference timed (``safe_reference``'s choice), each once) and handed, frozen,
to the phase calls and the facts measured before timing
(:func:`pytest_convperf.check.calls.phase_calls`), the timing
(:class:`pytest_convperf.check.paired_timing.PairedTiming`), the judgement
(:func:`pytest_convperf.check.judgement.judge`, through :class:`BaselineSlot`) and the A/B.
:class:`CheckSession` is what the fixture needs from the process's session
(``session.ConvperfSession`` has it), so this layer never imports the hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch.nn.functional as F

from pytest_convperf.core.env import env_from_facts
from pytest_convperf.correctness.case import make_grad_out
from pytest_convperf.correctness.known_defects import safe_reference
from pytest_convperf.correctness.oracle import describe, stable_seed
from pytest_convperf.judge.policy import policy_for
from pytest_convperf.night.machine_noise import machine_noise

if TYPE_CHECKING:
    import pytest
    import torch

    from pytest_convperf.baselines.store import Store
    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.core.device import DeviceInfo
    from pytest_convperf.core.problem import Conv2dProblem, ConvInputs
    from pytest_convperf.core.results import Comparison
    from pytest_convperf.judge.check_row import CheckRow
    from pytest_convperf.judge.decision import Policy
    from pytest_convperf.judge.entry import Entry
    from pytest_convperf.measure.protocol import Timer
    from pytest_convperf.reports.progress import LiveProgress

# A conv candidate or reference: a callable with ``F.conv2d``'s signature.
Candidate = Callable[..., Any]
PHASES = ("forward", "input_grad", "weight_grad", "backward")


def check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise ValueError(f"phase={phase!r} is not one of {', '.join(PHASES)}")


class ConfirmMeasure(Protocol):
    """A fresh-process confirm run (``night.fresh_confirm.ConfirmRun``): measure, judge nothing."""

    def measure(self, nodeid: str, key: str, confirm: Callable[[int], Comparison]) -> None: ...


class CheckSession(Protocol):
    """What a check needs from the process's session (``session.ConvperfSession`` has it)."""

    @property
    def cfg(self) -> ConvperfConfig: ...

    @property
    def confirm_run(self) -> ConfirmMeasure | None: ...

    def device_info(self) -> DeviceInfo: ...

    def progress(self) -> LiveProgress: ...

    def store(self, *, fake: bool = False) -> Store: ...

    def trace_dir(self) -> Path: ...

    def record(self, nodeid: str, row: CheckRow) -> None: ...


class CheckHost(Protocol):
    """What a context is built from: the ``convperf`` fixture of the running test."""

    @property
    def device(self) -> DeviceInfo: ...

    @property
    def timer(self) -> Timer: ...

    @property
    def store(self) -> Store: ...

    @property
    def cfg(self) -> ConvperfConfig: ...

    @property
    def nodeid(self) -> str: ...

    @property
    def module(self) -> str: ...

    @property
    def request(self) -> pytest.FixtureRequest: ...


def baseline_key(node: Any, name: str, phase: str) -> str:
    """Baseline key: the test name (plus ``@<name>`` when the test name lacks it), ``:<phase>``.

    ``node``: the test's pytest item. A test in a class is keyed ``Class::name`` so that same-named
    methods of two classes in one file get distinct keys; module-level tests keep the bare name.
    """
    test = str(node.name)
    cls = getattr(node, "cls", None)
    if cls is not None:
        test = f"{cls.__name__}::{test}"
    if name not in test:
        test = f"{test}@{name}"
    key = test if phase == "forward" else f"{test}:{phase}"
    # A lone surrogate ('\ud800' in a test id) cannot be stored in UTF-8 YAML: its escape is.
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class BaselineSlot:
    """Where one check's entry lives (the machine's store, the test file's stem, the key), the
    entry found there, looked up once (None: no entry yet, the check is NEW), and what the check is
    judged by, resolved once with it: the ``policy`` (``judge.policy.policy_for``: the command
    line's tolerance, else the entry's, else the device's) and the ``env`` it is judged under."""

    store: Store
    module: str
    key: str
    entry: Entry | None
    policy: Policy
    env: dict[str, str]

    @classmethod
    def look_up(
        cls,
        store: Store,
        module: str,
        key: str,
        *,
        cfg: ConvperfConfig,
        device: DeviceInfo,
        read: bool = True,
    ) -> BaselineSlot:
        """The slot of ``key``; ``read=False``: its entry is not read (a timing-only ``measure``)."""
        entry = store.get(module, key) if read else None
        learned = machine_noise(cfg.report_dir, store.machine, device.kind)
        policy = policy_for(cfg, device.kind, entry, learned)
        return cls(store, module, key, entry, policy, env_from_facts(device.facts))


@dataclass(frozen=True)
class CheckContext:
    """Everything the steps of one check share, derived once when the check starts.

    ``reference`` is the check's reference as given (None: ``F.conv2d``, whose backend is probed);
    ``timed_reference`` the one timed: ``reference`` or ``F.conv2d``, or, where the default one is
    on a path known to crash upstream, another path (``safe_reference``) named by ``reference_note``;
    ``inputs`` the one input set of ``seed`` (correctness, timing's set 0, memory, traces);
    ``mode`` the timing mode asked for; ``slot`` the baseline store, key and stored entry;
    ``grad_out`` the gradient of the output that every gradient-phase call differentiates with (the
    one correctness checks gradients with, ``make_grad_out`` of ``seed``), None for ``forward``.
    ``candidate_name``, ``reference_name`` (the reference as given, ``F.conv2d`` by default) and
    ``timed_reference_name``: each ``module:qualname`` (``oracle.describe``), named once, for the
    in-flight record and the facts.
    """

    problem: Conv2dProblem
    phase: str
    seed: int
    candidate: Candidate
    reference: Candidate | None
    inputs: ConvInputs
    mode: str
    device: DeviceInfo
    timer: Timer
    config: pytest.Config
    nodeid: str
    slot: BaselineSlot
    timed_reference: Candidate
    reference_note: str | None
    candidate_name: str
    reference_name: str
    timed_reference_name: str
    grad_out: torch.Tensor | None = None

    @classmethod
    def start(
        cls,
        candidate: Candidate,
        problem: Conv2dProblem,
        *,
        host: CheckHost,
        reference: Candidate | None,
        phase: str,
        mode: str,
        look_up: bool = True,
    ) -> CheckContext:
        """The context of one check, each part derived once, in this order: the phase validated,
        the device made usable, the seed, the key, the store and (``look_up``) the stored entry with
        the policy and env, the reference timed, the one input set, the timer, the names and a
        gradient phase's ``grad_out``."""
        check_phase(phase)
        device = host.device
        device.ensure_usable()
        seed = stable_seed(problem)
        key = baseline_key(host.request.node, problem.id, phase)
        store = host.store
        slot = BaselineSlot.look_up(store, host.module, key, cfg=host.cfg, device=device, read=look_up)
        asked = reference if reference is not None else F.conv2d
        timed_reference, reference_note = safe_reference(
            asked,
            problem,
            device.torch_device,
            weight_grad=phase in ("weight_grad", "backward"),
        )
        return CheckContext(
            problem=problem,
            phase=phase,
            seed=seed,
            candidate=candidate,
            reference=reference,
            # One input set of the recorded seed for the whole check: correctness, timing, memory, traces.
            inputs=problem.make_inputs(seed, device.torch_device),
            mode=mode,
            device=device,
            timer=host.timer,
            config=host.request.config,
            nodeid=host.nodeid,
            slot=slot,
            timed_reference=timed_reference,
            reference_note=reference_note,
            candidate_name=describe(candidate),
            reference_name=describe(asked),
            timed_reference_name=describe(timed_reference),
            grad_out=None if phase == "forward" else make_grad_out(problem, seed, device.torch_device),
        )

    @property
    def key(self) -> str:
        return self.slot.key

    @property
    def entry(self) -> Entry | None:
        return self.slot.entry

    @property
    def stored_mode(self) -> str | None:
        """The stored entry's timing mode, which ``auto`` reuses (sticky per key); else None."""
        return self.entry.mode if self.mode == "auto" and self.entry is not None else None

    def with_candidate(self, candidate: Candidate) -> CheckContext:
        """This check's context with another candidate in its place (REF's, in an A/B), named."""
        return replace(self, candidate=candidate, candidate_name=describe(candidate))

    def against(self, reference: Candidate) -> CheckContext:
        """This check's context timed against another reference (REF's candidate, in an A/B), named;
        the check's reference note goes with the check's reference."""
        return replace(
            self, timed_reference=reference, timed_reference_name=describe(reference), reference_note=None
        )
