"""The v4 NCHW tiled forward's plan (``plan_tile_v4`` in ``depthwise.cu``, mirrored): the outputs per
thread and the block size, chosen so the grid fills the GPU.

A v4 thread computes ``u`` x ``u`` outputs (``u`` = 4, 2 or 1); a tile is ``trows * u`` output rows
by the whole output width; a block holds ``pl`` planes' tiles. The planner takes the largest ``u``
(fewest instructions per output) whose grid covers ``WAVE_TARGET`` waves of resident blocks on an
H100's 132 SMs, halving the planes per block (down to 64-thread blocks) for more blocks first; when
no ``u`` reaches it, the plan with the most waves. Residency is computed at each instance's
``__launch_bounds__`` register cap (an upper bound on its registers). Pure Python, no CUDA:
``tests/kernels/test_depthwise_emulated.py`` checks it against the C++ planner in the emulator.
"""

from __future__ import annotations


from dataclasses import dataclass

from kernels.depthwise.model import Shape

SMS = 132  # kPlanSms
WAVE_TARGET = 2  # kWaveTarget
MIN_BLOCK_THREADS = 64  # kMinBlockThreads
THREADS = 256
MAX_SMEM = 48 * 1024
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
    return min(255, 65536 // (THREADS * min_blocks(k, u))) & ~7


def resident_blocks(threads: int, regs: int, smem: int) -> int:
    """``resident_blocks``: blocks per H100 SM by registers (per warp, units of 256), threads,
    the 32-block limit and shared memory (228 KB, 1 KB reserved per block)."""
    warps = -(-threads // 32)
    per_warp = -(-regs * 32 // 256) * 256
    by_smem = (228 * 1024) // (smem + 1024) if smem > 0 else 32
    return max(1, min(32, 65536 // (warps * per_warp), 2048 // (warps * 32), by_smem))


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
        return resident_blocks(self.threads, reg_cap(self.k, self.u), self.smem_bytes)

    @property
    def waves(self) -> float:
        return self.blocks / (SMS * self.resident)

    @property
    def lanes_wasted(self) -> float:
        """Share of the grid's thread outputs that fall outside the image (or are idle lanes)."""
        lanes = self.blocks * self.threads * self.u * self.u
        return 1 - self.planes * self.ho * self.wo / lanes


def _plan_u(sh: Shape, u: int, pl_cap: int) -> PlanV4 | None:
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
    return PlanV4(k, u, tpr, trows, pl, tiles_h, in_rows, sw, threads, sh.planes, ho, wo)


def plan_v4(sh: Shape) -> PlanV4:
    """``plan_tile_v4``: the largest ``u`` whose grid covers ``WAVE_TARGET`` waves (smaller blocks
    first), else the plan with the most waves."""
    best: PlanV4 | None = None
    for u in US:
        p = _plan_u(sh, u, THREADS)
        if p is None:
            continue
        while p.waves < WAVE_TARGET and p.pl > 1 and p.threads > MIN_BLOCK_THREADS:
            smaller = _plan_u(sh, u, p.pl // 2)
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



