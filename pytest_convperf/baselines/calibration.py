"""Calibration: K unchanged runs folded into each check's stored noise and, where they agree with
it, a re-centred baseline ratio (``python -m pytest_convperf calibrate`` runs them; this module is
the rule, pure except for :func:`write_calibration`).

Why re-centre: the decision rule's sigma carries the stored ratio's own error, ``noise^2 / ref_runs``. An
entry recorded by one session has ``ref_runs`` 1, so half of sigma^2 is the baseline's error;
pooling it with the K calibration runs takes that term to ``noise^2 / (1 + K)``. With 30 runs
this lifts the night-1 detection of a 10 % regression in the night simulation from 76.5 % to
95.7 % (docs/statistics.md §3). Only runs of the recording's own code move the ratio; runs of
other code leave it as is (a change is recorded by ``--convperf-update-baselines``, with its
review rules, never absorbed here).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from pytest_convperf.baselines.store import dump_text, read_file
from pytest_convperf.core.env import env_diff
from pytest_convperf.core.files import atomic_write, lock_for
from pytest_convperf.judge.changes import timing_diff
from pytest_convperf.judge.entry import Entry, entry_digest
from pytest_convperf.judge.verdict import CPU_NOISE_FLOOR, GPU_NOISE_FLOOR
from pytest_convperf.measure.witness import as_witness

# MAD -> SD of a normal distribution.
MAD_TO_SD = 1.4826
# A run this many robust SDs from the median is a load spike, not noise: for the t5 run offsets of
# the night simulation a clean run lands there 0.3 % of the time.
OUTLIER_SDS = 5.0
# Two-sided 99 %: calibration runs further than this from the stored ratio (in standard errors of
# their difference) disagree with it, and the ratio is left alone.
AGREE_Z = 2.576
# Fewer runs than this do not move a stored ratio (their median is not yet robust).
MIN_RECENTRE_RUNS = 3
# What a history record without the digest of its entry (``entry``) was judged against, and what a
# check without an entry was.
UNKNOWN_ENTRY = "unknown"
NO_ENTRY = "none"


@dataclass(frozen=True)
class Recentred:
    """The stored ratio after calibration: pooled with the runs (``moved``) or left as is (``why``)."""

    time_ratio: float
    ref_runs: int
    moved: bool
    why: str


def recentre(old: Entry, ln_ratios: Sequence[float], noise: float, *, other_code: str | None) -> Recentred:
    """The stored ratio after K unchanged runs: pooled with their median, replaced, or kept.

    Only runs of the code the entry was recorded from (``other_code`` None: the same commit, no
    uncommitted change and no untracked file outside the baselines and reports, no imported module
    git does not track; ``updates.code_state``) move the ratio: the runs and the recording measured
    the same thing. Otherwise ``other_code`` says why not (:func:`code_difference`).
    Agreeing runs are pooled, ``old.time_ratio`` worth ``old.ref_runs`` runs, the K runs' median
    worth K (the rule charges the stored ratio ``noise^2 / ref_runs``, decision.stage_of; for the
    heavy-tailed t5 offsets of the night simulation a median is as efficient as a mean). Runs that
    disagree beyond 2.576 x the noise of the difference replace it: K runs against one, the
    recorded run was the outlier. At other code the ratio is kept whatever the runs say: the
    candidate may have changed, and even a change inside the noise, pooled night after night,
    would ratchet into the baseline; a change is recorded by an update, with its review.
    """
    k = len(ln_ratios)
    if other_code is not None:
        return Recentred(old.time_ratio, old.ref_runs, False, f"ratio kept: {other_code}")
    if k < MIN_RECENTRE_RUNS:
        return Recentred(
            old.time_ratio, old.ref_runs, False, f"ratio kept: {k} run(s) are too few to move it"
        )
    old_runs = max(1, old.ref_runs)
    mid = statistics.median(ln_ratios)
    shift = mid - math.log(old.time_ratio)
    se = noise * math.sqrt(1 / old_runs + 1 / k)
    if abs(shift) > AGREE_Z * se:
        return Recentred(
            math.exp(mid),
            k,
            True,
            f"ratio replaced: the runs' median {math.exp(mid):.4g} is {shift:+.2%} from the stored "
            f"{old.time_ratio:.4g}, beyond {AGREE_Z:g} x the noise {se:.2%}, measuring the code it was "
            f"recorded from, so the recorded run was the outlier; now the median of the {k} runs",
        )
    pooled = (old_runs * math.log(old.time_ratio) + k * mid) / (old_runs + k)
    return Recentred(
        math.exp(pooled),
        old_runs + k,
        True,
        f"ratio {old.time_ratio:.4g} -> {math.exp(pooled):.4g} (pooled with the {k} runs: "
        f"{old_runs} -> {old_runs + k} runs behind it)",
    )


def spike_free(ln_ratios: Sequence[float]) -> list[float]:
    """The runs without load spikes: from 3 runs on, those within ``OUTLIER_SDS`` robust SDs
    (1.4826 x MAD) of the median; all of them when the MAD is 0 (over half the runs agree exactly)."""
    if len(ln_ratios) < 3:
        return list(ln_ratios)
    mid = statistics.median(ln_ratios)
    robust = MAD_TO_SD * statistics.median(abs(x - mid) for x in ln_ratios)
    if robust == 0:
        return list(ln_ratios)
    return [x for x in ln_ratios if abs(x - mid) <= OUTLIER_SDS * robust]


def noise_of(ln_ratios: Sequence[float], floor: float) -> float:
    """Between-run SD of the runs' median ln ratios, never under ``floor``.

    The plain SD of the :func:`spike_free` runs: one run under a load spike (a neighbour's build)
    does not become the stored noise, and clean runs keep the SD's efficiency. The MAD alone is
    only 37 % efficient: stored as the noise with ``noise_runs - 1`` degrees of freedom (the rule's
    t quantiles), it would claim more than it knows.
    """
    kept = spike_free(ln_ratios)
    return max(statistics.stdev(kept) if len(kept) >= 2 else 0.0, floor)


class CalibratedCheck(TypedDict):
    """What K runs say about one check (:func:`calibrate_records`); the median run's ``us`` .. ``timing``
    are its history record's, as stored."""

    runs: int
    noise_runs: int  # the noise's degrees of freedom + 1
    sd: float
    noise: float
    floor: float
    time_ratio: float
    ln_ratios: list[float]
    code: str | None
    code_mixed: bool
    entry_seen: list[str]
    us: Mapping[str, Any]
    env: Mapping[str, Any]
    reference_backend: str | None
    correctness: Mapping[str, Any]
    quality: Mapping[str, Any]
    timing: Mapping[str, Any]
    other_mode_runs: int
    load_max: float


class CalibratedFile(TypedDict):
    machine: str
    checks: dict[str, CalibratedCheck]


def calibrate_records(
    runs: Sequence[Sequence[Mapping[str, Any]]], *, floor: float | None = None
) -> dict[str, CalibratedFile]:
    """Fold K runs' history records into per-file entry updates; returns {file: {key: (entry fields)}}.

    Pure: the caller writes. ``floor`` defaults to the device's (GPU 0.4 %, CPU measured).
    """
    by_check: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for records in runs:
        for rec in records:
            if rec.get("ln_ratio") is None or not rec.get("baselines_file"):
                continue
            if rec.get("verdict") == "INCONCLUSIVE":  # unusable timing: never folded into noise
                continue
            ident = (str(rec["baselines_file"]), str(rec.get("machine")), str(rec["key"]))
            by_check.setdefault(ident, []).append(rec)
    out: dict[str, CalibratedFile] = {}
    for (file, machine, key), every in sorted(by_check.items()):
        # Runs timed in another mode (auto near the CUDA-graph threshold) are not the same
        # measurement: fold only the most common mode's runs (the first seen wins a tie).
        modes = [(r.get("timing") or {}).get("mode") for r in every]
        mode = max(dict.fromkeys(modes), key=modes.count)
        recs = [r for r, m in zip(every, modes) if m == mode]
        lns = [float(r["ln_ratio"]) for r in recs]
        dev_floor = (
            floor
            if floor is not None
            else (GPU_NOISE_FLOOR if recs[0].get("device_kind") == "cuda" else CPU_NOISE_FLOOR)
        )
        mid = sorted(recs, key=lambda r: float(r["ln_ratio"]))[len(recs) // 2]
        out.setdefault(file, CalibratedFile(machine=machine, checks={}))["checks"][key] = CalibratedCheck(
            runs=len(lns),
            noise_runs=len(spike_free(lns)),
            sd=statistics.stdev(lns) if len(lns) >= 2 else 0.0,
            noise=noise_of(lns, dev_floor),
            floor=dev_floor,
            time_ratio=math.exp(statistics.median(lns)),
            ln_ratios=lns,
            # One code state for all runs (None: git could not say), or None and ``code_mixed``:
            # only runs of the entry's own code replace it (code_difference).
            code=codes.pop() if len(codes := {r.get("code") for r in recs}) == 1 else None,
            code_mixed=len(codes) > 1,
            # The entries the runs were judged against (a record without one: unknown).
            entry_seen=sorted({_judged_against(r) for r in every}),
            us=mid.get("us") or {},
            env=mid.get("env") or {},
            reference_backend=mid.get("reference_backend"),
            correctness=mid.get("correctness") or {},
            quality=mid.get("quality") or {},
            timing=mid.get("timing") or {},
            other_mode_runs=len(every) - len(recs),
            load_max=max((max(r.get("load_avg") or [0.0]) for r in recs), default=0.0),
        )
    return out


# What re-centring needs, said where calibrate cannot tell whether the runs measured the recording.
_HOW = "record and calibrate in a git checkout with the code committed to re-centre it"
_OTHER = (
    "; calibrate at the recorded commit with a clean tree to re-centre it, or record a change with "
    "--convperf-update-baselines"
)


# Outside git the ratio is re-centred on calibrate's contract, and says so (issue 38.4: a recording
# made under load, 0.299x, stayed the centre while every run read 0.32-0.37x, so unchanged code read
# -8 to -18 %; keeping a ratio nothing can vouch for is no safer than moving it).
OUTSIDE_GIT = (
    "outside a git repository calibrate cannot see a code change, so it takes the runs as the "
    "recorded code, as calibrate requires (record a changed candidate with --convperf-update-baselines)"
)


def outside_git(old: Entry, c: Mapping[str, Any]) -> bool:
    """Neither the recording nor any run knows its code state (no git repository, or git missing)."""
    return not isinstance(c.get("code"), str) and not isinstance((old.updated or {}).get("code"), str)


def code_difference(old: Entry, c: Mapping[str, Any]) -> str | None:
    """None when the runs (calibrate's folded check ``c``) measured the committed code the entry was
    recorded from; else why the ratio stays (``updates.code_state`` gives both sides' code)."""
    code, recorded = c.get("code"), (old.updated or {}).get("code")
    if c.get("code_mixed"):
        return "the runs measured different code states (the code changed while calibrate ran)" + _OTHER
    if outside_git(old, c):
        return None  # calibrate's contract: unchanged code (OUTSIDE_GIT, said with the new ratio)
    if not isinstance(code, str):
        return (
            "git cannot say which code the runs measured, and the entry was recorded in a git checkout, "
            f"so the runs cannot be compared with it and the ratio is kept; {_HOW}"
        )
    if not isinstance(recorded, str):
        return (
            "the entry does not say which code it was recorded from (recorded outside git or by an "
            f"older version), so the runs cannot be compared with it; {_HOW}"
        )
    if code.endswith("+dirty"):
        return (
            f"the runs measured other code than the recording ({code}: uncommitted changes, or files "
            f"git does not track; recorded at {recorded})" + _OTHER
        )
    if code != recorded:
        return f"the runs measured other code than the recording ({code}; recorded at {recorded})" + _OTHER
    return None


def _same_timing(old: Entry, c: Mapping[str, Any]) -> bool:
    """The runs measured what the entry stores: same timing mode and flush, no env key moved."""
    return not timing_diff(old, c.get("timing") or {}) and not env_diff(old.env, c.get("env") or {})


def _unchanged(old: Entry | None, c: Mapping[str, Any]) -> bool:
    """The file still holds the entry every run was judged against (compare-and-swap under the
    file's lock): an update recorded while the runs went on is never overwritten by runs of before."""
    now = entry_digest(old.to_yaml()) if old is not None else NO_ENTRY
    return list(c.get("entry_seen") or [UNKNOWN_ENTRY]) == [now]


def _judged_against(rec: Mapping[str, Any]) -> str:
    """The digest of the entry a history record's run was judged against (``results.entry_digest``)."""
    seen = rec.get("entry", UNKNOWN_ENTRY)
    return NO_ENTRY if seen is None else str(seen)


def write_calibration(file: str, machine: str, checks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    path = Path(file)
    lines = []
    with lock_for(path):
        current = dict(read_file(path, machine).entries)
        for key, c in checks.items():
            old = current.get(key)
            if not _unchanged(old, c):
                lines.append(
                    f"  {key}: not written: the entry is not the one the runs were judged against "
                    "(an update changed it while calibrate ran); run calibrate again"
                )
                continue
            if old is not None:
                centre = (
                    recentre(old, c["ln_ratios"], c["noise"], other_code=code_difference(old, c))
                    if _same_timing(old, c)
                    else Recentred(
                        old.time_ratio, old.ref_runs, False, "ratio kept: timed in another mode or env"
                    )
                )
                current[key] = dataclasses.replace(
                    old,
                    noise=c["noise"],
                    noise_runs=c.get("noise_runs", c["runs"]),
                    time_ratio=centre.time_ratio,
                    ref_runs=centre.ref_runs,
                )
                what = f"noise updated; {centre.why}"
                if centre.moved and outside_git(old, c):
                    what += f" ({OUTSIDE_GIT})"
            else:
                us = c["us"]
                if not us.get("candidate") or not us.get("reference"):
                    lines.append(f"  {key}: no absolute times recorded; skipped")
                    continue
                current[key] = Entry(
                    time_ratio=c["time_ratio"],
                    noise=c["noise"],
                    noise_runs=c.get("noise_runs", c["runs"]),
                    ref_runs=c["runs"],
                    us_candidate=float(us["candidate"]),
                    us_reference=float(us["reference"]),
                    # The median run's witness (measure.witness): a record without a valid one
                    # leaves none (a bad one would make the file unreadable: parse_entry refuses it).
                    us_witness=as_witness(us.get("witness")),
                    env=dict(c["env"]),
                    reference_backend=c.get("reference_backend"),
                    correctness={k: v for k, v in c.get("correctness", {}).items() if v is not None},
                    quality={k: float(v) for k, v in (c.get("quality") or {}).items() if v is not None},
                    mode=(c.get("timing") or {}).get("mode"),
                    flush=(c.get("timing") or {}).get("flush"),
                )
                what = "new entry (median of the runs)"
            left_out = c.get("other_mode_runs", 0)
            lines.append(
                f"  {key}: between-run SD {c['sd']:.2%} over {c['runs']} runs -> noise "
                f"{c['noise']:.2%}{' (floor)' if c['noise'] > c['sd'] else ''}; {what}"
                + (f"; {left_out} run(s) of another timing mode left out" if left_out else "")
                + (f"; load average up to {c['load_max']:.1f}" if c.get("load_max") else "")
            )
        atomic_write(path, dump_text(machine, current))
    return lines
