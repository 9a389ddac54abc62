"""Change points over ``history.jsonl``: which check moved, at which commit, by how much.

``report.history_records`` appends one record per check per run. Here each check's series of
``ln(time ratio)`` (per machine and key, in time order; INCONCLUSIVE runs left out) is segmented
by PELT (Killick, Fearnhead & Eckley 2012, "Optimal detection of changepoints with a linear
computational cost", JASA 107:1590-1598) from ``ruptures`` (Truong, Oudre & Vayatis 2020,
"Selective review of offline change point detection methods", Signal Processing 167:107299),
with the l2 (mean shift) cost and a BIC-type penalty ``PENALTY * sigma^2 * ln(n)``, sigma the
robust night-to-night SD of the series (MAD of first differences / sqrt 2). PENALTY 5 (BIC's is
2): on flat series of 40 and 100 runs with 1 % noise it found 0 steps in 400 (3 found 8), and it
still finds a 3-sigma step (3 %) after 10 runs in 171 of 200 and a 5 % step on its 3rd run in 192.

ruptures over MongoDB's e-divisive (``signal-processing-algorithms``): ruptures ships wheels
(numpy and scipy only), while signal-processing-algorithms 2.1.6 is a source package that pins
numpy < 2, setuptools < 71 and Python ~3.11, and pulls gevent and structlog; it would not install
beside torch's numpy 2 here.

Persistence (docs/design.md §14): a step counts once it has persisted ``persist`` nights (default 3):
every segment holds at least that many runs, so a step in the last one or two nights is not
reported yet; it is new tonight when tonight is its ``persist``-th night. A step whose 95 % CI
(Welch, segment means) holds zero is not a change. Pure functions plus a CLI
(``python -m pytest_convperf history DIR``) and an optional plot.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_convperf.core.jsonl import Skipped, finite, read_objects, summary
from pytest_convperf.core.stats import t_quantile

PERSIST = 3
# A check 1e9 times slower or faster than its reference is no measurement: a record beyond it is
# corrupt, and one such value would dominate a segment's mean.
MAX_ABS_LN_RATIO = math.log(1e9)
PENALTY = 5.0
# Nights with a sub-0.1 % night-to-night SD still get a usable penalty (a flat series has sigma 0).
SIGMA_FLOOR = 1e-3
INSTALL_HINT = "change-point detection needs ruptures: pip install 'pytest-convperf[history]'"


@dataclass(frozen=True)
class Point:
    """One run of one check."""

    when: str
    commit: str | None
    ln_ratio: float
    verdict: str | None


@dataclass(frozen=True)
class ChangePoint:
    """A persisted step in one check's time ratio; ``step`` and ``ci`` are relative (0.1 = 10 % slower)."""

    machine: str
    key: str
    index: int
    commit: str | None
    when: str
    ratio_before: float
    ratio_after: float
    step: float
    ci: tuple[float, float]
    n_before: int
    n_after: int
    new: bool

    def line(self) -> str:
        tag = " NEW in this run" if self.new else ""
        return (
            f"{self.key} [{self.machine}]: step {self.step * 100:+.1f} % "
            f"(95 % CI {self.ci[0] * 100:+.1f} .. {self.ci[1] * 100:+.1f} %) at commit "
            f"{self.commit or 'unknown'} on {self.when}; time ratio {self.ratio_before:.4g} -> "
            f"{self.ratio_after:.4g} ({self.n_before} runs before, {self.n_after} after){tag}"
        )


Series = dict[tuple[str, str], list[Point]]


def read_history(path: Path) -> tuple[Series, list[Skipped]]:
    """Series per (machine, key) from a ``history.jsonl`` file or a report directory holding one,
    and the lines left out as unreadable (:mod:`pytest_convperf.core.jsonl`) or not a usable record
    (:func:`record_problem`): the nightly workflow downloads this file, and one bad line must not
    cost the others."""
    file = path / "history.jsonl" if path.is_dir() else path
    if not file.exists():
        raise FileNotFoundError(
            f"{file} not found; runs append to it with pytest --convperf --convperf-report={path}"
        )
    records, skipped = read_history_records(file)
    return series_from_records(records), sorted(skipped, key=lambda s: s.line)


