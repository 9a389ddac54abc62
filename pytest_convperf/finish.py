"""Session end, on the controller only: write planned baseline updates, convperf-update.md and reports.

Workers (``config.workerinput``) never write: their rows reach the controller on test reports,
and the controller writes each baseline file once, under its lock (see :mod:`baselines`).
"""

from __future__ import annotations

import datetime as _dt
import math
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_convperf.baselines import Entry, Store, atomic_write, parse_entry, read_file
from pytest_convperf.report import grouped, terminal_lines, write_reports

if TYPE_CHECKING:
    from pytest_convperf.session import ConvperfSession


def is_controller(config: pytest.Config) -> bool:
    """True in a plain run and in the xdist controller; False in an xdist worker."""
    return not hasattr(config, "workerinput")


def git(rootdir: Path, *args: str) -> str | None:
    """Output of a git command in ``rootdir``, or None outside a repository / without git."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=rootdir, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def commit_info(rootdir: Path) -> dict[str, Any]:
    """pytest-benchmark's ``commit_info``: id, branch, dirty (empty values outside git)."""
    status = git(rootdir, "status", "--porcelain")
    return {
        "id": git(rootdir, "rev-parse", "--short", "HEAD"),
        "branch": git(rootdir, "rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(status),
        "project": rootdir.name,
    }


def _entry_line(key: str, old: Mapping[str, Any] | None, new: Entry, row: Mapping[str, Any]) -> str:
    decision = row.get("decision") or {}
    ci = decision.get("delta_ci")
    new_y = new.to_yaml()
    if old:
        shift = math.expm1(math.log(new.time_ratio / float(old["time_ratio"])))
        old_us = old.get("us", {})
        change = (
            f"{old['time_ratio']:.4g} -> {new_y['time_ratio']:.4g} ({shift * 100:+.1f} %"
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
        change = f"(new) -> {new_y['time_ratio']:.4g}"
        us = f"cand {new_y['us']['candidate']} us, ref {new_y['us']['reference']} us"
        env = ", ".join(f"{k} {v}" for k, v in new_y["env"].items())
    reason = (new.updated or {}).get("reason", "")
    return (
        f"| `{key}` | {row.get('verdict', '')} | {change} | {us} | {env} | "
        f"{reason.replace('|', '/') if reason else ''} |"
    )


def apply_updates(session: ConvperfSession, rows: Sequence[Mapping[str, Any]], out_dir: Path) -> Path | None:
    """Write every planned update (grouped per file), then ``convperf-update.md``; None when no update ran."""
    cfg = session.cfg
    if not cfg.updating:
        return None
    commit = git(cfg.rootdir, "rev-parse", "--short", "HEAD")
    updated: dict[str, str] = {}
    if commit:
        updated["commit"] = commit
    if cfg.reason:
        updated["reason"] = cfg.reason
    per_file: dict[tuple[str, str], dict[str, tuple[Entry, Mapping[str, Any]]]] = {}
    kept: list[str] = []
    refused: list[str] = []
    for row in rows:
        plan = row.get("update") or {}
        action = plan.get("action")
        label = f"`{row.get('key')}` ({row.get('module')}): {plan.get('why', '')}"
        if action == "keep":
            kept.append(label)
        elif action == "refused":
            refused.append(label)
        if action != "write" or not plan.get("entry"):
            continue
        entry = parse_entry(str(row["key"]), plan["entry"]).with_(updated=dict(updated) or None)
        entries = per_file.setdefault((str(row["machine"]), str(row["module"])), {})
        if str(row["key"]) in entries:
            other = entries[str(row["key"])][1]
            raise pytest.UsageError(
                f"convperf: two tests record the same baseline key {row['key']!r} in "
                f"{row['machine']}/{row['module']}.yaml: {other.get('nodeid')} and {row.get('nodeid')}; "
                "rename one of them (baseline files are chosen by test file name, so two test files "
                "with the same name in different folders share one baseline file)"
            )
        entries[str(row["key"])] = (entry, row)
    lines = ["# convperf baseline update", ""]
    if cfg.reason:
        lines += [f"Reason: {cfg.reason}", ""]
    if commit:
        lines += [f"Measured at commit {commit}", ""]
    # Validate every target file before writing any: one bad file stops the update as a whole.
    for machine, module in per_file:
        read_file(Store(cfg.baselines_dir, machine).path(module), machine)
    for (machine, module), entries in sorted(per_file.items()):
        store = Store(cfg.baselines_dir, machine)
        store.write(module, {k: e for k, (e, _) in entries.items()})
        lines += [
            f"## {store.path(module)}",
            "",
            "| check | verdict | time ratio (old -> new, delta, CI) | us | env | reason |",
            "|---|---|---|---|---|---|",
        ]
        for key, (entry, row) in sorted(entries.items()):
            lines.append(_entry_line(key, row.get("baseline"), entry, row))
        lines.append("")
    if not per_file:
        lines += ["No entry was written.", ""]
    if kept:
        lines += ["## Left as they are (inside their noise band)", ""] + [f"- {k}" for k in kept] + [""]
    if refused:
        lines += ["## Refused (slower without --convperf-reason)", ""] + [f"- {k}" for k in refused] + [""]
    path = out_dir / "convperf-update.md"
    atomic_write(path, "\n".join(lines))
    return path


def machine_info(session: ConvperfSession, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """pytest-benchmark's ``machine_info`` with the device facts (GPU name, clocks, versions)."""
    info: dict[str, Any] = {"machine": rows[0].get("machine") if rows else None}
    try:
        device = session.device_info()
    except Exception as exc:  # the report must not fail because the device cannot be queried again
        info["device_error"] = str(exc)
        return info
    info.update(device="cuda" if device.is_cuda else "cpu", name=device.name, slug=device.slug)
    info.update(
        {k: v for k, v in device.facts.items() if isinstance(v, (str, int, float, bool)) or v is None}
    )
    return info


class Finisher:
    """The session-end work of one controller; ``ConvperfSession`` forwards its hooks here."""

    def __init__(self, session: ConvperfSession) -> None:
        self.session = session
        self.notes: list[str] = []
        self.update_md: Path | None = None
        self.done = False

    def sessionfinish(self) -> None:
        session = self.session
        if self.done or not is_controller(session.config) or not session.cfg.enabled:
            return
        self.done = True
        rows = list(session.rows)
        cfg = session.cfg
        out_dir = cfg.report_dir if cfg.report_dir is not None else cfg.rootdir
        self.update_md = apply_updates(session, rows, out_dir)
        if cfg.report_dir is not None and rows:
            when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            self.notes += write_reports(
                cfg.report_dir,
                rows,
                machine_info=machine_info(session, rows),
                commit_info=commit_info(cfg.rootdir),
                when=when,
            )

    def terminal_summary(self, terminalreporter: Any) -> None:
        session = self.session
        if not is_controller(session.config) or not session.cfg.enabled:
            return
        rows = session.rows
        if not rows and not self.update_md:
            return
        tr = terminalreporter
        counts = ", ".join(f"{v} {len(g)}" for v, g in grouped(rows))
        tr.write_sep("=", f"convperf: {counts}" if counts else "convperf")
        for line in terminal_lines(rows):
            tr.write_line(line)
        if self.update_md is not None:
            tr.write_line(f"baseline update written for review: {self.update_md}")
        if session.cfg.report_dir is not None and rows:
            tr.write_line(f"convperf report: {session.cfg.report_dir}")
        for note in self.notes:
            tr.write_line(f"note: {note}")
