"""``observe_round`` is part of the :class:`Timer` protocol: the rounds engine calls it on every timer
(a no-op on a bare timer, the live line's feed on a ``ProgressTimer``), never through ``getattr``."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_convperf.measure.cpu import CpuTimer
from pytest_convperf.measure.cuda import CudaTimer
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.protocol import Timer, Unwatched
from pytest_convperf.measure.rounds import measure_pair
from pytest_convperf.measure.rule import StopRule
from pytest_convperf.reports.progress import ProgressTimer


class NoObserver(FakeTimer):
    """Every protocol member except ``observe_round`` (hidden again below)."""


def test_every_timer_has_the_watcher_call_and_a_timer_without_it_is_no_timer() -> None:
    for cls in (CpuTimer, CudaTimer, FakeTimer):
        assert issubclass(cls, Unwatched), cls
    assert isinstance(FakeTimer({"*": 1e-3}), Timer)
    bare = NoObserver({"*": 1e-3})
    # The protocol names observe_round: an object whose observe_round is missing is not a Timer.
    NoObserver.observe_round = None  # type: ignore[assignment,method-assign]
    try:
        assert not isinstance(bare, Timer)
    finally:
        del NoObserver.observe_round


def test_the_rounds_engine_feeds_a_watching_proxy_every_round() -> None:
    seen: list[tuple[str, int, tuple[str, ...]]] = []

    def on_round(stage: str, index: int, names: Sequence[str], times: Sequence[float]) -> None:
        seen.append((stage, index, tuple(names)))

    fake = FakeTimer({"candidate": 5e-4, "reference": 1e-3})
    watched = ProgressTimer(fake, on_round)
    comparison = measure_pair(
        watched, lambda: None, lambda: None, mode="cold", rule=StopRule.for_timer(fake, min_rounds=7)
    )
    stages = {stage for stage, _, _ in seen}
    assert stages == {"warm-up", "timing"}
    assert all(names == ("candidate", "reference") for _, _, names in seen)
    assert len(seen) == fake.rounds  # once per round the wrapped timer ran, no more, no less
    assert comparison.n_rounds >= 7
