// PCILT: convolution through pre-calculated lookup tables (Gatchev & Mollov, arXiv 2104.01681).
// Plain CUDA, no torch headers.
//
// Activations are b-bit codes u in [0, 2^b) packed along W into 32-bit words (32/b codes a word,
// code of column ix at word ix / per, bits (ix % per) * b). For every weight (co, ci, ky, kx) a
// table row T[co][ci][ky][kx][u] holds its product with activation level u; the conv sums table
// entries and never multiplies. Out-of-image taps contribute nothing (the zero level's entry is 0).
#include <cuda_runtime.h>

#include <cstdint>

namespace {

struct LutGeometry {
  int n, c, h, w, wp;  // input: n x c x h x w codes, wp packed words per row
  int cout, cg, cog;   // output channels, input/output channels per group
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int ho, wo;
  int bits;
  // Epilogue: with fused, out is float32 = float(acc) * scale (+ bias[co]); else out holds acc.
  bool fused;
  float scale;
  const float* bias;
};

// Kernel choice flags of launch_lut_conv (run-time variants in one build, for A/B timing).
constexpr int kLutNaive = 1;        // the one-thread-per-output baseline
constexpr int kLutDense = 2;        // depthwise calls through the dense tiled kernel (no lut_dw4_kernel)
constexpr int kLutWholeTables = 4;  // 8-bit codes with their 256-entry tables (no nibble split)
constexpr int kLutTiledV2 = 8;      // the v2 tiled kernel (lut_tiled2_kernel) where it applies, else v1
// lut_conv_plan's answer for the v2 tiled kernel: kPlanTiled2 + its output-channel block.
constexpr int kPlanTiled2 = 16;
// lut_conv_plan's answer for the depthwise kernel (the tiled kernel's answers are its channel block).
constexpr int kPlanDepthwise = -1;

template <typename TableT>
__device__ __forceinline__ void store(void* out, int64_t idx, TableT acc, int co, const LutGeometry& g) {
  if (g.fused) {
    // Two roundings in this order, as the PyTorch reference scales and adds.
    float v = __fmul_rn(static_cast<float>(acc), g.scale);
    if (g.bias != nullptr) v = __fadd_rn(v, __ldg(g.bias + co));
    static_cast<float*>(out)[idx] = v;
  } else {
    static_cast<TableT*>(out)[idx] = acc;
  }
}

// bits is 2, 4 or 8, so a code never straddles two words: no division needed.
__device__ __forceinline__ int unpack(const uint32_t* __restrict__ row, int ix, int bits) {
  const int offset = ix * bits;
  const uint32_t word = __ldg(row + (offset >> 5));
  return static_cast<int>((word >> (offset & 31)) & ((1u << bits) - 1u));
}

// x (fp32) -> codes round_half_even(clamp(x * inv_step)) - qn, packed. One thread per word.
__global__ void __launch_bounds__(256) quantize_pack_kernel(const float* __restrict__ x, uint32_t* __restrict__ out,
                                                            int64_t rows, int w, int wp, float inv_step, int bits) {
  const int per = 32 / bits;
  const float qn = -static_cast<float>(1 << (bits - 1));
  const float qp = static_cast<float>((1 << (bits - 1)) - 1);
  const int64_t total = rows * wp;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / wp;
    const int word_idx = static_cast<int>(i % wp);
    const float* xr = x + r * w;
    uint32_t word = 0;
    for (int j = 0; j < per; ++j) {
      const int ix = word_idx * per + j;
      if (ix >= w) break;
      // __fmul_rn: one IEEE multiply even under --use_fast_math, as in the torch reference.
      float q = rintf(__fmul_rn(xr[ix], inv_step));
      q = fminf(fmaxf(q, qn), qp);
      word |= static_cast<uint32_t>(static_cast<int>(q - qn)) << (j * bits);
    }
    out[i] = word;
  }
}

// The baseline: one thread per output element, codes and tables straight from global memory.
// 32-bit index math within a sample (the host checks it fits); blockIdx.y walks the batch.
template <typename TableT>
__global__ void __launch_bounds__(256, 4) lut_naive_kernel(const uint32_t* __restrict__ packed,
                                                        const TableT* __restrict__ tables, void* __restrict__ out,
                                                        LutGeometry g) {
  const int per_sample = g.cout * g.ho * g.wo;
  const int levels = 1 << g.bits;
  for (int ni = blockIdx.y; ni < g.n; ni += gridDim.y) {
    const uint32_t* sample = packed + static_cast<int64_t>(ni) * g.c * g.h * g.wp;
    const int64_t out_n = static_cast<int64_t>(ni) * per_sample;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < per_sample; i += gridDim.x * blockDim.x) {
      const int ox = i % g.wo;
      const int t = i / g.wo;
      const int oy = t % g.ho;
      const int co = t / g.ho;
      const int grp = co / g.cog;
      TableT acc = 0;
      for (int ci = 0; ci < g.cg; ++ci) {
        const uint32_t* plane = sample + static_cast<int64_t>(grp * g.cg + ci) * g.h * g.wp;
        const TableT* trow = tables + (static_cast<int64_t>(co) * g.cg + ci) * g.kh * g.kw * levels;
        for (int ky = 0; ky < g.kh; ++ky) {
          const int iy = oy * g.sh - g.ph + ky * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          for (int kx = 0; kx < g.kw; ++kx) {
            const int ix = ox * g.sw - g.pw + kx * g.dw;
            if (ix < 0 || ix >= g.w) continue;
            acc += __ldg(trow + (ky * g.kw + kx) * levels + unpack(plane + iy * g.wp, ix, g.bits));
          }
        }
      }
      store(out, out_n + i, acc, co, g);
    }
  }
}

constexpr int kTile = 16;  // 16 x 16 output pixels per block, one per thread

