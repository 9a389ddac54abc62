"""The v4 NCHW tiled forward's plan (``plan_tile_v4`` in ``depthwise.cu``, mirrored): the outputs per
thread and the block size, chosen so the grid fills the GPU.

A v4 thread computes ``u`` x ``u`` outputs (``u`` = 4, 2 or 1); a tile is ``trows * u`` output rows
by the whole output width; a block holds ``pl`` planes' tiles. The planner halves the planes per
block (down to 64-thread blocks) while the grid covers fewer than ``WAVE_TARGET`` waves of resident
blocks on an H100's 132 SMs. Stride 1 keeps ``u`` = 4 (the fewest SASS instructions per output on
every seed shape); stride 2 (issue 29: grids sized to fill the GPU) takes the largest ``u`` whose grid
covers ``WAVE_TARGET`` waves, else the plan with the most waves. Residency is computed at each instance's
``__launch_bounds__`` register cap (an upper bound on its registers; ``kernels.h100.resident_blocks``
mirrors ``resident_blocks``). Pure Python, no CUDA:
``tests/kernels/test_depthwise_emulated.py`` checks it against the C++ planner in the emulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernels import h100
from kernels.model.static import MAX_SMEM, THREADS, Shape
from kernels.sass import KernelSass

SMS = h100.SMS  # kPlanSms: depthwise.cu plans for an H100 too
WAVE_TARGET = 2  # kWaveTarget
MIN_BLOCK_THREADS = 64  # kMinBlockThreads
US = (4, 2, 1)


def min_blocks(k: int, u: int) -> int:
    """``v4_min_blocks``: resident 256-thread blocks per SM each instance is built for."""
    if u == 4:
        return 5 if k <= 3 else (4 if k == 5 else 2)
    if u == 2:
        return 6 if k <= 3 else (5 if k == 5 else 3)
    return 8 if k <= 3 else (5 if k == 5 else 3)


def reg_cap(k: int, u: int) -> int:
    """``v4_reg_cap``: the register cap ``__launch_bounds__(256, min_blocks)`` gives ptxas."""
    return min(255, h100.REGS_PER_SM // (THREADS * min_blocks(k, u))) & ~7


@dataclass(frozen=True)
class PlanV4:
    k: int
    u: int
    tpr: int  # threads per output row
    trows: int  # thread rows per tile
    pl: int  # planes per block
    tiles_h: int
    in_rows: int
    sw: int  # staged row stride (floats)
    threads: int  # block size
    planes: int
    ho: int
    wo: int

    @property
    def blocks(self) -> int:
        return -(-self.planes // self.pl) * self.tiles_h

    @property
    def smem_bytes(self) -> int:
        return self.pl * self.in_rows * self.sw * 4

    @property
    def resident(self) -> int:
        return h100.resident_blocks(self.threads, reg_cap(self.k, self.u), self.smem_bytes)

    sms: int = SMS  # the SMs the plan sizes its grid for

    @property
    def waves(self) -> float:
        return self.blocks / (self.sms * self.resident)

    @property
    def lanes_wasted(self) -> float:
        """Share of the grid's thread outputs that fall outside the image (or are idle lanes)."""
        lanes = self.blocks * self.threads * self.u * self.u
        return 1 - self.planes * self.ho * self.wo / lanes


