"""``kernels.sass``: the parser on a checked-in SASS sample, and the gate's rules (pass and fail)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels import sass

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def tiny() -> dict[str, sass.KernelSass]:
    """``tiny.cu`` as nvcc 13.0 compiled it for sm_90 (the .sass and .res files beside this test)."""
    funcs = sass.parse_sass((DATA / "tiny_sm90.sass").read_text())
    res = sass.parse_resource_usage((DATA / "tiny_sm90.res").read_text())
    return {n: sass.KernelSass(n, ins, *res[n], pretty=n) for n, ins in funcs.items()}


def test_parser_finds_both_kernels_and_their_registers(tiny: dict[str, sass.KernelSass]) -> None:
    assert set(tiny) == {"_Z5plainPKfPfi", "_Z7divloopPK6float4Pfii"}
    assert tiny["_Z5plainPKfPfi"].registers == 12
    assert tiny["_Z7divloopPK6float4Pfii"].registers == 18


def test_parser_stops_at_the_end_trap_and_drops_nops(tiny: dict[str, sass.KernelSass]) -> None:
    plain = tiny["_Z5plainPKfPfi"].instrs
    assert plain[-1].op == "EXIT"
    assert all(i.base != "NOP" for k in tiny.values() for i in k.instrs)


def test_mix_counts_loads_divisions_and_ffma(tiny: dict[str, sass.KernelSass]) -> None:
    plain = tiny["_Z5plainPKfPfi"].mix
    assert plain.ldg == {32: 1}
    assert plain.ffma == 1
    assert plain.int_div == 0
    div = tiny["_Z7divloopPK6float4Pfii"].mix
    assert div.int_div == 1  # the I2F.RP that opens the inlined i / d
    assert div.ldg == {32: 2}  # .x and .w of the float4, loaded as two scalars


def test_loops_are_backward_branches(tiny: dict[str, sass.KernelSass]) -> None:
    assert tiny["_Z5plainPKfPfi"].loops() == []
    (loop,) = tiny["_Z7divloopPK6float4Pfii"].loops()
    assert (loop.start, loop.end) == (0x180, 0x2E0)
    assert loop.mix.loads == 2
    assert loop.mix.int_div == 0  # the reciprocal is hoisted; the loop keeps a multiply-high


def test_occupancy_from_registers() -> None:
    k = sass.KernelSass("k", [], registers=64)
    assert k.blocks_per_sm() == 4  # 64 x 256 x 4 = 65536 registers
    assert sass.KernelSass("k", [], registers=32).blocks_per_sm() == 8  # thread limit
    assert sass.KernelSass("k", [], registers=32).blocks_per_sm(smem_bytes=100 * 1024) == 2


def test_ptx_division_count() -> None:
    ptx = """
