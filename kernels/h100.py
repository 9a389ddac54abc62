"""The H100 SXM (sm_90) the static tools reason about: its SMs, clock and bandwidths, and the per-SM
limits that decide how many blocks are resident. One place for them: the SASS report
(``kernels.sass``) and the cost model (``kernels.model``) read these; no GPU is needed.

Figures measured on the first H100 run are marked so; the rest are the datasheet's and the CUDA
occupancy rules for compute capability 9.0.
"""

from __future__ import annotations

SMS = 132
CLOCK_HZ = 1.755e9  # sustained SM clock under a memory-bound load, measured (boost is 1.98 GHz)
SCHEDULERS = 4  # warp instructions issued per clock per SM
MIO_PER_CLK = 1.0  # L1/shared-memory wavefronts per clock per SM
COPY_BPS = 3.0e12  # device-to-device copy bandwidth, measured
PEAK_BPS = 3.35e12  # HBM3 datasheet peak
LAUNCH_S = 1.0e-6  # gap + ramp per back-to-back launch (the static model's assumption)

REGS_PER_SM = 65536
REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256
MAX_THREADS_PER_SM = 2048
MAX_BLOCKS_PER_SM = 32
SMEM_PER_SM = 228 * 1024
SMEM_RESERVED_PER_BLOCK = 1024  # the runtime's share of each resident block's shared memory
MAX_SMEM_PER_BLOCK = 48 * 1024  # static shared memory per block (more needs an opt-in)


def resident_blocks(threads: int, regs: int, smem: int = 0) -> int:
    """Blocks of ``threads`` threads using ``regs`` registers a thread and ``smem`` bytes of shared
    memory that one SM holds at once: the least of the register file (allocated per warp), the thread
    and block limits and shared memory. At least 1: every block the callers plan fits an SM."""
    warps = -(-threads // 32)
    per_warp = -(-max(regs, 1) * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    by_regs = REGS_PER_SM // (warps * per_warp)
    by_threads = MAX_THREADS_PER_SM // (warps * 32)
    by_smem = SMEM_PER_SM // (smem + SMEM_RESERVED_PER_BLOCK) if smem > 0 else MAX_BLOCKS_PER_SM
    return max(1, min(MAX_BLOCKS_PER_SM, by_regs, by_threads, by_smem))
