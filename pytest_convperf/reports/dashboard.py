"""``python -m pytest_convperf dashboard DIR|URL --out OUT``: a static site of the history.

One file, ``OUT/index.html``: the page (``assets/dashboard.html``, its script and style inline) with
the data inlined as JSON, so it opens from disk or any artifact viewer with no server and no
network. The data: per machine and check the runs in time order (speedup, its 95 % CI, commit,
verdict, kernel table, the baseline's speedup and the rule's tolerance), the change points of
:mod:`pytest_convperf.night.history` (the same rule as the ``history`` subcommand and the night's
notes), the last night's FAILs and change points (taken from the very change points the charts
draw, so the two cannot disagree), and a summary per family (test module). A step is told in one
number everywhere on the page: the relative change of the speedup, with "slower" or "faster".
Kernel tables are stored once each and referred to by index: they change with the code, rarely
with the night. See docs/dashboard.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict

from pytest_convperf.core.files import atomic_write
from pytest_convperf.core.jsonl import summary
from pytest_convperf.night.history import (
    PERSIST,
    WINDOW,
    ChangePoint,
    is_store_url,
    read_history_records,
    recent_change_points,
    record_problem,
    series_from_records,
    source_unreadable,
)

DATA_MARK = "/*CONVPERF_DATA*/null"
TEMPLATE = "dashboard.html"

# The page's data (:func:`page_data`), inlined as JSON; the page's script reads these keys.
# A run of a check, read by position by the page's script: when, commit, verdict, speedup, its CI
# (low, high), the kernel table's index, the baseline's speedup and the rule's tolerance.
PagePoint = list[str | float | None]


class StepWords(TypedDict):
    change: float
    ci: list[float]
    before: float
    after: float
    label: str
    text: str


class PageChangePoint(StepWords):
    index: int
    commit: str | None
    when: str
    new: bool


class PageCheck(TypedDict):
    machine: str
    key: str
    family: str
    points: list[PagePoint]
    change_points: list[PageChangePoint]


class NightStep(TypedDict):
    key: str
    index: int
    text: str
    when: str


class NightFail(TypedDict):
    key: str
    verdict: str
    commit: str | None


class LastNight(TypedDict):
    when: str
    fails: list[NightFail]
    new_steps: list[NightStep]
    older_steps: list[NightStep]


class PageFamily(TypedDict):
    machine: str
    family: str
    checks: int
    verdicts: dict[str, int]
    geomean_speedup: float | None
    changed: int
    new_change_points: int


class PageData(TypedDict):
    generated: str
    source: str
    persist: int
    window: int
    machines: list[str]
    kernels: list[object]  # each distinct kernel table once, as the records hold it
    checks: list[PageCheck]
    last_night: dict[str, LastNight]
    families: list[PageFamily]


def load_records(source: str) -> tuple[list[dict[str, Any]], list[str], str]:
    """(records, lines skipped, what was read) from a store URL or a report folder's history.jsonl."""
    if is_store_url(source):
        from pytest_convperf.resultsdb.db import open_reader, read_records, shown

        engine = open_reader(source)  # reading never writes: no migration, no new file
        try:
            stored = read_records(engine, columns=("id", "record"))
        finally:
            engine.dispose()
        records, skipped = [], []
        for row in stored:
            rec = row["record"]
            problem = record_problem(rec) if isinstance(rec, Mapping) else "not an object"
            if problem is None:
                records.append(dict(rec))
            else:
                skipped.append(f"{shown(source)}: result {row['id']}: {problem}; result skipped")
        return records, skipped, shown(source)
    path = Path(source)
    file = path / "history.jsonl" if path.is_dir() else path
    if not file.exists():
        raise FileNotFoundError(f"{file} not found; give a --convperf-report folder or a results store URL")
    records, bad = read_history_records(file)
    return records, [str(s) for s in bad], str(file)


def _speedup(ratio: Any) -> float | None:
    return 1.0 / ratio if isinstance(ratio, (int, float)) and ratio > 0 and math.isfinite(ratio) else None


def _ci(rec: Mapping[str, Any]) -> tuple[float | None, float | None]:
    ci = rec.get("ratio_ci")
    if isinstance(ci, (list, tuple)) and len(ci) == 2:
        return _speedup(ci[1]), _speedup(ci[0])  # a smaller time ratio is a larger speedup
    return None, None


