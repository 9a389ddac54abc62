"""Result rows for tests: a ``CheckRow`` from the few fields a test cares about."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_convperf.judge.check_row import CheckRow


def _measurement(data: Mapping[str, Any]) -> dict[str, Any]:
    samples = list(data.get("samples") or [data["median"]])
    return {"samples": samples, "ci": [data["median"]] * 2, "n": len(samples), **data}


def check_row(data: Mapping[str, Any]) -> CheckRow:
    """``CheckRow.from_dict`` of a partial row: a comparison needs only its medians (and
    ``time_ratio``, else their ratio); the CI defaults to the ratio itself, ``se`` to 0."""
    data = {"key": "k", "module": "m", **data}
    comp = data.get("comparison")
    if comp is not None:
        cand, ref = _measurement(comp["candidate"]), _measurement(comp["reference"])
        ratio = comp.get("time_ratio", cand["median"] / ref["median"])
        data["comparison"] = {
            "time_ratio_ci": [ratio, ratio],
            "se": 0.0,
            "n_rounds": len(cand["samples"]),
            **comp,
            "time_ratio": ratio,
            "candidate": cand,
            "reference": ref,
        }
    return CheckRow.from_dict(data)