// Tiled kernel: a block computes a 16x16 output tile for CO_BLOCK output channels of one group.
// Per block of ci_block input channels (one barrier pair per block, not per channel) it unpacks the
// (halo'd) input tiles into shared memory as bytes and, when TABLES_IN_SMEM, stages their
// CO_BLOCK x kh x kw x 2^b table entries there too; every code read then feeds CO_BLOCK lookups.
// Launch bounds (256, 4): without a minimum, nvcc 13.0's ptxas spilled 4-16 bytes in several
// instances; 4 blocks per SM caps them at 64 registers (no spills on sm_80 / sm_90).
//
// SPLIT (8-bit codes, tables in shared memory): a tap's 256 entries are staged as two 16-entry nibble
// tables, hi[h] = T[16 h] = w (16 h - 128) and lo[l] = T[128 + l] = w l, so T[u] = hi[u >> 4] + lo[u & 15]
// (exact for integer tables). Why: the 32 lanes of a warp read one tap's row at their own codes; in a
// 256-word row, lanes whose codes are equal mod 32 but different hit one bank with different words
// (a conflict: ~3-4 wavefronts a lookup for spread codes), while a 16-word nibble table spans 16
// distinct banks, so its lookup is one wavefront (equal codes broadcast): 2 wavefronts for both. The
// rows also shrink 8x, so 8 output channels' tables fit beside the input tiles.
constexpr int kSplitLevels = 32;  // staged entries a tap with SPLIT: hi[16] then lo[16]

// Stages one input channel ci's tables for output channels [co0, co0 + CO_BLOCK) into s_tab_q
// (CO_BLOCK rows of taps x staged entries; channels at or past co_end get zeros), 256 threads. SPLIT:
// entry k of tap t's 32 is hi[k] = T[16 k] or lo[k - 16] = T[128 + k - 16]. Shared by both tiled kernels.
template <typename TableT, int CO_BLOCK, bool SPLIT>
__device__ __forceinline__ void stage_tables(TableT* s_tab_q, const TableT* __restrict__ tables,
                                             const LutGeometry& g, int co0, int co_end, int ci, int tid) {
  const int levels = 1 << g.bits;
  const int taps = g.kh * g.kw;
  const int row_elems = taps * (SPLIT ? kSplitLevels : levels);
#pragma unroll
  for (int j = 0; j < CO_BLOCK; ++j) {
    const int co = co0 + j;
    const TableT* src = tables + (static_cast<int64_t>(co) * g.cg + ci) * taps * levels;
    for (int e = tid; e < row_elems; e += 256) {
      int from = e;
      if (SPLIT) {
        const int t = e >> 5, k = e & 31;
        from = t * 256 + (k < 16 ? k * 16 : 112 + k);
      }
      s_tab_q[j * row_elems + e] = co < co_end ? __ldg(src + from) : TableT(0);
    }
  }
}

template <typename TableT, int CO_BLOCK, bool TABLES_IN_SMEM, bool SPLIT>
__global__ void __launch_bounds__(kTile* kTile, 4) lut_tiled_kernel(const uint32_t* __restrict__ packed,
                                                                 const TableT* __restrict__ tables,
                                                                 void* __restrict__ out, LutGeometry g,
                                                                 int tiles_x, int in_th, int in_tw, int ci_block) {
  extern __shared__ __align__(16) unsigned char smem[];
  static_assert(!SPLIT || TABLES_IN_SMEM, "nibble tables live in shared memory");
  const int levels = 1 << g.bits;
  const int taps = g.kh * g.kw;
  const int row_levels = SPLIT ? kSplitLevels : levels;  // staged entries a tap
  TableT* s_tab = reinterpret_cast<TableT*>(smem);
  const int tab_elems = TABLES_IN_SMEM ? CO_BLOCK * taps * row_levels : 0;  // per staged channel
  const int in_elems = in_th * in_tw;
  uint8_t* s_in = reinterpret_cast<uint8_t*>(s_tab + tab_elems * ci_block);

  const int tile = blockIdx.x;
  const int oy0 = (tile / tiles_x) * kTile, ox0 = (tile % tiles_x) * kTile;
  const int blocks_per_group = (g.cog + CO_BLOCK - 1) / CO_BLOCK;
  const int grp = blockIdx.y / blocks_per_group;
  const int co0 = grp * g.cog + (blockIdx.y % blocks_per_group) * CO_BLOCK;
  const int co_end = min(co0 + CO_BLOCK, (grp + 1) * g.cog);
  const int64_t ni = blockIdx.z;
  const int tid = threadIdx.x;
  const int ty = tid / kTile, tx = tid % kTile;
  const int oy = oy0 + ty, ox = ox0 + tx;
  const int iy_base = oy0 * g.sh - g.ph, ix_base = ox0 * g.sw - g.pw;
  const int zero_code = 1 << (g.bits - 1);

  TableT acc[CO_BLOCK];
#pragma unroll
  for (int j = 0; j < CO_BLOCK; ++j) acc[j] = 0;

  for (int ci0 = 0; ci0 < g.cg; ci0 += ci_block) {
    const int nci = min(ci_block, g.cg - ci0);
    // Staging loops walk channels, rows and columns (tables: channel, output channel and entry) with
    // the thread's own (ty, tx) / tid strides, so no runtime division or remainder is left in them.
    for (int q = 0; q < nci; ++q) {
      const int ci = ci0 + q;
      const uint32_t* plane = packed + ((ni * g.c) + grp * g.cg + ci) * static_cast<int64_t>(g.h) * g.wp;
      uint8_t* s_in_q = s_in + q * in_elems;
      for (int r = ty; r < in_th; r += kTile) {
        const int iy = iy_base + r;
        const bool row_ok = iy >= 0 && iy < g.h;
        for (int cc = tx; cc < in_tw; cc += kTile) {
          const int ix = ix_base + cc;
          int code = zero_code;
          if (row_ok && ix >= 0 && ix < g.w) code = unpack(plane + static_cast<int64_t>(iy) * g.wp, ix, g.bits);
          s_in_q[r * in_tw + cc] = static_cast<uint8_t>(code);
        }
      }
      if (TABLES_IN_SMEM) {
        stage_tables<TableT, CO_BLOCK, SPLIT>(s_tab + q * tab_elems, tables, g, co0, co_end, ci, tid);
      }
    }
    __syncthreads();
    if (oy < g.ho && ox < g.wo) {
      for (int q = 0; q < nci; ++q) {
        const uint8_t* s_in_q = s_in + q * in_elems;
        const TableT* s_tab_q = s_tab + q * tab_elems;
        for (int ky = 0; ky < g.kh; ++ky) {
          for (int kx = 0; kx < g.kw; ++kx) {
            const int code = s_in_q[(ty * g.sh + ky * g.dh) * in_tw + tx * g.sw + kx * g.dw];
            const int tap = ky * g.kw + kx;
#pragma unroll
            for (int j = 0; j < CO_BLOCK; ++j) {
              if (SPLIT) {
                const TableT* t = s_tab_q + (j * taps + tap) * kSplitLevels;
                acc[j] += t[code >> 4] + t[16 + (code & 15)];
              } else if (TABLES_IN_SMEM) {
                acc[j] += s_tab_q[(j * taps + tap) * levels + code];
              } else if (co0 + j < co_end) {
                acc[j] += __ldg(tables + ((static_cast<int64_t>(co0 + j) * g.cg + ci0 + q) * taps + tap) * levels +
                                code);
              }
            }
          }
        }
      }
    }
    __syncthreads();
  }
  if (oy < g.ho && ox < g.wo) {
#pragma unroll
    for (int j = 0; j < CO_BLOCK; ++j) {
      if (co0 + j < co_end) {
        store(out, ((ni * g.cout + co0 + j) * g.ho + oy) * static_cast<int64_t>(g.wo) + ox, acc[j], co0 + j, g);
      }
    }
  }
}