.visible .entry a(
 .param .u32 n
)
{
	div.s32 	%r3, %r1, %r2;
	rem.u32 	%r4, %r1, %r2;
	div.rn.f32 	%f1, %f2, %f3;
}
.visible .entry b(
)
{
	mul.hi.u32 	%r3, %r1, %r2;
}
"""
    assert sass.ptx_int_divs(ptx) == {"a": 2, "b": 0}


def _kernel(pretty: str, ops: list[str], ptx_divs: int = 0) -> sass.KernelSass:
    instrs = [sass.Instr(16 * i, "", op, "R0, R1") for i, op in enumerate(ops)]
    return sass.KernelSass("m", instrs, 32, 0, ptx_divs, pretty)


GATE = (sass.Gate(pattern=r"stream<", vector_when=r", 1>"),)


def test_gate_passes_a_clean_kernel() -> None:
    ok = _kernel("stream<float, 0>", ["LDG.E", "FFMA", "EXIT"])
    assert sass.check([ok], GATE) == []


@pytest.mark.parametrize(
    ("ops", "ptx_divs"),
    [(["I2F.U32.RP", "MUFU.RCP", "EXIT"], 0), (["EXIT"], 3), (["CALL.REL.NOINC", "EXIT"], 0)],
)
def test_gate_fails_on_any_division(ops: list[str], ptx_divs: int) -> None:
    (problem,) = sass.check([_kernel("stream<float, 0>", ops, ptx_divs)], GATE)
    assert "FastDiv" in problem


def test_gate_wants_vector_loads_where_the_layout_allows() -> None:
    looped = ["LDG.E", "STS", "BRA"]  # a loop whose only load is 32-bit
    k = _kernel("stream<float, 1>", looped)
    k.instrs[-1] = sass.Instr(32, "", "BRA", "0x0")
    (problem,) = sass.check([k], GATE)
    assert "64/128-bit" in problem
    k.instrs[0] = sass.Instr(0, "", "LDG.E.128", "R4, desc[UR4][R2.64]")
    assert sass.check([k], GATE) == []


def test_gate_can_demand_16_byte_staging_loads() -> None:
    gate = (sass.Gate(pattern=r"stream<", vector_when=r", 1>", vector_bits=128),)
    k = _kernel("stream<__half, 1>", ["LDG.E.64", "STS", "BRA"])  # 8-byte loads: v2's fp16 staging
    k.instrs[-1] = sass.Instr(32, "", "BRA", "0x0")
    (problem,) = sass.check([k], gate)
    assert "128-bit" in problem
    k.instrs[0] = sass.Instr(0, "", "LDG.E.128", "R4, desc[UR4][R2.64]")
    assert sass.check([k], gate) == []


def test_gate_can_forbid_local_memory() -> None:
    gate = (sass.Gate(pattern=r"stream<", no_local=True),)
    assert sass.check([_kernel("stream<float, 0>", ["LDG.E", "FFMA", "EXIT"])], gate) == []
    (problem,) = sass.check([_kernel("stream<float, 0>", ["STL", "LDL.64", "EXIT"])], gate)
    assert "2 local-memory" in problem


def test_gate_that_matches_nothing_fails() -> None:
    (problem,) = sass.check([_kernel("other<float>", ["EXIT"])], GATE)
    assert "checked nothing" in problem


def test_gate_wants_tensor_cores_where_asked() -> None:
    gate = (sass.Gate(pattern=r"^triton:gemm$", no_int_div=False, tensor_cores=True),)
    simt = _kernel("triton:gemm", ["LDGSTS.E.128", "IMAD", "FFMA", "EXIT"])  # a GEMM on the CUDA cores
    (problem,) = sass.check([simt], gate)
    assert "no tensor-core instruction" in problem
    wgmma = _kernel("triton:gemm", ["LDGSTS.E.128", "IGMMA.64x128x32.S8.S8", "EXIT"])
    assert wgmma.mix.tensor == {"IGMMA": 1}
    assert sass.check([wgmma], gate) == []


def test_the_int8_implicit_gemm_compiles_to_igmma() -> None:
    """The LSQ v2 GEMM as Triton compiles it for sm_90 (no GPU needed): IGMMA in its K loop, no spills."""
    pytest.importorskip("triton")
    try:
        sass.cuobjdump_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    kernels = {k.pretty: k for k in sass.analyze_triton("kernels.im2col_gemm.lsq_triton", "90")}
    gemm = kernels["triton:implicit_gemm"]
    assert any(lp.mix.tensor.get("IGMMA") for lp in gemm.loops())
    assert gemm.stack == 0 and gemm.registers > 0
    assert not kernels["triton:quantize_pack"].mix.tensor
    assert sass.check(list(kernels.values()), sass.GATES["im2col_gemm"]) == []


def test_loop_scoped_gate_allows_prologue_divisions_only() -> None:
    gate = (sass.Gate(pattern=r"lut<", int_div_scope="loops"),)
    prologue = ["I2F.U32.RP", "MUFU.RCP", "LDS", "IADD3", "BRA", "EXIT"]  # a division, then a loop
    k = _kernel("lut<float>", prologue, ptx_divs=1)
    k.instrs[4] = sass.Instr(64, "", "BRA", "0x20")  # the loop: LDS, IADD3
    assert sass.check([k], gate) == []
    looped = ["LDS", "I2F.U32.RP", "BRA", "EXIT"]
    k2 = _kernel("lut<float>", looped)
    k2.instrs[2] = sass.Instr(32, "", "BRA", "0x0")
    (problem,) = sass.check([k2], gate)
    assert "inside 1 loop" in problem


def test_pcilt_sweep_plan_lists_tiled_and_naive_per_bit_width() -> None:
    from kernels.pcilt import sweep_plan

    cases = sweep_plan.cases()
    assert {c.variant for c in cases} >= {f"{k}-{b}bit" for k in ("tiled", "naive") for b in (2, 4, 8)}
    assert len({(c.variant, c.problem_id) for c in cases}) == len(cases)