def source_unreadable(exc: Exception) -> bool:
    """Whether ``exc`` says a history source could not be read: no such file, the store's packages
    missing, or the store's ``StoreUnavailable`` (its URL and fix in its message); the ``history``
    and ``dashboard`` subcommands print it in one line and exit 2. ``StoreUnavailable`` is matched by
    name: importing it would import SQLAlchemy, which a report-folder user need not have."""
    return isinstance(exc, (FileNotFoundError, ImportError)) or type(exc).__name__ == "StoreUnavailable"


def read_history_records(file: Path) -> tuple[list[dict[str, Any]], list[Skipped]]:
    """The usable history records of ``file`` (a ``history.jsonl``), and the lines left out: those
    :func:`read_objects` cannot read, then those with a :func:`record_problem`."""
    objects, skipped = read_objects(file)
    records: list[dict[str, Any]] = []
    for n, rec in objects:
        problem = record_problem(rec)
        if problem is None:
            records.append(rec)
        else:
            skipped.append(Skipped(file, n, problem))
    return records, skipped


def is_store_url(target: str | Path) -> bool:
    """Whether a ``history``/``dashboard`` argument is a results store URL, not a folder or file."""
    return "://" in str(target)


def read_store_history(url: str) -> tuple[Series, list[str]]:
    """Series per (machine, key) from a results store (:mod:`pytest_convperf.resultsdb`), and the
    stored results left out (named by the store and row id), as :func:`read_history` does for a file."""
    from pytest_convperf.resultsdb.db import open_reader, read_records, shown

    engine = open_reader(url)  # reading never writes: no migration, no new file
    try:
        stored = read_records(
            engine, columns=("id", "machine", "key", "when", "commit", "verdict", "ln_ratio")
        )
    finally:
        engine.dispose()
    records: list[dict[str, Any]] = []
    skipped: list[str] = []
    for rec in stored:
        problem = record_problem(rec)
        if problem is None:
            records.append(rec)
        else:
            skipped.append(f"{shown(url)}: result {rec['id']}: {problem}; result skipped")
    return series_from_records(records), skipped


def read_any(target: str | Path) -> tuple[Series, Sequence[object]]:
    """:func:`read_store_history` for a URL, :func:`read_history` for a folder or file."""
    return read_store_history(str(target)) if is_store_url(target) else read_history(Path(target))


def record_problem(rec: Mapping[str, Any]) -> str | None:
    """Why a history record cannot be a point of a series (a wrong type, a NaN), or None.

    A record without a ratio (a correctness failure) is no problem: it is simply not a point.
    """
    if not isinstance(rec.get("key"), str) or not rec["key"]:
        return "no key (a non-empty string)"
    for name in ("machine", "verdict", "when", "commit"):
        if rec.get(name) is not None and not isinstance(rec[name], str):
            return f"{name} is a {type(rec[name]).__name__}, not a string"
    ln = rec.get("ln_ratio")
    if ln is not None:
        value = finite(ln)
        if value is None:
            return f"ln_ratio {ln!r} is not a finite number"
        if abs(value) > MAX_ABS_LN_RATIO:
            return f"ln_ratio {value:g} is no measured time ratio (over 1e9 x either way)"
    return None


def usable_record(rec: Mapping[str, Any]) -> bool:
    """Whether a record is a point of its check's series: a ratio, a verdict that timed, no problem."""
    return (
        rec.get("ln_ratio") is not None
        and rec.get("verdict") not in ("INCONCLUSIVE", "CORRECTNESS_FAIL")
        and record_problem(rec) is None
    )


def series_from_records(records: Iterable[Mapping[str, Any]]) -> Series:
    """Group history records by (machine, key), in time order; unusable runs and records with a
    :func:`record_problem` are left out."""
    out: Series = {}
    for rec in records:
        if not usable_record(rec):
            continue
        ln = rec["ln_ratio"]
        ident = (str(rec.get("machine") or "unknown"), str(rec["key"]))
        out.setdefault(ident, []).append(
            Point(str(rec.get("when") or ""), rec.get("commit"), float(ln), rec.get("verdict"))
        )
    for points in out.values():
        points.sort(key=lambda p: p.when)
    return out


