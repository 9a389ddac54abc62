"""Issue 15, verdicts: a huge regression measured in few rounds FAILs; an improvement is confirmed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pytest_convperf.core.results import Comparison, Verdict
from pytest_convperf.judge.policy import decision_of
from pytest_convperf.judge.verdict import decide, default_policy
from tests.unit.judge.test_verdict import ENV, GPU, comparison, entry

CPU = default_policy("cpu")
FEW = "only 3 timing rounds kept; at least 6 are needed for a 95 % CI of the median"


def few(ratio: float, n: int = 3, *, spread: float = 0.0) -> Comparison:
    """A comparison of ``n`` rounds (too few for a CI), log ratios ``ratio`` +- ``spread``."""
    base = comparison(ratio, n=n, se=0.0, inconclusive=FEW)
    lr = tuple(math.log(ratio) + spread * (-1) ** i for i in range(n))
    return Comparison(
        base.candidate,
        base.reference,
        lr,
        base.time_ratio,
        base.time_ratio_ci,
        base.se,
        n,
        inconclusive=FEW,
    )


def test_huge_regression_in_few_rounds_fails_after_its_confirm() -> None:
    calls: list[int] = []

    def confirm(n: int) -> Comparison:
        calls.append(n)
        return few(0.6 * 40, n=4)

    d = decision_of(few(0.6 * 40), entry(0.6, noise=0.04), CPU, env=ENV, confirm=confirm)
    assert (d.verdict, d.outcome, d.stage) == (Verdict.FAIL, "fail", "few-rounds")
    assert calls == [9]  # the same 3x confirm as any suspect
    assert "3 rounds" in d.message and "4 rounds" in d.message


def test_few_rounds_that_show_little_stay_inconclusive() -> None:
    # 10 % slower in 3 rounds: within what a few rounds cannot tell from the noise.
    d = decision_of(few(0.66), entry(0.6, noise=0.04), CPU, env=ENV, confirm=lambda n: few(0.66, n=n))
    assert (d.verdict, d.outcome) == (Verdict.INCONCLUSIVE, "skip")
    # The least slow round decides: one fast round among slow ones clears it.
    d2 = decision_of(
        few(0.6 * 3, spread=1.2), entry(0.6, noise=0.04), CPU, env=ENV, confirm=lambda n: few(1.8, n)
    )
    assert d2.verdict is Verdict.INCONCLUSIVE
    # A confirm that does not repeat it clears it too.
    d3 = decision_of(few(0.6 * 40), entry(0.6, noise=0.04), CPU, env=ENV, confirm=lambda n: few(0.6, n=n))
    assert d3.verdict is Verdict.INCONCLUSIVE and "confirm" in d3.message
    # Clock-dropped rounds are never judged this way.
    clocks = comparison(0.6 * 40, n=3, inconclusive="3 of 4 timing rounds dropped")
    clocks = Comparison(
        *[
            getattr(clocks, f)
            for f in ("candidate", "reference", "log_ratios", "time_ratio", "time_ratio_ci", "se", "n_rounds")
        ],
        dropped_rounds=9,
        inconclusive=clocks.inconclusive,
    )
    assert (
        decision_of(clocks, entry(0.6), CPU, env=ENV, confirm=lambda n: few(24, n)).verdict
        is Verdict.INCONCLUSIVE
    )


def test_few_rounds_without_a_baseline_stay_inconclusive() -> None:
    assert decide(few(24), None, CPU, env=ENV).verdict is Verdict.INCONCLUSIVE


def test_improvement_is_confirmed_before_it_is_improved() -> None:
    calls: list[int] = []

    def confirm(n: int) -> Comparison:
        calls.append(n)
        return comparison(0.5, n=n)

    d = decision_of(comparison(0.5), entry(0.6), GPU, env=ENV, confirm=confirm)
    assert (d.verdict, d.stage) == (Verdict.IMPROVED, "confirm")
    assert calls == [123]
    assert d.confirm is not None and d.confirm.n_rounds == 123


def test_unconfirmed_improvement_is_a_pass_never_improved() -> None:
    d = decision_of(comparison(0.5), entry(0.6), GPU, env=ENV, confirm=lambda n: comparison(0.598, n=n))
    assert (d.verdict, d.outcome) == (Verdict.PASS, "pass")
    assert "improvement not confirmed" in d.message
    inconclusive = decision_of(
        comparison(0.5), entry(0.6), GPU, env=ENV, confirm=lambda n: comparison(0.5, n=n, inconclusive="x")
    )
    assert inconclusive.verdict is Verdict.PASS and "improvement not confirmed" in inconclusive.message


@pytest.mark.parametrize("confirm_ratio", [0.5, 0.598])
def test_improved_update_records_only_a_confirmed_improvement(confirm_ratio: float, tmp_path: Path) -> None:
    from pytest_convperf.baselines.updates import new_entry, plan_update
    from tests.unit.baselines.test_updates import _cfg

    old = entry(0.6)
    d = decision_of(comparison(0.5), old, GPU, env=ENV, confirm=lambda n: comparison(confirm_ratio, n=n))
    final = d.confirm if d.confirm is not None else comparison(0.5)
    plan = plan_update(
        _cfg(tmp_path, {"improved"}),
        d,
        old,
        new_entry(final, old, GPU, env=ENV, backend=None, errors=()),
        GPU,
    )
    assert plan is not None
    assert plan.action == ("write" if confirm_ratio == 0.5 else "skip")
    if plan.entry is not None:
        assert plan.entry.time_ratio == pytest.approx(0.5)  # the confirm run's ratio is what is stored
