"""A history record's times carry the machine's witness (issue 36): the reference timed alone on a
CPU (``measure.witness``), which ``calibrate`` stores with an entry it writes from the records."""

from __future__ import annotations

import math

from pytest_convperf.reports.report_files import times_of
from tests.unit.judge.test_verdict import comparison


def test_a_record_carries_the_witness_where_the_comparison_has_one() -> None:
    timed = comparison(0.5).with_facts({"witness_us": 181.9})
    assert times_of(650.0, 196.0, timed) == {"candidate": 650.0, "reference": 196.0, "witness": 181.9}
    assert times_of(650.0, 196.0, comparison(0.5)) == {"candidate": 650.0, "reference": 196.0}
    assert times_of(None, None, None) == {"candidate": None, "reference": None}
    bad = comparison(0.5).with_facts({"witness_us": math.nan})
    assert "witness" not in times_of(650.0, 196.0, bad)
