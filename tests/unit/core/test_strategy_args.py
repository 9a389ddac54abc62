"""The argument checks of ``conv2d_problems`` (``core/strategy_args.py``): each bad value named with what
is allowed; one value where a sequence is expected means that one value."""

from __future__ import annotations

import pytest
import torch
from hypothesis.errors import InvalidArgument

from pytest_convperf.core.strategy_args import canonical_dtype_arg, check_choices, check_positive, one_or_many


def test_choices_must_be_non_empty_and_allowed() -> None:
    check_choices("kinds", ["dense"], ["dense", "depthwise"])
    with pytest.raises(InvalidArgument, match="kinds must not be empty"):
        check_choices("kinds", [])
    with pytest.raises(
        InvalidArgument, match=r"kinds has \['sparse'\]; allowed are \['dense', 'depthwise'\]"
    ):
        check_choices("kinds", ["dense", "sparse"], ["dense", "depthwise"])


def test_positive_values_are_ints_at_or_above_the_floor() -> None:
    check_positive("batch", [1, 4])
    check_positive("padding", [0], low=0)
    with pytest.raises(InvalidArgument, match=r"stride has \[0, 2.0\]; each must be an int >= 1"):
        check_positive("stride", [1, 0, 2.0])  # type: ignore[list-item]


def test_one_value_is_a_tuple_of_one_and_a_sequence_a_tuple() -> None:
    assert one_or_many("dense") == ("dense",)
    assert one_or_many(torch.float32) == (torch.float32,)
    assert one_or_many(True) == (True,)
    assert one_or_many(["a", "b"]) == ("a", "b")


def test_a_dtype_that_is_not_one_names_itself() -> None:
    assert canonical_dtype_arg(torch.float16) == canonical_dtype_arg("float16")
    with pytest.raises(InvalidArgument, match="dtypes has 'float7'"):
        canonical_dtype_arg("float7")
