"""Static SASS report per kernel instance, and the CI gate on the streaming kernels (no GPU needed).

``python -m kernels.sass [FAMILY ...] [--arch 90] [--gate]`` compiles each family's ``.cu`` files to
a cubin (nvcc) and to PTX, disassembles the cubin with ``cuobjdump`` (CUDA's, or the one triton's
wheel ships) and prints per kernel: registers, occupancy on the arch, and for the whole kernel and
each loop (a backward branch) the instruction mix: global loads by width, integer-division
sequences, FFMAs, shared-memory traffic and tensor-core instructions (HMMA/IMMA/HGMMA/IGMMA).
Families with Triton kernels (``TRITON_SPECS``) add them, compiled by ``triton.compile`` for the
arch. ``--gate`` fails (exit 1) when a kernel under a ``Gate`` holds an integer div/rem (PTX
``div``/``rem`` on integers, or the SASS ``I2F.*.RP`` that opens every inlined integer division),
lacks the vector global loads its layout allows, or (``tensor_cores``) issues no tensor-core
instruction.

This is static analysis: counts are instructions in the binary, not issued instructions; the
per-shape figures built on them (``python -m kernels.model``: the depthwise cost model reads this
module, never the other way) are predictions, not measurements.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernels import _build, h100

# SASS opcodes of the tensor cores: warp-level MMA (sm_80: HMMA fp16/bf16/tf32, IMMA int8) and
# warpgroup MMA (sm_90 wgmma: HGMMA, IGMMA int8, QGMMA fp8).
TENSOR_CORE_OPS = ("HMMA", "IMMA", "HGMMA", "IGMMA", "QGMMA")


@dataclass(frozen=True)
class Instr:
    """One SASS instruction: address, guard predicate (``""`` when none), opcode with modifiers."""

    addr: int
    pred: str
    op: str
    operands: str

    @property
    def base(self) -> str:
        return self.op.split(".")[0]


@dataclass
class Mix:
    """Instruction mix of a stretch of SASS."""

    total: int = 0
    ffma: int = 0
    int_div: int = 0  # inlined integer divisions (I2F.*.RP opens each one)
    calls: int = 0
    ldg: dict[int, int] = field(default_factory=dict)  # global loads by width in bits
    stg: int = 0
    lds: int = 0
    sts: int = 0
    bar: int = 0
    tensor: dict[str, int] = field(default_factory=dict)  # tensor-core instructions by opcode base

    local: int = 0  # LDL/STL: register spills (or a stack array), DRAM traffic in the hot loop

    def add(self, ins: Instr) -> None:
        self.total += 1
        base, mods = ins.base, ins.op.split(".")[1:]
        if base == "FFMA":
            self.ffma += 1
        elif base == "I2F" and "RP" in mods:
            self.int_div += 1
        elif base == "CALL":
            self.calls += 1
        elif base == "LDG":
            width = next((int(m) for m in mods if m in ("64", "128")), 0)
            if not width:
                width = 16 if any(m in ("U16", "S16") for m in mods) else 8 if "U8" in mods else 32
            self.ldg[width] = self.ldg.get(width, 0) + 1
        elif base == "STG":
            self.stg += 1
        elif base == "LDS":
            self.lds += 1
        elif base == "STS":
            self.sts += 1
        elif base == "BAR":
            self.bar += 1
        elif base in TENSOR_CORE_OPS:
            self.tensor[base] = self.tensor.get(base, 0) + 1

        elif base in ("LDL", "STL"):
            self.local += 1

    @property
    def loads(self) -> int:
        return sum(self.ldg.values())

    @property
    def vector_loads(self) -> int:
        return sum(n for w, n in self.ldg.items() if w >= 64)

    def brief(self) -> str:
        ldg = " ".join(f"{w}b:{n}" for w, n in sorted(self.ldg.items())) or "-"
        return (
            f"{self.total:5d} ins  ldg[{ldg}]  ffma {self.ffma}  lds/sts {self.lds}/{self.sts}  "
            f"idiv {self.int_div}  call {self.calls}  tensor-core "
            f"{' '.join(f'{k}:{n}' for k, n in sorted(self.tensor.items())) or 'none'}"
        )


@dataclass
class Loop:
    """A loop: the instructions from a backward branch's target up to the branch."""

    start: int
    end: int
    mix: Mix


