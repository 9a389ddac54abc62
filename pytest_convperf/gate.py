"""The baseline gate of one check: look up the entry, decide, plan the update, act on the item.

``check.py`` calls :func:`judge` once per check with its recorded row, the measured comparison
and a way to re-measure; it merges ``Judgement.row_fields`` into the row, then calls
``Judgement.enforce()``, which fails (FAIL, correctness, refused update, strict NEW) or
skips (INCONCLUSIVE) the running test. Nothing is written here: the controller writes the
planned updates once at session end (:mod:`pytest_convperf.finish`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_convperf.baselines import Entry, Store, resolve_machine, validate_tree
from pytest_convperf.results import Comparison, ErrorStats, Verdict
from pytest_convperf.verdict import (
    QUALITY_KEYS,
    Decision,
    Policy,
    decide,
    default_policy,
    env_from_facts,
    timing_of,
)

if TYPE_CHECKING:
    from pytest_convperf.config import ConvperfConfig
    from pytest_convperf.session import ConvperfSession

STORE_KEY = pytest.StashKey["Store"]()
FAKE_STORE_KEY = pytest.StashKey["Store"]()
FAKE_SUFFIX = "-fake"

# Update kinds (``--convperf-update-baselines``) that rewrite each verdict.
UPDATE_KIND_FOR: dict[Verdict, str] = {
    Verdict.FAIL: "failed",
    Verdict.STALE: "failed",
    Verdict.CORRECTNESS_FAIL: "failed",  # drift only: a tolerance breach is never recorded
    Verdict.NEW: "new",
    Verdict.IMPROVED: "improved",
}


def store_for(session: ConvperfSession, *, fake: bool = False) -> Store:
    """The session's store for this machine class (built on first use).

    ``fake``: the check was timed by the fake timer. Unless ``--convperf-machine`` names the
    folder explicitly (the opt-in the plugin's own tests use), fake numbers are read from and
    written to ``<machine>-fake``, so they can never land in a real machine's baselines.
    """
    config = session.config
    key = FAKE_STORE_KEY if fake else STORE_KEY
    if key not in config.stash:
        cfg = session.cfg
        machine = resolve_machine(session.device_info().slug, cfg.machine, cfg.machine_aliases)
        if fake and cfg.machine is None and not machine.endswith(FAKE_SUFFIX):
            machine += FAKE_SUFFIX
        config.stash[key] = Store(cfg.baselines_dir, machine)
    return config.stash[key]


def stored_mode(session: ConvperfSession, module: str, key: str, *, timer_kind: str) -> str | None:
    """The timing mode of a check's stored entry (None: no entry, or none recorded).

    ``check`` passes it to ``measure_pair(stored_mode=...)`` so that ``mode="auto"`` times a
    check the way its baseline was timed, instead of re-deciding near the CUDA-graph threshold.
    """
    entry = store_for(session, fake=timer_kind == "fake").get(module, key)
    return entry.mode if entry is not None else None


def validate_baselines(cfg: ConvperfConfig) -> None:
    """Stop the run (``UsageError``) before any test when a baseline file is malformed."""
    if cfg.enabled:
        validate_tree(cfg.baselines_dir)


def policy_for(cfg: ConvperfConfig, device_kind: str, entry: Entry | None) -> Policy:
    """The command line's tolerance wins over the entry's own, which wins over the device default."""
    tol = cfg.tolerance if cfg.tolerance is not None else (entry.tolerance if entry is not None else None)
    policy = default_policy(device_kind, tolerance=tol, strict=cfg.strict)
    if cfg.noise_floor is not None:
        policy = dataclasses.replace(policy, noise_floor=cfg.noise_floor)
    return policy


def correctness_of(errors: Sequence[ErrorStats]) -> dict[str, Any]:
    """What an entry stores about correctness: flat for one output, per output name for several."""
    if len(errors) == 1:
        return {"max_abs": errors[0].max_abs, "max_rel": errors[0].max_rel}
    return {e.name: {"max_abs": e.max_abs, "max_rel": e.max_rel} for e in errors}


def quality_of(row: Mapping[str, Any]) -> dict[str, float]:
    """The row's quality metrics (``extra_metrics`` ``rel_l2``/``sqnr_db``) an entry stores and gates."""
    metrics = row.get("extra_metrics") or {}
    return {
        k: float(metrics[k])
        for k in QUALITY_KEYS
        if isinstance(metrics.get(k), (int, float))
        and not isinstance(metrics.get(k), bool)
        and not math.isnan(metrics[k])
    }


def new_entry(
    comparison: Comparison,
    old: Entry | None,
    policy: Policy,
    *,
    env: Mapping[str, str],
    backend: str | None,
    errors: Sequence[ErrorStats],
    quality: Mapping[str, float] | None = None,
) -> Entry:
    """The entry this measurement would store; noise stays with the machine (kept from the old entry)."""
    timing = timing_of(comparison)
    return Entry(
        time_ratio=comparison.time_ratio,
        noise=old.noise if old is not None else policy.noise_floor,
        noise_runs=old.noise_runs if old is not None else None,
        us_candidate=comparison.candidate.median_us,
        us_reference=comparison.reference.median_us,
        env=dict(env),
        reference_backend=backend,
        correctness=correctness_of(errors),
        tolerance=old.tolerance if old is not None else None,
        quality=dict(quality or {}),
        mode=timing["mode"],
        flush=timing.get("flush"),
    )


@dataclass(frozen=True)
class UpdatePlan:
    """What ``--convperf-update-baselines`` will do with this check's entry.

    ``action``: ``write`` (the controller writes ``entry``), ``keep`` (inside the noise band),
    ``refused`` (slower without ``--convperf-reason``), or ``skip`` (verdict not selected).
    """

    action: str
    why: str
    entry: Entry | None = None
    slower: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "why": self.why,
            "slower": self.slower,
            "entry": self.entry.to_yaml() if self.entry is not None else None,
        }


