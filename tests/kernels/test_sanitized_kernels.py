"""Every kernel family's ``.cu`` under AddressSanitizer + UBSan and under ThreadSanitizer, on the CPU.

The CPU stand-in for compute-sanitizer memcheck and racecheck (``tests/kernels/cuda_emulation.py``): device
buffers and shared arrays are exactly-sized allocations, so an out-of-bounds access is an ASan report
(misaligned vector accesses a UBSan one), and a block's threads run concurrently with only the barriers
between them, so a shared-memory access not ordered by a ``__syncthreads`` is a TSan report. Each case is
also checked against its oracle. The controls at the bottom plant a halo out-of-bounds read, a misaligned
float4 store and a missing ``__syncthreads`` by mutating a real kernel's source; each must be caught with
the kernel and the ``.cu`` line named.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.oracle import assert_conv_close
from tests.kernels import emulated_families as fam
from tests.kernels.cuda_emulation import (
    SANITIZERS,
    VARIANTS,
    EmulatedDepthwise,
    Emulation,
    SanitizerError,
    depthwise_candidate,
    emulation,
    family_source,
)

_CACHE: dict[tuple[str, str], Emulation] = {}


def _emu(family: str, sanitizer: str) -> Emulation:
    if (family, sanitizer) not in _CACHE:
        try:
            _CACHE[family, sanitizer] = emulation(family, sanitizer)
        except FileNotFoundError as exc:
            pytest.skip(str(exc))
    return _CACHE[family, sanitizer]


def _dw(problem: Conv2dProblem, variant: str = "v2") -> Callable[[Emulation], None]:
    def run(emu: Emulation) -> None:
        candidate = depthwise_candidate(EmulatedDepthwise(emu, variant))
        assert_conv_close(candidate, problem, backward=True, device="cpu")

    return run


def _dw_variants(case: str, problem: Conv2dProblem) -> list[tuple[str, str, Callable[[Emulation], None]]]:
    """An NCHW case that reaches the tiled forward / input grad, once per kernel variant (issue 19)."""
    return [("depthwise", f"{case}-{v}", _dw(problem, v)) for v in sorted(VARIANTS)]


def _dwp(**kw: object) -> Conv2dProblem:
    c = int(kw.pop("c"))  # type: ignore[call-overload]
    return Conv2dProblem(c_in=c, c_out=c, groups=c, **kw)  # type: ignore[arg-type]


def _nhwc_vec_strip3(emu: Emulation, c: int = 12, hw: int = 19) -> None:
    """fwd_nhwc_vec with a forced strip of 3 output rows (calls run 8), stride 2, the last strip
    partial."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, c, hw, hw, generator=gen).contiguous(memory_format=torch.channels_last)
    wt, b = torch.randn(c, 1, 5, 5, generator=gen), torch.randn(c, generator=gen)
    y = EmulatedDepthwise(emu, "v3").forward_nhwc_vec(x, wt, b, 2, 2, 3)
    want = torch.nn.functional.conv2d(x.double(), wt.double(), b.double(), 2, 2, 1, c)
    fam.assert_close_fp64(y, want, 26, "strip 3")


X = torch.randn(2, 3, 7, 9, generator=torch.Generator().manual_seed(0))
LUT4 = fam.lut_case((1, 3, 9, 10), 8, 1, (3, 3), 4)
LUT8 = fam.lut_case((1, 1, 9, 9), 2, 1, (7, 7), 8)
LUT_G = fam.lut_case((1, 4, 18, 17), 4, 2, (3, 3), 2)
LUT8_3 = fam.lut_case((1, 3, 9, 10), 8, 1, (3, 3), 8)  # 8-bit nibble tables, 8 output channels a block
LUT_V2G = fam.lut_case((1, 4, 18, 17), 8, 2, (3, 3), 2)  # groups of 4 output channels: v2's co 4
LUT_DW = fam.lut_case((2, 5, 9, 16), 5, 5, (3, 3), 4)  # depthwise, 4-bit: the depthwise kernel
LUT_DW_ODD = fam.lut_case((1, 3, 6, 13), 3, 3, (5, 5), 4)
ONE = (1, 1)