def _tolerance(rec: Mapping[str, Any]) -> float | None:
    tol = rec.get("tolerance")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)):
        return None
    return float(tol) if math.isfinite(tol) and 0 <= tol < 10 else None


def step_words(c: ChangePoint) -> StepWords:
    """A change point as the page tells it, in one number: the relative change of the speedup
    (``change``, -0.2: the speedup fell 20 %, the check got slower), its 95 % CI, a short ``label``
    for the chart and a ``text`` for the lists. ``ChangePoint.step`` is the time ratio's change
    (+25 % time is -20 % speedup); the page never shows that one, so no step reads two ways."""
    before, after = 1.0 / c.ratio_before, 1.0 / c.ratio_after
    change = after / before - 1.0
    low, high = 1.0 / (1.0 + c.ci[1]) - 1.0, 1.0 / (1.0 + c.ci[0]) - 1.0
    direction = "slower" if change < 0 else "faster"
    label = f"{direction}: speedup {change * 100:+.1f} %"
    text = (
        f"{label} ({before:.3f}x -> {after:.3f}x, 95 % CI {low * 100:+.1f} .. {high * 100:+.1f} %) "
        f"from commit {c.commit or 'unknown'} on {c.when[:10] or 'an unknown date'}; "
        f"{c.n_before} runs before, {c.n_after} since"
    )
    return StepWords(change=change, ci=[low, high], before=before, after=after, label=label, text=text)


def page_data(
    records: Sequence[Mapping[str, Any]], *, source: str, persist: int = PERSIST, window: int = WINDOW
) -> PageData:
    """Everything the page shows, as JSON-able data (see the module docstring)."""
    series = series_from_records(records)
    cps = recent_change_points(series, persist=persist, window=window)
    detail: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for rec in records:
        detail[(str(rec.get("machine") or "unknown"), str(rec["key"]), str(rec.get("when") or ""))] = rec
    kernel_tables: list[object] = []
    kernel_index: dict[str, int] = {}
    by_check: dict[tuple[str, str], list[ChangePoint]] = {}
    for c in cps:
        by_check.setdefault((c.machine, c.key), []).append(c)
    checks: list[PageCheck] = []
    for (machine, key), points in sorted(series.items()):
        out_points: list[PagePoint] = []
        module = None
        for p in points:
            rec = detail.get((machine, key, p.when), {})
            module = module or rec.get("module")
            kernels = rec.get("kernels")
            k = None
            if kernels:
                text = json.dumps(kernels, sort_keys=True)
                k = kernel_index.setdefault(text, len(kernel_tables))
                if k == len(kernel_tables):
                    kernel_tables.append(kernels)
            lo, hi = _ci(rec)
            base = _speedup(rec.get("baseline_ratio"))
            out_points.append(
                [p.when, p.commit, p.verdict, 1.0 / math.exp(p.ln_ratio), lo, hi, k, base, _tolerance(rec)]
            )
        checks.append(
            PageCheck(
                machine=machine,
                key=key,
                family=str(module or key.split("::")[0]),
                points=out_points,
                change_points=[_change_point(c) for c in by_check.get((machine, key), [])],
            )
        )
    return PageData(
        generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        source=source,
        persist=persist,
        window=window,
        machines=sorted({c["machine"] for c in checks}),
        kernels=kernel_tables,
        checks=checks,
        last_night=_last_night(records, checks),
        families=_families(checks),
    )


def _change_point(c: ChangePoint) -> PageChangePoint:
    return PageChangePoint(index=c.index, commit=c.commit, when=c.when, new=c.new, **step_words(c))


