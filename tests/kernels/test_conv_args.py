"""``kernels/conv_args.py``: one parser of ``F.conv2d``'s arguments for every family, so the same bad
call gets the same one-line error from each (issue 39: PCILT borrowed im2col's parser, depthwise had
its own), and the family rules on top stay the family's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from kernels import conv_args
from kernels.depthwise import reference as depthwise
from kernels.im2col_gemm import reference as im2col
from kernels.pcilt import reference as pcilt

# Each family's F.conv2d-signature CPU function, on a depthwise call every family accepts.
FAMILIES: dict[str, Callable[..., torch.Tensor]] = {
    "depthwise": depthwise.forward,
    "im2col_gemm": im2col.forward,
    "pcilt": pcilt.forward,
}
BAD = [
    ({"stride": 0}, "stride=0 must be >= 1"),
    ({"dilation": (1, 0)}, r"dilation=\(1, 0\) must be >= 1"),
    ({"padding": -1}, "padding=-1 must be >= 0"),
    ({"padding": "full"}, "padding='full' must be an int, a pair, 'valid' or 'same'"),
    ({"padding": "same", "stride": 2}, r"padding='same' is not supported for strided convolutions \(as in F"),
    ({"stride": (1, 2, 3)}, r"stride=\(1, 2, 3\) must be an int or a pair of ints"),
    (
        {"weight": torch.randn(4, 1, 9, 9)},
        r"input \(6, 6\) with padding \(0, 0\) is smaller than the dilated kernel",
    ),
    ({"input": torch.randn(4, 6)}, r"input must be 3-D \(C, H, W\) or 4-D"),
]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("change", "message"), BAD, ids=[m[:24] for _, m in BAD])
def test_every_family_gives_the_same_error(family: str, change: dict[str, Any], message: str) -> None:
    call: dict[str, Any] = {"input": torch.randn(1, 4, 6, 6), "weight": torch.randn(4, 1, 3, 3), "groups": 4}
    call.update(change)
    with pytest.raises(ValueError, match=f"^{message}"):
        FAMILIES[family](**call)


def test_pairs() -> None:
    assert conv_args.pair(3, "stride") == (3, 3)
    assert conv_args.pair([2], "stride") == (2, 2)
    assert conv_args.pair((2, 1), "stride") == (2, 1)
    for bad in (True, (1, True), "11", (1.0, 1)):
        with pytest.raises(ValueError, match="must be an int or a pair of ints"):
            conv_args.pair(bad, "stride")  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
def test_same_padding_with_an_even_span_is_the_family_s_choice() -> None:
    """The parser says what ``F.conv2d`` pads; depthwise pads the input so, im2col refuses."""
    sp = conv_args.spatial(1, "same", 1, (4, 2))
    assert sp == conv_args.Spatial((1, 1), (0, 0), (1, 1), (0, 1, 1, 2))
    x, w = torch.randn(1, 3, 7, 7), torch.randn(3, 1, 4, 2)
    want = F.conv2d(x, w, None, 1, "same", 1, 3)
    torch.testing.assert_close(depthwise.forward(x, w, None, 1, "same", 1, 3), want)
    with pytest.raises(ValueError, match="asymmetric padding"):
        im2col.forward(x, w, None, 1, "same", 1, 3)
