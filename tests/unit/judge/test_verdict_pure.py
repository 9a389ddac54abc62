"""Issue 39 item 3: the decision is pure. ``screen`` and ``settle`` (and ``decide``, the two without
a confirm) never measure; the one step that times is the caller's confirm, called once per suspect
with the rounds the suspect asks for (``judge.policy.decision_of``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

from pytest_convperf.core.results import Comparison, Verdict
from pytest_convperf.judge.few_rounds import FewRoundsSuspect
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.judge.policy import decision_of
from pytest_convperf.judge.verdict import Suspect, decide, screen, settle
from tests.unit.judge.test_verdict import ENV, GPU, comparison, entry
from tests.unit.judge.test_verdict_trust import CPU, few


class Measured(AssertionError):
    """Raised by any timer use: a pure step that measures fails the test."""


def _never(*_: object, **__: object) -> Comparison:
    raise Measured("a pure decision step measured")


@pytest.fixture(autouse=True)
def _timers_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way to a timer raises: the timer factory and the CPU/fake timers' timing methods."""
    from pytest_convperf.measure import cpu, fake, timers

    monkeypatch.setattr(timers, "make_timer", _never)
    for cls in (cpu.CpuTimer, fake.FakeTimer):
        for name in ("time", "time_rounds", "measure", "__call__"):
            if hasattr(cls, name):
                monkeypatch.setattr(cls, name, _never)


CASES: dict[str, Callable[[], tuple[Comparison, object]]] = {
    "pass": lambda: (comparison(0.6), entry(0.6)),
    "new": lambda: (comparison(0.6), None),
    "stale": lambda: (comparison(0.6), entry(0.6, env={"torch": "1.0"})),
    "advisory": lambda: (comparison(0.6), entry(0.6, noise=0.08)),
    "slower": lambda: (comparison(0.7), entry(0.6)),
    "faster": lambda: (comparison(0.5), entry(0.6)),
}


def test_decide_takes_no_confirm() -> None:
    """Nothing callable goes into the pure functions: they cannot measure."""
    for fn in (decide, screen, settle):
        assert "confirm" not in inspect.signature(fn).parameters, fn.__name__


@pytest.mark.parametrize("case", sorted(CASES))
def test_screen_and_settle_never_measure(case: str) -> None:
    comp, old = CASES[case]()
    first = screen(comp, old, GPU, env=ENV, backend="CudnnConv")  # type: ignore[arg-type]
    if case in ("slower", "faster"):
        assert isinstance(first, Suspect) and first.slower is (case == "slower")
        assert first.rounds == GPU.confirm_factor * comp.n_rounds
        unconfirmed = settle(first, None)
        assert unconfirmed.stage == "screen"
        assert unconfirmed.verdict is (Verdict.FAIL if case == "slower" else Verdict.IMPROVED)
        # The caller's measurement, handed in: settle judges it without timing anything.
        confirmed = settle(first, comparison(comp.time_ratio, n=first.rounds))
        assert confirmed.stage == "confirm" and confirmed.confirm is not None
    else:
        assert isinstance(first, Decision)
        assert decide(comp, old, GPU, env=ENV, backend="CudnnConv") == first  # type: ignore[arg-type]


def test_few_rounds_suspect_is_settled_without_measuring() -> None:
    first = screen(few(0.6 * 40), entry(0.6, noise=0.04), CPU, env=ENV, backend="CudnnConv")
    assert isinstance(first, FewRoundsSuspect) and first.rounds == CPU.confirm_factor * 3
    assert settle(first, few(0.6 * 40, n=first.rounds)).verdict is Verdict.FAIL
    assert settle(first, None).verdict is Verdict.FAIL


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_caller_measures_once_per_suspect(case: str) -> None:
    comp, old = CASES[case]()
    asked: list[int] = []

    def confirm(n: int) -> Comparison:
        asked.append(n)
        return comparison(comp.time_ratio, n=n)

    decision_of(comp, old, GPU, confirm=confirm, env=ENV, backend="CudnnConv")  # type: ignore[arg-type]
    assert asked == ([GPU.confirm_factor * comp.n_rounds] if case in ("slower", "faster") else [])