def _last_night(records: Sequence[Mapping[str, Any]], checks: Sequence[PageCheck]) -> dict[str, LastNight]:
    """Per machine: the latest run's date and its FAILs (every record of that run, unusable ones
    too); the change points new in it and the others, taken from ``checks``' own (the charts'), so
    the box cannot say "no change point" beside a charted step."""
    latest: dict[str, str] = {}
    for rec in records:
        machine, when = str(rec.get("machine") or "unknown"), str(rec.get("when") or "")
        latest[machine] = max(latest.get(machine, ""), when)
    out = {m: LastNight(when=w, fails=[], new_steps=[], older_steps=[]) for m, w in latest.items()}
    for c in checks:
        for cp in c["change_points"]:
            step = NightStep(key=c["key"], index=cp["index"], text=cp["text"], when=cp["when"])
            out[c["machine"]]["new_steps" if cp["new"] else "older_steps"].append(step)
    for night in out.values():
        night["older_steps"].sort(key=lambda s: s["when"], reverse=True)  # the latest first
    for rec in records:
        machine = str(rec.get("machine") or "unknown")
        if rec.get("when") == latest[machine] and rec.get("verdict") in ("FAIL", "CORRECTNESS_FAIL"):
            out[machine]["fails"].append(
                NightFail(key=rec["key"], verdict=rec["verdict"], commit=rec.get("commit"))
            )
    return out


def _families(checks: Sequence[PageCheck]) -> list[PageFamily]:
    """Per machine and family: checks, the last run's verdicts and the geometric mean of its speedups."""
    groups: dict[tuple[str, str], list[PageCheck]] = {}
    for c in checks:
        groups.setdefault((c["machine"], c["family"]), []).append(c)
    out = []
    for (machine, family), members in sorted(groups.items()):
        last = [c["points"][-1] for c in members if c["points"]]
        verdicts: dict[str, int] = {}
        for p in last:
            verdicts[str(p[2])] = verdicts.get(str(p[2]), 0) + 1
        speedups = [s for s in (p[3] for p in last) if isinstance(s, (int, float)) and s > 0]
        gmean = math.exp(statistics.fmean(math.log(s) for s in speedups)) if speedups else None
        moved = sum(1 for c in members if any(cp["new"] for cp in c["change_points"]))
        changed = sum(1 for c in members if c["change_points"])
        out.append(
            PageFamily(
                machine=machine,
                family=family,
                checks=len(members),
                verdicts=verdicts,
                geomean_speedup=gmean,
                changed=changed,
                new_change_points=moved,
            )
        )
    return out


# Inside <script>, the HTML parser still looks for ``</script`` and, after ``<!--``, for ``<script``
# (the "script data double escaped" state, which swallowed the whole app: issue 37.7). JSON has
# these characters only inside strings, where ``\uXXXX`` means the same: with no ``<``, ``>`` or ``&``
# left, no id can end or re-open the element; U+2028/9 end a line in older JavaScript.
_SCRIPT_SAFE = str.maketrans({c: f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"})


def script_json(data: Any) -> str:
    """``data`` as JSON that is inert inside an HTML ``<script>`` element."""
    return json.dumps(data, default=str, allow_nan=False).translate(_SCRIPT_SAFE)


def render(data: Mapping[str, Any]) -> str:
    """The page with ``data`` inlined (:func:`script_json`: no string in it can end the script)."""
    template = (
        resources.files("pytest_convperf.reports").joinpath("assets").joinpath(TEMPLATE).read_text("utf-8")
    )
    payload = script_json(data)
    if DATA_MARK not in template:
        raise RuntimeError(f"{TEMPLATE} lost its data mark {DATA_MARK!r}")
    return template.replace(DATA_MARK, payload)


def build(source: str, out: Path, *, persist: int = PERSIST, window: int = WINDOW) -> tuple[list[str], int]:
    """The ``dashboard`` subcommand: (output lines, exit code)."""
    started = time.perf_counter()
    try:
        records, skipped, shown = load_records(source)
        data = page_data(records, source=shown, persist=persist, window=window)
    except Exception as exc:
        if not source_unreadable(exc):
            raise
        return [f"dashboard: {exc}"], 2
    out.mkdir(parents=True, exist_ok=True)
    page = out / "index.html"
    atomic_write(page, render(data))
    lines = [f"dashboard: {line}" for line in summary(skipped)]
    n_points = sum(len(c["points"]) for c in data["checks"])
    if not n_points:
        lines.append(f"dashboard: {shown} holds no usable run: the page says so")
    lines.append(
        f"dashboard: wrote {page} ({len(data['checks'])} checks, {n_points} runs, "
        f"{sum(len(c['change_points']) for c in data['checks'])} change points) in "
        f"{time.perf_counter() - started:.1f} s"
    )
    return lines, 0