@dataclass
class KernelSass:
    """Static facts of one kernel instance."""

    name: str  # mangled
    instrs: list[Instr]
    registers: int = 0
    shared_static: int = 0
    ptx_int_divs: int = 0
    pretty: str = ""
    ptx_mma: int = 0  # PTX mma.sync / wgmma.mma_async instructions (filled for Triton kernels)
    stack: int = 0  # bytes of stack (spills) per thread (filled for Triton kernels)

    @property
    def mix(self) -> Mix:
        m = Mix()
        for ins in self.instrs:
            m.add(ins)
        return m

    def loops(self) -> list[Loop]:
        """Every backward branch gives one loop (nested ones overlap); the branch-to-self that pads the
        end of a function is not a loop."""
        out = []
        for ins in self.instrs:
            if ins.base == "BRA" and (m := re.match(r"(?:`\()?(0x[0-9a-f]+)", ins.operands)):
                target = int(m.group(1), 16)
                if target < ins.addr:
                    mix = Mix()
                    for j in self.instrs:
                        if target <= j.addr <= ins.addr:
                            mix.add(j)
                    out.append(Loop(target, ins.addr, mix))
        return out

    def split_at_last_barrier(self) -> tuple[Mix, Mix]:
        """Mixes of the code outside loops before and after the last ``BAR`` (staging | compute)."""
        in_loop = [(lp.start, lp.end) for lp in self.loops()]
        bars = [i.addr for i in self.instrs if i.base == "BAR"]
        cut = bars[-1] if bars else -1
        pre, post = Mix(), Mix()
        for ins in self.instrs:
            if any(a <= ins.addr <= b for a, b in in_loop):
                continue
            (pre if ins.addr <= cut else post).add(ins)
        return pre, post

    def blocks_per_sm(self, threads: int = 256, smem_bytes: int = 0) -> int:
        """Resident blocks per SM on sm_90 from registers, threads and shared memory."""
        return h100.resident_blocks(threads, self.registers, smem_bytes)


_FUNC_RE = re.compile(r"^\s*Function : (\S+)")
_INSTR_RE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*([^;]*);")
_RES_RE = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+)\s+STACK:\d+\s+SHARED:(\d+)")


def parse_sass(text: str) -> dict[str, list[Instr]]:
    """``cuobjdump -sass`` output -> instructions per (mangled) function name: the kernel body up to the
    branch-to-self that ends it (what follows is padding and out-of-line subroutines such as the
    slow path of a 64-bit division, reached by ``CALL``), without ``NOP`` padding."""
    out: dict[str, list[Instr]] = {}
    current: list[Instr] | None = None
    for line in text.splitlines():
        if m := _FUNC_RE.match(line):
            current = out.setdefault(m.group(1), [])
        elif current is not None and (m := _INSTR_RE.search(line)):
            ins = Instr(int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4).strip())
            if ins.base == "BRA" and ins.operands.startswith(hex(ins.addr)):
                current = None  # the end-of-kernel trap
            elif ins.base != "NOP":
                current.append(ins)
    return out


def parse_resource_usage(text: str) -> dict[str, tuple[int, int]]:
    """``cuobjdump -res-usage`` output -> (registers, static shared bytes) per function."""
    return {m.group(1).rstrip(":"): (int(m.group(2)), int(m.group(3))) for m in _RES_RE.finditer(text)}


_PTX_ENTRY_RE = re.compile(r"\.entry\s+(\w+)\(")
_PTX_IDIV_RE = re.compile(r"^\s*(?:@!?%p\d+\s+)?(div|rem)\.(?:s|u)(?:16|32|64)\b", re.M)


def ptx_int_divs(ptx: str) -> dict[str, int]:
    """Integer ``div``/``rem`` instructions per ``.entry`` in PTX text."""
    out: dict[str, int] = {}
    entries = list(_PTX_ENTRY_RE.finditer(ptx))
    for i, m in enumerate(entries):
        body = ptx[m.end() : entries[i + 1].start() if i + 1 < len(entries) else len(ptx)]
        out[m.group(1)] = len(_PTX_IDIV_RE.findall(body))
    return out


