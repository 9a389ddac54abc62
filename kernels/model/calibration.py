"""The depthwise cost model calibrated on GPU measurements: launch cost, latency rounds, tail waves.

``static.py`` predicts from SASS counts and had no latency, tail or fixed-cost term; the first H100
run showed what that misses (60 % of the HBM spec where it said 84 %, fp16 as slow as fp32). This
module models every measured depthwise kernel (the NCHW tiled forward and stride-1 input grad, the
NHWC row kernel, the two-launch weight grad) from its launch geometry, mirrored from
``depthwise.cu``, with four terms:

* launch: a fixed cost per kernel launch, one value for CUDA-graph replays and one for a cold call;
* DRAM: compulsory bytes at the measured copy bandwidth (3.0 TB/s);
* latency: each thread waits for its staging loads in *rounds* (a round is one set of loads issued
  before any is consumed; v2 stages ``#pragma unroll 1``, one vector load per round; v3 batches 4). A block
  takes ``(rounds + 1) x L`` (the +1 is the store after compute), and an SM overlaps ``occupancy``
  blocks: the waves are ``ceil(blocks / (SMs x occupancy))`` (the tail wave costs a whole wave).
  This is memory-level parallelism in another form: bytes in flight per SM =
  occupancy x 256 threads x bytes per round, against L x bandwidth per SM;
* issue: instructions per tap and output (one fitted figure per kernel kind) at 4 per clock per SM.

Time = launches x launch + max(DRAM, latency + issue). The seven constants in ``H100_FIT`` are fitted
(least squares on log time, Nelder-Mead) on the 96 depthwise rows of
``baselines/nvidia-h100-80gb-hbm3/test_depthwise.yaml``; :func:`held_out` refits with each seed
shape's 12 rows left out and predicts them, the error to quote for shapes the fit has not seen.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from kernels.h100 import CLOCK_HZ, COPY_BPS, PEAK_BPS, SMS, resident_blocks
from kernels.model import plan_v4
from kernels.model.static import (
    STAGE_BATCH_V3_SCALAR,
    THREADS,
    Shape,
    _geometry_v2,
    plan_v2,
    plan_v3,
    staging_rounds,
)

GOAL_MEDIAN = 0.15  # issue 29: median absolute error <= 15 %
GOAL_MAX = 0.40  # and none worse than 40 %
BASELINE_FILE = "test_depthwise.yaml"

KINDS = ("tile", "nhwc", "wgrad_nchw", "wgrad_nhwc")


@dataclass(frozen=True)
class Params:
    launch_graph_s: float  # per launch, replayed in a CUDA graph
    launch_cold_s: float  # per launch, a cold call (event-timed, L2 flushed)
    round_s: float  # L: one round of dependent loads (latency under load)
    issue_tile: float  # instructions per (tap + 8) per output, fwd_tile_nchw_v2
    issue_nhwc: float  # fwd_rows_nhwc
    issue_wgrad_nchw: float  # wgrad_partial, NCHW
    issue_wgrad_nhwc: float  # wgrad_partial, channels_last

    def issue(self, kind: str) -> float:
        # W2's staged NCHW weight grad has no measured row yet: it borrows the tiled forward's figure,
        # whose compute loop it mirrors (RPT rows per thread, each staged row read once into registers).
        return float(getattr(self, "issue_" + ("tile" if kind == "wgrad_tile" else kind)))


# Fitted on the H100 rows by `python -m kernels.model --fit baselines/nvidia-h100-80gb-hbm3`.
H100_FIT = Params(
    launch_graph_s=3.16e-06,
    launch_cold_s=4.83e-06,
    round_s=1.79e-07,
    issue_tile=4.77,
    issue_nhwc=7.22,
    issue_wgrad_nchw=17.7,
    issue_wgrad_nhwc=22.8,
)


@dataclass(frozen=True)
class Row:
    """One measured seed-shape row: the candidate's (our kernel's) time."""

    key: str
    shape: Shape  # dtype_bytes set
    layout: str  # nchw | nhwc
    phase: str  # forward | input_grad | weight_grad
    mode: str  # graph | cold
    us: float
    ref_us: float | None = None  # the reference's time in the same entry (native or cuDNN)

    @property
    def label(self) -> str:
        dt = "fp16" if self.shape.dtype_bytes == 2 else "fp32"
        return f"{self.shape.label}-{dt}-{self.layout}-{self.phase}"


@dataclass(frozen=True)
class Launch:
    """What the model needs of one call: its kernel kind and launch geometry."""

    kind: str
    bytes: int
    blocks: int
    rounds: int  # dependent load rounds per thread
    occupancy: int  # resident blocks per SM
    launches: int
    taps: int  # outputs x (k^2 + 8): the work the issue term scales with
    # the kind's fitted issue figure times this: a kernel with no measured row yet borrows a measured
    # kind's figure, scaled by the ratio of their static SASS instructions per output
    issue_scale: float = 1.0


_KEY = re.compile(
    r"test_seed_shape\[(\d+)x(\d+)x(\d+)-k(\d+)-(fp16|fp32)-(nchw|nhwc)-(forward|input_grad|weight_grad)\]"
)


def load_rows(baseline_dir: Path) -> list[Row]:
    """The seed-shape rows of ``<dir>/test_depthwise.yaml`` (the ``candidate`` time of each)."""
    path = baseline_dir / BASELINE_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist; pass a baselines/<machine> folder that holds {BASELINE_FILE}"
        )
    doc = yaml.safe_load(path.read_text())
    rows = []
    for key, entry in (doc.get("benchmarks") or {}).items():
        m = _KEY.search(key)
        if m is None or "candidate" not in entry.get("us", {}):
            continue
        n, c, hw, k = (int(g) for g in m.groups()[:4])
        shape = Shape(n, c, hw, k, 1, 2 if m.group(5) == "fp16" else 4)
        us = entry["us"]
        ref = float(us["reference"]) if "reference" in us else None
        mode = str(entry.get("mode", "cold"))
        rows.append(Row(key, shape, m.group(6), m.group(7), mode, float(us["candidate"]), ref))
    if not rows:
        raise ValueError(f"{path} holds no test_seed_shape rows with a candidate time")
    return rows


def wgrad_splits(sh: Shape, channels_last: bool) -> tuple[int, int]:
    """Mirror of ``weight_grad_splits`` (132 SMs): (splits, lanes along positions per block)."""
    positions = sh.n * sh.ho * sh.ho
    cb = 32 if channels_last else 1
    lanes = THREADS // cb
    splits = -(-4 * SMS // -(-sh.c // cb))
    splits = max(1, min(splits, -(-positions // (lanes * 8))))
    return splits, lanes


# wgrad_tile_nchw's registers per thread, sm_90, k <= 3 and k = 5 (python -m kernels.sass depthwise).
WGRAD_TILE_REGS = (40, 63)


def w2_splits(channel_blocks: int, items: int, min_items: int, sms: int = SMS) -> int:
    """Mirror of ``wgrad_w2_splits``: blocks per channel block for about 4 waves of 256-thread blocks,
    never more splits than ``items`` allow at ``min_items`` a split."""
    splits = -(-4 * max(sms, 1) // channel_blocks)
    return max(1, min(splits, -(-items // min_items), 65535))


def _wgrad_tile_launch(sh: Shape, taps: int) -> Launch:
    """W2's staged NCHW weight grad (``wgrad_tile_nchw``, mirrored): a channel's N planes cut into the
    forward's tiles, ``splits`` blocks per channel walking their tiles one after another; per tile one
    round of batched scalar staging loads per 4 x 256 items and one round of dy loads; one launch."""
    per_channel = Shape(1, sh.n, sh.hw, sh.k, sh.s, sh.dtype_bytes)  # planes = N
    _, _, pl, tiles_w, tiles_h, in_rows, in_cols = _geometry_v2(per_channel)
    units = -(-sh.n // pl) * tiles_w * tiles_h
    splits = w2_splits(sh.c, units, 1)
    per_split = -(-units // splits)
    rounds = per_split * (-(-(pl * in_rows * in_cols) // (STAGE_BATCH_V3_SCALAR * THREADS)) + 1)
    occ = resident_blocks(THREADS, WGRAD_TILE_REGS[0 if sh.k <= 3 else 1], pl * in_rows * in_cols * 4)
    x_and_dy = sh.planes * (sh.hw * sh.hw + sh.ho * sh.ho) * sh.dtype_bytes
    return Launch("wgrad_tile", x_and_dy, sh.c * splits, rounds, occ, 1, taps)


# v4's static SASS instructions per output over v2's (sm_90, fp32 v2; ``plan_v4.instr_per_output`` and
# ``static.predict_tiled`` on ``python -m kernels.sass depthwise``'s instances), per seed shape and dtype
# bytes: v4 borrows the tiled forward's fitted issue figure scaled by it (no v4 row is measured yet).
V4_ISSUE_SCALE = {
    ("16x32x112-k3", 4): 48.3 / 77.3,
    ("16x144x56-k3", 4): 48.9 / 80.0,
    ("16x240x28-k5", 4): 90.7 / 146.3,
    ("16x480x14-k3", 4): 111.5 / 101.7,
    ("16x480x14-k5", 4): 159.8 / 144.5,
    ("16x672x14-k5", 4): 159.8 / 144.5,
    ("16x1152x7-k5", 4): 182.8 / 145.5,
    ("16x1152x7-k3", 4): 132.2 / 102.1,
    ("16x32x112-k3", 2): 49.9 / 77.3,
    ("16x144x56-k3", 2): 50.5 / 80.0,
    ("16x240x28-k5", 2): 137.7 / 146.3,
    ("16x480x14-k3", 2): 108.0 / 101.7,
    ("16x480x14-k5", 2): 159.0 / 144.5,
    ("16x672x14-k5", 2): 159.0 / 144.5,
    ("16x1152x7-k5", 2): 181.5 / 145.5,
    ("16x1152x7-k3", 2): 127.8 / 102.1,
}


def _v4_launch(sh: Shape, taps: int) -> Launch:
    """v4's NCHW tiled forward / stride-1 input grad (``plan_v4``, mirrored): its blocks, rounds of
    batched staging loads, residency at the instances' register caps, and the issue scaled by
    ``V4_ISSUE_SCALE``."""
    p = plan_v4.plan_v4(sh)
    if sh.s == 1 and not plan_v4.staged_items(sh, p)[0]:
        return launch_of(sh, "nchw", "forward", "v3")  # run_tile_v4 hands these to v3
    scale = V4_ISSUE_SCALE[(sh.label, sh.dtype_bytes)]
    return Launch(
        "tile", sh.bytes, p.blocks, plan_v4.staging_rounds(sh, p), p.resident, 1, round(taps * scale)
    )


# ---- v3 NHWC: fwd_nhwc_vec (channel vectors walking down a column), predicted before any GPU run ----
NHWC_VEC_STRIP = 8  # kNhwcVecStrip
NHWC_VEC_CT = 8  # kNhwcVecCt


def nhwc_vec_ct_max(k: int, dtype_bytes: int) -> int:
    """Mirror of ``nhwc_vec_ct_max``: the widest block whose weights fit 48 KB of shared memory."""
    return 16 if k == 7 and dtype_bytes == 2 else 32


# Static sm_90 SASS (`python -m kernels.sass depthwise --filter nhwc`, no GPU), instructions per part of
# a thread's work, by (k, dtype bytes), stride 1 (the seed shapes):
# fwd_nhwc_vec: (prologue outside every loop, one weight-staging element, the sample loop's own body,
#   one row-loop iteration: S input rows of k LDG.128, the ring's taps (FFMA + LDS.128), a store, a shift);
# fwd_rows_nhwc: (one item's body outside the kh loop, one kh iteration); an item is 4 outputs.
NHWC_VEC_SASS: dict[tuple[int, int], tuple[int, int, int, int]] = {
    (3, 4): (169, 26, 45, 175),
    (5, 4): (173, 26, 53, 237),
    (7, 4): (154, 25, 65, 388),
    (3, 2): (170, 27, 57, 261),
    (5, 2): (174, 27, 73, 502),
    (7, 2): (178, 27, 89, 876),
}
NHWC_ROWS_SASS: dict[tuple[int, int], tuple[int, int]] = {
    (3, 4): (165, 141),
    (5, 4): (165, 186),
    (7, 4): (166, 226),
    (3, 2): (172, 153),
    (5, 2): (172, 202),
    (7, 2): (172, 255),
}


def nhwc_instr_per_output(sh: Shape, vec: bool) -> float:
    """Instructions a thread executes per output it computes (from the counts above; stride 1)."""
    key = (sh.k, sh.dtype_bytes)
    if not vec:
        item, kh = NHWC_ROWS_SASS[key]
        return (item + sh.k * kh) / 4
    plan = nhwc_vec_plan(sh)
    prologue, per_element, sample, per_iter = NHWC_VEC_SASS[key]
    staged = (sh.k * sh.k + 1) * plan.ct * plan.vw / THREADS  # the block's weights and bias
    iters = plan.rows + sh.k - 1  # the ring fills over k - 1 extra iterations (stride 1)
    return (prologue + per_element * staged + sample + iters * per_iter) / (plan.rows * plan.vw)


# fwd_nhwc_vec's resident 256-thread blocks per SM (sm_90 registers, stride 1): fp32 k3 62 (4 blocks),
# 16-bit k3 85 (2), k5 112 (2), k7 140 (1); by (k, dtype bytes)
NHWC_VEC_OCCUPANCY = {(3, 4): 4, (3, 2): 2, (5, 4): 2, (5, 2): 2, (7, 4): 1, (7, 2): 1}


@dataclass(frozen=True)
class NhwcVecPlan:
    """``depthwise.cu``'s launch of the v3 NHWC kernel (mirrored): channel vectors per block ``ct``,
    output rows per thread ``strip`` (``rows``: on average, the last strip of a column may be shorter),
    the grid's blocks and the input rows a thread loads (one round of k 16-byte loads each)."""

    vw: int
    ct: int
    strip: int
    rows: float
    blocks: int
    rounds: int


