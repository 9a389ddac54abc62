"""The docs stand on their own (issue 26.6): README stays short and its options table names every
option and ini key ``pytest --help`` lists, every relative link in README and docs/ resolves, nothing
points at documents outside the repository, and every ``design.md §N`` the code cites is a section
of docs/design.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 200
# Being rewritten by the lead in the same issue; drop it from here when that lands.
NOT_YET: frozenset[str] = frozenset()
OUTSIDE = re.compile(r"shared/(?:reference|seeds|DESIGN)|\bDESIGN(?:\.md)? ?§")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE_SPAN = re.compile(r"`[^`]*`")  # `f[x](y)` in code is no link
CITED = re.compile(r"design\.md\)? §(\d+)")


def tracked(*patterns: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return [name for name in out.split() if name not in NOT_YET and (REPO / name).is_file()]


def test_readme_is_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to a page under docs/"


# Not for users: the fresh-process confirm's plan, passed by the plugin to its own subprocess.
INTERNAL_OPTIONS = frozenset({"--convperf-confirm-run"})


def test_readme_names_every_option() -> None:
    """Every ``--convperf*`` flag, and every ``convperf_*`` ini key that has no flag, is in README
    (read from ``pytest --help``, so options added anywhere, by any module, count)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    help_text = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    flags = set(re.findall(r"(--convperf[-a-z]*)", help_text)) - INTERNAL_OPTIONS
    inis = set(re.findall(r"^  (convperf_[a-z_]+)", help_text, re.MULTILINE))
    assert "--convperf" in flags and inis, "pytest --help lists no convperf options: is the plugin loaded?"
    ini_only = {key for key in inis if "--" + key.replace("_", "-") not in flags}
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = sorted(name for name in flags | ini_only if f"`{name}`" not in readme)
    assert not missing, f"README's options table does not name {missing}"


def test_relative_links_resolve() -> None:
    broken = []
    for name in ["README.md", *tracked("docs/*.md")]:
        for target in LINK.findall(CODE_SPAN.sub("", (REPO / name).read_text(encoding="utf-8"))):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not ((REPO / name).parent / target).exists():
                broken.append(f"{name}: {target}")
    assert not broken, f"links to missing files: {broken}"


def test_nothing_points_outside_the_repository() -> None:
    found = [
        f"{name}:{i}: {line.strip()}"
        for name in tracked("*.py", "*.md")
        if name != "tests/ci/test_doc_links.py"
        for i, line in enumerate((REPO / name).read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "references to documents outside the repository; cite docs/design.md:\n" + "\n".join(
        found
    )


def test_cited_design_sections_exist() -> None:
    sections = set(re.findall(r"^## (\d+)\. ", (REPO / "docs" / "design.md").read_text(), re.MULTILINE))
    missing = [
        f"{name}: §{n}"
        for name in tracked("*.py", "*.md")
        for n in CITED.findall((REPO / name).read_text(encoding="utf-8"))
        if n not in sections
    ]
    assert not missing, f"design.md has no such section: {missing}"