// ---- v2 tiled kernel -------------------------------------------------------------------------------
// A block computes a 32x32 output tile for CO_BLOCK (8 or 4) output channels of one group; a thread
// holds a 2x2 output-pixel block x CO_BLOCK channels in registers (4 x CO_BLOCK accumulators), so each
// code it reads from shared memory feeds CO_BLOCK lookups. Input channels are staged ci_block at a
// time into one of two shared buffers: while the block computes channel group g from buffer g & 1 it
// has already written group g + 1 into the other, so one barrier a group suffices (v1: two a group).
// Staging reads whole packed words: a thread takes one 32-bit word of a tile row and unpacks all its
// codes in registers (v1: one global load and unpack a code). BITS is a template argument, so codes a
// word, masks and shifts are constants, and a tap's staged tables are laid out [tap][channel][entry]
// with a compile-time channel stride: a lookup is one LDS with an immediate offset plus the add. The
// only divisions are the block's tile coordinates, once, before any loop. 8-bit codes use the nibble
// tables (as v1's SPLIT); whole 256-entry tables stay on v1. Launch bounds (256, 2): 128 registers.
constexpr int kTile2 = 32;  // output tile edge; 16 x 16 threads of 2 x 2 pixels

template <int BITS>
struct LutBits {
  static constexpr int kPer = 32 / BITS;                   // codes a packed word
  static constexpr int kLog2Per = BITS == 2 ? 4 : (BITS == 4 ? 3 : 2);
  static constexpr int kRowLevels = BITS == 8 ? kSplitLevels : 1 << BITS;  // staged entries a tap
  static constexpr int kLog2RowLevels = BITS == 2 ? 2 : (BITS == 4 ? 4 : 5);
};

