"""Markdown sections a suite adds to the report directory, safe under pytest-xdist.

A test or fixture calls ``convperf_report.section(name, markdown, title=...)`` (the
``convperf_report`` fixture is a :class:`ReportSections`). The section waits in the process until
the next test report is made, rides on that report's ``user_properties`` (so xdist ships it from a
worker to the controller), and the controller writes every file once, at session end
(:func:`write_sections`): sections of one file are joined in the order they arrived, under the file's
title. No process writes a file another writes, so workers cannot clobber each other's tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

SECTIONS_PROPERTY = "convperf_sections"


class SectionDict(TypedDict):
    """A section as it rides on a test report to the controller (``Section(**it)`` there)."""

    name: str
    markdown: str
    title: str | None


@dataclass(frozen=True)
class Section:
    """One piece of a report file: ``name`` is the file name (``depthwise.md``), ``title`` its heading."""

    name: str
    markdown: str
    title: str | None = None

    def to_dict(self) -> SectionDict:
        return SectionDict(name=self.name, markdown=self.markdown, title=self.title)


class ReportSections:
    """The ``convperf_report`` fixture: collects this process's sections until a report carries them."""

    def __init__(self) -> None:
        self.pending: list[Section] = []

    def section(self, name: str, markdown: str, *, title: str | None = None) -> None:
        """Add ``markdown`` to the report file ``name`` (a plain file name, e.g. ``models.md``).

        ``title`` becomes the file's ``#`` heading (written once, however many sections the file
        gets). The file is written at session end into the report directory (``--convperf-report``,
        else a temporary directory named in the terminal summary).
        """
        if not name or Path(name).name != name:
            raise ValueError(f"report section name {name!r} must be a plain file name such as 'models.md'")
        self.pending.append(Section(name, markdown, title))

    def take(self) -> list[SectionDict]:
        """The pending sections in their JSON-able form, and forget them (they ride on one report)."""
        out = [s.to_dict() for s in self.pending]
        self.pending.clear()
        return out


def write_sections(report_dir: Path, sections: list[Section]) -> list[Path]:
    """Write each file once: its title, then its sections in arrival order. Returns the paths written."""
    from pytest_convperf.core.files import atomic_write

    files: dict[str, list[Section]] = {}
    for s in sections:
        files.setdefault(s.name, []).append(s)
    paths = []
    for name, parts in files.items():
        title = next((p.title for p in parts if p.title), None)
        lines = [f"# {title}", ""] if title else []
        for part in parts:
            lines += [part.markdown.rstrip("\n"), ""]
        report_dir.mkdir(parents=True, exist_ok=True)
        path = report_dir / name
        atomic_write(path, "\n".join(lines))
        paths.append(path)
    return paths