def nhwc_vec_plan(sh: Shape) -> NhwcVecPlan:
    """Mirror of ``run_nhwc_vec`` / ``nhwc_vec_ct`` (same padding, square maps)."""
    vw = 16 // sh.dtype_bytes
    cv = sh.c // vw
    ct = 1
    while ct < NHWC_VEC_CT and ct < cv:
        ct *= 2
    strip = NHWC_VEC_STRIP
    strips = -(-sh.ho // strip)
    positions = strips * sh.ho
    while THREADS // ct > positions and 2 * ct <= nhwc_vec_ct_max(sh.k, sh.dtype_bytes) and ct < cv:
        ct *= 2
    rows = sh.ho / strips
    blocks = -(-positions // (THREADS // ct)) * -(-cv // ct) * sh.n
    return NhwcVecPlan(vw, ct, strip, rows, blocks, math.ceil((rows - 1) * sh.s + sh.k))


def _nhwc_vec_launch(sh: Shape, taps: int) -> Launch:
    plan = nhwc_vec_plan(sh)
    # the row kernel's fitted issue figure, scaled by the static instructions per output of the two
    scale = nhwc_instr_per_output(sh, True) / nhwc_instr_per_output(sh, False)
    occ = NHWC_VEC_OCCUPANCY[sh.k, sh.dtype_bytes]
    return Launch("nhwc", sh.bytes, plan.blocks, plan.rounds, occ, 1, taps, issue_scale=scale)


# ---- W3 NHWC weight grad: wgrad_nhwc_vec (channel vectors walking strips), predicted before any GPU run ----
WGRAD_NHWC_CT = 8  # kWgradNhwcCt: channel vectors per block
WGRAD_NHWC_STRIP = 8  # kWgradNhwcStrip: output rows per item
WGRAD_NHWC_ACC = 104  # kWgradNhwcAcc: tap-sum floats a kernel-row group is sized to


@dataclass(frozen=True)
class WgradNhwcPlan:
    """``depthwise.cu``'s launch of ``wgrad_nhwc_vec`` (mirrored): vector width, kernel-row groups and
    rows per group, items (strips of a column), splits, blocks, and per thread the items it walks and
    the row-loop iterations of one item (each one round: a dy vector and S rows of k x vectors)."""

    vw: int
    groups: int
    rows: int
    items: int
    splits: int
    blocks: int
    items_per_lane: int
    iters_per_item: float


def wgrad_nhwc_groups(k: int, vw: int) -> tuple[int, int]:
    """Mirror of ``wgrad_nhwc_groups`` / ``wgrad_nhwc_rows``: (groups, kernel rows per group)."""
    kr_max = max(1, WGRAD_NHWC_ACC // (k * vw))
    groups = -(-k // kr_max)
    return groups, -(-k // groups)


def wgrad_nhwc_plan(sh: Shape, sms: int = SMS) -> WgradNhwcPlan:
    """Mirror of ``weight_grad_plan`` (W3, channels_last) and ``run_wgrad_nhwc`` (square maps)."""
    vw = 16 // sh.dtype_bytes
    groups, rows = wgrad_nhwc_groups(sh.k, vw)
    channel_blocks = -(-(sh.c // vw) // WGRAD_NHWC_CT)
    strips = -(-sh.ho // WGRAD_NHWC_STRIP)
    items = sh.n * strips * sh.ho
    lanes = THREADS // WGRAD_NHWC_CT
    splits = w2_splits(channel_blocks * groups, items, lanes, sms)
    per_split = -(-items // splits)
    d = -(-rows // sh.s)  # the dy ring: output rows one input row feeds
    iters = sh.ho / strips + d - 1
    return WgradNhwcPlan(
        vw, groups, rows, items, splits, channel_blocks * groups * splits, -(-per_split // lanes), iters
    )


# Static sm_90 SASS (`python -m kernels.sass depthwise --filter 'wgrad_(nhwc_vec|partial)'`, no GPU),
# stride 1, by (k, dtype bytes): wgrad_nhwc_vec (one row-loop iteration, an item's own work outside
# it) and the generic NHWC kernel (wgrad_partial<..., true, true>: one position's loop body, one
# channel).
WGRAD_NHWC_VEC_SASS: dict[tuple[int, int], tuple[int, int]] = {
    (3, 4): (113, 56),
    (5, 4): (218, 61),
    (3, 2): (193, 62),
    (5, 2): (236, 61),
}
WGRAD_PARTIAL_NHWC_SASS: dict[tuple[int, int], int] = {(3, 4): 203, (5, 4): 445, (3, 2): 213, (5, 2): 475}
# wgrad_nhwc_vec's sm_90 registers (ptxas -v, stride 1) by (k, dtype bytes); its shared memory is the
# reduction's 8 warps x 8 lanes x (taps of a group + bias) x VW floats.
WGRAD_NHWC_VEC_REGS = {(3, 4): 91, (5, 4): 184, (3, 2): 150, (5, 2): 156}


def wgrad_nhwc_instr_per_output(sh: Shape, vec: bool) -> float:
    """Instructions a thread executes per output (position x channel) of the weight grad, stride 1:
    the vector kernel's row loop over an item for every kernel-row group, or one generic position."""
    key = (sh.k, sh.dtype_bytes)
    if not vec:
        return float(WGRAD_PARTIAL_NHWC_SASS[key])
    plan = wgrad_nhwc_plan(sh)
    per_iter, per_item = WGRAD_NHWC_VEC_SASS[key]
    rows = plan.iters_per_item - (-(-plan.rows // sh.s) - 1)  # output rows of an item, on average
    return plan.groups * (plan.iters_per_item * per_iter + per_item) / (rows * plan.vw)


def _wgrad_nhwc_vec_launch(sh: Shape, taps: int) -> Launch:
    """W3's channels_last weight grad: one launch; each thread's items are its rounds (one round per
    row-loop iteration: a dy vector and k x vectors issued together); the generic NHWC kernel's fitted
    issue figure scaled by the static instructions per output of the two. The groups of a channel
    block are adjacent in the grid, so x and dy are read from DRAM once."""
    plan = wgrad_nhwc_plan(sh)
    scale = wgrad_nhwc_instr_per_output(sh, True) / wgrad_nhwc_instr_per_output(sh, False)
    nv = plan.rows * sh.k * plan.vw + plan.vw
    smem = THREADS // 32 * WGRAD_NHWC_CT * nv * 4
    occ = resident_blocks(THREADS, WGRAD_NHWC_VEC_REGS[sh.k, sh.dtype_bytes], smem)
    x_and_dy = sh.planes * (sh.hw * sh.hw + sh.ho * sh.ho) * sh.dtype_bytes
    rounds = math.ceil(plan.items_per_lane * plan.iters_per_item)
    return Launch("wgrad_nhwc", x_and_dy, plan.blocks, rounds, occ, 1, taps, issue_scale=scale)


def wgrad_nhwc_vec_applies(sh: Shape) -> bool:
    """Whether W3 runs ``wgrad_nhwc_vec`` on a channels_last seed shape (aligned tensors assumed)."""
    return sh.k in (3, 5, 7) and sh.s in (1, 2) and sh.c % (16 // sh.dtype_bytes) == 0


def launch_of(sh: Shape, layout: str, phase: str, variant: str = "v2") -> Launch:
    """The launch geometry of our kernel for a stride-1 seed shape (mirrors ``depthwise.cu``);
    ``variant`` picks the NCHW tiled kernel (v2, the measured one, v3 or v4) or the weight grad (w1,
    the measured one, w2: one launch, and for NCHW the staged kernel, or w3: w2 with channels_last on
    ``wgrad_nhwc_vec``)."""
    taps = sh.outputs * (sh.k * sh.k + 8)
    if phase == "weight_grad":
        cl = layout == "nhwc"
        if variant in ("w2", "w3") and not cl:
            return _wgrad_tile_launch(sh, taps)
        if variant == "w3" and wgrad_nhwc_vec_applies(sh):
            return _wgrad_nhwc_vec_launch(sh, taps)
        splits, lanes = wgrad_splits(sh, cl)  # W2's generic kernel splits as W1 does
        blocks = -(-sh.c // (32 if cl else 1)) * splits
        per_split = -(-(sh.n * sh.ho * sh.ho) // splits)
        occ = resident_blocks(THREADS, 32 if sh.k == 3 else 64)
        x_and_dy = sh.planes * (sh.hw * sh.hw + sh.ho * sh.ho) * sh.dtype_bytes
        launches = 2 if variant == "w1" else 1
        return Launch("wgrad_" + layout, x_and_dy, blocks, -(-per_split // lanes), occ, launches, taps)
    if layout == "nhwc":
        if variant == "v3" and sh.k in (3, 5, 7) and sh.s == 1 and sh.c % (16 // sh.dtype_bytes) == 0:
            return _nhwc_vec_launch(sh, taps)
        per_sample = sh.ho * -(-sh.ho // 4) * sh.c  # 4 outputs along W per thread
        blocks = -(-per_sample // THREADS) * sh.n
        return Launch("nhwc", sh.bytes, blocks, sh.k, 3, 1, taps)  # kh loop, __launch_bounds__(256, 3)
    if variant == "v4":
        return _v4_launch(sh, taps)
    plan = {"v2": plan_v2, "v3": plan_v3}[variant](sh)
    blocks = -(-sh.planes // plan.pl) * plan.tiles
    # sm_90 registers of the v2 instances; v3's __launch_bounds__ holds it to the same residency
    occ = resident_blocks(THREADS, 38 if sh.k == 3 else 56, plan.smem_bytes)
    return Launch("tile", sh.bytes, blocks, staging_rounds(plan), occ, 1, taps)


def predict_launch(launch: Launch, mode: str, p: Params = H100_FIT) -> float:
    """Predicted seconds of one call."""
    fixed = (p.launch_graph_s if mode == "graph" else p.launch_cold_s) * launch.launches
    dram = launch.bytes / COPY_BPS
    waves = math.ceil(launch.blocks / (SMS * launch.occupancy))
    latency = waves * (launch.rounds + 1) * p.round_s
    issue = launch.taps * p.issue(launch.kind) * launch.issue_scale / (32 * SMS * 4 * CLOCK_HZ)
    return fixed + max(dram, latency + issue)


def predict(row: Row, p: Params = H100_FIT) -> float:
    return predict_launch(launch_of(row.shape, row.layout, row.phase), row.mode, p)


DTYPE_BYTES = {"fp32": 4, "fp16": 2}


def predicted_us(
    shape: tuple[int, int, int, int], dtype: str, phase: str, variant: str, layout: str = "nchw"
) -> float:
    """The calibrated model's cold-call time (us) of a stride-1 seed row ``(N, C, H = W, k)``: the
    prediction each row of the depthwise sweep carries (``kernels/depthwise/sweep_plan.py``)."""
    n, c, hw, k = shape
    launch = launch_of(Shape(n, c, hw, k, 1, DTYPE_BYTES[dtype]), layout, phase, variant)
    return predict_launch(launch, "cold") * 1e6


def errors(rows: Sequence[Row], p: Params = H100_FIT) -> list[float]:
    """Relative error per row: predicted / measured - 1."""
    return [predict(r, p) / (r.us * 1e-6) - 1 for r in rows]


# ---- fitting ----------------------------------------------------------------------------------------


def _nelder_mead(f: Callable[[list[float]], float], x0: list[float], iters: int) -> list[float]:
    """Minimise f over R^n (standard reflection/expansion/contraction/shrink), no dependencies."""
    n = len(x0)
    pts = [x0] + [[v + (0.5 if i == j else 0.0) for j, v in enumerate(x0)] for i in range(n)]
    vals = [f(x) for x in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=vals.__getitem__)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        cen = [sum(x[j] for x in pts[:-1]) / n for j in range(n)]
        worst = pts[-1]
        xr = [2 * cen[j] - worst[j] for j in range(n)]
        fr = f(xr)
        if fr < vals[0]:
            xe = [3 * cen[j] - 2 * worst[j] for j in range(n)]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = [(cen[j] + worst[j]) / 2 for j in range(n)]
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [[(pts[0][j] + x[j]) / 2 for j in range(n)] for x in pts[1:]]
                vals = [vals[0]] + [f(x) for x in pts[1:]]
    return pts[min(range(n + 1), key=vals.__getitem__)]


def fit(rows: Sequence[Row], start: Params = H100_FIT, iters: int = 2000, restarts: int = 2) -> Params:
    """Least squares on log(predicted / measured) over the rows, in log-parameter space."""
    names = [f.name for f in fields(Params)]
    launches = [(launch_of(r.shape, r.layout, r.phase), r.mode, r.us * 1e-6) for r in rows]

    def loss(logs: list[float]) -> float:
        p = Params(*(math.exp(v) for v in logs))
        return sum(math.log(predict_launch(ln, mode, p) / t) ** 2 for ln, mode, t in launches)

    x = [math.log(getattr(start, name)) for name in names]
    for _ in range(restarts):
        x = _nelder_mead(loss, x, iters)
    return Params(*(math.exp(v) for v in x))


def held_out(rows: Sequence[Row], start: Params = H100_FIT, iters: int = 1000) -> list[float]:
    """Leave-one-shape-out: refit without a seed shape's rows (all dtypes, layouts, phases), predict
    them. Returns the relative error of every row, in the order of ``rows``."""
    out: dict[str, float] = {}
    for label in sorted({r.shape.label for r in rows}):
        p = fit([r for r in rows if r.shape.label != label], start, iters, restarts=1)
        for r in rows:
            if r.shape.label == label:
                out[r.key] = predict(r, p) / (r.us * 1e-6) - 1
    return [out[r.key] for r in rows]


# ---- the check ---------------------------------------------------------------------------------------


def summary(errs: Sequence[float]) -> tuple[float, float]:
    a = [abs(e) for e in errs]
    return statistics.median(a), max(a)


def meets_goal(errs: Sequence[float]) -> bool:
    med, worst = summary(errs)
    return med <= GOAL_MEDIAN and worst <= GOAL_MAX


def report(rows: Sequence[Row], errs: Sequence[float], held: Sequence[float] | None = None) -> str:
    """Per-row table (measured, predicted, error) and the summary line."""
    lines = [
        f"{'row':<44} {'mode':<5} {'meas us':>8} {'pred us':>8} {'error':>7}" + ("  held-out" if held else "")
    ]
    for i, (r, e) in enumerate(zip(rows, errs, strict=True)):
        line = f"{r.label:<44} {r.mode:<5} {r.us:>8.2f} {r.us * (1 + e):>8.2f} {e:>+7.1%}"
        lines.append(line + (f"  {held[i]:>+8.1%}" if held else ""))
    med, worst = summary(errs)
    verdict = "met" if meets_goal(errs) else "FAILED"
    lines.append(
        f"fit: {len(rows)} rows, median |error| {med:.1%}, worst {worst:.1%} "
        f"(goal: median <= {GOAL_MEDIAN:.0%}, worst <= {GOAL_MAX:.0%}): {verdict}"
    )
    if held:
        hm, hw = summary(held)
        lines.append(f"held out (leave one seed shape out, refit): median |error| {hm:.1%}, worst {hw:.1%}")
    return "\n".join(lines)


def params_source(p: Params) -> str:
    """``H100_FIT = Params(...)`` as it goes into this file after a refit."""
    body = "".join(f"    {f.name}={getattr(p, f.name):.3g},\n" for f in fields(p))
    return f"H100_FIT = Params(\n{body})"


def variant_table(rows: Sequence[Row], variant: str, p: Params = H100_FIT) -> str:
    """Markdown: per measured NCHW forward / input-grad row, v2 measured and predicted, ``variant``
    predicted (same timing mode), and its share of the 3.35 TB/s HBM spec. Predictions, written
    before a GPU measures the variant."""
    lines = [
        f"| row | mode | v2 measured us | v2 predicted us | {variant} predicted us "
        f"| {variant} / v2 predicted | {variant} % of HBM spec |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.layout != "nchw" or r.phase == "weight_grad":
            continue
        t, t2 = predict_launch(launch_of(r.shape, r.layout, r.phase, variant), r.mode, p), predict(r, p)
        lines.append(
            f"| {r.label} | {r.mode} | {r.us:.2f} | {t2 * 1e6:.2f} | {t * 1e6:.2f} | "
            f"{t / t2:.2f} | {r.shape.bytes / t / PEAK_BPS:.0%} |"
        )
    return "\n".join(lines)


def goal_lines(rows: Sequence[Row], variant: str, p: Params = H100_FIT) -> list[str]:
    """Issue 29's forward and input-grad goals, as the model predicts them for ``variant`` (the
    references are the measured PyTorch times of the same entries)."""

    def t_us(r: Row) -> float:
        return predict_launch(launch_of(r.shape, r.layout, r.phase, variant), r.mode, p) * 1e6

    def pick(dt: int, layout: str, phase: str) -> list[Row]:
        return [r for r in rows if r.shape.dtype_bytes == dt and r.layout == layout and r.phase == phase]

    def spec(r: Row) -> float:
        return r.shape.bytes / (t_us(r) * 1e-6) / PEAK_BPS

    out = []
    for phase, goal in (("forward", 0.80), ("input_grad", 0.70)):
        largest = sorted(pick(4, "nchw", phase), key=lambda r: -r.shape.bytes)[:2]
        got = ", ".join(f"{r.shape.label} {spec(r):.0%}" for r in largest)
        met = all(spec(r) >= goal for r in largest)
        out.append(
            f"fp32 NCHW {phase}, two largest: {got} of the HBM spec (goal >= {goal:.0%}): {_verdict(met)}"
        )
    nhwc = {r.shape.label: r.ref_us for r in pick(4, "nhwc", "forward") if r.ref_us}
    best = [
        min(r.ref_us, nhwc[r.shape.label]) / t_us(r)
        for r in pick(4, "nchw", "forward")
        if r.ref_us and r.shape.label in nhwc
    ]
    out.append(
        f"fp32 forward vs the best PyTorch path: worst {min(best):.2f}x (goal >= 1.0x): "
        + _verdict(min(best) >= 1)
    )
    half = [r.ref_us / t_us(r) for r in pick(2, "nchw", "forward") if r.ref_us]
    g = math.exp(sum(math.log(x) for x in half) / len(half))
    met = g >= 1.2 and min(half) >= 1.0
    out.append(
        f"fp16 NCHW forward vs cuDNN: geomean {g:.2f}x, worst {min(half):.2f}x (goal 1.2x, none < 1.0x): "
        + _verdict(met)
    )
    return out


def nhwc_table(rows: Sequence[Row], p: Params = H100_FIT) -> str:
    """Markdown: per measured NHWC forward / input-grad row, v2 (the row kernel) measured and
    predicted, v3 (``fwd_nhwc_vec``) predicted in the same timing mode, and v3 against the measured
    cuDNN time of the same entry. Predictions, written before a GPU measures v3."""
    lines = [
        "| row | mode | v2 measured us | v2 predicted us | v3 predicted us | v3 / v2 predicted "
        "| cuDNN us (measured) | v3 vs cuDNN predicted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.layout != "nhwc" or r.phase == "weight_grad":
            continue
        t3 = predict_launch(launch_of(r.shape, r.layout, r.phase, "v3"), r.mode, p)
        t2 = predict(r, p)
        ref = f"{r.ref_us:.2f} | {r.ref_us / (t3 * 1e6):.2f}x" if r.ref_us else "- | -"
        lines.append(
            f"| {r.label} | {r.mode} | {r.us:.2f} | {t2 * 1e6:.2f} | {t3 * 1e6:.2f} | {t3 / t2:.2f} | {ref} |"
        )
    return "\n".join(lines)


def nhwc_goal_lines(rows: Sequence[Row], p: Params = H100_FIT) -> list[str]:
    """Issue 29's NHWC goal (forward vs cuDNN, geomean >= 1.0x, fp32 and fp16) as the model predicts
    it for v3, beside what v2 measured."""
    out = []
    for dt, name in ((4, "fp32"), (2, "fp16")):
        fwd = [(r, r.ref_us) for r in rows if r.layout == "nhwc" and r.phase == "forward" and r.ref_us]
        fwd = [(r, ref) for r, ref in fwd if r.shape.dtype_bytes == dt]
        v3 = [
            ref / (predict_launch(launch_of(r.shape, "nhwc", "forward", "v3"), r.mode, p) * 1e6)
            for r, ref in fwd
        ]
        v2 = [ref / r.us for r, ref in fwd]
        g3, g2 = (math.exp(sum(math.log(x) for x in xs) / len(xs)) for xs in (v3, v2))
        out.append(
            f"{name} NHWC forward vs cuDNN: v3 geomean {g3:.2f}x, worst {min(v3):.2f}x (v2 measured "
            f"{g2:.2f}x; goal geomean >= 1.0x): {_verdict(g3 >= 1.0)}"
        )
    return out


def _verdict(met: bool) -> str:
    return "predicted met" if met else "predicted NOT met"