template <typename TableT, int CO_BLOCK, int BITS>
__global__ void __launch_bounds__(256, 2) lut_tiled2_kernel(const uint32_t* __restrict__ packed,
                                                            const TableT* __restrict__ tables,
                                                            void* __restrict__ out, LutGeometry g, int tiles_x,
                                                            int in_th, int in_tw, int ci_block) {
  extern __shared__ __align__(16) unsigned char smem[];
  using B = LutBits<BITS>;
  constexpr bool kSplit = BITS == 8;
  constexpr int kLevels = 1 << BITS;
  constexpr int kTapElems = CO_BLOCK * B::kRowLevels;  // one tap's staged entries, all channels
  constexpr int kLog2Co = CO_BLOCK == 8 ? 3 : 2;
  const int taps = g.kh * g.kw;
  const int tab_elems = taps * kTapElems;  // one staged input channel's tables
  const int in_elems = (in_th * in_tw + 3) & ~3;  // a channel's input tile, rounded to keep tables aligned
  // Buffer b: ci_block channels' tables, then their input tiles (bytes).
  const int64_t buf_bytes = static_cast<int64_t>(ci_block) * (tab_elems * sizeof(TableT) + in_elems);

  // The block's coordinates: the kernel's only divisions, outside every loop.
  const int tile = blockIdx.x;
  const int tile_y = tile / tiles_x;
  const int oy0 = tile_y * kTile2, ox0 = (tile - tile_y * tiles_x) * kTile2;
  const int blocks_per_group = (g.cog + CO_BLOCK - 1) / CO_BLOCK;
  const int grp = blockIdx.y / blocks_per_group;
  const int co0 = grp * g.cog + (blockIdx.y - grp * blocks_per_group) * CO_BLOCK;
  const int co_end = min(co0 + CO_BLOCK, (grp + 1) * g.cog);
  const int64_t ni = blockIdx.z;
  const int tid = threadIdx.x;
  const int ty = tid >> 4, tx = tid & 15;
  const int iy_base = oy0 * g.sh - g.ph, ix_base = ox0 * g.sw - g.pw;
  constexpr int kZeroCode = 1 << (BITS - 1);
  constexpr uint32_t kMask = (1u << BITS) - 1u;
  const int w_first = ix_base >> B::kLog2Per;  // floor (arithmetic shift): the tile's first word
  const int n_words = ((ix_base + in_tw - 1) >> B::kLog2Per) - w_first + 1;
  // Staging threads: 8 lanes a tile row (whole words), 32 rows a pass.
  const int sr0 = tid >> 3, sk0 = tid & 7;

  TableT acc[CO_BLOCK][4];
#pragma unroll
  for (int j = 0; j < CO_BLOCK; ++j)
#pragma unroll
    for (int p = 0; p < 4; ++p) acc[j][p] = 0;

  // Stages channels [ci0, ci0 + nci) into buffer b.
  auto stage = [&](int ci0, int nci, int b) {
    TableT* s_tab = reinterpret_cast<TableT*>(smem + b * buf_bytes);
    uint8_t* s_in = reinterpret_cast<uint8_t*>(s_tab + ci_block * tab_elems);
    for (int q = 0; q < nci; ++q) {
      const int ci = ci0 + q;
      const uint32_t* plane = packed + ((ni * g.c) + grp * g.cg + ci) * static_cast<int64_t>(g.h) * g.wp;
      uint8_t* s_in_q = s_in + q * in_elems;
      for (int r = sr0; r < in_th; r += 32) {
        const int iy = iy_base + r;
        const bool row_ok = iy >= 0 && iy < g.h;
        uint8_t* s_row = s_in_q + r * in_tw;
        for (int k = sk0; k < n_words; k += 8) {
          const int wi = w_first + k;
          const bool word_ok = row_ok && wi >= 0 && wi < g.wp;
          const uint32_t word = word_ok ? __ldg(plane + static_cast<int64_t>(iy) * g.wp + wi) : 0u;
          const int col0 = wi * B::kPer - ix_base;  // tile column of the word's first code (wi may be < 0)
#pragma unroll
          for (int i = 0; i < B::kPer; ++i) {
            const int cc = col0 + i;
            if (cc < 0 || cc >= in_tw) continue;
            const int ix = ix_base + cc;
            const int code = word_ok && ix < g.w ? static_cast<int>((word >> (i * BITS)) & kMask) : kZeroCode;
            s_row[cc] = static_cast<uint8_t>(code);
          }
        }
      }
      // Tables as [tap][channel][entry]: staged entry e is tap e >> log2(kTapElems), channel
      // (e >> log2(kRowLevels)) & (CO_BLOCK - 1), entry e & (kRowLevels - 1) (all powers of two).
      TableT* s_tab_q = s_tab + q * tab_elems;
      for (int e = tid; e < tab_elems; e += 256) {
        const int tap = e >> (kLog2Co + B::kLog2RowLevels);
        const int j = (e >> B::kLog2RowLevels) & (CO_BLOCK - 1);
        const int k = e & (B::kRowLevels - 1);
        const int co = co0 + j;
        // Nibble tables: entry k is hi[k] = T[16 k] or lo[k - 16] = T[128 + k - 16].
        const int from = kSplit ? (k < 16 ? k * 16 : 112 + k) : k;
        const TableT* src = tables + ((static_cast<int64_t>(co) * g.cg + ci) * taps + tap) * kLevels;
        s_tab_q[e] = co < co_end ? __ldg(src + from) : TableT(0);
      }
    }
  };

  stage(0, min(ci_block, g.cg), 0);
  __syncthreads();
  int b = 0;
  for (int ci0 = 0; ci0 < g.cg; ci0 += ci_block) {
    const int nci = min(ci_block, g.cg - ci0);
    const int next = ci0 + ci_block;
    // The other buffer was last read in the previous group, before the barrier that ended it.
    if (next < g.cg) stage(next, min(ci_block, g.cg - next), b ^ 1);
    const TableT* s_tab = reinterpret_cast<const TableT*>(smem + b * buf_bytes);
    const uint8_t* s_in = reinterpret_cast<const uint8_t*>(s_tab + ci_block * tab_elems);
    for (int q = 0; q < nci; ++q) {
      const uint8_t* s_in_q = s_in + q * in_elems;
      const TableT* s_tap = s_tab + q * tab_elems;
      for (int ky = 0; ky < g.kh; ++ky) {
        const uint8_t* s_r0 = s_in_q + ((2 * ty) * g.sh + ky * g.dh) * in_tw + (2 * tx) * g.sw;
        const uint8_t* s_r1 = s_r0 + g.sh * in_tw;
        for (int kx = 0; kx < g.kw; ++kx, s_tap += kTapElems) {
          const int dx = kx * g.dw;
          int code[4];
          code[0] = s_r0[dx];
          code[1] = s_r0[dx + g.sw];
          code[2] = s_r1[dx];
          code[3] = s_r1[dx + g.sw];
#pragma unroll
          for (int p = 0; p < 4; ++p) {
            if (kSplit) {
              const TableT* hi = s_tap + (code[p] >> 4);
              const TableT* lo = s_tap + 16 + (code[p] & 15);
#pragma unroll
              for (int j = 0; j < CO_BLOCK; ++j) acc[j][p] += hi[j * B::kRowLevels] + lo[j * B::kRowLevels];
            } else {
              const TableT* t = s_tap + code[p];
#pragma unroll
              for (int j = 0; j < CO_BLOCK; ++j) acc[j][p] += t[j * B::kRowLevels];
            }
          }
        }
      }
    }
    __syncthreads();
    b ^= 1;
  }
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const int oy = oy0 + 2 * ty + (p >> 1), ox = ox0 + 2 * tx + (p & 1);
    if (oy >= g.ho || ox >= g.wo) continue;
#pragma unroll
    for (int j = 0; j < CO_BLOCK; ++j) {
      if (co0 + j < co_end) {
        store(out, ((ni * g.cout + co0 + j) * g.ho + oy) * static_cast<int64_t>(g.wo) + ox, acc[j][p], co0 + j, g);
      }
    }
  }
}

