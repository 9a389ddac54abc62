"""Hostile text in Markdown (issue 37.8): a code span stays one inert cell, a code block stays
closed, whatever the text (Hypothesis over hostile strings), checked against the model of GitHub's
rules in ``tests/markdown_model.py``, which is itself checked on plain Markdown that does render."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_convperf.core.markdown_safe import SPAN_LIMIT, code_block, code_span, one_line
from tests.markdown_model import ACTIVE, assert_inert, outside_code, table_cells

PIECES = [
    "@octocat",
    "@org/team",
    "#12",
    "GH-3",
    "[x](https://evil.example)",
    "![i](https://evil.example/i.png)",
    "<img src=x onerror=alert(1)>",
    "<!--",
    "-->",
    "--!>",
    "`",
    "``",
    "```",
    "~~~",
    "|",
    "\\",
    "\\|",
    "\n",
    "\r\n",
    "\t",
    "\u2028",
    "\u2029",
    "\x00",
    "www.evil.example",
    "https://evil.example",
    "*",
    "_",
    "&amp;",
    "\u202e",
    " ",
    "a",
]
hostile = st.lists(st.sampled_from(PIECES) | st.text(max_size=5), max_size=25).map("".join)


@settings(max_examples=300, deadline=None)
@given(hostile)
@example("a --> @octocat #1 [l](https://e) ![i](https://e/i.png)\n| ``` \\|")
def test_a_code_span_is_one_inert_cell_on_one_line(text: str) -> None:
    span = code_span(text, table=True)
    assert "\n" not in span and "\r" not in span and "\u2028" not in span and "\u2029" not in span
    row = f"| {span} | after |"
    assert len(table_cells(row)) == 2, row  # the row keeps its cells
    assert_inert(row)
    assert outside_code(row).strip(" |") == "after"


@settings(max_examples=300, deadline=None)
@given(hostile)
def test_a_code_block_holds_its_text_and_stays_closed(text: str) -> None:
    doc = f"before\n\n{code_block(text)}\n\nafter @ping"
    assert outside_code(doc).split() == ["before", "after", "@ping"]


def test_spans_are_bounded() -> None:
    span = code_span("x" * 100_000)
    assert len(span) < SPAN_LIMIT + 60 and "99700 more characters" in span
    assert len(code_block("y\n" * 100_000)) < 4100


def test_a_span_keeps_plain_text_readable() -> None:
    assert code_span("test_dw::test_a[n8-c64]") == "` test_dw::test_a[n8-c64] `"
    assert one_line("a\nb\u2028c") == "a\\nb\\u2028c"


def test_the_model_sees_what_renders() -> None:
    # Negative controls: raw hostile text, a short fence and a bare pipe are caught by the model.
    for raw in ("@octocat", "see #12", "[l](u)", "![i](u)", "<img src=x>", "a --> b"):
        assert ACTIVE.search(outside_code(raw)), raw
    assert ACTIVE.search(outside_code("`` a ``` @x ``` b ``")) is None
    assert ACTIVE.search(outside_code("` a `` @x")), "an unclosed span is text"
    assert outside_code("````\n``` \n@x\n````").strip() == "", "a shorter run inside does not close"
    assert "@x" in outside_code("```\n```` \n@x"), "a longer run closes"
    assert "@x" in outside_code("```\n@y\n```\n@x")
    assert len(table_cells("| ` a \\\\| b ` | c |")) == 3, "an escaped backslash leaves the pipe bare"
    assert len(table_cells("| ` a \\| b ` | c |")) == 2
