"""The machine's between-session noise, learned from its judged sessions (issue 36 item 1).

Every judged session leaves, per check, ``ln(time ratio)`` in ``history.jsonl`` with the entry it was
judged against. Two consecutive sessions of one check against the same entry differ by
``d2 - d1``, whose variance is ``2 (noise^2 + se^2)``: the machine's between-session noise and each
session's own standard error. Pooled over the machine's checks (each check's last ``WINDOW``
sessions), the robust SD of those differences (1.4826 MAD / sqrt 2: a code change's one step and a
crashed run's outlier do not move it) less the median ``se^2`` is the machine's noise. Its degrees
of freedom: a MAD is worth about 37 % of an SD's observations for normal data (its asymptotic
efficiency), so ``df = 0.37 (pairs - 1)``; the gate's t quantiles use them (Welch-Satterthwaite,
``judge.decision.stage_of``). The device floors (CPU 2 %, GPU 0.4 %) stay lower bounds.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_convperf.judge.decision import LearnedNoise
from pytest_convperf.night.history import read_history_records, usable_record

# Each check's most recent sessions: the machine now, not a year ago.
WINDOW = 30
# Fewer session pairs than this learn nothing (the floor and the entry's noise decide).
MIN_PAIRS = 5
MAD_EFFICIENCY = 0.37
# Only sessions that compared like with like (a STALE session's mode or env differs from its entry's).
JUDGED = {"PASS", "ADVISORY", "FAIL", "SUSPECT", "IMPROVED"}


def learn(records: Iterable[Mapping[str, Any]], machine: str, device_kind: str) -> LearnedNoise | None:
    """The noise of ``machine``'s ``device_kind`` checks in ``records`` (None: under ``MIN_PAIRS``)."""
    by_check: dict[str, list[Mapping[str, Any]]] = {}
    for rec in records:
        if (
            usable_record(rec)
            and str(rec.get("machine") or "unknown") == machine
            and rec.get("device_kind") == device_kind
            and rec.get("verdict") in JUDGED
            and rec.get("entry") is not None
        ):
            by_check.setdefault(str(rec["key"]), []).append(rec)
    diffs: list[float] = []
    se2: list[float] = []
    for recs in by_check.values():
        recs.sort(key=lambda r: str(r.get("when") or ""))
        recent = recs[-WINDOW:]
        for a, b in itertools.pairwise(recent):
            if a.get("entry") == b.get("entry"):
                diffs.append(float(b["ln_ratio"]) - float(a["ln_ratio"]))
                se2 += [float(r.get("se") or 0.0) ** 2 for r in (a, b)]
    if len(diffs) < MIN_PAIRS:
        return None
    med = statistics.median(diffs)
    sd_diff = 1.4826 * statistics.median(abs(d - med) for d in diffs)
    noise2 = sd_diff * sd_diff / 2 - statistics.median(se2)
    return LearnedNoise(math.sqrt(max(0.0, noise2)), len(diffs), max(1.0, MAD_EFFICIENCY * (len(diffs) - 1)))


@functools.lru_cache(maxsize=8)
def _learned(file: Path, mtime_ns: int, machine: str, device_kind: str) -> LearnedNoise | None:
    records, _ = read_history_records(file)
    return learn(records, machine, device_kind)


def machine_noise(report_dir: Path | None, machine: str, device_kind: str) -> LearnedNoise | None:
    """The learned noise of ``report_dir``'s ``history.jsonl`` (None: no folder, no history, too
    little of it, or a history that cannot be read: the gate then uses the floor and the entry)."""
    if report_dir is None:
        return None
    file = report_dir / "history.jsonl"
    try:
        return _learned(file, file.stat().st_mtime_ns, machine, device_kind)
    except (OSError, ValueError):
        return None


def noise_lines(report_dir: Path | None, machine: str, device_kind: str) -> list[str]:
    """The header's and summary's line: the noise the gate uses on this machine beside the floor."""
    learned = machine_noise(report_dir, machine, device_kind)
    if learned is None:
        return []
    source = f"learned from {report_dir}/history.jsonl (the floors are lower bounds)"
    return [f"convperf: {learned.text()}, {source}"]