// ---- depthwise, packed 4-bit codes ------------------------------------------------------------
// A depthwise call (groups == C_in == C_out) with 4-bit codes, a square k in {3, 5, 7}, stride 1 and
// dilation 1 runs this kernel instead of the dense one (which gave every block one output channel).
// A block is (bw output words) x (cpb channels) threads; blockIdx.y picks kDwRows output rows and
// blockIdx.z the sample, so one block covers cpb channels of one sample. A thread owns one packed
// output word (8 adjacent outputs) for kDwRows rows: per input row it loads 3 whole words (its own
// and its neighbours', coalesced across the warp), shifts them into one 64-bit window that starts at
// its first tap's column (8 + k - 1 <= 14 codes), unpacks the codes in registers and feeds each to
// every output row and column that reads it. The cpb channels' tables (k*k*16 entries each) are
// staged in shared memory behind the block's one barrier. Inputs read 1/8 of fp32's bytes; the fp32
// output is the bulk of the traffic (docs/tuning-log.md).
constexpr size_t kSmemBudget = 48 * 1024;  // no opt-in needed below this
constexpr int kDwRows = 4;          // output rows per thread
constexpr int kDwCols = 8;          // output columns per thread: one packed word of 4-bit codes
constexpr uint32_t kZeroWord = 0x88888888u;  // eight zero-level codes (u = 8): entries exactly 0

struct DwPlan {
  int k;           // 0: the kernel does not apply
  int words;       // output words per row, ceil(wo / 8)
  int bw, cpb;     // block: bw words x cpb channels
  int word_tiles;  // blocks along a row
  uint32_t tail_fill;  // zero-level codes for the unused tail of a row's last input word
  size_t smem_bytes;
};

template <typename TableT, int K>
__global__ void __launch_bounds__(256) lut_dw4_kernel(const uint32_t* __restrict__ packed,
                                                      const TableT* __restrict__ tables, void* __restrict__ out,
                                                      LutGeometry g, int word_tiles, uint32_t tail_fill,
                                                      bool vec_out) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTab = K * K * 16;  // one channel's table entries
  constexpr int kWin = kDwCols + K - 1;  // codes one input row feeds a thread
  TableT* s_tab = reinterpret_cast<TableT*>(smem);
  // The one division of the kernel, once per thread: blockIdx.x = channel block x word tile.
  const int cblk = static_cast<int>(blockIdx.x) / word_tiles;
  const int wtile = static_cast<int>(blockIdx.x) - cblk * word_tiles;
  const int c0 = cblk * static_cast<int>(blockDim.y);
  const int nch = min(static_cast<int>(blockDim.y), g.c - c0);
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int nthreads = blockDim.x * blockDim.y;
  const TableT* src_tab = tables + static_cast<int64_t>(c0) * kTab;
  for (int e = tid; e < nch * kTab; e += nthreads) s_tab[e] = __ldg(src_tab + e);
  __syncthreads();

  const int c = c0 + static_cast<int>(threadIdx.y);
  const int j = wtile * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);  // output word
  const int words = (g.wo + kDwCols - 1) / kDwCols;
  if (c >= g.c || j >= words) return;  // after the block's only barrier
  const int64_t plane = static_cast<int64_t>(blockIdx.z) * g.c + c;
  const uint32_t* src = packed + plane * g.h * g.wp;
  const TableT* tab = s_tab + threadIdx.y * kTab;
  const int oy0 = static_cast<int>(blockIdx.y) * kDwRows;
  // The window starts at column 8j - pw, inside word j - 1 (pw <= 7): shift the pair (j, j-1) right
  // by 32 - 4 pw bits and bring word j + 1's codes in above.
  const int shift = 32 - 4 * g.pw;

  TableT acc[kDwRows][kDwCols];
#pragma unroll
  for (int r = 0; r < kDwRows; ++r)
#pragma unroll
    for (int o = 0; o < kDwCols; ++o) acc[r][o] = 0;

#pragma unroll
  for (int ir = 0; ir < kDwRows + K - 1; ++ir) {
    const int iy = oy0 - g.ph + ir;
    if (iy < 0 || iy >= g.h) continue;  // a padding row: every entry it would add is 0
    const uint32_t* row = src + static_cast<int64_t>(iy) * g.wp;
    uint32_t w3[3];
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      const int k = j - 1 + q;
      // Out of the row: zero-level codes; the last word's unused tail holds code 0, not the zero level.
      w3[q] = (k >= 0 && k < g.wp) ? (__ldg(row + k) | (k == g.wp - 1 ? tail_fill : 0u)) : kZeroWord;
    }
    const uint64_t pair = (static_cast<uint64_t>(w3[1]) << 32) | w3[0];
    const uint64_t win = (pair >> shift) | (static_cast<uint64_t>(w3[2]) << (64 - shift));
    int code[kWin];
#pragma unroll
    for (int i = 0; i < kWin; ++i) code[i] = static_cast<int>((win >> (4 * i)) & 15u);
#pragma unroll
    for (int r = 0; r < kDwRows; ++r) {
      const int ky = ir - r;  // compile-time after unrolling
      if (ky >= 0 && ky < K) {
#pragma unroll
        for (int kx = 0; kx < K; ++kx) {
          const TableT* t = tab + (ky * K + kx) * 16;
#pragma unroll
          for (int o = 0; o < kDwCols; ++o) acc[r][o] += t[code[o + kx]];
        }
      }
    }
  }

  const int ox0 = j * kDwCols;
  const bool full = ox0 + kDwCols <= g.wo;
  const float b = (g.fused && g.bias != nullptr) ? __ldg(g.bias + c) : 0.f;
#pragma unroll
  for (int r = 0; r < kDwRows; ++r) {
    const int oy = oy0 + r;
    if (oy >= g.ho) break;
    const int64_t base = (plane * g.ho + oy) * static_cast<int64_t>(g.wo) + ox0;
    if (g.fused && vec_out && full) {  // two 16-byte stores; the epilogue's two roundings as store()
      float v[kDwCols];
#pragma unroll
      for (int o = 0; o < kDwCols; ++o) {
        v[o] = __fmul_rn(static_cast<float>(acc[r][o]), g.scale);
        if (g.bias != nullptr) v[o] = __fadd_rn(v[o], b);
      }
      float4* dst = reinterpret_cast<float4*>(static_cast<float*>(out) + base);
      dst[0] = make_float4(v[0], v[1], v[2], v[3]);
      dst[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
#pragma unroll
      for (int o = 0; o < kDwCols; ++o) {
        if (ox0 + o < g.wo) store(out, base + o, acc[r][o], c, g);
      }
    }
  }
}

