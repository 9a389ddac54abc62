"""One guarded call of a candidate (``correctness/candidate_run.py``): fresh inputs, poisoned fresh
allocations, its output's type, shape and dtype checked, its inputs checked untouched, and what it
raised kept with the user's part of the traceback."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.candidate_run import poisoned_allocations, raised, run_case, wrong_output
from pytest_convperf.correctness.case import build_case

P = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=3, padding=1)


def _case(backward: bool = False):  # type: ignore[no-untyped-def]
    return build_case(P, P.make_inputs(1, "cpu"), 1, "cpu", backward)


def test_fresh_allocations_are_nan_inside_and_the_settings_come_back() -> None:
    before = torch.are_deterministic_algorithms_enabled()
    with poisoned_allocations():
        assert torch.isnan(torch.empty(64)).all()
    assert torch.are_deterministic_algorithms_enabled() == before


def test_a_correct_candidate_returns_its_output_and_gradients() -> None:
    results, exc, wrong = run_case(F.conv2d, P, _case(backward=True), backward=True)
    assert exc is None and wrong is None
    assert set(results) == {"output", "grad_input", "grad_weight", "grad_bias"}


def test_a_candidate_that_writes_nothing_returns_nan_not_an_earlier_answer() -> None:
    def lazy(x, w, b, *args):  # type: ignore[no-untyped-def]
        return torch.empty(1, 4, 8, 8)  # the right shape, never written

    results, exc, wrong = run_case(lazy, P, _case(), backward=False)
    assert exc is None and wrong is None and torch.isnan(results["output"]).all()


def test_an_input_written_in_place_is_named() -> None:
    def zeroing(x, w, b, *args):  # type: ignore[no-untyped-def]
        with torch.no_grad():
            w.zero_()
        return F.conv2d(x, w, b, *args)

    results, exc, wrong = run_case(zeroing, P, _case(), backward=False)
    assert results == {} and exc is None
    assert wrong is not None and wrong.startswith("the candidate changed its weight in place")


def test_a_wrong_output_is_named_by_type_shape_or_dtype() -> None:
    expected = torch.zeros(1, 4, 8, 8)
    assert wrong_output("output", expected, expected, torch.float32) is None
    assert wrong_output("output", [1.0], expected, torch.float32) == (
        "output: the candidate returned list, not a torch.Tensor"
    )
    assert "has shape (1, 4, 8, 7), expected (1, 4, 8, 8)" in (
        wrong_output("output", torch.zeros(1, 4, 8, 7), expected, torch.float32) or ""
    )
    assert "has dtype torch.float16, expected torch.float32" in (
        wrong_output("output", expected.half(), expected, torch.float32) or ""
    )


def test_what_a_candidate_raised_keeps_its_own_frame() -> None:
    def broken(x, w, b, *args):  # type: ignore[no-untyped-def]
        raise ValueError("boom")

    results, exc, wrong = run_case(broken, P, _case(), backward=False)
    assert results == {} and wrong is None and exc is not None
    assert exc.startswith("raised ValueError: boom\n  Traceback")
    assert "in broken" in exc and "pytest_convperf" not in exc  # the plugin's own frames are cut
    assert raised(KeyError("k")) == "raised KeyError: 'k'"  # never raised: no traceback to show
