"""``python -m pytest_convperf export --format bmf|gab DIR|URL``: the latest run of each check in
formats other tools read.

- ``bmf``: Bencher Metric Format (``bencher run --adapter json``): ``{check: {measure: {value,
  lower_value, upper_value}}}`` with ``speedup`` (the gated number, its 95 % CI as the bounds),
  ``latency`` (the candidate's median, nanoseconds, Bencher's built-in latency unit) and
  ``correctness-max-abs`` (the largest absolute error against the fp64 oracle over the outputs).
- ``gab``: github-action-benchmark's ``customBiggerIsBetter``: a list of ``{name, unit, value,
  range, extra}``, the speedup with its CI half-width as ``range`` and verdict, commit and CI in
  ``extra``.

A check's latest run is its last record by date on the chosen machine (default: the machine of the
newest record). See docs/dashboard.md ("Exports").
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

FORMATS = ("bmf", "gab")
# Bencher refuses a benchmark name over 1,024 characters (counted here in UTF-8 bytes, the stricter).
BMF_NAME_LIMIT = 1024


def latest(
    records: Sequence[Mapping[str, Any]], machine: str | None
) -> tuple[str | None, list[Mapping[str, Any]]]:
    """(the machine, the newest record of each of its checks with a ratio), by check id."""
    if not records:
        return machine, []
    if machine is None:
        machine = str(max(records, key=lambda r: str(r.get("when") or "")).get("machine") or "unknown")
    newest: dict[str, Mapping[str, Any]] = {}
    for rec in records:
        if str(rec.get("machine") or "unknown") != machine or not _finite(rec.get("time_ratio")):
            continue
        ident = check_id(rec)
        if ident not in newest or str(rec.get("when") or "") >= str(newest[ident].get("when") or ""):
            newest[ident] = rec
    return machine, [newest[k] for k in sorted(newest)]


def check_id(rec: Mapping[str, Any]) -> str:
    return f"{rec['module']}::{rec['key']}" if rec.get("module") else str(rec["key"])


def _finite(value: Any) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


def speedup_ci(rec: Mapping[str, Any]) -> tuple[float, float | None, float | None]:
    """(speedup, lower, upper): the reference time over the candidate's, the CI from the ratio's."""
    speed = 1.0 / float(rec["time_ratio"])
    ci = rec.get("ratio_ci")
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and _finite(ci[0]) and _finite(ci[1]):
        return speed, 1.0 / float(ci[1]), 1.0 / float(ci[0])
    return speed, None, None


def max_abs_error(rec: Mapping[str, Any]) -> float | None:
    """The largest ``max_abs`` over a record's outputs (flat for one output, per name for several)."""
    errors = rec.get("correctness")
    if not isinstance(errors, Mapping):
        return None
    values = [errors.get("max_abs")] + [v.get("max_abs") for v in errors.values() if isinstance(v, Mapping)]
    found = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return max(found) if found else None


def bmf_name(ident: str, limit: int = BMF_NAME_LIMIT) -> str:
    """``ident`` when Bencher takes it, else its start and a digest of the whole id: the same id
    gives the same name every night (its history stays one series), two long ids that share a start
    give two names."""
    raw = ident.encode("utf-8", "surrogatepass")  # a non-UTF-8 file name's id still has a name
    if len(raw) <= limit:
        return ident
    tag = f"~{hashlib.sha256(raw).hexdigest()[:16]}"
    return raw[: limit - len(tag)].decode("utf-8", "ignore") + tag


def bmf(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for rec in records:
        speed, low, high = speedup_ci(rec)
        measures: dict[str, dict[str, float]] = {"speedup": {"value": speed}}
        if low is not None and high is not None:
            measures["speedup"].update(lower_value=low, upper_value=high)
        us = rec.get("us")
        candidate = us.get("candidate") if isinstance(us, Mapping) else None
        if isinstance(candidate, (int, float)) and math.isfinite(candidate):
            measures["latency"] = {"value": float(candidate) * 1e3}  # us -> ns
        error = max_abs_error(rec)
        if error is not None:
            measures["correctness-max-abs"] = {"value": error}
        out[bmf_name(check_id(rec))] = measures
    return out


class GabBenchmark(TypedDict):
    """One benchmark of github-action-benchmark's ``customBiggerIsBetter`` input."""

    name: str
    unit: str
    value: float
    range: str
    extra: str


def gab(records: Sequence[Mapping[str, Any]]) -> list[GabBenchmark]:
    out = []
    for rec in records:
        speed, low, high = speedup_ci(rec)
        half = max(speed - low, high - speed) if low is not None and high is not None else None
        ci = f"95 % CI {low:.4f}..{high:.4f}" if low is not None and high is not None else "no CI"
        out.append(
            GabBenchmark(
                name=check_id(rec),
                unit="x speedup",
                value=speed,
                range=f"± {half:.4f}" if half is not None else "",
                extra=f"{rec.get('verdict')} at commit {rec.get('commit') or 'unknown'} on "
                f"{rec.get('machine')}, {rec.get('when')}; {ci}",
            )
        )
    return out


def export(source: str, fmt: str, *, machine: str | None, out: Path | None) -> tuple[list[str], int]:
    """The ``export`` subcommand: (lines for stderr, exit code); the document goes to ``out`` or stdout."""
    from pytest_convperf.core.files import atomic_write
    from pytest_convperf.core.jsonl import summary
    from pytest_convperf.reports.dashboard import load_records

    try:
        records, skipped, _ = load_records(source)
    except FileNotFoundError as exc:
        return [f"export: {exc}"], 2
    except Exception as exc:  # the store's StoreUnavailable: URL and fix in its message
        if type(exc).__name__ != "StoreUnavailable":
            raise
        return [f"export: {exc}"], 2
    machine, chosen = latest(records, machine)
    if not chosen:
        return [f"export: no timed check on machine {machine} in {source}"], 2
    document = bmf(chosen) if fmt == "bmf" else gab(chosen)
    text = json.dumps(document, indent=1, allow_nan=False) + "\n"
    lines = [f"export: {line}" for line in summary(skipped)]
    if out is None:
        print(text, end="")
    else:
        atomic_write(out, text)
        lines.append(f"export: {len(chosen)} checks of {machine} -> {out} ({fmt})")
    return lines, 0