# (family, case id, run on an emulation): small shapes that reach every kernel and code path.
CASES: list[tuple[str, str, Callable[[Emulation], None]]] = [
    *_dw_variants("tile-nchw-vec4-k3", _dwp(n=2, c=3, h=9, w=8, kernel=(3, 3), padding=(1, 1))),
    *_dw_variants("tile-nchw-planes-c12", _dwp(n=1, c=12, h=5, w=5, kernel=(3, 3), padding=(1, 1))),
    *_dw_variants(
        "tile-nchw-s2-vec4", _dwp(n=1, c=2, h=9, w=12, kernel=(3, 3), stride=(2, 2), padding=(1, 1))
    ),
    *_dw_variants("tile-nchw-crop", _dwp(n=1, c=2, h=7, w=7, kernel=(3, 3), padding=(3, 3))),
    (
        "depthwise",
        "rows-nhwc-k5-s2",
        _dw(_dwp(n=1, c=5, h=9, w=7, kernel=(5, 5), stride=(2, 2), padding=(2, 2), layout="nhwc")),
    ),
    (
        "depthwise",
        "direct-k2x3-dil-fp16",
        _dw(_dwp(n=1, c=2, h=6, w=7, kernel=(2, 3), dilation=(2, 1), padding=(1, 1), dtype="fp16")),
    ),
    *_dw_variants("tile-k7-bf16", _dwp(n=1, c=1, h=8, w=8, kernel=(7, 7), padding=(3, 3), dtype="bf16")),
    # v3: 16-byte fp16 chunks along rows (W % 8 == 0), and a staging of more than one batched round.
    (
        "depthwise",
        "tile-v3-rows-fp16",
        _dw(_dwp(n=1, c=2, h=6, w=16, kernel=(3, 3), padding=(1, 1), dtype="fp16"), "v3"),
    ),
    (
        "depthwise",
        "tile-v3-planes-s2-two-rounds",
        _dw(_dwp(n=1, c=2, h=50, w=50, kernel=(3, 3), stride=(2, 2), padding=(1, 1)), "v3"),
    ),
    # v4: U = 4 with the vector store epilogue (Wo % 4 == 0), and U = 1 stride 2 in fp16 with scalar
    # staging (W % 8 != 0) and several planes a block.
    (
        "depthwise",
        "tile-v4-u4-vec-store",
        _dw(_dwp(n=1, c=2, h=12, w=16, kernel=(3, 3), padding=(1, 1), bias=True), "v4"),
    ),
    (
        "depthwise",
        "tile-v4-s2-fp16-scalar",
        _dw(_dwp(n=2, c=3, h=11, w=10, kernel=(5, 5), stride=(2, 2), padding=(2, 2), dtype="fp16"), "v4"),
    ),
    # v3 NHWC vector kernel (forward and stride-1 input grad): fp32 4-channel and 16-bit 8-channel
    # vectors, a partial channel group (3 vectors in a 4-wide block), stride 2, k 7; a forced odd strip.
    (
        "depthwise",
        "nhwc-vec-fp32-k3",
        _dw(_dwp(n=2, c=8, h=9, w=7, kernel=(3, 3), padding=(1, 1), layout="nhwc"), "v3"),
    ),
    (
        "depthwise",
        "nhwc-vec-fp16-k5-s2",
        _dw(
            _dwp(
                n=1,
                c=16,
                h=11,
                w=9,
                kernel=(5, 5),
                stride=(2, 2),
                padding=(2, 2),
                layout="nhwc",
                dtype="fp16",
            ),
            "v3",
        ),
    ),
    (
        "depthwise",
        "nhwc-vec-bf16-k7-c24",
        _dw(_dwp(n=1, c=24, h=8, w=8, kernel=(7, 7), padding=(3, 3), layout="nhwc", dtype="bf16"), "v3"),
    ),
    ("depthwise", "nhwc-vec-strip3-fp32-k5-s2", _nhwc_vec_strip3),
    (
        "im2col_gemm",
        "im2col-knl-fp32-ones-row",
        lambda e: fam.check_im2col(e, X, (3, 3), ONE, ONE, ONE, 0, 7, "knl", ones_row=True),
    ),
    # W2 weight grad with more than one split per channel (the last-block reduction, its counters and
    # fences) and the fused bias: the staged NCHW kernel (stride 2, odd sizes) and the generic NHWC one.
    (
        "depthwise",
        "wgrad-w2-tile-splits",
        _dw(_dwp(n=5, c=2, h=47, w=43, kernel=(5, 5), stride=(2, 2), padding=(2, 2))),
    ),
    (
        "depthwise",
        "wgrad-w2-nhwc-splits",
        _dw(_dwp(n=2, c=35, h=9, w=7, kernel=(3, 3), padding=(1, 1), layout="nhwc")),
    ),
    # W3's NHWC weight grad (wgrad_nhwc_vec, the default w3 of every variant but v1) with 2 splits:
    # fp32 k7 (3 kernel-row groups, a partial channel block) and bf16 k7 stride 2 (7 groups).
    (
        "depthwise",
        "wgrad-w3-nhwc-vec-fp32-k7-splits",
        _dw(_dwp(n=2, c=12, h=13, w=9, kernel=(7, 7), padding=(3, 3), layout="nhwc")),
    ),
    (
        "depthwise",
        "wgrad-w3-nhwc-vec-bf16-k7-s2-splits",
        _dw(
            _dwp(
                n=2,
                c=16,
                h=25,
                w=21,
                kernel=(7, 7),
                stride=(2, 2),
                padding=(3, 3),
                layout="nhwc",
                dtype="bf16",
            )
        ),
    ),
    ("im2col_gemm", "im2col-nlk-fp32", lambda e: fam.check_im2col(e, X, (3, 3), ONE, ONE, ONE, 0, 7, "nlk")),
    (
        "im2col_gemm",
        "im2col-knl-int8-band",
        lambda e: fam.check_im2col(
            e,
            torch.randint(-100, 100, (1, 2, 9, 8), dtype=torch.int8),
            (3, 2),
            (2, 3),
            (1, 0),
            (1, 2),
            1,
            2,
            "knl",
            8,
        ),
    ),
    (
        "im2col_gemm",
        "col2im-nkl-bf16-band",
        lambda e: fam.check_col2im(
            e, (1, 2, 9, 8), torch.bfloat16, (3, 2), (2, 3), (1, 0), (1, 2), 1, 2, "nkl", 1, 6
        ),
    ),
    ("pcilt", "quantize-pack", lambda e: fam.check_quantize_pack(e, X, 0.37, 4)),
    (
        "pcilt",
        "tiled-co8-int",
        lambda e: fam.check_lut_conv(e, *LUT4, ONE, ONE, ONE, 1, 4, integer=True, naive=False, fused=False),
    ),
    (
        "pcilt",
        "tiled-groups-co2-fused",
        lambda e: fam.check_lut_conv(
            e, *LUT_G, ONE, ONE, ONE, 2, 2, integer=True, naive=False, fused=True, bias=True
        ),
    ),
    (
        "pcilt",
        "tiled-global-tables-float",
        lambda e: fam.check_lut_conv(
            e, *LUT8, ONE, (3, 3), ONE, 1, 8, integer=False, naive=False, fused=False
        ),
    ),
    (
        "pcilt",
        "depthwise-vec-fused",
        lambda e: fam.check_lut_conv(
            e, *LUT_DW, ONE, ONE, ONE, 5, 4, integer=True, naive=False, fused=True, bias=True
        ),
    ),
    (
        "pcilt",
        "depthwise-k5-tail-float",
        lambda e: fam.check_lut_conv(
            e, *LUT_DW_ODD, ONE, (2, 2), ONE, 3, 4, integer=False, naive=False, fused=True
        ),
    ),
    (
        "pcilt",
        "tiled-8bit-nibble-tables-float",
        lambda e: fam.check_lut_conv(e, *LUT8_3, ONE, ONE, ONE, 1, 8, integer=False, naive=False, fused=True),
    ),
    (  # v2 tiled: 3 channels in groups of 2 + 1 through both shared buffers
        "pcilt",
        "tiled-v2-co8-int",
        lambda e: fam.check_lut_conv(
            e, *LUT4, ONE, ONE, ONE, 1, 4, integer=True, naive=False, fused=False, variant="v2"
        ),
    ),
    (
        "pcilt",
        "tiled-v2-groups-co4-fused",
        lambda e: fam.check_lut_conv(
            e, *LUT_V2G, ONE, ONE, ONE, 2, 2, integer=True, naive=False, fused=True, bias=True, variant="v2"
        ),
    ),
    (
        "pcilt",
        "tiled-v2-8bit-nibble-float",
        lambda e: fam.check_lut_conv(
            e, *LUT8_3, ONE, ONE, ONE, 1, 8, integer=False, naive=False, fused=True, variant="v2"
        ),
    ),
    (
        "pcilt",
        "naive-fused",
        lambda e: fam.check_lut_conv(
            e, *LUT4, (2, 1), ONE, ONE, 1, 4, integer=True, naive=True, fused=True, bias=True
        ),
    ),
    (
        "edsr",
        "c16-vec-residual-relu",
        lambda e: fam.check_sep_conv(e, 1, 16, 8, 16, residual=True, relu=True),
    ),
    ("edsr", "c32-partial-scalar", lambda e: fam.check_sep_conv(e, 1, 32, 9, 18, residual=True, relu=False)),
    (
        "edsr",
        "c16-v2-prefetch-partial",
        lambda e: fam.check_sep_conv(e, 2, 16, 11, 20, residual=True, relu=True, variant=2),
    ),
    ("_controls", "correct-fp32", lambda e: fam.check_control(e, "correct", X, (3, 3), (2, 2), ONE, ONE, 2)),
    (
        "_controls",
        "wrong-border-fp16",
        lambda e: fam.check_control(e, "wrong_border", X.half(), (3, 3), ONE, ONE, ONE),
    ),
]