def plan_update(
    cfg: ConvperfConfig, decision: Decision, old: Entry | None, candidate: Entry, policy: Policy
) -> UpdatePlan | None:
    """Apply the update rules (selection, hysteresis, reason required) to one decided check."""
    if not cfg.update:
        return None
    verdict = decision.verdict
    if verdict is Verdict.INCONCLUSIVE:
        return UpdatePlan("skip", "inconclusive measurements are never recorded")
    if verdict is Verdict.CORRECTNESS_FAIL and decision.stage not in ("drift", "quality"):
        return UpdatePlan("skip", "a correctness failure (tolerance breach or NaN/Inf) is never recorded")
    kind = UPDATE_KIND_FOR.get(verdict)
    if "all" not in cfg.update and kind not in cfg.update:
        return UpdatePlan(
            "skip",
            f"{verdict.value} is not selected by --convperf-update-baselines={','.join(sorted(cfg.update))}",
        )
    if old is None:
        return UpdatePlan("write", "new entry", candidate)
    band = max(old.noise, policy.noise_floor)
    shift = math.log(candidate.time_ratio / old.time_ratio)
    env_changed = bool(decision.env_diff)
    drift = verdict is Verdict.CORRECTNESS_FAIL
    # An entry recorded before quality was gated gains its quality block on the next update.
    quality_added = bool(candidate.quality) and not old.quality
    # Likewise its timing mode, so that ``auto`` reuses it from then on (sticky per key).
    mode_added = candidate.mode is not None and old.mode is None
    if abs(shift) <= band and not env_changed and not drift and not quality_added and not mode_added:
        return UpdatePlan(
            "keep",
            f"the new ratio {candidate.time_ratio:.4g} lies within the noise band "
            f"(+-{band:.2%}) of the stored {old.time_ratio:.4g}; entry left as is",
        )
    slower = shift > band or drift
    if slower and not cfg.reason:
        what = (
            "a lower quality against the float conv"
            if drift and decision.stage == "quality"
            else "larger errors"
            if drift
            else f"a slower ratio ({old.time_ratio:.4g} -> {candidate.time_ratio:.4g})"
        )
        return UpdatePlan(
            "refused",
            f"recording {what} needs --convperf-reason=TEXT (stored with the entry "
            "for reviewers); the baseline was not changed",
            candidate,
            slower=True,
        )
    return UpdatePlan("write", "updated", candidate, slower=slower)


@dataclass(frozen=True)
class Judgement:
    """The decision of one check, its planned update, and the row fields for reports."""

    decision: Decision
    update: UpdatePlan | None
    row_fields: dict[str, Any] = field(default_factory=dict)

    def enforce(self) -> None:
        """Fail or skip the running test as the decision (and update plan) says."""
        plan, decision = self.update, self.decision
        if plan is not None and plan.action == "refused":
            pytest.fail(f"{decision.message}\nconvperf update refused: {plan.why}", pytrace=False)
        if plan is not None and plan.action == "write":
            return  # the update acknowledges the change; the summary lists it
        if decision.outcome == "fail":
            pytest.fail(decision.message, pytrace=False)
        if decision.outcome == "skip":
            pytest.skip(decision.message)


def judge(
    session: ConvperfSession,
    row: Mapping[str, Any],
    comparison: Comparison,
    *,
    confirm: Callable[[float], Comparison],
    errors: Sequence[ErrorStats] = (),
    backend: str | None = None,
) -> Judgement:
    """Decide one check (``row["module"]``, ``row["key"]``) against its baseline.

    ``confirm(factor)`` re-times the same pair with ``factor`` x the rounds of ``comparison``.
    """
    module, key = str(row["module"]), str(row["key"])
    store = store_for(session, fake=(row.get("facts") or {}).get("timer") == "fake")
    device = session.device_info()
    env = env_from_facts(device.facts)
    old = store.get(module, key)
    policy = policy_for(session.cfg, device.kind, old)

    def remeasure(n_rounds: int) -> Comparison:
        return confirm(n_rounds / max(1, comparison.n_rounds))

    quality = quality_of(row)
    decision = decide(
        comparison, old, policy, errors=errors, env=env, backend=backend, confirm=remeasure, quality=quality
    )
    final = decision.confirm if decision.confirm is not None else comparison
    plan: UpdatePlan | None
    if comparison.inconclusive:
        # Decided for correctness/quality drift only: the timing must never be recorded.
        plan = (
            UpdatePlan("skip", "inconclusive measurements are never recorded") if session.cfg.update else None
        )
    else:
        candidate = new_entry(final, old, policy, env=env, backend=backend, errors=errors, quality=quality)
        plan = plan_update(session.cfg, decision, old, candidate, policy)
    fields: dict[str, Any] = {
        "machine": store.machine,
        "baselines_file": str(store.path(module)),
        "device_kind": device.kind,
        "env": env,
        "timing": timing_of(final),
        "verdict": decision.verdict.value,
        "message": decision.message,
        "decision": decision.to_dict(),
        "baseline": old.to_yaml() if old is not None else None,
        "update": plan.to_dict() if plan is not None else None,
    }
    return Judgement(decision, plan, fields)
