"""The text of a report's numbers: speedups with their CIs, deltas, times in readable units, the
display cells of one :class:`~pytest_convperf.reports.report_row.ReportRow` and the roofline note.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_convperf.reports.report_row import ReportRow, lopsided


def speedup_text(r: ReportRow) -> str:
    """``speedup 0.366x [0.287, 0.378]``, saying so when the median sits near an end of its CI."""
    text = f"speedup {ratio_x(r.speedup)} {_ci(r.speedup_ci)}".strip()
    return text + " (median near its CI's end: rounds skewed or in two groups)" if lopsided(r) else text


def ratio_x(value: float | None) -> str:
    return f"{value:.3f}x" if value is not None else "-"


def _ci(ci: tuple[float, float] | None, pct: bool = False) -> str:
    if ci is None:
        return ""
    if pct:
        return f"[{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]"
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _pct(value: float | None) -> str:
    return f"{value * 100:+.1f} %" if value is not None else "-"


def _usf(value: float | None) -> str:
    return fixed(value) if value is not None else "-"


def fixed(value: float) -> str:
    """Four significant digits without exponent forms: ``11170``, ``355.1``, ``0.04123``."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{round(value, decimals):.{decimals}f}"


def fmt_time(us: float | None) -> str:
    """A time given in microseconds, in a readable unit: ``355.1 us``, ``11.17 ms``, ``2.300 s``."""
    if us is None:
        return "-"
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if abs(us) >= scale:
            return f"{fixed(us / scale)} {unit}"
    return f"{fixed(us)} us"


def cells(r: ReportRow) -> dict[str, str]:
    """The display columns of one row."""
    return {
        "check": (f"{r.module}::{r.key}" if r.module else r.key)
        + (" (deterministic)" if r.deterministic else ""),
        "speedup": f"{ratio_x(r.speedup)} {_ci(r.speedup_ci)}".strip(),
        "baseline": ratio_x(r.baseline_speedup),
        "delta": f"{_pct(r.delta)} {_ci(r.delta_ci, pct=True)}".strip(),
        "candidate us": _usf(r.candidate_us),
        "reference us": _usf(r.reference_us),
        "MDE": f"{r.mde:.1%}" if r.mde is not None else "-",
        "update": r.update or "",
        "roofline (copy BW)": f"{r.roofline:.0%}" if r.roofline is not None else "-",
        "roofline (spec)": f"{r.roofline_spec:.0%}" if r.roofline_spec is not None else "-",
    }


def roofline_note(rows: Sequence[ReportRow]) -> str | None:
    """What the two roofline columns mean, naming the spec peaks used (or why there is none)."""
    specs = sorted({r.spec for r in rows if r.spec})
    if not any(r.roofline is not None for r in rows):
        return None
    return (
        "roofline: the candidate's median against the time to move the problem's minimum bytes at the "
        "measured device copy bandwidth (copy BW) and at the datasheet peak (spec: "
        + ("; ".join(specs) if specs else "none")
        + ")"
    )
