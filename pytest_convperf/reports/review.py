"""Render a pull request's baseline changes as Markdown for review: old -> new ratio of every check.

    python -m pytest_convperf review BASE_REV [HEAD_REV]

compares every ``baselines/**/*.yaml`` between two git revisions (``HEAD_REV`` defaults to the
work tree) and prints one table per changed file: check, old and new time ratio (speedup),
the change, what moved in the environment, and the recorded reason. The same facts as the
``convperf-update.md`` that ``--convperf-update-baselines`` writes, rebuilt from the YAML itself,
so a hand-edited baseline gets the same review. Files are read with the store's safe loader
(:mod:`pytest_convperf.baselines.baseline_yaml`: duplicate keys refused, ``1e6`` a number).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from pytest_convperf.baselines import baseline_yaml
from pytest_convperf.core.markdown_safe import code_span
from pytest_convperf.core.results import ratio_text

ROOT = "baselines"


class ReviewError(Exception):
    """A review that cannot run (outside a git repository): one line naming the fix."""


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def _require_repository() -> None:
    try:
        subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True, text=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        raise ReviewError(
            f"review: {Path.cwd()} is not inside a git repository (or git is missing); review compares "
            "the baseline files of two git revisions: run it in a clone of the repository"
        ) from None


def changed_files(base: str, head: str | None) -> list[str]:
    """Baseline YAML files that differ between ``base`` and ``head`` (or the work tree)."""
    revs = [f"{base}...{head}"] if head else [base]
    names = git("diff", "--name-only", *revs, "--", ROOT).splitlines()
    return sorted(n for n in names if n.endswith((".yaml", ".yml")))


def load(rev: str | None, path: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(benchmarks, error)`` of one file at a revision (``None`` rev: the work tree)."""
    try:
        text = git("show", f"{rev}:{path}") if rev else Path(path).read_text(encoding="utf-8")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None, None  # the file does not exist on that side
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte at offset {exc.start})"
    try:
        data = baseline_yaml.load(text)
    except yaml.YAMLError as exc:
        return None, f"not valid YAML: {exc}"
    if not isinstance(data, Mapping) or not isinstance(data.get("benchmarks", {}), Mapping):
        return None, "not a convperf baseline file (expected a mapping with 'benchmarks')"
    return dict(data.get("benchmarks") or {}), None


def _ratio(entry: Mapping[str, Any] | None) -> float | None:
    value = (entry or {}).get("time_ratio")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _fmt(ratio: float | None) -> str:
    return "-" if ratio is None else ratio_text(ratio)


def _env_change(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> str:
    before, after = (old or {}).get("env") or {}, (new or {}).get("env") or {}
    moved = [
        f"{k} {before.get(k, '-')} -> {after.get(k, '-')}"
        for k in sorted({*before, *after})
        if before.get(k) != after.get(k)
    ]
    return "; ".join(moved) or "-"


def _cell(text: object) -> str:
    """A table cell of text from a baseline file (a key, a reason, env values): a code span, so no
    key or reason pings, links or breaks the table (:mod:`pytest_convperf.core.markdown_safe`)."""
    return code_span(text, table=True) if text not in ("", "-") else str(text)


def file_section(path: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """The table of one file: added, removed and changed entries (unchanged ones are left out)."""
    old, new = old or {}, new or {}
    lines = [f"### {code_span(path)}", ""]
    rows: list[str] = []
    for key in sorted({*old, *new}):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        ra, rb = _ratio(a), _ratio(b)
        if a is None:
            change = "added"
        elif b is None:
            change = "**removed**"
        elif ra and rb:
            pct = (rb / ra - 1) * 100
            change = f"{pct:+.1f} % time" + (" (slower)" if pct > 0 else " (faster)" if pct < 0 else "")
        else:
            change = "changed"
        reason = ((b or {}).get("updated") or {}).get("reason", "")
        rows.append(
            f"| {_cell(key)} | {_fmt(ra)} | {_fmt(rb)} | {change} | {_cell(_env_change(a, b))} "
            f"| {_cell(reason)} |"
        )
    if not rows:
        return [*lines, "Only formatting or metadata changed.", ""]
    return [
        *lines,
        "| check | old time_ratio (speedup) | new time_ratio (speedup) | change | env moved | reason |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def review(base: str, head: str | None) -> str:
    """The whole comment: one section per changed baseline file."""
    _require_repository()
    files = changed_files(base, head)
    lines = [
        "## convperf baseline changes",
        "",
        "time_ratio = t_candidate / t_reference (lower is faster), as the baseline files store it; "
        "speedup = 1 / time_ratio, as the terminal says it.",
        "",
    ]
    if not files:
        return "\n".join([*lines, "No baseline file changed.", ""])
    # Like the pull request's diff: compare with the merge base, not the base branch's tip.
    old_rev = git("merge-base", base, head).strip() if head else base
    for path in files:
        old, old_err = load(old_rev, path)
        new, new_err = load(head, path)
        if old_err or new_err:
            lines += [f"### {code_span(path)}", "", f"Could not read it: {code_span(old_err or new_err)}", ""]
            continue
        if new is None:
            lines += [f"### {code_span(path)}", "", f"**File removed** ({len(old or {})} entries).", ""]
            continue
        lines += file_section(path, old, new)
    return "\n".join(lines)
