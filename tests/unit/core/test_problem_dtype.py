"""Conv2dProblem takes torch dtypes and their names as aliases of the short names (issue 16, item 5)."""

from __future__ import annotations

import pytest
import torch

from pytest_convperf.core.problem import Conv2dProblem, canonical_dtype


def _problem(dtype: object) -> Conv2dProblem:
    # dtype is annotated str (the stored, canonical form); aliases are accepted at run time.
    return Conv2dProblem(n=1, c_in=2, h=5, w=5, c_out=3, dtype=dtype)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        (torch.float32, "fp32"),
        ("float32", "fp32"),
        ("float", "fp32"),
        ("torch.float32", "fp32"),
        ("FP32", "fp32"),
        (torch.half, "fp16"),
        (torch.float16, "fp16"),
        ("half", "fp16"),
        ("float16", "fp16"),
        (torch.bfloat16, "bf16"),
        ("bfloat16", "bf16"),
        (torch.float64, "fp64"),
        (torch.double, "fp64"),
        ("double", "fp64"),
        ("fp64", "fp64"),
    ],
)
def test_aliases_normalise_to_the_short_name(given: object, canonical: str) -> None:
    p = _problem(given)
    assert p.dtype == canonical
    # Ids and baseline keys do not change with the spelling.
    assert p == _problem(canonical)
    assert p.id == _problem(canonical).id
    assert p.id.endswith(f"-{canonical}-nchw")
    assert p.torch_dtype() == getattr(
        torch, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}[canonical]
    )


def test_replace_and_from_id_keep_the_short_name() -> None:
    p = _problem(torch.half)
    assert p.replace(dtype="bfloat16").dtype == "bf16"
    assert Conv2dProblem.from_id(p.id) == p


@pytest.mark.parametrize("bad", ["fp8", "int8", torch.int32, torch.complex64, 32, None])
def test_unknown_dtype_is_a_clear_value_error(bad: object) -> None:
    with pytest.raises(
        ValueError, match=r"must be one of \['bf16', 'fp16', 'fp32', 'fp64'\], one of the aliases .*float32"
    ):
        _problem(bad)


def test_canonical_dtype_does_not_need_torch_for_names() -> None:
    assert canonical_dtype("torch.bfloat16") == "bf16"
