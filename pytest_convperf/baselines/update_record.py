"""``convperf-update.md``, the review record of an update run: per written file, old -> new of every
entry (ratio, speedup, CI, times, env moves, reason), then the checks kept and refused.
:func:`pytest_convperf.baselines.updates.apply_updates` writes it before any baseline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pytest_convperf.baselines.store import Store
from pytest_convperf.core.markdown_safe import code_span
from pytest_convperf.core.results import ratio_text
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.judge.entry import Entry

if TYPE_CHECKING:
    from pytest_convperf.core.config import ConvperfConfig

# The review record of an update run (in the report folder, else the rootdir).
UPDATE_MD = "convperf-update.md"


def _entry_line(key: str, new: Entry, row: CheckRow | None) -> str:
    """One table line: the entry judged against (``row.baseline``) -> the one written."""
    old = row.baseline.to_yaml() if row is not None and row.baseline is not None else None
    ci = row.decision.delta_ci if row is not None and row.decision is not None else None
    new_y = new.to_yaml()
    if old:
        shift = math.expm1(math.log(new.time_ratio / float(old["time_ratio"])))
        old_us = old.get("us", {})
        change = (
            f"{ratio_text(float(old['time_ratio']))} -> {ratio_text(new_y['time_ratio'])} "
            f"({shift * 100:+.1f} %"
            + (f", 95 % CI {ci[0] * 100:+.1f} .. {ci[1] * 100:+.1f} %" if ci else "")
            + ")"
        )
        us = (
            f"cand {old_us.get('candidate', '?')} -> {new_y['us']['candidate']} us, "
            f"ref {old_us.get('reference', '?')} -> {new_y['us']['reference']} us"
        )
        env_old = old.get("env") or {}
        env_moves = [
            f"{k} {env_old.get(k)} -> {v}" for k, v in new_y["env"].items() if env_old.get(k) not in (None, v)
        ]
        env = "; ".join(env_moves) or "env unchanged"
    else:
        change = f"(new) -> {ratio_text(new_y['time_ratio'])}"
        us = f"cand {new_y['us']['candidate']} us, ref {new_y['us']['reference']} us"
        env = ", ".join(f"{k} {v}" for k, v in new_y["env"].items())
    if new.ref_runs > 1:  # recorded over fresh processes (night/fresh_record.py): say how many
        change += f", the median of {new.ref_runs} pytest processes"
    reason = (new.updated or {}).get("reason", "")
    # The key, the env values and the reason come from test code, the command line and the old file:
    # code spans (core.markdown_safe), so none pings, links or breaks the row.
    return (
        f"| {code_span(key, table=True)} | {row.verdict if row is not None else 'cliff'} | {change} | "
        f"{us} | {code_span(env, table=True)} | "
        f"{code_span(reason, table=True) if reason else ''} |"
    )


def render_update_md(
    cfg: ConvperfConfig,
    per_file: Mapping[tuple[str, str], Mapping[str, tuple[Entry, CheckRow | None]]],
    kept: Sequence[str],
    refused: Sequence[str],
    commit: str | None,
) -> str:
    """``convperf-update.md``: per written file, old -> new of every entry; then kept and refused checks."""
    lines = ["# convperf baseline update", ""]
    if cfg.reason:
        lines += [f"Reason: {code_span(cfg.reason)}", ""]
    if commit:
        lines += [f"Measured at commit {code_span(commit)}", ""]
    for (machine, module), entries in sorted(per_file.items()):
        lines += [
            f"## {code_span(Store(cfg.baselines_dir, machine).path(module))}",
            "",
            "| check | verdict | time_ratio (speedup): old -> new, delta, CI | us | env | reason |",
            "|---|---|---|---|---|---|",
        ]
        for key, (entry, row) in sorted(entries.items()):
            lines.append(_entry_line(key, entry, row))
        lines.append("")
    if not per_file:
        lines += ["No entry was written.", ""]
    if kept:
        lines += ["## Left as they are (inside their noise band)", ""]
        lines += [f"- {code_span(k)}" for k in kept] + [""]
    if refused:
        lines += (
            ["## Refused (slower, or implausibly faster, without --convperf-reason)", ""]
            + [f"- {code_span(k)}" for k in refused]
            + [""]
        )
    return "\n".join(lines)
