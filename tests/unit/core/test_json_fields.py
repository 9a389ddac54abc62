"""core.json_fields: a field of a JSON object read back, checked for its type, named when wrong."""

from __future__ import annotations

import pytest

from pytest_convperf.core import json_fields as jf


def test_numbers_come_back_as_stored_and_defaults_fill_absent_fields() -> None:
    data = {"n": 3, "x": 0.5, "pair": [1, 2.5], "flag": True}
    assert jf.number(data, "n") == 3 and isinstance(jf.number(data, "n"), int)  # rewritten as "3"
    assert jf.number(data, "missing", 0.0) == 0.0 and jf.opt_number(data, "missing") is None
    assert jf.pair(data, "pair") == (1, 2.5) and jf.opt_pair(data, "missing") is None
    assert jf.flag(data, "flag", False) is True and jf.strings(data, "missing") == ()


@pytest.mark.parametrize(
    ("read", "value", "want"),
    [
        (jf.number, True, "a number"),  # a bool is not a number here
        (jf.integer, 1.5, "an integer"),
        (jf.text, 3, "a string"),
        (jf.numbers, [1, "2"], "a list of numbers"),
        (jf.obj, [], "an object"),
        (jf.opt_str_map, {"a": 1}, "an object of strings"),
    ],
)
def test_a_wrong_type_names_the_field_and_what_it_must_be(read: object, value: object, want: str) -> None:
    with pytest.raises(ValueError, match=rf"field 'f' must be {want}, got "):
        read({"f": value}, "f")  # type: ignore[operator]
    with pytest.raises(ValueError, match=r"field 'p' must be two numbers, got 3"):
        jf.pair({"p": [1, 2, 3]}, "p")