// Whether lut_dw4_kernel runs on g, and its block shape: as many channels per block as 256 threads and
// the shared-memory budget allow, the row's words along x (tiled by 256 on very wide rows).
DwPlan plan_dw4(const LutGeometry& g, size_t table_elem) {
  DwPlan p{};
  const bool shape_ok = g.bits == 4 && g.cg == 1 && g.cog == 1 && g.kh == g.kw &&
                        (g.kh == 3 || g.kh == 5 || g.kh == 7) && g.sh == 1 && g.sw == 1 && g.dh == 1 &&
                        g.dw == 1 && g.pw <= 7;
  if (!shape_ok || g.n > 65535) return p;
  const int64_t row_groups = (g.ho + kDwRows - 1) / kDwRows;
  if (row_groups > 65535) return p;
  p.words = (g.wo + kDwCols - 1) / kDwCols;
  p.bw = p.words < 256 ? p.words : 256;
  p.word_tiles = (p.words + p.bw - 1) / p.bw;
  const size_t per_channel = static_cast<size_t>(g.kh) * g.kw * 16 * table_elem;
  int64_t cpb = 256 / p.bw;
  if (cpb > g.c) cpb = g.c;
  if (cpb * per_channel > kSmemBudget) cpb = static_cast<int64_t>(kSmemBudget / per_channel);
  if (cpb < 1) return p;
  p.cpb = static_cast<int>(cpb);
  if (static_cast<int64_t>((g.c + p.cpb - 1) / p.cpb) * p.word_tiles > INT32_MAX) return p;
  const int tail = g.w % kDwCols;
  p.tail_fill = tail == 0 ? 0u : kZeroWord & ~((1u << (4 * tail)) - 1u);
  p.smem_bytes = static_cast<size_t>(p.cpb) * per_channel;
  p.k = g.kh;
  return p;
}

template <typename TableT>
cudaError_t launch_dw4(const uint32_t* packed, const TableT* tables, void* out, const LutGeometry& g,
                       const DwPlan& p, cudaStream_t stream) {
  const dim3 grid(((g.c + p.cpb - 1) / p.cpb) * p.word_tiles, (g.ho + kDwRows - 1) / kDwRows, g.n);
  const dim3 block(p.bw, p.cpb);
  // 16-byte stores need a 4-float aligned row start: wo % 4 == 0 (the output is a fresh, aligned tensor).
  const bool vec_out = g.wo % 4 == 0;
  switch (p.k) {
    case 3:
      lut_dw4_kernel<TableT, 3><<<grid, block, p.smem_bytes, stream>>>(packed, tables, out, g, p.word_tiles,
                                                                       p.tail_fill, vec_out);
      break;
    case 5:
      lut_dw4_kernel<TableT, 5><<<grid, block, p.smem_bytes, stream>>>(packed, tables, out, g, p.word_tiles,
                                                                       p.tail_fill, vec_out);
      break;
    default:
      lut_dw4_kernel<TableT, 7><<<grid, block, p.smem_bytes, stream>>>(packed, tables, out, g, p.word_tiles,
                                                                       p.tail_fill, vec_out);
      break;
  }
  return cudaGetLastError();
}

int grid_for(int64_t total) {
  const int64_t blocks = (total + 255) / 256;
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}


// Host-side choice of the tiled kernel's configuration, made before any launch (so a failed
// launch is always reported, never mistaken for "use the naive kernel"): the output-channel block
// (8, 4, 2 or 1) and whether its tables are staged in shared memory, or co_block = 0 when the
// tiled kernel cannot run on g (grid limits, or a huge stride/dilation tile) and the naive one does.
struct TiledPlan {
  int co_block;
  bool tables_in_smem;
  int tiles_x, in_th, in_tw;
  size_t smem_bytes;
  int ci_block;  // input channels staged per barrier pair
};

constexpr int kMaxCiBlock = 8;

TiledPlan plan_tiled(const LutGeometry& g, size_t table_elem, bool split) {
  TiledPlan p{0, false, 0, 0, 0, 0, 1};
  const int64_t tiles_y = (g.ho + kTile - 1) / kTile, tiles_x = (g.wo + kTile - 1) / kTile;
  if (tiles_y * tiles_x > INT32_MAX || g.n > 65535) return p;
  const size_t per_co = static_cast<size_t>(g.kh) * g.kw * (split ? kSplitLevels : 1 << g.bits) * table_elem;
  int cob = 1;  // largest channel block that both fits the group and keeps the tables in shared memory
  if (g.cog >= 8 && 8 * per_co <= kSmemBudget / 2) {
    cob = 8;
  } else if (g.cog >= 4 && 4 * per_co <= kSmemBudget / 2) {
    cob = 4;
  } else if (g.cog >= 2 && 2 * per_co <= kSmemBudget / 2) {
    cob = 2;
  }
  const int64_t grid_y = static_cast<int64_t>((g.cog + cob - 1) / cob) * (g.cout / g.cog);
  if (grid_y > 65535) return p;
  const int64_t in_th = static_cast<int64_t>(kTile - 1) * g.sh + static_cast<int64_t>(g.kh - 1) * g.dh + 1;
  const int64_t in_tw = static_cast<int64_t>(kTile - 1) * g.sw + static_cast<int64_t>(g.kw - 1) * g.dw + 1;
  const int64_t in_bytes = in_th * in_tw;
  const size_t tab_bytes = cob * per_co;
  if (in_bytes > static_cast<int64_t>(kSmemBudget)) return p;  // huge stride/dilation
  p.tiles_x = static_cast<int>(tiles_x);
  p.in_th = static_cast<int>(in_th);
  p.in_tw = static_cast<int>(in_tw);
  if (tab_bytes + static_cast<size_t>(in_bytes) <= kSmemBudget) {
    p.co_block = cob;
    p.tables_in_smem = true;
    p.smem_bytes = tab_bytes + static_cast<size_t>(in_bytes);
  } else if (cob == 1) {  // tables too large for shared memory (8-bit codes, big kernels): L1/L2
    p.co_block = 1;
    p.smem_bytes = static_cast<size_t>(in_bytes);
  }
  // Stage as many channels per barrier pair as fit (up to kMaxCiBlock, never more than the group has).
  const size_t per_channel = p.smem_bytes;
  while (p.co_block > 0 && p.ci_block * 2 <= kMaxCiBlock && p.ci_block * 2 <= g.cg &&
         per_channel * p.ci_block * 2 <= kSmemBudget) {
    p.ci_block *= 2;
  }
  p.smem_bytes = per_channel * p.ci_block;
  return p;
}

