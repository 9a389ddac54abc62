"""Night-wide false-alarm control: Holm and Benjamini-Hochberg, a check's p-value, the controller."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_convperf.core.results import Comparison
from pytest_convperf.judge.decision import Stage
from pytest_convperf.judge.entry import Entry
from pytest_convperf.judge.policy import decision_of
from pytest_convperf.judge.verdict import decide, default_policy
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.rounds import measure_pair
from pytest_convperf.measure.rule import StopRule
from pytest_convperf.night.multiplicity import (
    bh_adjusted,
    checks_from_rows,
    control,
    family_p_value,
    holm_adjusted,
)
from tests.rows import check_row

P = [0.01, 0.04, 0.03, 0.005, 0.2]


def test_holm_matches_the_step_down_by_hand() -> None:
    # sorted: 0.005*5, 0.01*4, 0.03*3, 0.04*2, 0.2*1 -> 0.025, 0.04, 0.09, 0.09 (monotone), 0.2
    assert holm_adjusted(P) == pytest.approx([0.04, 0.09, 0.09, 0.025, 0.2])


def test_bh_matches_scipy() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    assert bh_adjusted(P) == pytest.approx(list(scipy_stats.false_discovery_control(P, method="bh")))


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30))
def test_adjusted_never_below_raw_and_bh_never_above_holm(ps: list[float]) -> None:
    holm, bh = holm_adjusted(ps), bh_adjusted(ps)
    for p, h, b in zip(ps, holm, bh):
        assert p <= b + 1e-12 and b <= h + 1e-12 and h <= 1.0


def test_a_bad_p_value_is_an_error() -> None:
    with pytest.raises(ValueError, match="must lie in"):
        holm_adjusted([0.1, 1.5])


def test_controller_keeps_significant_fails_clears_the_rest_and_skips_non_family() -> None:
    checks: dict[str, tuple[str, float | None]] = {f"p{i}": ("PASS", None) for i in range(98)}
    checks["strong"] = ("FAIL", 1e-6)
    checks["weak"] = ("FAIL", 3e-4)  # passes its own 0.9995 rule, not 100 checks at 1 %
    checks["new"] = ("NEW", None)
    checks["stale"] = ("STALE", None)
    night = control(checks, method="holm", alpha=0.01, per_check_alpha=5e-4)
    assert night.m == 100 and night.fails == ("strong",) and night.cleared == ("weak",)
    assert night.expected_uncontrolled == pytest.approx(0.05)
    assert "Holm" in night.summary() and "1 per-check FAIL(s) not significant" in night.summary()
    assert control(checks, method="none", alpha=0.01, per_check_alpha=5e-4).fails == ("strong", "weak")


def test_controller_rejects_an_unknown_method_and_level() -> None:
    with pytest.raises(ValueError, match="unknown false-alarm control"):
        control({"a": ("FAIL", 0.0)}, method="bonf", per_check_alpha=5e-4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        control({"a": ("FAIL", 0.0)}, alpha=0.0, per_check_alpha=5e-4)


def test_family_membership() -> None:
    assert family_p_value("PASS", None) == 1.0
    assert family_p_value("FAIL", 0.001) == 0.001
    assert family_p_value("INCONCLUSIVE", 0.001) is None


@given(
    st.floats(-0.2, 0.3), st.floats(1e-3, 0.1), st.sampled_from([5.0, 30.0, math.inf]), st.floats(0.9, 0.9999)
)
def test_stage_p_value_rejects_exactly_when_the_bound_clears_the_tolerance(
    d: float, sigma: float, df: float, q: float
) -> None:
    stage = Stage("confirm", d, sigma, df, q, 63)
    tol = 0.02
    margin = stage.lower - math.log1p(tol)
    if abs(margin) > 1e-9:
        assert (stage.p_value(tol) < 1 - q) == (margin > 0)


def _comparison(ratio: float, rounds: int = 21) -> Comparison:
    times = {"candidate": [ratio * 1e-3 * (1 + 0.002 * (i % 5 - 2)) for i in range(7)], "reference": [1e-3]}
    rule = StopRule(min_rounds=rounds, max_rounds=rounds, warmup_window=1, warmup_cap_s=0.0)
    return measure_pair(FakeTimer(times, call_jobs=False), lambda: None, lambda: None, mode="warm", rule=rule)


def test_decide_carries_the_confirm_p_value() -> None:
    entry = Entry(time_ratio=0.5, noise=0.005, us_candidate=500.0, us_reference=1000.0, ref_runs=5)
    policy = default_policy("cuda")
    slow = decision_of(_comparison(0.6), entry, policy, confirm=lambda n: _comparison(0.6, n))
    assert slow.verdict.value == "FAIL" and slow.p_value is not None and slow.p_value < 1 - policy.confirm_q
    assert slow.to_dict()["p_value"] == slow.p_value
    same = decision_of(_comparison(0.5), entry, policy, confirm=lambda n: _comparison(0.5, n))
    assert same.verdict.value == "PASS" and same.p_value is None
    unconfirmed = decide(_comparison(0.6), entry, policy)
    assert unconfirmed.stage == "screen" and unconfirmed.p_value is not None and unconfirmed.p_value < 0.05


def test_rows_feed_the_controller() -> None:
    rows: list[dict[str, Any]] = [
        {"nodeid": "t.py::a", "key": "a", "verdict": "FAIL", "decision": {"p_value": 1e-7}},
        {"nodeid": "t.py::b", "key": "b", "verdict": "PASS", "decision": {"p_value": None}},
        {"nodeid": "t.py::c", "key": "c", "verdict": "NEW"},
    ]
    checks = checks_from_rows([check_row(row) for row in rows])
    assert checks == {
        "t.py::a [a]": ("FAIL", 1e-7),
        "t.py::b [b]": ("PASS", None),
        "t.py::c [c]": ("NEW", None),
    }
    night = control(checks, per_check_alpha=5e-4)
    assert night.m == 2 and night.fails == ("t.py::a [a]",)
