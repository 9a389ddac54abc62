"""Every kernel family's real ``.cu`` run on the CPU (``tests/kernels/cuda_emulation.py``) against its oracle.

im2col (three column layouts, row bands, K padding, int8) and col2im; PCILT's fused quantize+pack and its
lookup conv (naive, the tiled kernel with every channel block, with tables outside shared memory and
with 8-bit nibble tables, the depthwise kernel on packed 4-bit codes, integer and float tables, fused
epilogue); the fused EDSR block (vector and scalar epilogues, partial
tiles, residual, ReLU); the negative controls (each defect against its CPU twin). Depthwise has its own
module (``tests/kernels/test_depthwise_emulated.py``). Index math and algorithms only: speed is a GPU matter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from tests.kernels import emulated_families as fam
from tests.kernels.cuda_emulation import Emulation, emulation, family_source, geometry


def _open(family: str) -> Iterator[Emulation]:
    try:
        yield emulation(family)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def _family_fixture(family: str) -> Any:
    @pytest.fixture(scope="module")
    def fixture() -> Iterator[Emulation]:
        yield from _open(family)

    return fixture


im2col_emu = _family_fixture("im2col_gemm")
pcilt_emu = _family_fixture("pcilt")
edsr_emu = _family_fixture("edsr")
controls_emu = _family_fixture("_controls")


GEOMS = [  # (x shape, kernel, stride, padding, dilation)
    ((2, 3, 7, 9), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 2, 9, 8), (3, 2), (2, 3), (1, 0), (1, 2)),
    ((2, 1, 6, 5), (1, 1), (1, 1), (0, 0), (1, 1)),
]


@pytest.mark.parametrize("layout", ["nkl", "knl", "nlk"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("geom", GEOMS)
def test_im2col(im2col_emu: Emulation, layout: str, dtype: torch.dtype, geom: tuple) -> None:  # type: ignore[type-arg]
    shape, k, s, p, d = geom
    x = torch.randint(-100, 100, shape).to(dtype) if dtype == torch.int8 else torch.randn(shape).to(dtype)
    ho = geometry(shape, k, s, p, d)[4]
    fam.check_im2col(im2col_emu, x, k, s, p, d, 0, ho, layout)
    if ho > 2:  # a band of rows, K padded as the int8 GEMM wants
        fam.check_im2col(im2col_emu, x, k, s, p, d, 1, ho - 2, layout, pad_k_to=8)
    if layout != "nlk":  # the fused bias's ones row, alone and before K padding
        fam.check_im2col(im2col_emu, x, k, s, p, d, 0, ho, layout, ones_row=True)
        fam.check_im2col(im2col_emu, x, k, s, p, d, 0, ho, layout, pad_k_to=8, ones_row=True)


def test_im2col_ones_row_refused_on_k_fast_layout(im2col_emu: Emulation) -> None:
    """The k-fast kernel (nlk) writes no ones row: the launcher says so (cudaErrorInvalidValue)."""
    x = torch.randn(1, 2, 5, 5)
    with pytest.raises(AssertionError, match="cudaError 1"):
        fam.check_im2col(im2col_emu, x, (3, 3), (1, 1), (1, 1), (1, 1), 0, 5, "nlk", ones_row=True)


@pytest.mark.parametrize("layout", ["nkl", "knl", "nlk"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("geom", GEOMS)
def test_col2im(im2col_emu: Emulation, layout: str, dtype: torch.dtype, geom: tuple) -> None:  # type: ignore[type-arg]
    shape, k, s, p, d = geom
    ho = geometry(shape, k, s, p, d)[4]
    fam.check_col2im(im2col_emu, shape, dtype, k, s, p, d, 0, ho, layout, 0, shape[2])
    if ho > 2:  # a band of output rows, scattered into a band of input rows
        fam.check_col2im(im2col_emu, shape, dtype, k, s, p, d, 1, ho - 2, layout, 1, shape[2] - 2)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("w", [1, 5, 16, 33])
def test_quantize_pack(pcilt_emu: Emulation, bits: int, w: int) -> None:
    x = torch.randn(2, 3, 3, w) * 3
    fam.check_quantize_pack(pcilt_emu, x, 0.37, bits)
    fam.check_quantize_pack(pcilt_emu, x, fam.pcilt_tables.default_act_step(x, bits), bits)


LUT_CASES = [  # (x shape, cout, groups, kernel, stride, padding, dilation, bits, whole tables, expected plan)
    ((2, 3, 9, 10), 8, 1, (3, 3), (1, 1), (1, 1), (1, 1), 4, False, 8),
    ((1, 4, 18, 17), 4, 2, (3, 3), (1, 1), (1, 1), (1, 1), 2, False, 2),
    ((1, 2, 8, 9), 4, 1, (3, 2), (2, 1), (1, 0), (1, 2), 4, False, 4),
    ((1, 3, 6, 7), 3, 3, (3, 3), (1, 1), (1, 1), (1, 1), 8, False, 1),
    ((1, 1, 9, 9), 2, 1, (7, 7), (1, 1), (3, 3), (1, 1), 8, True, 1),  # whole 8-bit 7x7 tables: global memory
    ((1, 6, 9, 9), 4, 1, (3, 3), (1, 1), (1, 1), (1, 1), 4, False, 4),  # 6 channels: a block of 4, then of 2
    ((1, 11, 9, 9), 2, 1, (7, 7), (1, 1), (3, 3), (1, 1), 8, True, 1),  # global tables: 8 + 3 channels
    # 8-bit nibble tables (1/8 of the shared memory): 7x7 tables staged for 2 channels (whole: global), ...
    ((1, 11, 9, 9), 2, 1, (7, 7), (1, 1), (3, 3), (1, 1), 8, False, 2),
    ((2, 3, 9, 10), 8, 1, (3, 3), (1, 1), (1, 1), (1, 1), 8, False, 8),  # ... 3x3 for 8 (whole: 2)
    ((2, 3, 9, 10), 8, 1, (3, 3), (1, 1), (1, 1), (1, 1), 8, True, 2),
]


@pytest.mark.parametrize("integer", [True, False])
@pytest.mark.parametrize("case", LUT_CASES)
def test_lut_conv_tiled_and_naive(pcilt_emu: Emulation, case: tuple, integer: bool) -> None:  # type: ignore[type-arg]
    shape, cout, groups, k, s, p, d, bits, whole, expected = case
    x, wt, step = fam.lut_case(shape, cout, groups, k, bits)
    common = dict(integer=integer, fused=False, whole_tables=whole)
    plan = fam.check_lut_conv(pcilt_emu, x, wt, step, s, p, d, groups, bits, naive=False, **common)  # type: ignore[arg-type]
    assert plan == expected, f"the host planned co_block={plan}, the case is meant to cover {expected}"
    assert fam.check_lut_conv(pcilt_emu, x, wt, step, s, p, d, groups, bits, naive=True, **common) == 0  # type: ignore[arg-type]


V2 = fam.pcilt_ops.PLAN_TILED2
V2_CASES = [  # (x shape, cout, groups, kernel, stride, padding, dilation, bits, plan under variant v2)
    ((2, 3, 9, 10), 8, 1, (3, 3), (1, 1), (1, 1), (1, 1), 4, V2 + 8),  # channel groups of 2 + 1
    ((1, 9, 40, 70), 12, 1, (3, 3), (1, 1), (1, 1), (1, 1), 4, V2 + 8),  # 2x3 tiles, co 8 + 4, ci 4 + 4 + 1
    ((1, 4, 18, 17), 8, 2, (3, 3), (1, 1), (1, 1), (1, 1), 2, V2 + 4),  # groups: 4 output channels each
    ((2, 6, 33, 35), 8, 2, (5, 5), (1, 1), (2, 2), (1, 1), 2, V2 + 4),  # 2-bit 5x5, tiles past 32
    ((1, 5, 8, 9), 4, 1, (3, 2), (2, 1), (1, 0), (1, 2), 4, V2 + 4),  # stride, dilation, asymmetric kernel
    ((1, 3, 9, 10), 8, 1, (3, 3), (1, 1), (1, 1), (1, 1), 8, V2 + 8),  # 8-bit nibble tables
    ((1, 2, 37, 21), 8, 1, (1, 1), (2, 2), (0, 0), (1, 1), 8, V2 + 8),  # 1x1 stride 2, W % per != 0
    ((1, 3, 9, 10), 2, 1, (3, 3), (1, 1), (1, 1), (1, 1), 4, 2),  # 2 output channels: v1 runs
    ((1, 3, 9, 9), 8, 1, (7, 7), (1, 1), (3, 3), (1, 1), 8, 2),  # 7x7 8-bit: two buffers do not fit, v1
]


@pytest.mark.parametrize("integer", [True, False])
@pytest.mark.parametrize("case", V2_CASES)
def test_lut_conv_tiled_v2(pcilt_emu: Emulation, case: tuple, integer: bool) -> None:  # type: ignore[type-arg]
    """The v2 tiled kernel (2x2 pixels x 8/4 output channels a thread, double-buffered channel groups,
    whole-word unpacking) exact against the integer oracle (float tables: fp64), where it applies;
    v1 where it does not. The fused epilogue with a bias on every case."""
    shape, cout, groups, k, s, p, d, bits, expected = case
    x, wt, step = fam.lut_case(shape, cout, groups, k, bits)
    for fused, bias in ((False, False), (True, True)):
        plan = fam.check_lut_conv(pcilt_emu, x, wt, step, s, p, d, groups, bits, integer=integer, naive=False,
                                  fused=fused, bias=bias, variant="v2")  # fmt: skip
        assert plan == expected, f"the host planned {plan}, the case is meant to cover {expected}"


def test_lut_conv_tiled_v2_catches_planted_tail() -> None:
    """Control: v2's whole-word unpacking without the ``ix < W`` check reads the last word's unused
    tail (code 0, the lowest level) as image columns, and the exact oracle fails on a 10-wide image."""
    _assert_planted_fails(
        "word_ok && ix < g.w ? static_cast<int>", "word_ok ? static_cast<int>", (1, 3, 9, 10), 8, 1, "v2"
    )


def _assert_planted_fails(old: str, new: str, shape: tuple[int, ...], cout: int, groups: int,
                          variant: str = "v1") -> None:  # fmt: skip
    """pcilt.cu with ``old`` replaced by ``new`` (a planted defect) fails the exact integer oracle on a
    4-bit 3x3 conv of ``shape``."""
    text = family_source("pcilt").read_text()
    assert text.count(old) == 1, "the planted defect's anchor is not unique in pcilt.cu any more"
    emu = emulation("pcilt", text=text.replace(old, new))
    x, wt, step = fam.lut_case(shape, cout, groups, (3, 3), 4)
    with pytest.raises(AssertionError, match="differs from the exact integer oracle"):
        fam.check_lut_conv(emu, x, wt, step, (1, 1), (1, 1), (1, 1), groups, 4, integer=True, naive=False,
                           fused=False, variant=variant)  # fmt: skip


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("integer", [True, False])
def test_lut_plan_seed_v2(pcilt_emu: Emulation, bits: int, integer: bool) -> None:
    """Seed 003 (1 x 64 x 224² -> 128, 3x3) under v2: the v2 kernel with 8 output channels a block at every
    width (the sweep's ``tiled-v2-*`` rows time v2, not a v1 fallback). The host's plan only."""
    flags = fam.pcilt_ops.kernel_flags(False, False, False, "v2")
    ints = [
        int(not integer),
        1,
        64,
        224,
        224,
        224 * bits // 32,
        128,
        1,
        3,
        3,
        1,
        1,
        1,
        1,
        1,
        1,
        224,
        224,
        bits,
        flags,
    ]
    assert pcilt_emu.call("lut_plan", [], ints) == V2 + 8


def test_tiled_variant_names_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fam.pcilt_ops.TILED_VARIANT_ENV, "v3")
    with pytest.raises(ValueError, match=r"CONVPERF_PCILT_VARIANT='v3' must be one of v1, v2"):
        fam.pcilt_ops.kernel_flags(False, False)
    monkeypatch.setenv(fam.pcilt_ops.TILED_VARIANT_ENV, "v2")
    assert fam.pcilt_ops.kernel_flags(False, False) == fam.pcilt_ops.TILED_V2


@pytest.mark.parametrize("naive", [True, False])
@pytest.mark.parametrize("integer", [True, False])
def test_lut_conv_fused_epilogue(pcilt_emu: Emulation, naive: bool, integer: bool) -> None:
    x, wt, step = fam.lut_case((2, 4, 7, 6), 8, 2, (3, 3), 4)
    for bias in (False, True):
        fam.check_lut_conv(pcilt_emu, x, wt, step, (1, 1), (1, 1), (1, 1), 2, 4, integer=integer, naive=naive,
                           fused=True, bias=bias)  # fmt: skip


DW_CASES = [  # (x shape, kernel, padding): depthwise, 4-bit, stride 1 -> the depthwise kernel
    ((2, 5, 11, 13), 3, (1, 1)),  # wo = 13: scalar stores; W % 8 = 5: the last word's tail
    ((1, 3, 9, 16), 3, (1, 1)),  # wo = 16: 16-byte stores, no tail
    ((1, 2, 7, 20), 5, (2, 2)),  # a last word half outside the output row
    ((1, 2, 10, 12), 7, (3, 3)),
    ((1, 2, 6, 18), 3, (0, 0)),  # no padding: the window starts inside word j
    ((1, 2, 5, 9), 3, (2, 7)),  # pw = 7 (the most a window allows), wo > w
    ((1, 100, 4, 4), 3, (1, 1)),  # 100 channels: blocks of 85 (48 KiB of int32 tables) and 15
    ((1, 2, 1, 2056), 3, (1, 1)),  # 257 output words: two word tiles per row
]


@pytest.mark.parametrize("integer", [True, False])
@pytest.mark.parametrize("case", DW_CASES)
def test_lut_conv_depthwise(pcilt_emu: Emulation, case: tuple, integer: bool) -> None:  # type: ignore[type-arg]
    shape, k, p = case
    c = shape[1]
    x, wt, step = fam.lut_case(shape, c, c, (k, k), 4)
    for fused, bias in ((False, False), (True, False), (True, True)):
        plan = fam.check_lut_conv(pcilt_emu, x, wt, step, (1, 1), p, (1, 1), c, 4, integer=integer,
                                  naive=False, fused=fused, bias=bias)  # fmt: skip
        assert plan == -1, f"the host planned {plan}, not the depthwise kernel (-1)"


def test_lut_conv_depthwise_dense_switch(pcilt_emu: Emulation) -> None:
    """``dense`` keeps a depthwise call on the tiled kernel; 2/8-bit, strided or dilated depthwise calls
    and a channel multiplier never take the depthwise kernel."""
    x, wt, step = fam.lut_case((1, 4, 9, 10), 4, 4, (3, 3), 4)
    one = (1, 1)
    plan = fam.check_lut_conv(pcilt_emu, x, wt, step, one, one, one, 4, 4, integer=True, naive=False,
                              fused=True, dense=True)  # fmt: skip
    assert plan == 1, f"dense: planned {plan}, not the tiled kernel's channel block 1"
    for bits, s, d in ((2, one, one), (8, one, one), (4, (2, 2), one), (4, one, (2, 2))):
        x, wt, step = fam.lut_case((1, 4, 9, 10), 4, 4, (3, 3), bits)
        plan = fam.check_lut_conv(pcilt_emu, x, wt, step, s, one, d, 4, bits, integer=True, naive=False,
                                  fused=False)  # fmt: skip
        assert plan > 0, f"bits={bits} stride={s} dilation={d}: planned {plan}, expected the tiled kernel"
    x, wt, step = fam.lut_case((1, 4, 9, 10), 8, 4, (3, 3), 4)  # two output channels per group
    assert fam.check_lut_conv(pcilt_emu, x, wt, step, one, one, one, 4, 4, integer=True, naive=False,
                              fused=False) > 0  # fmt: skip


def test_lut_conv_depthwise_catches_planted_tail() -> None:
    """Control: the depthwise kernel without the zero-level fill of the last word's unused tail reads
    code 0 (level -8) right of the image, and the oracle comparison fails on a 13-wide image."""
    _assert_planted_fails(
        "(__ldg(row + k) | (k == g.wp - 1 ? tail_fill : 0u))", "__ldg(row + k)", (1, 2, 5, 13), 2, 2
    )


@pytest.mark.parametrize(("whole", "expected"), [(False, 8), (True, 2)])
def test_lut_plan_seed_8bit(pcilt_emu: Emulation, whole: bool, expected: int) -> None:
    """Seed 003 (1 x 64 x 224² -> 128, 3x3) at 8 bits: nibble tables let a block hold 8 output channels'
    tables (whole 256-entry tables: 2). The host's plan only; nothing runs."""
    flags = fam.pcilt_ops.kernel_flags(False, False, whole)
    ints = [0, 1, 64, 224, 224, 224 * 8 // 32, 128, 1, 3, 3, 1, 1, 1, 1, 1, 1, 224, 224, 8, flags]
    assert pcilt_emu.call("lut_plan", [], ints) == expected


def test_lut_conv_nibble_tables_catch_planted_offset() -> None:
    """Control: 8-bit nibble tables staged with the lo table one entry off (T[129 + l] for T[128 + l])
    fail the exact integer oracle."""
    text = family_source("pcilt").read_text()
    old = "from = t * 256 + (k < 16 ? k * 16 : 112 + k);"
    assert text.count(old) == 1, "the planted defect's anchor is not unique in pcilt.cu any more"
    emu = emulation("pcilt", text=text.replace(old, "from = t * 256 + (k < 16 ? k * 16 : 113 + k);"))
    x, wt, step = fam.lut_case((1, 3, 9, 10), 8, 1, (3, 3), 8)
    with pytest.raises(AssertionError, match="differs from the exact integer oracle"):
        fam.check_lut_conv(emu, x, wt, step, (1, 1), (1, 1), (1, 1), 1, 8, integer=True, naive=False,
                           fused=False)  # fmt: skip


# Both kernels: v1 (the measured one) and v2 (the next chunk's halo loads in flight during the current
# chunk's compute).
EDSR_VARIANTS = pytest.mark.parametrize("variant", [1, 2])


@EDSR_VARIANTS
@pytest.mark.parametrize("c", [16, 32, 64])
def test_edsr_block(edsr_emu: Emulation, c: int, variant: int) -> None:
    fam.check_sep_conv(edsr_emu, 1, c, 8, 16, residual=True, relu=True, variant=variant)  # float4 epilogue


@EDSR_VARIANTS
@pytest.mark.parametrize(("h", "w"), [(11, 20), (9, 18), (5, 3)])
@pytest.mark.parametrize(("residual", "relu"), [(False, False), (True, False), (False, True)])
def test_edsr_block_partial_tiles(edsr_emu: Emulation, h: int, w: int, residual: bool, relu: bool,
                                  variant: int) -> None:  # fmt: skip
    fam.check_sep_conv(edsr_emu, 2, 16, h, w, residual=residual, relu=relu, variant=variant)


def test_edsr_rejects_an_unknown_variant(edsr_emu: Emulation) -> None:
    x = torch.zeros(1, 16, 8, 8)
    bufs = [x, torch.zeros(16, 1, 3, 3), torch.zeros(16), torch.zeros(16, 16, 1, 1), torch.zeros(16), None, x]
    assert edsr_emu.call("sep_conv", bufs, [1, 16, 8, 8, 0, 3], [0.5]) != 0


CONTROL_GEOMS = [
    ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((1, 2, 6, 6), (5, 5), (1, 1), (2, 2), (1, 1)),
    ((1, 2, 9, 7), (3, 3), (1, 2), (2, 1), (2, 1)),
]


@pytest.mark.parametrize("mode", list(fam.CONTROL_MODES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("geom", CONTROL_GEOMS)
def test_controls(controls_emu: Emulation, mode: str, dtype: torch.dtype, geom: tuple) -> None:  # type: ignore[type-arg]
    shape, k, s, p, d = geom
    fam.check_control(controls_emu, mode, torch.randn(shape).to(dtype), k, s, p, d)


def test_control_repeated_planes_same_result(controls_emu: Emulation) -> None:
    """The slowed control redoes planes and must still be correct."""
    fam.check_control(controls_emu, "correct", torch.randn(2, 3, 8, 8), (3, 3), (1, 1), (1, 1), (1, 1), 4)
