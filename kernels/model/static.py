"""Cost model of the NCHW depthwise forward on an H100 SXM: ours (v1, v2) against PyTorch's native kernel.

Every figure here is a prediction from static facts (tile plans mirrored from ``depthwise.cu``, SASS
instruction counts from ``kernels.sass``) and the stated hardware assumptions (``kernels.h100``); none
is a GPU measurement. ``docs/depthwise-model.md`` explains it; ``python -m kernels.model`` prints the
table. The calibrated model (``calibration.py``) builds on the shapes and tile plans here.

Time of one launch = max(DRAM, issue, MIO) + launch gap, where
* DRAM: compulsory bytes (x read once, y written once, weights) at the measured copy bandwidth
  (halo re-reads are assumed to hit L2);
* issue: warp instructions / (SMs x schedulers x clock), stretched by the block tail
  ceil(B / SMs) / (B / SMs);
* MIO: L1/shared-memory wavefronts (one per clock per SM), with the same tail.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kernels import h100
from kernels.depthwise.seed import DEPTHWISE_SEED_SHAPES
from kernels.sass import KernelSass

THREADS = 256  # kThreads: the block size of depthwise.cu's tiled kernels
RPT = 4  # kRowsPerThread (v1)
RPT_V2 = 8  # kRowsPerThreadV2
MAX_SMEM = h100.MAX_SMEM_PER_BLOCK


@dataclass(frozen=True)
class Hardware:
    """The machine a prediction is for (``kernels.h100``'s figures unless a test varies one)."""

    sms: int = h100.SMS
    clock_hz: float = h100.CLOCK_HZ
    schedulers: int = h100.SCHEDULERS
    mio_per_clk: float = h100.MIO_PER_CLK
    dram_bps: float = h100.COPY_BPS
    peak_bps: float = h100.PEAK_BPS
    launch_s: float = h100.LAUNCH_S


H100 = Hardware()


@dataclass(frozen=True)
class NativeModel:
    """PyTorch's ``conv_depthwise2d_forward_kernel``: one thread per output, 256-thread blocks."""

    index_instr: int = 3 * 20  # three runtime divisions (n, c, h, w from the linear index)
    fixed_instr: int = 30  # bias, offsets, store, grid-stride loop
    tap_instr: int = 6  # bounds test, address, input load, weight load, FMA (unrolled k x k)
    wavefronts_per_tap: float = 3.0  # input load over two 128-byte lines + weight load


NATIVE = NativeModel()


@dataclass(frozen=True)
class Shape:
    n: int
    c: int
    hw: int
    k: int
    s: int = 1
    dtype_bytes: int = 4

    @property
    def ho(self) -> int:
        return (self.hw + 2 * (self.k // 2) - self.k) // self.s + 1

    @property
    def planes(self) -> int:
        return self.n * self.c

    @property
    def outputs(self) -> int:
        return self.planes * self.ho * self.ho

    @property
    def bytes(self) -> int:
        return (
            self.planes * (self.hw * self.hw + self.ho * self.ho) + self.c * self.k * self.k
        ) * self.dtype_bytes

    @property
    def label(self) -> str:
        return f"{self.n}x{self.c}x{self.hw}-k{self.k}"


SEED = tuple(Shape(n, c, hw, k) for n, c, hw, k in DEPTHWISE_SEED_SHAPES)


@dataclass(frozen=True)
class Plan:
    """A block's geometry and staging work, as ``plan_tile`` / ``plan_tile_v2`` pick them."""

    variant: str
    mode: str  # "scalar" | "rows4" | "planes4"
    tw: int
    trows: int
    pl: int
    tiles: int  # tiles per plane
    in_rows: int
    in_cols: int
    fill_items: int  # per block: 16-byte zero stores into shared memory (planes4)
    load_items: int  # per block: global loads issued (vector chunks or scalars)

    @property
    def rpt(self) -> int:
        return RPT if self.variant == "v1" else RPT_V2

    @property
    def active_threads(self) -> int:
        return self.pl * self.tw * self.trows

    @property
    def smem_bytes(self) -> int:
        return self.pl * self.in_rows * self.in_cols * 4


def plan_v1(sh: Shape) -> Plan:
    """Mirror of ``plan_tile`` (v1) for a stride-s, same-padding shape, fp32, aligned input."""
    k, s, ho, pad = sh.k, sh.s, sh.ho, sh.k // 2
    tw = 32 if ho > 16 else (16 if ho > 8 else 8)
    rows_needed = -(-ho // RPT)
    trows = 1
    while trows < rows_needed and trows * 2 <= THREADS // tw:
        trows *= 2
    pl = THREADS // tw // trows
    in_rows, in_cols = (trows * RPT - 1) * s + k, (tw - 1) * s + k
    while pl > 1 and pl > sh.planes:
        pl //= 2
    while pl * in_rows * in_cols * 4 > MAX_SMEM and pl > 1:
        pl //= 2
    tiles = -(-ho // (trows * RPT)) * -(-ho // tw)
    if sh.hw % 4 == 0:
        iw0 = -pad
        c0 = iw0 - (iw0 % 4)
        nch = (iw0 + in_cols - c0 + 3) // 4
        return Plan("v1", "rows4", tw, trows, pl, tiles, in_rows, in_cols, 0, pl * in_rows * nch)
    return Plan("v1", "scalar", tw, trows, pl, tiles, in_rows, in_cols, 0, pl * in_rows * in_cols)


def _geometry_v2(sh: Shape) -> tuple[int, int, int, int, int, int, int]:
    """Mirror of ``plan_tile_v2`` (v2 and v3 share it): tw, trows, pl, tiles_w, tiles_h, in_rows, in_cols."""
    k, s, ho, wo = sh.k, sh.s, sh.ho, sh.ho
    rpt = RPT_V2
    irt = (rpt - 1) * s + k
    best: tuple[float, int, int, int, int, int, int, int] | None = None
    for parts in range(1, 17):
        tw = -(-wo // parts)
        if tw > 64 or (parts > 1 and -(-wo // tw) != parts):
            continue
        trows = 1
        while tw * trows <= THREADS:
            th = trows * rpt
            if trows > 1 and (trows // 2) * rpt >= ho:
                break
            in_rows, in_cols = (th - 1) * s + k, (tw - 1) * s + k
            pl = THREADS // (tw * trows)
            while pl > 1 and pl > sh.planes:
                pl -= 1
            while pl > 1 and pl * in_rows * in_cols * 4 > MAX_SMEM:
                pl -= 1
            if pl * in_rows * in_cols * 4 <= MAX_SMEM:
                tiles_w, tiles_h = -(-wo // tw), -(-ho // th)
                blocks = float(-(-sh.planes // pl) * tiles_w * tiles_h)
                warps = -(-(pl * tw * trows) // 32)
                cost = blocks * (warps * 32.0 * (rpt * k * k + irt * k) + pl * in_rows * in_cols * 8.0)
                if best is None or cost < best[0]:
                    best = (cost, tw, trows, pl, tiles_w, tiles_h, in_rows, in_cols)
            trows *= 2
    assert best is not None
    return best[1:]


def _staged(sh: Shape, variant: str, cw: int) -> Plan:
    """Mirror of ``choose_stage_mode`` for chunks of ``cw`` elements (aligned input)."""
    tw, trows, pl, tiles_w, tiles_h, in_rows, in_cols = _geometry_v2(sh)
    hw, pad = sh.hw * sh.hw, sh.k // 2
    if tiles_w == 1 and tiles_h == 1:
        while pl > 1 and pl * hw % cw:
            pl -= 1
        if pl * hw % cw == 0:
            fill = pl * in_rows * in_cols // 4
            return Plan(variant, "planes4", tw, trows, pl, 1, in_rows, in_cols, fill, pl * hw // cw)
    tiles = tiles_w * tiles_h
    if sh.hw % cw == 0:
        off = ((-pad) & (cw - 1)) if (tw * sh.s) % cw == 0 else cw - 1
        nch = (in_cols + off + cw - 1) // cw
        return Plan(variant, "rows4", tw, trows, pl, tiles, in_rows, in_cols, 0, pl * in_rows * nch)
    return Plan(variant, "scalar", tw, trows, pl, tiles, in_rows, in_cols, 0, pl * in_rows * in_cols)


def plan_v2(sh: Shape) -> Plan:
    """Mirror of ``plan_tile_v2`` and the staging-mode choice of ``run_tile_staged<V2>`` (aligned
    input): 4-element chunks (16 bytes in fp32, 8 in fp16)."""
    return _staged(sh, "v2", 4)


STAGE_BATCH_V3 = 4  # kStageBatch: vector loads per thread per round
STAGE_BATCH_V3_SCALAR = 4  # kStageBatchScalar (8 spilled; depthwise.cu)


def plan_v3(sh: Shape) -> Plan:
    """Mirror of ``run_tile_staged<V3>``'s plan: v2's geometry, 16-byte chunks for every dtype."""
    return _staged(sh, "v3", 16 // sh.dtype_bytes)


def staging_rounds(plan: Plan) -> int:
    """Dependent load rounds per thread of a block's staging: v2 waits for each load (one per round),
    v3 keeps a batch of loads in flight per round."""
    per_round = THREADS
    if plan.variant == "v3":
        per_round *= STAGE_BATCH_V3_SCALAR if plan.mode == "scalar" else STAGE_BATCH_V3
    return -(-plan.load_items // per_round)


@dataclass(frozen=True)
class KernelCounts:
    """Per-thread static instruction counts of one kernel instance (from its SASS)."""

    pre: int  # straight-line code up to the last barrier (every thread of the block)
    post: int  # straight-line code after it (threads that compute)
    post_mio: int  # shared loads + global loads after the barrier (wavefronts per warp)
    fill_per_item: float  # loop instructions per zeroed word (0 when no fill loop)
    load_per_item: float  # loop instructions per staged global load
    regs: int


@dataclass(frozen=True)
class Prediction:
    shape: Shape
    kernel: str
    seconds: float
    bound: str
    instr_per_output: float
    lanes_wasted: float
    blocks: int

    @property
    def hbm_fraction(self) -> float:
        return self.shape.bytes / self.seconds / H100.peak_bps


def warp_trips(items: int, threads: int = THREADS) -> int:
    """Loop trips summed over a block's warps for a ``for (i = tid; i < items; i += threads)`` loop:
    a warp runs as many trips as its busiest thread."""
    return sum(max(0, -(-(items - w) // threads)) for w in range(0, threads, 32))


def _tail(blocks: int, hw: Hardware) -> float:
    return math.ceil(blocks / hw.sms) / (blocks / hw.sms)


def _time(sh: Shape, warp_instr: float, wavefronts: float, blocks: int, hw: Hardware) -> tuple[float, str]:
    t_dram = sh.bytes / hw.dram_bps
    tail = _tail(blocks, hw)
    t_issue = warp_instr / (hw.sms * hw.schedulers * hw.clock_hz) * tail
    t_mio = wavefronts / (hw.sms * hw.mio_per_clk * hw.clock_hz) * tail
    t, bound = max((t_dram, "dram"), (t_issue, "issue"), (t_mio, "mio"))
    return t + hw.launch_s, bound


def predict_tiled(sh: Shape, plan: Plan, counts: KernelCounts, hw: Hardware = H100) -> Prediction:
    """Predicted time of one tiled launch (v1 or v2) from its plan and SASS counts."""
    blocks = -(-sh.planes // plan.pl) * plan.tiles
    warps_all = THREADS // 32
    warps_active = -(-plan.active_threads // 32)
    per_block = (
        warps_all * counts.pre
        + warp_trips(plan.fill_items) * counts.fill_per_item
        + warp_trips(plan.load_items) * counts.load_per_item
        + warps_active * counts.post
    )
    # MIO: stores into shared memory while staging (one wavefront per warp store, 4 per vector chunk's
    # scattered elements), plus the compute section's shared and weight loads.
    per_vec = 4 if plan.mode != "scalar" else 1
    mio_block = plan.fill_items / 32 + plan.load_items * per_vec / 32 * 2 + warps_active * counts.post_mio
    warp_instr = blocks * per_block
    t, bound = _time(sh, warp_instr, blocks * mio_block, blocks, hw)
    useful = sh.outputs
    lanes = blocks * plan.pl * plan.tw * plan.trows * plan.rpt
    return Prediction(sh, plan.variant, t, bound, warp_instr * 32 / useful, 1 - useful / lanes, blocks)


def predict_native(sh: Shape, hw: Hardware = H100, m: NativeModel = NATIVE) -> Prediction:
    """Predicted time of PyTorch's native kernel (assumptions in ``NativeModel``)."""
    per_output = m.index_instr + m.fixed_instr + m.tap_instr * sh.k * sh.k
    blocks = -(-sh.outputs // THREADS)
    warps = sh.outputs / 32
    t, bound = _time(sh, warps * per_output, warps * m.wavefronts_per_tap * sh.k * sh.k, blocks, hw)
    return Prediction(sh, "native", t, bound, float(per_output), 1 - sh.outputs / (blocks * THREADS), blocks)


def geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


# ---- from SASS -------------------------------------------------------------------------------------


def counts_from_sass(k: KernelSass, mode: str) -> KernelCounts:
    """Per-thread counts of a tiled instance: straight-line code around the last barrier, and per
    staged item the cheapest loop of the right kind (a vector-load loop for rows4/planes4, a
    scalar-load loop for scalar staging, a load-free store loop for the zero fill). Untaken branches
    inside the straight-line code and inside a loop are counted: an upper bound."""
    pre, post = k.split_at_last_barrier()
    loops = k.loops()

    def per_item(kind: str) -> float:
        costs = []
        for lp in loops:
            m = lp.mix
            if kind == "fill" and not m.loads and m.sts:
                costs.append(m.total / m.sts)
            elif kind == "vector" and m.vector_loads:
                costs.append(m.total / m.vector_loads)
            elif kind == "scalar" and m.loads and not m.vector_loads:
                costs.append(m.total / m.loads)
        return min(costs) if costs else 0.0

    fill = per_item("fill") if mode == "planes4" else 0.0
    load = per_item("scalar" if mode == "scalar" else "vector")
    if load == 0.0:
        raise ValueError(f"{k.pretty}: no {mode} staging loop found in its SASS")
    return KernelCounts(pre.total, post.total, post.lds + post.loads, fill, load, k.registers)


_MODES = {"scalar": 0, "rows4": 1, "planes4": 2}


def instance_name(plan: Plan, k: int, s: int) -> str:
    """The demangled-name prefix of the instance that runs ``plan`` (fp32)."""
    if plan.variant == "v1":
        return f"fwd_tile_nchw<float, {k}, {s}>("
    return f"fwd_tile_nchw_v2<float, {k}, {s}, {_MODES[plan.mode]}>("


def predict_all(kernels: Sequence[KernelSass], shapes: Sequence[Shape] = SEED) -> list[dict[str, Prediction]]:
    """Native, v1 and v2 predictions for every shape, from the SASS of ``depthwise.cu``."""
    out = []
    for sh in shapes:
        row = {"native": predict_native(sh)}
        for plan in (plan_v1(sh), plan_v2(sh)):
            name = instance_name(plan, sh.k, sh.s)
            inst = next((x for x in kernels if name in x.pretty), None)
            if inst is None:
                raise ValueError(f"no kernel instance {name} in the SASS")
            row[plan.variant] = predict_tiled(sh, plan, counts_from_sass(inst, plan.mode))
        out.append(row)
    return out


def table(rows: Sequence[dict[str, Prediction]]) -> str:
    """Markdown table of the predictions (times in microseconds)."""
    head = (
        "| shape | native us | v1 us | v2 us | v1 x | v2 x | v2 % HBM peak | instr/out native / v1 / v2 "
        "| lanes wasted v1 / v2 | v2 bound |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        n, a, b = r["native"], r["v1"], r["v2"]
        lines.append(
            f"| {n.shape.label} | {n.seconds * 1e6:.1f} | {a.seconds * 1e6:.1f} | {b.seconds * 1e6:.1f} | "
            f"{n.seconds / a.seconds:.2f} | {n.seconds / b.seconds:.2f} | {b.hbm_fraction:.0%} | "
            f"{n.instr_per_output:.0f} / {a.instr_per_output:.0f} / {b.instr_per_output:.0f} | "
            f"{a.lanes_wasted:.0%} / {b.lanes_wasted:.0%} | {b.bound} |"
        )
    g1 = geomean([r["native"].seconds / r["v1"].seconds for r in rows])
    g2 = geomean([r["native"].seconds / r["v2"].seconds for r in rows])
    lines.append(
        f"\nPredicted geomean speedup over native: v1 {g1:.2f}x, v2 {g2:.2f}x (not a GPU measurement)."
    )
    return "\n".join(lines)
