"""Conv2dProblem: validation, derived values against F.conv2d, ids, input factory."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_convperf.core.problem import Conv2dProblem


def make(**kw: object) -> Conv2dProblem:
    base: dict[str, object] = dict(n=2, c_in=8, h=10, w=9, c_out=16)
    base.update(kw)
    return Conv2dProblem(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"groups": 3, "c_in": 32, "c_out": 33}, "groups=3 does not divide c_in=32"),
        ({"groups": 4, "c_out": 10}, "groups=4 does not divide c_out=10"),
        ({"n": -1}, "n=-1 must be >= 0"),
        ({"c_in": 0}, "c_in=0 must be >= 1"),
        ({"stride": 0}, r"stride=\(0, 0\) must be >= 1"),
        ({"dilation": (1, 0)}, r"dilation=\(1, 0\) must be >= 1"),
        ({"padding": -1}, r"padding=\(-1, -1\) must be >= 0"),
        ({"kernel": (5, 3), "h": 4}, "h=4 with padding 0 is smaller than the dilated kernel span 5"),
        (
            {"kernel": 3, "dilation": 3, "w": 6},
            "w=6 with padding 0 is smaller than the dilated kernel span 7",
        ),
        ({"dtype": "fp8"}, "dtype='fp8' must be one of"),
        ({"layout": "nwhc"}, "layout='nwhc' must be one of"),
        ({"kernel": (1, 2, 3)}, "kernel=.* must be an int or a pair of ints"),
        ({"stride": True}, "must be an int or a pair of ints, not a bool"),
        ({"c_in": 2.0}, "c_in=2.0 must be an int"),
    ],
)
def test_validation_names_field_and_rule(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(**changes)


def test_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        Conv2dProblem(2, 8, 10, 9, 16)  # type: ignore[misc]
    p = make()
    with pytest.raises(AttributeError):
        p.n = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "problem",
    [
        make(kernel=3, padding=1),
        make(kernel=(2, 5), stride=(2, 1), padding=(0, 2), dilation=(1, 2)),
        make(kernel=4, stride=3, dilation=2, padding=3, groups=8, c_out=24),
        make(kernel=1, stride=2),
        make(groups=2, kernel=(3, 1), h=3, w=1, padding=(1, 0)),
        make(n=0, kernel=3),
    ],
    ids=str,
)
def test_derived_shapes_match_f_conv2d(problem: Conv2dProblem) -> None:
    x, w, b = problem.make_inputs(0)
    y = F.conv2d(x, w, b, *problem.conv_args())
    assert tuple(y.shape) == problem.output_shape
    assert tuple(x.shape) == problem.input_shape
    assert tuple(w.shape) == problem.weight_shape
    assert b is not None and tuple(b.shape) == (problem.c_out,)


def test_kinds() -> None:
    assert make(kernel=3).kind == "dense"
    assert make(kernel=1).kind == "pointwise"
    assert make(groups=8, c_out=8).kind == "depthwise"
    assert make(groups=8, c_out=24).kind == "depthwise"
    assert make(groups=8, c_out=24).multiplier == 3
    assert make(groups=2).kind == "grouped"


def test_flops_and_min_bytes() -> None:
    p = Conv2dProblem(n=16, c_in=32, h=112, w=112, c_out=32, kernel=3, padding=1, groups=32, bias=False)
    # 2 * N * C_out * Ho * Wo * (C_in/g * kh * kw)
    assert p.flops == 2 * 16 * 32 * 112 * 112 * 9
    elems = 16 * 32 * 112 * 112
    assert p.min_bytes == 4 * (2 * elems + 32 * 9)
    assert p.replace(dtype="fp16").min_bytes == p.min_bytes // 2
    assert p.replace(bias=True).min_bytes == p.min_bytes + 4 * 32


@pytest.mark.parametrize(
    "problem",
    [
        make(),
        make(kernel=(2, 5), stride=(2, 1), padding=(0, 2), dilation=(1, 2), bias=False),
        make(dtype="bf16", layout="nhwc", groups=8, c_out=8),
        make(n=0, dtype="fp64"),
    ],
    ids=str,
)
def test_id_round_trips(problem: Conv2dProblem) -> None:
    assert Conv2dProblem.from_id(problem.id) == problem
    assert str(problem) == problem.id


def test_id_format_matches_design() -> None:
    p = Conv2dProblem(n=16, c_in=32, h=112, w=112, c_out=32, kernel=3, padding=1, groups=32)
    assert p.id == "n16-ci32-h112-w112-co32-k3x3-s1-p1-d1-g32-fp32-nchw"


def test_from_id_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="is not a Conv2dProblem id"):
        Conv2dProblem.from_id("n16-c32")
    with pytest.raises(ValueError, match="groups=3 does not divide c_in=32"):
        Conv2dProblem.from_id("n1-ci32-h8-w8-co33-k3x3-s1-p1-d1-g3-fp32-nchw")


def test_make_inputs_seeded_nonzero_dtype_layout() -> None:
    p = make(dtype="fp16", layout="nhwc", kernel=3)
    x1, w1, b1 = p.make_inputs(7)
    x2, w2, b2 = p.make_inputs(7)
    x3, _, _ = p.make_inputs(8)
    assert torch.equal(x1, x2) and torch.equal(w1, w2)
    assert b1 is not None and b2 is not None and torch.equal(b1, b2)
    assert not torch.equal(x1, x3)
    assert x1.dtype == torch.float16 and w1.dtype == torch.float16
    assert x1.is_contiguous(memory_format=torch.channels_last)
    assert (x1 != 0).float().mean() > 0.99
    assert 0.8 < float(x1.float().std()) < 1.2
    nchw = p.replace(layout="nchw").make_inputs(7).input
    assert nchw.is_contiguous() and torch.equal(nchw, x1)


def test_no_bias() -> None:
    assert make(bias=False).make_inputs(0).bias is None
