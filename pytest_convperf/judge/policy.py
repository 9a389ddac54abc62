"""The policy a check is judged by and the decision under it: ``verdict.screen``, the confirm a
suspect needs (measured here, by the caller's ``confirm``: the one step of a decision that times),
``verdict.settle``, and what a FAIL says about the kernels that moved. Shared by the check's gate and
the fresh-process confirm at session end, which decides again by the same rule."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from pytest_convperf.core import kerneldiff
from pytest_convperf.core.results import Comparison, ErrorStats, Verdict
from pytest_convperf.judge.decision import LearnedNoise, Policy
from pytest_convperf.judge.entry import Entry
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.judge.verdict import default_policy, screen, settle

if TYPE_CHECKING:
    from pytest_convperf.core.config import ConvperfConfig


def policy_for(
    cfg: ConvperfConfig, device_kind: str, entry: Entry | None, learned: LearnedNoise | None = None
) -> Policy:
    """The command line's tolerance wins over the entry's own, which wins over the device default;
    ``learned``: the machine's between-session noise (``night.machine_noise``), where it has one."""
    tol = cfg.tolerance if cfg.tolerance is not None else (entry.tolerance if entry is not None else None)
    policy = default_policy(device_kind, tolerance=tol, strict=cfg.strict)
    policy = dataclasses.replace(policy, learned=learned)
    if cfg.noise_floor is not None:
        policy = dataclasses.replace(policy, noise_floor=cfg.noise_floor)
    return policy


def decision_of(
    comparison: Comparison,
    old: Entry | None,
    policy: Policy,
    *,
    confirm: Callable[[int], Comparison],
    errors: Sequence[ErrorStats] = (),
    env: Mapping[str, str] | None = None,
    backend: str | None = None,
    quality: Mapping[str, float] | None = None,
) -> Decision:
    """Screen, measure a suspect's confirm with ``confirm(rounds)``, settle; a FAIL says which kernel
    changed (issue 18). Also the fresh-process confirm's (``fresh_confirm``): the same rule, its
    confirm measured in another process."""
    first = screen(comparison, old, policy, errors=errors, env=env, backend=backend, quality=quality)
    decision = first if isinstance(first, Decision) else settle(first, confirm(first.rounds))
    kernels = comparison.facts.get("kernels")  # the candidate's table now (check(), when asked)
    moved = kerneldiff.describe(old.kernels if old is not None else None, kernels)
    if moved and decision.verdict is Verdict.FAIL:
        decision = dataclasses.replace(decision, message=f"{decision.message}\n{moved}")
    return decision
