"""The baseline lifecycle: what a check would store, the update plan, and the session-end writes.

One home for everything ``--convperf-update-baselines`` does, in the order it happens:

1. :func:`new_entry` builds the entry a measurement would store (also used by ``calibrate``, so what
   an entry holds is written once);
2. :func:`plan_update` applies the update rules (selection, hysteresis, reason required) to one
   decided check, giving an :class:`UpdatePlan` that rides in the check's row;
3. :func:`apply_updates` runs on the controller at session end: it validates every target file,
   writes the planned entries (grouped per file, under the store's lock) and renders
   ``convperf-update.md`` for reviewers (``update_record.render_update_md``).

The judgement itself (entry lookup and ``verdict.decide``) is :mod:`pytest_convperf.check.judgement`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import site
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import pytest

from pytest_convperf.baselines.orphans import PRUNE
from pytest_convperf.baselines.orphans import render_md as render_orphans
from pytest_convperf.baselines.store import Store, read_file
from pytest_convperf.baselines.update_outcome import Applied, utf8
from pytest_convperf.baselines.update_record import UPDATE_MD, render_update_md
from pytest_convperf.core.clocks import side_clocks
from pytest_convperf.core.env import timing_of
from pytest_convperf.core.files import atomic_write
from pytest_convperf.core.kerneldiff import KernelShare
from pytest_convperf.core.results import Comparison, ErrorStats, Verdict
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.judge.cliffs import CliffChange, file_changes, render_md
from pytest_convperf.judge.decision import Policy
from pytest_convperf.judge.entry import Entry, UpdatePlan, correctness_of, parse_entry
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.judge.quality import QUALITY_KEYS
from pytest_convperf.measure.witness import witness_us

# A recorded ratio falling to under 1/2 of the stored one needs --convperf-reason: cheats that
# reached IMPROVED read 0.07-0.2x of their baseline (issue 25 item 1); a real 2x speedup deserves
# the sentence that says what changed.
IMPLAUSIBLE_SPEEDUP = 2.0

if TYPE_CHECKING:
    from pytest_convperf.core.config import ConvperfConfig

# Update kinds (``--convperf-update-baselines``) that rewrite each verdict.
UPDATE_KIND_FOR: dict[Verdict, str] = {
    Verdict.FAIL: "failed",
    Verdict.STALE: "failed",
    Verdict.CORRECTNESS_FAIL: "failed",  # drift only: a tolerance breach is never recorded
    Verdict.NEW: "new",
    Verdict.IMPROVED: "improved",
}


def quality_of(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The quality metrics (``rel_l2``, ``sqnr_db``) among ``extra_metrics`` that an entry stores."""
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
    kernels: Sequence[KernelShare] | None = None,
) -> Entry:
    """The entry this measurement would store; noise stays with the machine (kept from the old entry)."""
    timing = timing_of(comparison)
    return Entry(
        time_ratio=comparison.time_ratio,
        noise=old.noise if old is not None else policy.noise_floor,
        noise_runs=old.noise_runs if old is not None else None,
        us_candidate=comparison.candidate.median_us,
        us_reference=comparison.reference.median_us,
        us_witness=witness_us(comparison.facts),
        env=dict(env),
        reference_backend=backend,
        correctness=correctness_of(errors),
        tolerance=old.tolerance if old is not None else None,
        quality=dict(quality or {}),
        mode=timing["mode"],
        flush=timing.get("flush"),
        kernels=tuple(kernels or ()),
        cliff=old.cliff if old is not None else None,  # a pinned cliff stays pinned when re-recorded
        # The clocks it was recorded at (GPU): a later session judges in cycles where they moved.
        sm_mhz=side_clocks(comparison.candidate.sm_mhz, comparison.reference.sm_mhz),
    )