def cuobjdump_path() -> Path:
    """``$CUOBJDUMP``, CUDA's ``cuobjdump``, one on PATH, or the one in triton's wheel."""
    candidates: list[Path] = []
    if env := os.environ.get("CUOBJDUMP"):
        candidates.append(Path(env))
    home = _build.cuda_home()
    if home is not None:
        candidates.append(home / "bin" / "cuobjdump")
    if which := shutil.which("cuobjdump"):
        candidates.append(Path(which))
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(
        "cuobjdump not found: install the CUDA toolkit, `pip install triton` (its wheel ships one), "
        "or set CUOBJDUMP to its path"
    )


def _run(cmd: list[str]) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise _build.KernelBuildError(
            f"{cmd[0]} failed:\n{(res.stderr or res.stdout)[-3000:]}\n{' '.join(cmd)}"
        )
    return res.stdout


def analyze(cu_file: Path, arch: str = "90") -> list[KernelSass]:
    """Compile ``cu_file`` for ``sm_<arch>`` and return every kernel's static facts."""
    nvcc = _build.nvcc_path()
    if nvcc is None:
        raise _build.KernelBuildError("nvcc not found: set CUDA_HOME to build the SASS report")
    flags = [*_build.CUDA_FLAGS, "-std=c++17", f"-arch=sm_{arch}", "-I", str(cu_file.parent)]
    if _build.SHARED_INCLUDE.is_dir():
        flags += ["-I", str(_build.SHARED_INCLUDE)]
    with tempfile.TemporaryDirectory() as tmp:
        cubin, ptx = Path(tmp) / "k.cubin", Path(tmp) / "k.ptx"
        _run([str(nvcc), "-cubin", *flags, str(cu_file), "-o", str(cubin)])
        _run([str(nvcc), "-ptx", *flags, str(cu_file), "-o", str(ptx)])
        tool = str(cuobjdump_path())
        sass = parse_sass(_run([tool, "-sass", str(cubin)]))
        res = parse_resource_usage(_run([tool, "-res-usage", str(cubin)]))
        divs = ptx_int_divs(ptx.read_text())
    names = _build._demangle(sorted(sass))
    out = []
    for name, instrs in sorted(sass.items()):
        regs, shared = res.get(name, (0, 0))
        out.append(KernelSass(name, instrs, regs, shared, divs.get(name, 0), names.get(name, name)))
    return out


# Families with Triton kernels: a module whose ``sass_specs()`` lists (name, source function,
# signature, constexprs, launch options) per kernel; ``triton.compile`` builds them without a GPU.
TRITON_SPECS = {"im2col_gemm": ("kernels.im2col_gemm.lsq_triton", "kernels.im2col_gemm.implicit_triton")}


