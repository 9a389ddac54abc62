"""Hostile text (test ids, ``--convperf-reason``, messages, file names) inside the Markdown that
GitHub renders: issues, pull-request comments, ``report.md`` in the job summary, ``convperf-update.md``,
``ab.md``. A test id is anything a parametrize id may hold: ``@team`` pings, ``#12`` links an issue,
``[x](u)`` and ``![x](u)`` make a link and an image, ``-->`` closes an HTML comment, a newline ends a
table row or opens a code fence.

Every such value goes in as code: GitHub renders nothing inside a code span or a fenced block (no
mention, no reference, no link, no image, no HTML), and its mention and reference filters skip
``<code>``. Backslash escapes would not do: they stop links and emphasis, but the mention filter
runs on the rendered text, after the backslash is gone.

- :func:`code_span`: one line, bounded, in a backtick run longer than any inside it (CommonMark
  6.1); control characters (newline, CR, tab, U+2028/9) shown as ``\\n``-style escapes; in a
  table cell ``|`` is escaped so the row keeps its cells (GFM tables: a ``\\`` pairs with the
  character after it, so a backslash run before a ``|`` is doubled to keep the pipe escaped).
- :func:`code_block`: many lines, bounded, in a backtick fence longer than any backtick run inside,
  so no line of the text can close it.
"""

from __future__ import annotations

import re
import unicodedata

# A test id of a few hundred characters is still readable; past that only its start is useful.
SPAN_LIMIT = 300
BLOCK_LIMIT = 4000
_BACKTICKS = re.compile(r"`+")
_PIPE = re.compile(r"(\\*)\|")


def bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def _visible(ch: str) -> str:
    """A control or line/paragraph separator as a visible escape; any other character as it is."""
    if ch in "\n\r\t":
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch]
    if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
        return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
    return ch


def one_line(text: object, limit: int = SPAN_LIMIT) -> str:
    """``str(text)`` bounded, its control characters made visible escapes: a single line."""
    return "".join(_visible(ch) for ch in bounded(str(text), limit))


def _fence_for(text: str, shortest: int) -> str:
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    return "`" * max(shortest, longest + 1)


def code_span(text: object, *, table: bool = False, limit: int = SPAN_LIMIT) -> str:
    """``text`` as inline code on one line (``table``: safe inside a GFM table cell)."""
    inner = one_line(text, limit)
    if table:
        inner = _PIPE.sub(lambda m: m.group(1) * 2 + "\\|", inner)
    fence = _fence_for(inner, 1)
    # CommonMark strips one space each side when both are there: pad so the text keeps its own
    # edges and a backtick at either end cannot join the fence.
    return f"{fence} {inner} {fence}"


def code_block(text: object, *, limit: int = BLOCK_LIMIT) -> str:
    """``text`` (many lines) as a fenced code block that nothing in it can close."""
    inner = bounded(str(text), limit).replace("\r\n", "\n").replace("\r", "\n")
    inner = "".join(ch if ch in "\n\t" else _visible(ch) for ch in inner)
    fence = _fence_for(inner, 3)
    return f"{fence}text\n{inner}\n{fence}"