template <typename TableT, int CO_BLOCK, bool TABLES_IN_SMEM, bool SPLIT>
cudaError_t launch_tiled(const uint32_t* packed, const TableT* tables, void* out, const LutGeometry& g,
                         const TiledPlan& p, cudaStream_t stream) {
  const int tiles = ((g.ho + kTile - 1) / kTile) * p.tiles_x;
  const dim3 grid(tiles, ((g.cog + CO_BLOCK - 1) / CO_BLOCK) * (g.cout / g.cog), g.n);
  lut_tiled_kernel<TableT, CO_BLOCK, TABLES_IN_SMEM, SPLIT>
      <<<grid, kTile * kTile, p.smem_bytes, stream>>>(packed, tables, out, g, p.tiles_x, p.in_th, p.in_tw,
                                                      p.ci_block);
  return cudaGetLastError();
}

// The tiled kernel with its tables in shared memory, for the plan's output-channel block.
template <typename TableT, bool SPLIT>
cudaError_t launch_smem_tables(const uint32_t* packed, const TableT* t, void* o, const LutGeometry& g,
                               const TiledPlan& p, cudaStream_t stream) {
  switch (p.co_block) {
    case 8:
      return launch_tiled<TableT, 8, true, SPLIT>(packed, t, o, g, p, stream);
    case 4:
      return launch_tiled<TableT, 4, true, SPLIT>(packed, t, o, g, p, stream);
    case 2:
      return launch_tiled<TableT, 2, true, SPLIT>(packed, t, o, g, p, stream);
    default:
      return launch_tiled<TableT, 1, true, SPLIT>(packed, t, o, g, p, stream);
  }
}

// The v2 tiled kernel's plan (TiledPlan's fields; co_block 0: v2 does not apply and v1 runs): 8 or 4
// output channels a block with their tables in shared memory (2-bit, 4-bit, or 8-bit nibble tables),
// two buffers of ci_block channels each within the 48 KiB budget.
TiledPlan plan_tiled2(const LutGeometry& g, size_t table_elem, bool split) {
  TiledPlan p{0, true, 0, 0, 0, 0, 1};
  if (g.bits == 8 && !split) return p;  // whole 256-entry tables: v1's case
  const int64_t tiles_y = (g.ho + kTile2 - 1) / kTile2, tiles_x = (g.wo + kTile2 - 1) / kTile2;
  if (tiles_y * tiles_x > INT32_MAX || g.n > 65535) return p;
  const int cob = g.cog >= 8 ? 8 : (g.cog >= 4 ? 4 : 0);
  if (cob == 0) return p;
  const int64_t grid_y = static_cast<int64_t>((g.cog + cob - 1) / cob) * (g.cout / g.cog);
  if (grid_y > 65535) return p;
  const int64_t in_th = static_cast<int64_t>(kTile2 - 1) * g.sh + static_cast<int64_t>(g.kh - 1) * g.dh + 1;
  const int64_t in_tw = static_cast<int64_t>(kTile2 - 1) * g.sw + static_cast<int64_t>(g.kw - 1) * g.dw + 1;
  const size_t per_co = static_cast<size_t>(g.kh) * g.kw * (split ? kSplitLevels : 1 << g.bits) * table_elem;
  const size_t per_channel = cob * per_co + static_cast<size_t>((in_th * in_tw + 3) & ~3);  // as the kernel
  if (2 * per_channel > kSmemBudget) return p;
  p.co_block = cob;
  p.tiles_x = static_cast<int>(tiles_x);
  p.in_th = static_cast<int>(in_th);
  p.in_tw = static_cast<int>(in_tw);
  while (p.ci_block * 2 <= kMaxCiBlock && p.ci_block * 2 <= g.cg && 2 * per_channel * p.ci_block * 2 <= kSmemBudget) {
    p.ci_block *= 2;
  }
  p.smem_bytes = 2 * per_channel * p.ci_block;
  return p;
}

template <typename TableT, int CO_BLOCK, int BITS>
cudaError_t launch_tiled2(const uint32_t* packed, const TableT* tables, void* out, const LutGeometry& g,
                          const TiledPlan& p, cudaStream_t stream) {
  const int tiles = ((g.ho + kTile2 - 1) / kTile2) * p.tiles_x;
  const dim3 grid(tiles, ((g.cog + CO_BLOCK - 1) / CO_BLOCK) * (g.cout / g.cog), g.n);
  lut_tiled2_kernel<TableT, CO_BLOCK, BITS><<<grid, 256, p.smem_bytes, stream>>>(packed, tables, out, g, p.tiles_x,
                                                                                p.in_th, p.in_tw, p.ci_block);
  return cudaGetLastError();
}

template <typename TableT, int CO_BLOCK>
cudaError_t launch_v2_bits(const uint32_t* packed, const TableT* t, void* o, const LutGeometry& g,
                           const TiledPlan& p, cudaStream_t stream) {
  switch (g.bits) {
    case 2:
      return launch_tiled2<TableT, CO_BLOCK, 2>(packed, t, o, g, p, stream);
    case 4:
      return launch_tiled2<TableT, CO_BLOCK, 4>(packed, t, o, g, p, stream);
    default:
      return launch_tiled2<TableT, CO_BLOCK, 8>(packed, t, o, g, p, stream);
  }
}