def analyze_triton(module: str, arch: str = "90") -> list[KernelSass]:
    """Compile each Triton kernel of ``module`` for ``sm_<arch>`` and return its static facts; the
    demangled name is ``triton:<name>``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out = []
    tool = str(cuobjdump_path())
    for name, fn, sig, consts, options in importlib.import_module(module).sass_specs():
        jit = triton.jit(fn)
        signature = {a: ("constexpr" if a in consts else sig[a].split(":")[0]) for a in jit.arg_names}
        # "<type>:16": divisible by 16, as the launcher specializes aligned pointers and such sizes
        attrs = {
            (i,): [["tt.divisibility", 16]]
            for i, a in enumerate(jit.arg_names)
            if sig.get(a, "").endswith(":16")
        }
        consts_at = {(jit.arg_names.index(k),): v for k, v in consts.items()}
        src = ASTSource(jit, signature, constexprs=consts_at, attrs=attrs)
        compiled = triton.compile(src, target=GPUTarget("cuda", int(arch), 32), options=options)
        with tempfile.TemporaryDirectory() as tmp:
            cubin = Path(tmp) / "k.cubin"
            cubin.write_bytes(compiled.asm["cubin"])
            sass = parse_sass(_run([tool, "-sass", str(cubin)]))
            usage = _run([tool, "-res-usage", str(cubin)])
        ptx = compiled.asm["ptx"]
        divs = ptx_int_divs(ptx)
        for mangled, instrs in sass.items():
            m = re.search(rf"Function {re.escape(mangled)}:.*?REG:(\d+)\s+STACK:(\d+)", usage, re.S)
            regs, stack = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
            ks = KernelSass(mangled, instrs, regs, int(compiled.metadata.shared), divs.get(mangled, 0))
            ks.stack = stack
            ks.pretty = f"triton:{name}"
            ks.ptx_mma = len(re.findall(r"^\s*(?:@!?%p\d+\s+)?(?:wgmma\.mma_async|mma\.sync)", ptx, re.M))
            out.append(ks)
    return out


# ---- the gate -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """Rules for the kernels whose demangled name matches ``pattern``."""

    pattern: str
    no_int_div: bool = True
    # template-argument regex (on the demangled name) of instances whose layout allows vector loads
    vector_when: str = ""
    # "kernel": no integer div/rem anywhere (PTX and SASS); "loops": none inside a loop (SASS), so
    # per-block index math in the prologue is allowed
    int_div_scope: str = "kernel"
    tensor_cores: bool = False  # must issue tensor-core instructions (SASS HMMA/IMMA/HGMMA/IGMMA)

    vector_bits: int = 64  # the narrowest global load that counts as a vector staging load
    no_local: bool = False  # no LDL/STL anywhere: no spill, no stack array
    why: str = ""


GATES: dict[str, tuple[Gate, ...]] = {
    # fwd_tile_nchw (v1) is the A/B baseline and exempt; v2 is the streaming forward and dgrad kernel.
    "depthwise": (
        Gate(
            pattern=r"fwd_tile_nchw_v2<",
            vector_when=r", [12]>",  # StageMode kStageRows4 / kStagePlanes4
            why="NCHW tiled forward / input grad (v2)",
        ),
        Gate(
            pattern=r"fwd_tile_nchw_v3<",
            vector_when=r", [12]>",
            vector_bits=128,  # 16-byte staging loads for every dtype
            no_local=True,
            why="NCHW tiled forward / input grad (v3, batched staging)",
        ),
        Gate(
            pattern=r"fwd_tile_nchw_v4<",
            vector_when=r".",  # every instance holds the 16-byte chunk staging loop
            vector_bits=128,
            no_local=True,
            why="NCHW tiled forward / input grad (v4, register-window tiles)",
        ),
        Gate(
            pattern=r"fwd_nhwc_vec<",
            vector_when=r"fwd_nhwc_vec<",  # every instance: C % vector width == 0 is its precondition
            vector_bits=128,  # one 16-byte load per input pixel
            no_local=True,
            why="NHWC forward / stride-1 input grad (v3, channel vectors)",
        ),
        Gate(pattern=r"wgrad_tile_nchw<", no_local=True, why="NCHW staged weight grad (W2)"),
        # W3's NHWC weight grad: item -> (n, strip, ow) by FastDiv, the reduction's slot decode by
        # compile-time divisors; every instance loads 16-byte channel vectors (C % VW == 0 is its
        # precondition) and keeps its tap sums in registers
        Gate(
            pattern=r"wgrad_nhwc_vec<",
            vector_when=r"wgrad_nhwc_vec<",
            vector_bits=128,
            no_local=True,
            why="NHWC weight grad (W3, channel vectors)",
        ),
        Gate(pattern=r"dgrad_s2<", no_local=True, why="stride-2 input grad (parity phases)"),
        # W2's generic weight grad: the per-block channel/split decode may divide, the loops may not
        Gate(pattern=r"wgrad_partial<[^>]*, true>", int_div_scope="loops", why="generic weight grad (W2)"),
    ),
    # PCILT's tiled kernel: staging and lookup loops free of div/rem (the prologue's tile index math
    # runs once per block).
    # The depthwise kernel divides once per thread (block -> channel block, word tile), never in a loop,
    # and keeps its unpacked codes and 4 x 8 accumulators in registers (no local-memory array).
    "pcilt": (
        Gate(pattern=r"lut_tiled_kernel<", int_div_scope="loops", why="PCILT tiled loops"),
        Gate(pattern=r"lut_dw4_kernel<", int_div_scope="loops", no_local=True, why="PCILT depthwise, 4-bit"),
        Gate(pattern=r"lut_tiled2_kernel<", int_div_scope="loops", no_local=True, why="PCILT tiled v2"),
    ),
    # The int8 implicit GEMM (LSQ v2) must run on the tensor cores; its runtime divisions are in the
    # prologue (pixel -> n, oy, ox once per thread), the K loop divides by constexprs only.
    "im2col_gemm": (
        Gate(
            pattern=r"^triton:implicit_gemm$", no_int_div=False, tensor_cores=True, why="LSQ int8 GEMM (v2)"
        ),
    ),
}


def check(kernels: Sequence[KernelSass], gates: Sequence[Gate]) -> list[str]:
    """Violations of ``gates`` (empty when the gate passes, which needs at least one kernel gated)."""
    problems = []
    gated = 0
    for k in kernels:
        for g in gates:
            if not re.search(g.pattern, k.pretty):
                continue
            gated += 1
            mix = k.mix
            if g.no_int_div and g.int_div_scope == "loops":
                looped = [lp for lp in k.loops() if lp.mix.int_div or lp.mix.calls]
                if looped:
                    problems.append(
                        f"{k.pretty}: integer division sequences or calls inside {len(looped)} loop(s) "
                        f"(first at {looped[0].start:#x}); walk the loop with strides instead of div/rem"
                    )
            elif g.no_int_div and (k.ptx_int_divs or mix.int_div or mix.calls):
                problems.append(
                    f"{k.pretty}: {k.ptx_int_divs} integer div/rem in PTX, {mix.int_div} division sequences "
                    f"and {mix.calls} out-of-line calls (a 64-bit division's slow path) in SASS; divide by "
                    "host-computed magic numbers (FastDiv) or compile-time constants"
                )
            if g.tensor_cores and not mix.tensor:
                problems.append(
                    f"{k.pretty}: no tensor-core instruction (HMMA/IMMA/HGMMA/IGMMA) in its SASS; "
                    "its GEMM runs on the CUDA cores"
                )
            if g.vector_when and re.search(g.vector_when, k.pretty):
                staged = [lp for lp in k.loops() if lp.mix.loads]
                if not any(w >= g.vector_bits for lp in staged for w in lp.mix.ldg):
                    widths = "64/128" if g.vector_bits <= 64 else str(g.vector_bits)
                    problems.append(f"{k.pretty}: no {widths}-bit global load in its staging loop")
            if g.no_local and mix.local:
                problems.append(
                    f"{k.pretty}: {mix.local} local-memory loads/stores (LDL/STL: a register spill or a "
                    "stack array); cut live registers or relax its __launch_bounds__"
                )
    if not gated:
        problems.append(
            f"no kernel matched the gate patterns {[g.pattern for g in gates]}: the gate checked nothing"
        )
    return problems


def report(kernels: Sequence[KernelSass], arch: str) -> str:
    lines = []
    for k in kernels:
        occ = k.blocks_per_sm() * 256 / h100.MAX_THREADS_PER_SM if arch == "90" else float("nan")
        lines.append(f"{k.pretty[:150]}")
        lines.append(
            f"    regs {k.registers:3d}  occupancy(256-thread blocks, no smem) {occ:4.0%}  "
            f"ptx int div/rem {k.ptx_int_divs}  tensor cores: {'yes' if k.mix.tensor else 'no'}"
            + (
                f" (ptx mma {k.ptx_mma}), smem {k.shared_static} B, stack {k.stack} B"
                if k.pretty.startswith("triton:")
                else ""
            )
        )
        lines.append(f"    all   {k.mix.brief()}")
        for i, lp in enumerate(k.loops()):
            lines.append(f"    loop{i} {lp.mix.brief()}  [{lp.start:#x}..{lp.end:#x}]")
    return "\n".join(lines)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.sass", description=__doc__.split("\n")[0])
    parser.add_argument("families", nargs="*", help="families (default: every one with a gate)")
    parser.add_argument("--arch", default="90", help="SM version, e.g. 90")
    parser.add_argument("--gate", action="store_true", help="exit 1 when a gated kernel breaks a rule")
    parser.add_argument("--filter", default="", help="only kernels whose demangled name matches")
    args = parser.parse_args(argv)
    failed = False
    for family in args.families or sorted(GATES):
        folder = _build.KERNELS_ROOT / family
        kernels: list[KernelSass] = []
        for cu in sorted(folder.glob("*.cu")):
            kernels += analyze(cu, args.arch)
        for module in TRITON_SPECS.get(family, ()):
            kernels += analyze_triton(module, args.arch)
        shown = [k for k in kernels if re.search(args.filter, k.pretty)]
        print(f"== {family} (sm_{args.arch}, {len(kernels)} kernels, static SASS: not a GPU measurement)")
        print(report(shown, args.arch))
        if args.gate and family in GATES:
            problems = check(kernels, GATES.get(family, ()))
            for p in problems:
                print(f"FAILED {family}: {p}", file=sys.stderr)
            failed |= bool(problems)
            if not problems:
                print(f"sass gate {family}: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main())
