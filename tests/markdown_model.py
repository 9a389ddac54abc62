"""A small model of the GitHub Markdown rules that decide whether hostile text stays inert: which
text lies outside code (CommonMark 4.5 fenced blocks, 6.1 code spans) and how a GFM table row splits
into cells (cmark-gfm's scanner: a backslash pairs with the ASCII punctuation after it, any other
``|`` ends a cell). Outside code, GitHub renders mentions, references, links, images and HTML."""

from __future__ import annotations

import re
import string

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_RUN = re.compile(r"`+")
# What renders when it stands outside code.
ACTIVE = re.compile(r"@\w|#\d|\]\(|\]\[|!\[|<[a-zA-Z!/?]|https?://|www\.|-->")


def outside_code(markdown: str) -> str:
    """The text of ``markdown`` that is neither in a fenced code block nor in a code span."""
    kept: list[str] = []
    fence: str | None = None
    for line in markdown.split("\n"):
        if fence is not None:
            run = line.strip(" ")
            closes = len(line) - len(line.lstrip(" ")) <= 3 and run == fence[0] * len(run)
            if closes and len(run) >= len(fence):
                fence = None
            continue
        opened = _FENCE_OPEN.match(line)
        if opened:
            fence = opened.group(1)
            continue
        kept.append(_without_spans(line))
    return "\n".join(kept)


def _without_spans(line: str) -> str:
    out, i = [], 0
    while i < len(line):
        run = _RUN.match(line, i)
        if run is None:
            out.append(line[i])
            i += 1
            continue
        n = len(run.group())
        close = next((m for m in _RUN.finditer(line, run.end()) if len(m.group()) == n), None)
        if close is None:  # an unmatched run is literal backticks
            out.append(run.group())
            i = run.end()
        else:
            out.append(" ")
            i = close.end()
    return "".join(out)


def table_cells(row: str) -> list[str]:
    """A GFM table row's cells, split as cmark-gfm splits them."""
    body = row.strip()
    if body.startswith("|"):
        body = body[1:]
    cells, cell, i = [], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] in string.punctuation:
            cell.append(body[i : i + 2])
            i += 2
            continue
        if ch == "|":
            cells.append("".join(cell))
            cell = []
        else:
            cell.append(ch)
        i += 1
    if cell and "".join(cell).strip():
        cells.append("".join(cell))
    return cells


def assert_inert(markdown: str) -> None:
    """Nothing outside code in ``markdown`` would render as a mention, reference, link, image or HTML."""
    found = ACTIVE.search(outside_code(markdown))
    assert found is None, f"{found.group()!r} renders outside code in:\n{markdown}"
