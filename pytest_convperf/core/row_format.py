"""The version of a result row's dict form (xdist, the journal, ``rows.json``) and its conversions.

Format 2 holds each thing once: the row's ``env`` (format 1 also stored it in the row's ``facts``
and the comparison's facts) and its ``verdict`` and ``message`` (format 1 also stored them in the
row's ``decision``). A format-1 row is converted when read; a newer one is refused with the fix.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_convperf.core.json_fields import JsonObject

ROW_FORMAT = 2


def current_format(data: JsonObject) -> JsonObject:
    """A row dict in :data:`ROW_FORMAT`: format 1 (no ``format`` key) converted, a newer one a
    ``ValueError`` (the reader names the file and line)."""
    version = data.get("format", 1)
    if not isinstance(version, int):
        raise ValueError(f"row format {version!r} is not a format number: the row is corrupt")
    if version > ROW_FORMAT:
        raise ValueError(
            f"row format {version!r} is newer than this pytest-convperf reads ({ROW_FORMAT}): "
            "upgrade pytest-convperf"
        )
    if version == ROW_FORMAT:
        return data
    # Format 1: the row's own env is kept, its copies in the facts dropped. The decision's verdict
    # and message are left as they were (a format-1 reader's rows say what they said).
    out = dict(data)
    facts = data.get("facts")
    if isinstance(facts, Mapping):
        out["facts"] = {k: v for k, v in facts.items() if k != "env"}
    comparison = data.get("comparison")
    if isinstance(comparison, Mapping) and isinstance(comparison.get("facts"), Mapping):
        out["comparison"] = {
            **comparison,
            "facts": {k: v for k, v in comparison["facts"].items() if k != "env"},
        }
    return out
