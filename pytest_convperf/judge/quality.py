"""Quality drift of lossy variants (quantized, pruned, lookup-table) against their stored entry.

A pure rule, like :mod:`pytest_convperf.judge.verdict`, which applies it: no torch, no pytest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_convperf.judge.entry import Entry

# Quality drift of quantized/sparse/lookup variants against the float conv (``extra_metrics``
# ``rel_l2`` and ``sqnr_db``, stored as an entry's ``quality``). The metrics come from fixed,
# seeded inputs and deterministic quantizers, so an unchanged kernel reproduces them to far under
# 0.01 dB; 1 dB is a sixth of a bit (6.02 dB per bit), small next to any real accuracy bug (a
# wrong rounding mode or a lost bit costs several dB) yet far above that jitter. rel_l2 uses the
# same tolerance (sqnr_db = -20 log10 rel_l2, so 1 dB is a 1.122x growth) for entries or rows
# that carry only one of the two metrics.
QUALITY_DB_DROP = 1.0
QUALITY_REL_L2_FACTOR = 10 ** (QUALITY_DB_DROP / 20)
# Below a relative L2 error of 1e-5 (SQNR 100 dB) the error is fp32 rounding (about sqrt(K) x
# 6e-8 for a K-term sum, ~4e-6 at K = 4608) that moves with the GEMM algorithm, not lost accuracy.
QUALITY_REL_L2_FLOOR = 1e-5
QUALITY_KEYS = ("rel_l2", "sqnr_db")


def quality_drift(quality: Mapping[str, float] | None, entry: Entry | None) -> list[str]:
    """The quality metrics that lost accuracy against the stored ``entry.quality`` (one phrase each).

    ``rel_l2`` fails when over ``QUALITY_REL_L2_FACTOR`` x the stored value, ``sqnr_db`` when more
    than ``QUALITY_DB_DROP`` dB under it; neither while the new error is under the rounding floor
    (``QUALITY_REL_L2_FLOOR``, i.e. 100 dB). Better quality never fails.
    """
    if not quality or entry is None or not entry.quality:
        return []
    out: list[str] = []
    old, new = entry.quality.get("rel_l2"), quality.get("rel_l2")
    # NaN compares false everywhere: a NaN metric never fails here (the tolerance check sees NaNs).
    if (
        old is not None
        and new is not None
        and new > QUALITY_REL_L2_FACTOR * old
        and new > QUALITY_REL_L2_FLOOR
    ):
        out.append(
            f"rel_l2 {old:.4g} -> {new:.4g} (over {QUALITY_REL_L2_FACTOR:.3g}x the stored value; "
            f"tolerance {QUALITY_REL_L2_FACTOR:.3g}x above a {QUALITY_REL_L2_FLOOR:g} floor)"
        )
    old, new = entry.quality.get("sqnr_db"), quality.get("sqnr_db")
    floor_db = -20 * math.log10(QUALITY_REL_L2_FLOOR)
    if old is not None and new is not None and new < old - QUALITY_DB_DROP and new < floor_db:
        out.append(
            f"sqnr_db {old:.4g} -> {new:.4g} dB (down {old - new:.3g} dB; tolerance "
            f"{QUALITY_DB_DROP:g} dB below {floor_db:g} dB)"
        )
    return out
