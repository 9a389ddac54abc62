"""The session's framing lines: the header's lines about this machine's baselines folder (files,
missing, unwritable) and, on a machine with none while the repository holds other machines' (the
H100's), that every check will read NEW and the short path: record, then compare; and what a
Ctrl-C kept (issue 24.4)."""

from __future__ import annotations

from pathlib import Path

from pytest_convperf.core.files import unwritable

RECORD_HINT = "pytest --convperf --convperf-update-baselines=new ARGS, then pytest --convperf ARGS"


def baseline_lines(folder: Path, *, updating: bool) -> list[str]:
    """What the run will find in (and may write to) this machine's baseline ``folder``."""
    lines = []
    if folder.is_dir():
        files = len(list(folder.glob("*.yaml")))
        lines.append(f"convperf: baselines {folder} ({files} file{'s' if files != 1 else ''})")
    else:
        how = (
            "this run records the checks it selects there"
            if updating
            else "checks report NEW; record them with --convperf-update-baselines=new"
        )
        lines.append(f"convperf: baselines {folder} (does not exist yet: {how})")
        others = other_machines(folder)
        if others and not updating:
            lines.append(
                f"convperf: the baselines in {folder.parent} are for {', '.join(others)}, not this machine "
                f"({folder.name}): every check will read NEW. Short path on this machine: {RECORD_HINT} "
                "(on a CPU, pick a few tests with -k: each check times for seconds)"
            )
    why = unwritable(folder)
    if why is not None:
        lines.append(
            f"convperf: baselines {folder}: {why}; --convperf-update-baselines would stop on it. "
            "Fix: --convperf-baselines=DIR with a folder you can write"
        )
    return lines


def other_machines(folder: Path) -> list[str]:
    """The machine folders beside ``folder`` that hold baseline files."""
    return sorted(p.name for p in folder.parent.glob("*") if p.is_dir() and any(p.glob("*.yaml")))


def interrupted_note(measured: int, report_dir: Path | None) -> str:
    """The line after Ctrl-C (pytest alone prints a bare ``KeyboardInterrupt``); with no check
    measured yet, the report folder gets a ``report.md`` that says so instead of staying empty."""
    if measured == 0:
        if report_dir is not None:
            report_dir.mkdir(parents=True, exist_ok=True)
            (report_dir / "report.md").write_text(
                "# convperf report\n\nThe session was interrupted (Ctrl-C) before any check was measured "
                "(the first seconds go to importing torch and collecting tests): nothing to report.\n"
            )
        return (
            "convperf: interrupted (Ctrl-C) before any check was measured: no result, no baseline written"
            + (f"; {report_dir}/report.md says so" if report_dir is not None else "")
        )
    where = f" are in {report_dir}" if report_dir is not None else " are summarised below"
    return f"convperf: interrupted (Ctrl-C): the {measured} check(s) measured before it{where}"