def night_sigma(values: Sequence[float]) -> float:
    """Robust night-to-night SD: 1.4826 MAD of first differences / sqrt(2), floored."""
    diffs = [b - a for a, b in itertools.pairwise(values)]
    if len(diffs) < 2:
        return SIGMA_FLOOR
    med = statistics.median(diffs)
    mad = statistics.median(abs(d - med) for d in diffs)
    return max(1.4826 * mad / math.sqrt(2), SIGMA_FLOOR)


def _cumsum_l2() -> Any:
    """ruptures' l2 cost (a segment's sum of squared deviations from its mean) from prefix sums:
    O(1) per segment instead of a ``var`` over the slice. PELT asks for ~n^2/2 segments on a long
    flat series; with ``CostL2`` a check's 200 runs took ~1 s, so 500 checks of 1,000 runs (the
    dashboard of a store) would take hours. Same costs up to rounding (the signal is centred
    first), so the same segmentation (tests/unit/night/test_history.py compares them)."""
    import numpy as np
    from ruptures.base import BaseCost

    class CumsumL2(BaseCost):  # type: ignore[misc]
        model = "l2"

        def __init__(self) -> None:
            self.min_size = 1
            self.s1: Any = None
            self.s2: Any = None
            self.signal: Any = None  # PELT reads its shape

        def fit(self, signal: Any) -> CumsumL2:
            x = np.asarray(signal, dtype=float).reshape(len(signal), -1)
            self.signal = x
            x = x - x.mean(axis=0)
            self.s1 = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
            self.s2 = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x * x, axis=0)])
            return self

        def error(self, start: int, end: int) -> float:
            from ruptures.exceptions import NotEnoughPoints

            n = end - start
            if n < self.min_size:
                raise NotEnoughPoints
            total = self.s1[end] - self.s1[start]
            return float((self.s2[end] - self.s2[start] - total * total / n).sum())

    return CumsumL2()


def breakpoints(values: Sequence[float], *, persist: int = PERSIST, penalty: float = PENALTY) -> list[int]:
    """Indices where a new segment starts (PELT, l2 cost, every segment >= ``persist`` runs)."""
    try:
        import numpy as np
        import ruptures
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    n = len(values)
    if n < 2 * persist:
        return []
    sigma = night_sigma(values)
    algo = ruptures.Pelt(custom_cost=_cumsum_l2(), min_size=persist, jump=1).fit(
        np.asarray(values, dtype=float)
    )
    ends = algo.predict(pen=penalty * sigma * sigma * math.log(n))
    return [int(e) for e in ends[:-1]]


def _step(before: Sequence[float], after: Sequence[float]) -> tuple[float, float, float]:
    """Mean shift in ln and its 95 % Welch half-width."""
    mb, ma = statistics.fmean(before), statistics.fmean(after)
    vb = statistics.variance(before) / len(before) if len(before) > 1 else 0.0
    va = statistics.variance(after) / len(after) if len(after) > 1 else 0.0
    se2 = vb + va
    if se2 <= 0:
        return ma - mb, 0.0, 0.0
    denom = (vb * vb / (len(before) - 1) if vb else 0.0) + (va * va / (len(after) - 1) if va else 0.0)
    df = se2 * se2 / denom if denom > 0 else math.inf
    return ma - mb, t_quantile(0.975, df) * math.sqrt(se2), se2


def change_points(
    machine: str, key: str, points: Sequence[Point], *, persist: int = PERSIST, penalty: float = PENALTY
) -> list[ChangePoint]:
    """The persisted steps of one check's series (see the module docstring for the rules)."""
    values = [p.ln_ratio for p in points]
    cuts = breakpoints(values, persist=persist, penalty=penalty)
    bounds = [0, *cuts, len(values)]
    out = []
    for i, cut in enumerate(cuts):
        before = values[bounds[i] : cut]
        after = values[cut : bounds[i + 2]]
        if len(after) < persist:  # min_size already keeps this; the rule is stated here too
            continue
        step, half, _ = _step(before, after)
        if abs(step) <= half:
            continue
        out.append(
            ChangePoint(
                machine=machine,
                key=key,
                index=cut,
                commit=points[cut].commit,
                when=points[cut].when,
                ratio_before=math.exp(statistics.fmean(before)),
                ratio_after=math.exp(statistics.fmean(after)),
                step=math.expm1(step),
                ci=(math.expm1(step - half), math.expm1(step + half)),
                n_before=len(before),
                n_after=len(after),
                new=cut + persist == len(values),
            )
        )
    return out