template <typename TableT>
cudaError_t launch_v2(const uint32_t* packed, const TableT* t, void* o, const LutGeometry& g, const TiledPlan& p,
                      cudaStream_t stream) {
  return p.co_block == 8 ? launch_v2_bits<TableT, 8>(packed, t, o, g, p, stream)
                         : launch_v2_bits<TableT, 4>(packed, t, o, g, p, stream);
}

template <typename TableT>
cudaError_t lut_conv_typed(const uint32_t* packed, const void* tables, void* out, const LutGeometry& g, int flags,
                           cudaStream_t stream) {
  const TableT* t = static_cast<const TableT*>(tables);
  void* o = out;
  const int64_t total = static_cast<int64_t>(g.n) * g.cout * g.ho * g.wo;
  if (total == 0) return cudaSuccess;
  const bool naive = (flags & kLutNaive) != 0;
  if (!naive && (flags & kLutDense) == 0) {
    const DwPlan d = plan_dw4(g, sizeof(TableT));
    if (d.k > 0) return launch_dw4<TableT>(packed, t, o, g, d, stream);
  }
  // 8-bit tables in shared memory are split into nibble tables unless the flags ask for whole ones.
  const bool split = g.bits == 8 && (flags & kLutWholeTables) == 0;
  if (!naive && (flags & kLutTiledV2) != 0) {
    const TiledPlan p2 = plan_tiled2(g, sizeof(TableT), split);
    if (p2.co_block > 0) return launch_v2<TableT>(packed, t, o, g, p2, stream);
  }
  const TiledPlan p = naive ? TiledPlan{0, false, 0, 0, 0, 0, 1} : plan_tiled(g, sizeof(TableT), split);
  if (p.co_block > 0 && !p.tables_in_smem) return launch_tiled<TableT, 1, false, false>(packed, t, o, g, p, stream);
  if (p.co_block > 0) {
    return split ? launch_smem_tables<TableT, true>(packed, t, o, g, p, stream)
                 : launch_smem_tables<TableT, false>(packed, t, o, g, p, stream);
  }
  // Naive requested, or the tiled kernel cannot run on g (plan_tiled says why).
  const int64_t per_sample = static_cast<int64_t>(g.cout) * g.ho * g.wo;
  const dim3 grid(grid_for(per_sample), g.n < 65535 ? g.n : 65535);
  lut_naive_kernel<TableT><<<grid, 256, 0, stream>>>(packed, t, o, g);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_quantize_pack(const float* x, uint32_t* out, int64_t rows, int w, int wp, float inv_step, int bits,
                                 cudaStream_t stream) {
  const int64_t total = rows * wp;
  if (total == 0) return cudaSuccess;
  quantize_pack_kernel<<<grid_for(total), 256, 0, stream>>>(x, out, rows, w, wp, inv_step, bits);
  return cudaGetLastError();
}

// Which kernel launch_lut_conv runs for this geometry and these flags (decided on the host, before
// launching): kPlanDepthwise, the tiled kernel's output-channel block (8, 4, 2 or 1; v2: kPlanTiled2 +
// its block, 8 or 4), or 0 for naive.
int lut_conv_plan(bool is_float, int n, int c, int h, int w, int wp, int cout, int groups, int kh, int kw, int sh,
                  int sw, int ph, int pw, int dh, int dw, int ho, int wo, int bits, int flags) {
  if ((flags & kLutNaive) != 0) return 0;
  LutGeometry g;
  g.n = n; g.c = c; g.h = h; g.w = w; g.wp = wp;
  g.cout = cout; g.cg = c / groups; g.cog = cout / groups;
  g.kh = kh; g.kw = kw; g.sh = sh; g.sw = sw; g.ph = ph; g.pw = pw; g.dh = dh; g.dw = dw;
  g.ho = ho; g.wo = wo; g.bits = bits;
  g.fused = false; g.scale = 1.0f; g.bias = nullptr;
  const size_t elem = is_float ? sizeof(float) : sizeof(int32_t);
  if ((flags & kLutDense) == 0 && plan_dw4(g, elem).k > 0) return kPlanDepthwise;
  const bool split = bits == 8 && (flags & kLutWholeTables) == 0;
  if ((flags & kLutTiledV2) != 0) {
    const int cob = plan_tiled2(g, elem, split).co_block;
    if (cob > 0) return kPlanTiled2 + cob;
  }
  return plan_tiled(g, elem, split).co_block;
}

// tables: [cout, cg, kh, kw, 2^bits] of int32 (is_float = false) or float; out: [n, cout, ho, wo], the raw sums
// in the tables' type, or (fused) float32 sums * scale + bias (bias may be null). flags: kLut* (0: the
// fastest kernel that applies).
cudaError_t launch_lut_conv(const uint32_t* packed, const void* tables, void* out, bool is_float, int n, int c, int h,
                            int w, int wp, int cout, int groups, int kh, int kw, int sh, int sw, int ph, int pw,
                            int dh, int dw, int ho, int wo, int bits, int flags, bool fused, float scale,
                            const float* bias, cudaStream_t stream) {
  LutGeometry g;
  g.n = n; g.c = c; g.h = h; g.w = w; g.wp = wp;
  g.cout = cout; g.cg = c / groups; g.cog = cout / groups;
  g.kh = kh; g.kw = kw; g.sh = sh; g.sw = sw; g.ph = ph; g.pw = pw; g.dh = dh; g.dw = dw;
  g.ho = ho; g.wo = wo; g.bits = bits;
  g.fused = fused; g.scale = scale; g.bias = bias;
  return is_float ? lut_conv_typed<float>(packed, tables, out, g, flags, stream)
                  : lut_conv_typed<int32_t>(packed, tables, out, g, flags, stream);
}