def plan_update(
    cfg: ConvperfConfig, decision: Decision, old: Entry | None, proposed: Entry, policy: Policy
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
        return UpdatePlan("write", "new entry", proposed)
    band = max(old.noise, policy.noise_floor)
    shift = math.log(proposed.time_ratio / old.time_ratio)
    env_changed = bool(decision.env_diff)
    drift = verdict is Verdict.CORRECTNESS_FAIL
    # An entry recorded before quality was gated gains its quality block on the next update.
    quality_added = bool(proposed.quality) and not old.quality
    # Likewise its timing mode, so that ``auto`` reuses it from then on (sticky per key).
    mode_added = proposed.mode is not None and old.mode is None
    if abs(shift) <= band and not env_changed and not drift and not quality_added and not mode_added:
        return UpdatePlan(
            "keep",
            f"the new ratio {proposed.time_ratio:.4g} lies within the noise band "
            f"(+-{band:.2%}) of the stored {old.time_ratio:.4g}; entry left as is",
        )
    slower = shift > band or drift
    if shift < -math.log(IMPLAUSIBLE_SPEEDUP) and not cfg.reason:
        return UpdatePlan(
            "refused",
            f"recording a ratio {old.time_ratio:.4g} -> {proposed.time_ratio:.4g} "
            f"({math.exp(-shift):.2f}x faster than stored; over {IMPLAUSIBLE_SPEEDUP:g}x is implausible "
            "without a word: a cached result, or work the timer cannot see?) needs "
            "--convperf-reason=TEXT (stored with the entry for reviewers); the baseline was not changed",
            proposed,
        )
    if slower and not cfg.reason:
        what = (
            "a lower quality against the float conv"
            if drift and decision.stage == "quality"
            else "larger errors"
            if drift
            else f"a slower ratio ({old.time_ratio:.4g} -> {proposed.time_ratio:.4g})"
        )
        return UpdatePlan(
            "refused",
            f"recording {what} needs --convperf-reason=TEXT (stored with the entry "
            "for reviewers); the baseline was not changed",
            proposed,
            slower=True,
        )
    return UpdatePlan("write", "updated", proposed, slower=slower)


def git_output(rootdir: Path, *args: str, timeout: float = 10) -> str | None:
    """Stripped output of a git command in ``rootdir`` ("" when it printed nothing), or None when it
    failed: outside a repository, without git, or over ``timeout``."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=rootdir, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git(rootdir: Path, *args: str) -> str | None:
    """Output of a git command in ``rootdir``, or None outside a repository / without git / when empty."""
    return git_output(rootdir, *args) or None


class CommitInfo(TypedDict):
    """pytest-benchmark's ``commit_info`` block (a mapping: the hooks and the JSON files carry it)."""

    id: str | None
    branch: str | None
    dirty: bool
    project: str
    code: str | None


def commit_info(cfg: ConvperfConfig) -> CommitInfo:
    """pytest-benchmark's ``commit_info``: id, branch, dirty (empty values outside git), and ``code``
    (:func:`code_state`)."""
    rootdir = cfg.rootdir
    status = git(rootdir, "status", "--porcelain")
    return CommitInfo(
        id=git(rootdir, "rev-parse", "--short", "HEAD"),
        branch=git(rootdir, "rev-parse", "--abbrev-ref", "HEAD"),
        dirty=bool(status),
        project=rootdir.name,
        code=code_state(cfg),
    )


def code_state(cfg: ConvperfConfig) -> str | None:
    """HEAD's short hash, with ``+dirty`` when the code may differ from that commit: what "the same
    code" means to ``calibrate`` (calibration.recentre).

    Dirty: an uncommitted change, an untracked file git does not ignore (a new candidate module),
    or a ``.py`` file of the repository this process imported and git does not track (ignored).
    Left out: the baselines and reports folders and ``convperf-update.md`` (recording them changes
    the tree before calibrating), and Python's environment (a virtualenv inside the repository).
    The whole repository counts, wherever the rootdir sits in it. None when git cannot say
    (unknown is not clean: a ratio is then never replaced)."""
    head = git(cfg.rootdir, "rev-parse", "--short", "HEAD")
    top_text = git(cfg.rootdir, "rev-parse", "--show-toplevel")
    if head is None or top_text is None:
        return None
    top = Path(top_text).resolve()
    spec = [":/"]
    for path in (cfg.baselines_dir, cfg.report_dir, cfg.rootdir / UPDATE_MD):
        if path is not None and path.resolve().is_relative_to(top):
            spec.append(f":(top,exclude){path.resolve().relative_to(top).as_posix()}")
    changed = git_output(
        cfg.rootdir, "status", "--porcelain", "--untracked-files=all", "--", *spec, timeout=30
    )
    if changed is None:
        return None
    if changed:
        return f"{head}+dirty"
    imported = _imported_sources(top)
    if not imported:
        return head
    spec = [f":(top,literal){name}" for name in imported]
    tracked = git_output(cfg.rootdir, "ls-files", "--full-name", "--", *spec, timeout=30)
    if tracked is None:
        return None
    return head if set(tracked.splitlines()) >= set(imported) else f"{head}+dirty"


def _imported_sources(top: Path) -> list[str]:
    """The ``.py`` files of this process's modules inside the repository ``top`` (paths relative to
    it), without those of the Python environment (a virtualenv may live inside the repository)."""
    env = {Path(p).resolve() for p in {sys.prefix, sys.base_prefix, *site.getsitepackages()}}
    out = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        # Relative names are not files (``torch.ops`` says ``_ops.py``): they would resolve in the cwd.
        if not isinstance(file, str) or not file.endswith(".py") or not os.path.isabs(file):
            continue
        path = Path(file).resolve()
        if path.is_relative_to(top) and not any(path.is_relative_to(e) for e in env):
            out.add(path.relative_to(top).as_posix())
    return sorted(out)


def apply_updates(
    cfg: ConvperfConfig,
    rows: Sequence[CheckRow],
    out_dir: Path,
    cliffs: Sequence[CliffChange] = (),
    orphans: Mapping[tuple[str, str], Sequence[str]] | None = None,
) -> Applied | None:
    """Write ``convperf-update.md``, then every planned update (grouped per file); None when no update ran.

    ``cliffs``: the night's cliff changes (:mod:`pytest_convperf.judge.cliffs`): pins are written like
    new entries, retired cliffs removed from their files, all of them listed for review.
    ``orphans``: entries no collected test produced (:mod:`pytest_convperf.baselines.orphans`), removed
    and listed under ``--convperf-update-baselines=prune``.
    The review record is written before the baselines, so a baseline change never lands without
    it: when the record cannot be written (a full disk), no baseline is. A file that cannot be
    written (``OSError``: ENOSPC, permissions) does not stop the others; each failure is one line
    of :attr:`Applied.failed` and of the record's "Write failed" section.
    """
    if not cfg.updating:
        return None
    commit = git(cfg.rootdir, "rev-parse", "--short", "HEAD")
    updated: dict[str, str] = {}
    if commit:
        updated["commit"] = commit
        code = code_state(cfg)
        if code is not None:
            updated["code"] = code
    if cfg.reason:
        updated["reason"] = cfg.reason
    per_file: dict[tuple[str, str], dict[str, tuple[Entry, CheckRow | None]]] = {}
    kept: list[str] = []
    refused: list[str] = []
    bad: list[str] = []
    for row in rows:
        plan = row.update
        if plan is None:
            continue
        label = f"{row.key} ({row.module}): {plan.why}"  # update_record puts it in a code span
        if plan.action == "keep":
            kept.append(label)
        elif plan.action == "refused":
            refused.append(label)
        if plan.action != "write" or plan.entry is None:
            continue
        if not utf8(row.key):  # YAML cannot hold it: this entry is named, the others are written
            bad.append(f"{row.key!r} ({row.module}) not written: its key is not UTF-8 (a lone surrogate)")
            continue
        entry = dataclasses.replace(plan.entry, updated=dict(updated) or None)
        entries = per_file.setdefault((str(row.machine), row.module), {})
        if row.key in entries:
            other = entries[row.key][1]
            assert other is not None  # cliffs are added below
            raise pytest.UsageError(
                f"convperf: two tests record the same baseline key {row.key!r} in "
                f"{row.machine}/{row.module}.yaml: {other.nodeid} and {row.nodeid}; "
                "rename one of them (baseline files are chosen by test file name, so two test files "
                "with the same name in different folders share one baseline file)"
            )
        entries[row.key] = (entry, row)
    pins, retired = file_changes(cliffs)
    pruned = dict(orphans or {}) if PRUNE in cfg.update else {}
    for where, gone in pruned.items():
        retired.setdefault(where, set()).update(gone)
    for where, pinned in pins.items():  # a pinned cliff is a new entry with its ``cliff`` field
        for key, raw in pinned.items():
            entry = dataclasses.replace(parse_entry(key, raw), updated=dict(updated) or None)
            per_file.setdefault(where, {})[key] = (entry, None)  # no check's row: a pinned cliff
    for where, keys in retired.items():  # retirement wins over a re-check's own update
        for key in keys:
            per_file.get(where, {}).pop(key, None)
    # Validate every target file before writing any: one bad file stops the update as a whole.
    for machine, module in {*per_file, *retired}:
        read_file(Store(cfg.baselines_dir, machine).path(module), machine)
    # The review record first: a baseline written without it would reach git unexplained.
    path = out_dir / UPDATE_MD
    record = render_update_md(cfg, per_file, kept, refused, commit)
    record += "\n".join(render_md(cliffs, cfg.reason))
    record += "\n".join(["", *render_orphans(pruned, cfg.baselines_dir)]) if pruned else ""
    targets = sorted({*per_file, *retired})
    try:
        atomic_write(path, record)
    except OSError as exc:
        n = sum(len(per_file.get(t, {})) + len(retired.get(t, ())) for t in targets)
        why = f"{path} could not be written ({exc}), so none of the {n} planned baseline changes was"
        return Applied(path, False, frozenset(), (why,))
    written: set[tuple[str, str, str]] = set()
    failed: list[str] = list(bad)
    for machine, module in targets:
        entries = per_file.get((machine, module), {})
        store = Store(cfg.baselines_dir, machine, rootdir=cfg.rootdir)
        try:
            store.write(module, {k: e for k, (e, _) in entries.items()}, retired.get((machine, module), ()))
        except OSError as exc:
            names = ", ".join(sorted(entries)) or "retired cliffs only"
            failed.append(f"{store.path(module)} not written ({exc}): {len(entries)} entries ({names})")
            continue
        written.update((machine, module, key) for key in entries)
    if failed:
        section = "\n## Write failed\n\n" + "".join(f"- {line}\n" for line in failed)
        try:
            atomic_write(path, record + section + "\nEvery other file above was written.\n")
        except OSError:
            pass  # the terminal summary says it (session notes)
    return Applied(path, True, frozenset(written), tuple(failed))
