"""Hostile JSON-lines files (issue 25.3): what a crash, a download or a hand edit can leave in
``history.jsonl`` or ``rows.journal.jsonl``. Each case holds the good records too, so a reader can
be held to keep them: ``name -> (file bytes, how many good records it holds)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

# What a field may hold instead of what it should (a hand edit, another tool's writer).
WRONG_VALUES: dict[str, Any] = {
    "int": 12345,
    "huge int": 10**400,
    "string": "not a number",
    "list": [1, 2],
    "object": {"a": 1},
    "null": None,
    "bool": True,
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
    "huge float": 1e308,
    "lone surrogate": "\ud800",
}


def _line(record: Mapping[str, Any]) -> bytes:
    # json.dumps writes NaN/Infinity as Python reads them, and a surrogate as an \u escape.
    return json.dumps(record).encode()


def files(good: Sequence[Mapping[str, Any]]) -> dict[str, tuple[bytes, int]]:
    """Whole-file cases around ``good`` (at least one record)."""
    lines = [_line(r) for r in good]
    body = b"\n".join(lines) + b"\n"
    n = len(good)
    first = lines[0]
    return {
        "empty file": (b"", 0),
        "blank lines only": (b"\n\n   \n\t\n", 0),
        "cut-off last line": (body + first[: len(first) // 2], n),
        "cut-off line in the middle": (first[:30] + b"\n" + body, n),
        "invalid JSON": (body + b"{not json at all}\n", n),
        "a JSON array": (b"[1, 2, 3]\n" + body, n),
        "a JSON string, number, null, true": (b'"text"\n5\nnull\ntrue\n' + body, n),
        "NUL bytes (a crashed write)": (body + b"\x00" * 64 + b"\n", n),
        "not UTF-8": (b"\xff\xfe\x00\x81 garbage\n" + body, n),
        "Latin-1 text": (_line({**good[0], "key": "caf"}).replace(b"caf", b"caf\xe9") + b"\n" + body, n),
        "lone surrogate": (body + _line({**good[0], "key": "k\ud800"}) + b"\n", n),
        "deeply nested": (b"[" * 100_000 + b"\n" + body, n),
        "huge line (17 MiB)": (b'{"key": "' + b"a" * (17 * 2**20) + b'"}\n' + body, n),
        "int of 5000 digits": (body + first[:-1] + b', "x": ' + b"9" * 5000 + b"}\n", n),
        "empty object": (b"{}\n" + body, n),
        "CRLF line ends": (body.replace(b"\n", b"\r\n"), n),
        "BOM at the start": (b"\xef\xbb\xbf" + body, n),
        "duplicated good lines": (body + body, 2 * n),
    }


def field_cases(good: Sequence[Mapping[str, Any]]) -> dict[str, bytes]:
    """One file per (field of ``good[0]``, wrong value, or the field missing), after the good records."""
    body = b"\n".join(_line(r) for r in good) + b"\n"
    out = {}
    for name in good[0]:
        for label, value in WRONG_VALUES.items():
            out[f"{name} = {label}"] = body + _line({**good[0], name: value}) + b"\n"
        out[f"{name} missing"] = body + _line({k: v for k, v in good[0].items() if k != name}) + b"\n"
    return out