def all_change_points(series: Series, *, persist: int = PERSIST) -> list[ChangePoint]:
    """Change points of every check, by machine and key."""
    out: list[ChangePoint] = []
    for (machine, key), points in sorted(series.items()):
        out.extend(change_points(machine, key, points, persist=persist))
    return out


# Runs per check a store's or the dashboard's change points are looked for in: PELT's cost grows
# with the square of a series' length (docs/dashboard.md), and a store holds years.
WINDOW = 120


def recent_change_points(
    series: Series, *, persist: int = PERSIST, window: int = WINDOW
) -> list[ChangePoint]:
    """:func:`all_change_points` over each check's last ``window`` runs (0: all), with indices in the
    whole series; ``new`` means the same (tonight is the step's ``persist``-th run)."""
    recent = {ident: points[-window:] if window else points for ident, points in series.items()}
    return [
        replace(c, index=c.index + len(series[(c.machine, c.key)]) - len(recent[(c.machine, c.key)]))
        for c in all_change_points(recent, persist=persist)
    ]


def new_store_change_points(
    url: str, machines: Iterable[str], *, persist: int = PERSIST
) -> list[ChangePoint]:
    """The change points new in this run among ``machines``' checks in a results store."""
    series, _ = read_store_history(url)
    wanted = set(machines)
    mine = {ident: points for ident, points in series.items() if ident[0] in wanted}
    return [c for c in recent_change_points(mine, persist=persist) if c.new]


def plot_history(
    series: Series, cps: Sequence[ChangePoint], path: Path, *, max_checks: int = 24
) -> str | None:
    """``history.png``: time ratio per run for each check (steps first), change points marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "history.png not written: matplotlib is not installed (pip install 'pytest-convperf[plot]')"
    if not series:
        return "history.png not written: no usable runs in the history"
    moved = {(c.machine, c.key) for c in cps}
    idents = sorted(series, key=lambda k: (k not in moved, k))[:max_checks]
    fig, axes = plt.subplots(len(idents), 1, figsize=(9, 1.8 * len(idents) + 0.5), squeeze=False)
    for ax, ident in zip(axes[:, 0], idents):
        points = series[ident]
        ax.plot(range(len(points)), [math.exp(p.ln_ratio) for p in points], "o-", markersize=3)
        for c in cps:
            if (c.machine, c.key) == ident:
                ax.axvline(c.index - 0.5, color="C3", linestyle="--")
                ax.annotate(f"{c.step * 100:+.1f} %", (c.index, c.ratio_after), color="C3", fontsize=7)
        ax.set_title(f"{ident[1]} [{ident[0]}]", fontsize=8)
        ax.set_ylabel("time ratio", fontsize=7)
    axes[-1, 0].set_xlabel("run (oldest first); dashed: change point")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    if len(series) > max_checks:
        return f"history.png shows {max_checks} of {len(series)} checks (those with change points first)"
    return None


def run(
    directory: Path | str, *, persist: int = PERSIST, plot: bool = True, out: Path | None = None
) -> tuple[list[str], int]:
    """The ``history`` subcommand over a report folder, a ``history.jsonl`` or a store URL:
    (output lines, exit code). Skipped lines are named first. ``history.png`` goes beside the
    history, or to ``out`` (a store's: the current folder when none is given)."""
    try:
        series, skipped = read_any(directory)
        cps = all_change_points(series, persist=persist)
    except Exception as exc:
        if not source_unreadable(exc):
            raise
        return [f"history: {exc}"], 2
    lines = [f"history: {line}" for line in summary(skipped)]
    lines += [c.line() for c in cps]
    if not cps:
        lines.append(f"history: no change points in {len(series)} checks (steps count after {persist} runs)")
    if plot:
        if out is None:
            here = Path(".") if is_store_url(directory) else Path(directory)
            out = (here if here.is_dir() else here.parent) / "history.png"
        note = plot_history(series, cps, out)
        lines.append(f"history: {note}" if note else f"history: wrote {out}")
    return lines, 0
