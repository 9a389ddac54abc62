"""A suspect's confirm measured again while the machine is away from its entry's state (CPU), and
what that does to the verdict (a stub confirm: no timer, no sleeping)."""

from __future__ import annotations

import dataclasses

from pytest_convperf.check.matched_confirm import BUDGET_S, PAUSES_S, MatchedConfirm
from pytest_convperf.core.results import Comparison, Verdict
from pytest_convperf.judge.policy import decision_of
from pytest_convperf.judge.verdict import default_policy
from tests.unit.judge.test_verdict import comparison, entry

CPU = dataclasses.replace(default_policy("cpu"), noise_floor=0.02)
# Recorded at ratio 0.5: candidate 15 us, reference 30 us.
STORED = entry(0.5, noise=0.02, us_candidate=15.0, us_reference=30.0)


def _timed(cand_us: float, ref_us: float) -> Comparison:
    """A CPU comparison with these medians (the ratio follows)."""
    c = comparison(cand_us / ref_us, se=0.002, n=400)
    cand = dataclasses.replace(c.candidate, median=cand_us * 1e-6, mode="cpu")
    ref = dataclasses.replace(c.reference, median=ref_us * 1e-6, mode="cpu")
    return dataclasses.replace(c, candidate=cand, reference=ref)


class Stub:
    """``confirm(n)`` returning the given comparisons in turn; ``slept`` the pauses asked for."""

    def __init__(self, *tries: Comparison) -> None:
        self.tries = list(tries)
        self.calls = 0
        self.slept: list[float] = []
        self.now = 0.0

    def confirm(self, n: int) -> Comparison:
        self.calls += 1
        return self.tries[min(self.calls - 1, len(self.tries) - 1)]

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def clock(self) -> float:
        return self.now


# A 30 % slower candidate: its confirm first on a machine 25 % slower for both sides, then back.
MOVED = _timed(15.0 * 1.3 * 1.6, 30.0 * 1.25)
BACK = _timed(15.0 * 1.3, 30.0 * 1.01)
SLOWED_SCREEN = _timed(15.0 * 1.3, 30.0)


def test_a_moved_machine_is_measured_again_and_the_closest_state_is_judged() -> None:
    stub = Stub(MOVED, BACK)
    got = MatchedConfirm(STORED, CPU, sleep=stub.sleep, clock=stub.clock).wrap(stub.confirm)(100)
    assert stub.calls == 2 and stub.slept == [PAUSES_S[0]]
    assert got.candidate.median == BACK.candidate.median
    assert got.facts["machine_tries"] == 2 and got.facts["reference_shifts"][1] < 0.02


def test_the_slowed_candidate_fails_where_the_unmatched_confirm_was_blind() -> None:
    """Before: ADVISORY (the reference +25 % since the entry); after: FAIL, judged on the try
    whose machine was back."""
    blind = Stub(MOVED, BACK)
    before = decision_of(SLOWED_SCREEN, STORED, CPU, confirm=blind.confirm)
    assert before.verdict is Verdict.ADVISORY, before.message
    stub = Stub(MOVED, BACK)
    matched = MatchedConfirm(STORED, CPU, sleep=stub.sleep, clock=stub.clock).wrap(stub.confirm)
    after = decision_of(SLOWED_SCREEN, STORED, CPU, confirm=matched)
    assert after.verdict is Verdict.FAIL, after.message


def test_an_unmoved_machine_is_measured_once_and_a_gpu_never_retried() -> None:
    stub = Stub(BACK, MOVED)
    got = MatchedConfirm(STORED, CPU, sleep=stub.sleep, clock=stub.clock).wrap(stub.confirm)(100)
    assert stub.calls == 1 and not stub.slept and "machine_tries" not in got.facts
    gpu = Stub(MOVED, BACK)
    MatchedConfirm(STORED, default_policy("cuda"), sleep=gpu.sleep, clock=gpu.clock).wrap(gpu.confirm)(100)
    assert gpu.calls == 1
    new = Stub(MOVED, BACK)  # no entry: nothing to match
    MatchedConfirm(None, CPU, sleep=new.sleep, clock=new.clock).wrap(new.confirm)(100)
    assert new.calls == 1


def test_a_machine_that_never_comes_back_costs_at_most_the_budget() -> None:
    stub = Stub(MOVED)
    got = MatchedConfirm(STORED, CPU, sleep=stub.sleep, clock=stub.clock).wrap(stub.confirm)(100)
    assert stub.calls == 1 + len(PAUSES_S) and sum(stub.slept) <= BUDGET_S
    assert got.facts["machine_tries"] == 4 and min(got.facts["reference_shifts"]) > 0.2
    assert decision_of(SLOWED_SCREEN, STORED, CPU, confirm=lambda n: got).verdict is Verdict.ADVISORY