@pytest.mark.parametrize("sanitizer", SANITIZERS)
@pytest.mark.parametrize(
    ("family", "case"), [(f, c) for f, c, _ in CASES], ids=[f"{f}-{c}" for f, c, _ in CASES]
)
def test_kernels_clean_under_sanitizer(family: str, case: str, sanitizer: str) -> None:
    run = next(r for f, c, r in CASES if (f, c) == (family, case))
    run(_emu(family, sanitizer))


def test_every_kernel_is_covered() -> None:
    """Each family with a .cu has sanitized cases (a new family cannot slip past the sanitizers)."""
    from kernels import _build

    assert {f for f, _, _ in CASES} == set(_build.families())


def _line_of(text: str, needle: str) -> int:
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    assert len(hits) == 1, f"expected one line containing {needle!r} in the kernel, found {hits}"
    return hits[0]


def _mutate(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"the planted defect's anchor {old!r} is not unique in the kernel any more"
    return text.replace(old, new)


# (old, new, the line the report must name, image width, what the report must say) in edsr.cu
EDSR_DEFECTS = {
    # The halo staging reads one column past the image: an out-of-bounds read of x.
    "halo-read": (
        "gw >= 0 && gw < W) v = __ldg",
        "gw >= 0 && gw <= W) v = __ldg",
        "gw <= W) v = __ldg",
        16,
        "heap-buffer-overflow",
    ),
    # The float4 epilogue without its W % 4 check: rows of an 18-wide image are not 16-byte aligned.
    "misaligned-float4": (
        "const bool vec = (W % 4 == 0) && (gw + PX <= W);",
        "const bool vec = gw + PX <= W;",
        "*reinterpret_cast<float4*>(yn + off) = make_float4",
        18,
        "misaligned address",
    ),
}


def test_ubsan_catches_planted_misaligned_depthwise_store() -> None:
    """pcilt.cu's depthwise kernel without the wo % 4 check on its 16-byte stores: a 13-wide output row
    is not 16-byte aligned, and UBSan names the kernel and the store's line."""
    cu = family_source("pcilt")
    text = _mutate(cu.read_text(), "const bool vec_out = g.wo % 4 == 0;", "const bool vec_out = true;")
    line = _line_of(text, "dst[0] = make_float4(")
    emu = emulation("pcilt", "asan", text)
    with pytest.raises(SanitizerError) as err:
        fam.check_lut_conv(emu, *LUT_DW_ODD, ONE, (2, 2), ONE, 3, 4, integer=True, naive=False, fused=True)
    msg = str(err.value).splitlines()[0]
    assert "misaligned address" in msg and "in kernel lut_dw4_kernel" in msg, msg
    assert f"pcilt/{cu.name}:{line}" in msg, msg


@pytest.mark.parametrize("defect", list(EDSR_DEFECTS))
def test_asan_ubsan_catch_planted_defect(defect: str) -> None:
    """A planted out-of-bounds halo read (ASan) or misaligned float4 store (UBSan) in edsr.cu is caught,
    and the message names the kernel and the line."""
    old, new, needle, width, kind = EDSR_DEFECTS[defect]
    cu = family_source("edsr")
    text = _mutate(cu.read_text(), old, new)
    line = _line_of(text, needle)
    emu = emulation("edsr", "asan", text)
    with pytest.raises(SanitizerError) as err:
        fam.check_sep_conv(emu, 1, 16, 8, width, residual=False, relu=False)
    msg = str(err.value).splitlines()[0]
    assert kind in msg and "in kernel sep_conv_fwd_kernel" in msg, msg
    assert f"edsr/{cu.name}:{line}" in msg, msg


# (old, new, the line the report must name, what the report must say, channels) in depthwise.cu's
# v3 NHWC kernel
NHWC_VEC_DEFECTS = {
    # The column bound test lets the right halo read one pixel past the row: past the end of x on the
    # last row of the last sample.
    "halo-read": (
        "const bool ok = row_ok && iw >= 0 && iw < a.w;",
        "const bool ok = row_ok && iw >= 0 && iw <= a.w;",
        "return *reinterpret_cast<const uint4*>(p);",
        "heap-buffer-overflow",
        8,
    ),
    # The dispatch without its C % vector-width test: with C = 6 every second pixel's 16-byte vector
    # starts 8 bytes off a 16-byte boundary.
    "misaligned-vector": (
        "&& a.c % VW == 0 &&",
        "&&",
        "return *reinterpret_cast<const uint4*>(p);",
        "misaligned address",
        6,
    ),
}


@pytest.mark.parametrize("defect", list(NHWC_VEC_DEFECTS))
def test_asan_ubsan_catch_planted_nhwc_vec_defect(defect: str) -> None:
    """A planted out-of-bounds halo read (ASan) or misaligned 16-byte load (UBSan) in the v3 NHWC
    kernel is caught, naming fwd_nhwc_vec and the load's line."""
    old, new, needle, kind, c = NHWC_VEC_DEFECTS[defect]
    cu = family_source("depthwise")
    text = _mutate(cu.read_text(), old, new)
    line = _line_of(text, needle)
    emu = emulation("depthwise", "asan", text)
    x = torch.randn(1, c, 5, 6).contiguous(memory_format=torch.channels_last)
    with pytest.raises(SanitizerError) as err:  # the forward entry directly: the oracle would wrap it
        EmulatedDepthwise(emu, "v3").forward(x, torch.randn(c, 1, 3, 3), None, ONE, ONE, ONE, True)
    msg = str(err.value).splitlines()[0]
    assert kind in msg and "in kernel fwd_nhwc_vec" in msg, msg
    assert f"depthwise/{cu.name}:{line}" in msg, msg


def test_tsan_catches_planted_missing_syncthreads() -> None:
    """pcilt.cu's tiled kernel restages its shared input tile for the next channel without waiting for
    the block to finish reading it: TSan names the kernel and the racing lines."""
    cu = family_source("pcilt")
    text = cu.read_text()
    anchor = "    __syncthreads();\n  }\n  if (oy < g.ho && ox < g.wo) {"
    text = _mutate(text, anchor, anchor.replace("__syncthreads();", ""))
    writes = {
        _line_of(text, "s_in_q[r * in_tw + cc] = static_cast<uint8_t>(code);"),
        _line_of(text, "s_tab_q[j * row_elems + e] ="),
    }
    reads = {_line_of(text, "const int code = s_in_q["), _line_of(text, "acc[j] += s_tab_q[")}
    _assert_tsan_race(text, "lut_tiled_kernel", writes, reads, "v1")


def _assert_tsan_race(text: str, kernel: str, writes: set[int], reads: set[int], variant: str) -> None:
    """pcilt.cu ``text`` (a planted defect) on LUT4 under TSan: a data race in ``kernel`` between a
    line of ``writes`` and one of ``reads``."""
    emu = emulation("pcilt", "tsan", text)
    with pytest.raises(SanitizerError) as err:
        x, wt, step = LUT4
        fam.check_lut_conv(emu, x, wt, step, ONE, ONE, ONE, 1, 4, integer=True, naive=False, fused=False,
                           variant=variant)  # fmt: skip
    msg = str(err.value).splitlines()[0]
    assert "data race" in msg and f"in kernel {kernel}" in msg, msg
    lines = {int(n) for n in re.findall(r"pcilt/pcilt\.cu:(\d+)", msg)}
    assert lines & writes and lines & reads, f"{msg}: expected a staging write {writes} and a read {reads}"


def test_tsan_catches_planted_single_buffer_in_tiled_v2() -> None:
    """pcilt.cu's v2 tiled kernel staging the next channel group into the buffer the block is still
    reading (one buffer, not two): TSan names the kernel and the racing staging write and read."""
    cu = family_source("pcilt")
    text = _mutate(
        cu.read_text(),
        "if (next < g.cg) stage(next, min(ci_block, g.cg - next), b ^ 1);",
        "if (next < g.cg) stage(next, min(ci_block, g.cg - next), b);",
    )
    writes = {
        _line_of(text, "s_row[cc] = static_cast<uint8_t>(code);"),
        _line_of(text, "s_tab_q[e] = co < co_end"),
    }
    # Any of the four code reads or the table read: which racing pair TSan reports first varies by run
    # (CI once reported code[1]'s).
    code_reads = (
        "code[0] = s_r0[dx];",
        "code[1] = s_r0[dx + g.sw];",
        "code[2] = s_r1[dx];",
        "code[3] = s_r1[dx + g.sw];",
    )
    reads = {_line_of(text, r) for r in code_reads} | {_line_of(text, "acc[j][p] += t[j * B::kRowLevels];")}
    _assert_tsan_race(text, "lut_tiled2_kernel", writes, reads, "v2")


def test_asan_catches_planted_v4_staging_overread() -> None:
    """depthwise.cu's v4 forward staging one row past the image (``ih <= h``): the last plane's bottom
    halo row reads past the input, and ASan names the v4 kernel and the staging line."""
    cu = family_source("depthwise")
    text = _mutate(
        cu.read_text(),
        "const bool in = plane0 + p < a.planes && ih >= 0 && ih < a.h;",
        "const bool in = plane0 + p < a.planes && ih >= 0 && ih <= a.h;",
    )
    line = _line_of(text, "if (in) raw[j] = load16(xb + at);")
    emu = EmulatedDepthwise(emulation("depthwise", "asan", text), "v4")
    x, wt = torch.randn(1, 2, 12, 16), torch.randn(2, 1, 3, 3)
    with pytest.raises(SanitizerError) as err:
        emu.forward(x, wt, None, (1, 1), (1, 1), (1, 1), False)
    msg = str(err.value).splitlines()[0]
    assert "heap-buffer-overflow" in msg and "in kernel fwd_tile_nchw_v4" in msg, msg
    assert f"depthwise/{cu.name}:{line}" in msg, msg


def _wgrad_nhwc_call(emu: Emulation, c: int, hw: tuple[int, int], k: int) -> None:
    """W3's NHWC weight grad (with the bias) through the entry point directly (the oracle would wrap
    a sanitizer report), stride 1, padding k // 2, 2 samples, 3 SMs (more than one split)."""
    gen = torch.Generator().manual_seed(c)
    x = torch.randn(2, c, *hw, generator=gen).contiguous(memory_format=torch.channels_last)
    dy = torch.randn(2, c, *hw, generator=gen).contiguous(memory_format=torch.channels_last)
    p = (k // 2, k // 2)
    EmulatedDepthwise(emu, "v2", "w3").weight_grad(dy, x, (k, k), ONE, p, ONE, True, bias=True)


def test_asan_catches_planted_wgrad_nhwc_halo_overread() -> None:
    """The NHWC vector kernels' column test one pixel too wide (``iw <= a.w`` in ``load_row16``, as
    NHWC_VEC_DEFECTS plants it for the forward), run by the weight grad: the right halo of the last
    row of the last sample reads one 16-byte vector past x, and ASan names wgrad_nhwc_vec and the load."""
    cu = family_source("depthwise")
    old, new, *_ = NHWC_VEC_DEFECTS["halo-read"]
    text = _mutate(cu.read_text(), old, new)
    line = _line_of(text, "return *reinterpret_cast<const uint4*>(p);")
    with pytest.raises(SanitizerError) as err:
        _wgrad_nhwc_call(emulation("depthwise", "asan", text), 8, (5, 6), 3)
    msg = str(err.value).splitlines()[0]
    assert "heap-buffer-overflow" in msg and "in kernel wgrad_nhwc_vec" in msg, msg
    assert f"depthwise/{cu.name}:{line}" in msg, msg


def test_tsan_catches_planted_missing_barrier_in_wgrad_nhwc() -> None:
    """wgrad_nhwc_vec without the barrier between the warps writing their partial sums and the block
    reading them (``warp_partials`` then ``sum_warp_partials``): TSan names the kernel and the racing
    write and read of the reduction buffer."""
    cu = family_source("depthwise")
    text = _mutate(
        cu.read_text(),
        "warp_partials<NV, CT>(acc, red, tid);\n  __syncthreads();",
        "warp_partials<NV, CT>(acc, red, tid);",
    )
    write = _line_of(text, "if (lane < GROUP) red[(warp * GROUP + lane) * NV + t] = v;")
    read = _line_of(text, "sum += red[(wi * GROUP + lane) * NV + t];")
    with pytest.raises(SanitizerError) as err:
        _wgrad_nhwc_call(emulation("depthwise", "tsan", text), 8, (9, 7), 3)
    msg = str(err.value).splitlines()[0]
    assert "data race" in msg and "in kernel wgrad_nhwc_vec" in msg, msg
    lines = {int(n) for n in re.findall(rf"depthwise/{re.escape(cu.name)}:(\d+)", msg)}
    assert {write, read} <= lines, f"{msg}: expected the write (line {write}) and the read (line {read})"
