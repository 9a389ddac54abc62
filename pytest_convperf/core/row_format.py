"""The version of a result row's dict form (xdist, the journal, ``rows.json``) and its conversions.

Each format holds each thing once. Format 2 stopped storing the row's ``env`` again in the row's
``facts`` and the comparison's facts, and its ``verdict`` and ``message`` again in the row's
``decision``; format 3 stopped storing the row's ``seed`` and ``machine`` (its ``facts``) again in
the comparison's facts and its confirm's. An older row is converted when read; a newer one is
refused with the fix.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_convperf.core.json_fields import JsonObject

ROW_FORMAT = 3


def _without(facts_of: Mapping[str, object], dropped: frozenset[str]) -> dict[str, object]:
    """``facts_of`` (a row or a comparison) less the ``dropped`` keys of its ``facts``."""
    facts = facts_of.get("facts")
    if not isinstance(facts, Mapping):
        return dict(facts_of)
    return {**facts_of, "facts": {k: v for k, v in facts.items() if k not in dropped}}


def current_format(data: JsonObject) -> JsonObject:
    """A row dict in :data:`ROW_FORMAT`: formats 1 (no ``format`` key) and 2 converted, a newer one
    a ``ValueError`` (the reader names the file and line)."""
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
    out = dict(data)
    if version == 1:
        # The row's own env is kept, its copies in the facts dropped. The decision's verdict and
        # message are left as they were (a format-1 reader's rows say what they said).
        out = _without(out, frozenset({"env"}))
    # Formats 1 and 2: the comparisons' copies of the row's env, seed and machine dropped.
    copies = frozenset({"env", "seed", "machine"})
    comparison = out.get("comparison")
    if isinstance(comparison, Mapping):
        out["comparison"] = _without(comparison, copies)
    decision = out.get("decision")
    if isinstance(decision, Mapping) and isinstance(decision.get("confirm"), Mapping):
        out["decision"] = {**decision, "confirm": _without(decision["confirm"], copies)}
    return out