def _plan_u(sh: Shape, u: int, pl_cap: int, sms: int = SMS) -> PlanV4 | None:
    """``plan_tile_v4_u`` for a same-padding (``k // 2``) shape."""
    k, s, pad, hw = sh.k, sh.s, sh.k // 2, sh.hw
    ho = wo = sh.ho
    tpr = -(-wo // u)
    if tpr > THREADS:
        return None
    off = (max(pad, 0) + 3) & ~3
    need = off - pad + (tpr * u - 1) * s + k
    sw = (max(need, off + hw) + 3) & ~3
    best: tuple[int, int, int, int] | None = None  # (total rows, trows, tiles_h, in_rows)
    for trows in range(THREADS // tpr, 0, -1):
        th = trows * u
        tiles_h = -(-ho // th)
        in_rows = (th - 1) * s + k
        if in_rows * sw * 4 > MAX_SMEM:
            continue
        if best is None or tiles_h * trows < best[0]:
            best = (tiles_h * trows, trows, tiles_h, in_rows)
    if best is None:
        return None
    _, trows, tiles_h, in_rows = best
    plane_sz = in_rows * sw
    pl = max(1, min(THREADS // (tpr * trows), sh.planes, MAX_SMEM // (plane_sz * 4), pl_cap))
    threads = -(-(pl * tpr * trows) // 32) * 32
    return PlanV4(k, u, tpr, trows, pl, tiles_h, in_rows, sw, threads, sh.planes, ho, wo, sms)


def plan_v4(sh: Shape, sms: int = SMS) -> PlanV4:
    """``plan_tile_v4``: blocks halved while the grid covers under ``WAVE_TARGET`` waves; stride 1
    keeps ``u`` = 4 (the fewest instructions per output), stride 2 takes the largest ``u`` whose grid
    covers ``WAVE_TARGET`` waves, else the plan with the most waves."""
    best: PlanV4 | None = None
    for u in US if sh.s == 2 else US[:1]:
        p = _plan_u(sh, u, THREADS, sms)
        if p is None:
            continue
        while p.waves < WAVE_TARGET and p.pl > 1 and p.threads > MIN_BLOCK_THREADS:
            smaller = _plan_u(sh, u, p.pl // 2, sms)
            assert smaller is not None  # fewer planes always fit
            p = smaller
        if p.waves >= WAVE_TARGET:
            return p
        if best is None or p.waves > best.waves:
            best = p
    if best is None:
        raise ValueError(f"no v4 tile fits {sh.label} stride {sh.s}: the v4 path falls back to v3")
    return best


def as_row(p: PlanV4) -> list[int]:
    """The plan as ``dw_plan_v4`` (the emulator's entry) writes it."""
    return [p.u, p.tpr, p.trows, p.pl, p.tiles_h, p.in_rows, p.sw, p.threads, p.blocks]


# ---- static instruction counts (from the sm_90 SASS of ``depthwise.cu``) ------------------------------

STAGE_BATCH = 4  # kStageBatch: items a thread loads per round before storing any


def staged_items(sh: Shape, p: PlanV4) -> tuple[bool, int]:
    """(16-byte chunks?, items a block stages): chunks when W is a multiple of a 16-byte chunk (an
    aligned input), else elements."""
    cw = 16 // sh.dtype_bytes
    vec = sh.hw % cw == 0
    return vec, p.pl * p.in_rows * (sh.hw // cw if vec else sh.hw)


def staging_rounds(sh: Shape, p: PlanV4) -> int:
    """Dependent load rounds per thread: every thread runs ceil(items / (batch x threads)) rounds."""
    return -(-staged_items(sh, p)[1] // (STAGE_BATCH * p.threads))


def instance_name(sh: Shape, u: int) -> str:
    dt = "float" if sh.dtype_bytes == 4 else "__half"
    return f"fwd_tile_nchw_v4<{dt}, {sh.k}, {sh.s}, {u}>("


def instr_per_output(sh: Shape, p: PlanV4, kernel: KernelSass) -> float:
    """Warp instructions x 32 per useful output of one launch, from the instance's SASS: the code
    before the barrier outside loops (every warp), the halo loop per staged row, the staging loop of
    the plan's item kind per round (every warp runs every round), the compute code after the barrier
    (warps with outputs). Loop bodies and untaken branches are counted whole: an upper bound."""
    pre, post = kernel.split_at_last_barrier()
    loops = kernel.loops()
    vec, _ = staged_items(sh, p)
    stage = [lp for lp in loops if lp.mix.loads and (lp.mix.vector_loads > 0) == vec]
    halo = [lp for lp in loops if not lp.mix.loads and lp.mix.sts]
    if not stage or not halo:
        raise ValueError(
            f"{kernel.pretty}: no {'vector' if vec else 'scalar'} staging or halo loop in its SASS"
        )
    outer = max(halo, key=lambda lp: lp.mix.total)
    inner = min(halo, key=lambda lp: lp.mix.total)
    # the outer halo loop holds one trip of each inner loop (left, right columns); the rest repeat
    halo_row = outer.mix.total + max(0, p.sw - sh.hw - 2) * inner.mix.total
    warps = p.threads // 32
    active = -(-(p.pl * p.tpr * p.trows) // 32)
    rows = p.pl * p.in_rows
    per_block = (
        warps * pre.total
        + sum(max(0, -(-(rows - w) // p.threads)) for w in range(0, p.threads, 32)) * halo_row
        + warps * staging_rounds(sh, p) * min(lp.mix.total for lp in stage)
        + active * post.total
    )
    return p.blocks * per_block * 32 / sh.outputs


def instr_table(kernels: Sequence[KernelSass], shapes: Sequence[Shape]) -> str:
    """Markdown: v4's plan and static instructions per output on each shape, fp32 and fp16 (``python
    -m kernels.sass depthwise`` prints it under the v1/v2 table). Stride 1 without 16-byte chunks
    runs v3 (``run_tile_v4``)."""
    lines = [
        "| shape | v4 U, threads, blocks, waves | v4 instr/out fp32 | v4 instr/out fp16 |",
        "|---|---|---|---|",
    ]
    for sh in shapes:
        cells = []
        for db in (4, 2):
            s = Shape(sh.n, sh.c, sh.hw, sh.k, sh.s, db)
            p = plan_v4(s)
            inst = next((k for k in kernels if instance_name(s, p.u) in k.pretty), None)
            if inst is None:
                raise ValueError(f"no kernel instance {instance_name(s, p.u)} in the SASS")
            runs_v3 = s.s == 1 and not staged_items(s, p)[0]
            cells.append(f"{instr_per_output(s, p, inst):.0f}" + (" (runs v3)" if runs_v3 else ""))
        p = plan_v4(sh)
        plan = f"{p.u}, {p.threads}, {p.blocks}, {p.waves:.2f}"
        lines.append(f"| {sh.label} s{sh.s} | {plan} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)
