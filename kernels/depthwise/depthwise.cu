// Depthwise conv2d kernels: forward, input grad, weight grad (fp32/fp16/bf16, fp32 accumulation).
//
// Forward NCHW fast path (square k in {1,3,5,7}, stride 1 or 2, dilation 1): a block stages a tile
// of input planes including the halo in shared memory once (4-wide vector loads when W % 4 == 0),
// then every thread computes RPT vertically adjacent outputs, reading each staged input row once
// into registers and feeding it to every output row that uses it. Small planes pack several planes
// into one 256-thread block so 7x7 and 14x14 maps do not idle most of the block. The stride-1 input
// grad is the same kernel run on dy with the flipped filter and padding k-1-p. channels_last with the
// same kernels/strides runs a row kernel: threads along C (coalesced), 4 adjacent outputs per thread
// sharing their input loads. Everything else (non-square, dilation, stride > 2) uses direct kernels
// with one thread per output element in memory order (NHWC coalesced along C).
//
// Weight grad: one pass over x and dy. A block owns a channel (NCHW) or 32 channels (NHWC) and a
// slice of the positions; each thread keeps all KH*KW tap sums in registers (k = 7 in the generic
// kernel: one filter row per pass), the block reduces them in a fixed order (warp shuffles, then warps
// in index order), and the slices' partials are added in slice order: deterministic. W2 stages input
// tiles for the NCHW tiled geometries, fuses the bias grad and adds the partials in the block of a
// channel that finishes last (one launch); W1 adds them in a second kernel; W3 (the default) is W2
// with channels_last k 3/5/7 on 16-byte channel vectors walking strips (wgrad_nhwc_vec).
// (The native kernel re-reads x and dy once per tap, with one block per (c, kh, kw).)
#include "depthwise.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "convperf/convert.cuh"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace convperf_dw {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerThread = 4;
constexpr int kMaxSmemBytes = 48 * 1024;

using convperf::from_f;
using convperf::to_f;

// ---- forward, NCHW tiled -----------------------------------------------------------------------
struct TileArgs {
  int64_t planes;  // N*C
  int c, h, w, ho, wo, ph, pw;
  int tw, trows, pl, tiles_h, tiles_w;
  bool flip;  // use w[c, K-1-kh, K-1-kw] (input grad as a correlation)
  bool vec4;  // W % 4 == 0 and x aligned to 4 elements: stage with 16-byte (fp32) / 8-byte loads
};

// Four consecutive elements from a 4-element-aligned address, as floats (one vector load).
template <typename T>
__device__ __forceinline__ void load4(const T* p, float (&v)[4]);
template <>
__device__ __forceinline__ void load4<float>(const float* p, float (&v)[4]) {
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
}
template <typename T>
__device__ __forceinline__ void load4_16bit(const T* p, float (&v)[4]) {
  const uint2 q = *reinterpret_cast<const uint2*>(p);
  T h[4];
  memcpy(h, &q, sizeof(h));
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = to_f(h[e]);
}
template <>
__device__ __forceinline__ void load4<__half>(const __half* p, float (&v)[4]) { load4_16bit(p, v); }
template <>
__device__ __forceinline__ void load4<__nv_bfloat16>(const __nv_bfloat16* p, float (&v)[4]) {
  load4_16bit(p, v);
}

// Compute phase of the tiled forward kernels (every variant): RPT vertically adjacent outputs starting
// at (oh, ow) of `plane`, from the staged tile `s` already offset to the thread's top-left input. Each
// staged input row is read once into registers and fed to every output row that uses it.
template <typename T, int K, int S, int RPT>
__device__ __forceinline__ void tile_outputs(const float* s, int in_cols, const T* __restrict__ wt,
                                             const T* __restrict__ bias, T* __restrict__ y, int c, bool flip,
                                             int64_t plane, int ho, int wo, int oh, int ow) {
  constexpr int IN_ROWS_T = (RPT - 1) * S + K;  // input rows one thread touches
  float wr[K * K];
#pragma unroll
  for (int i = 0; i < K * K; ++i) wr[i] = to_f(wt[static_cast<int64_t>(c) * K * K + (flip ? K * K - 1 - i : i)]);
  const float b = bias != nullptr ? to_f(bias[c]) : 0.f;
  float acc[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) acc[r] = b;
#pragma unroll
  for (int ir = 0; ir < IN_ROWS_T; ++ir) {
    float v[K];
#pragma unroll
    for (int kw = 0; kw < K; ++kw) v[kw] = s[ir * in_cols + kw];
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const int kh = ir - r * S;  // compile-time after unrolling
      if (kh >= 0 && kh < K) {
#pragma unroll
        for (int kw = 0; kw < K; ++kw) acc[r] = fmaf(wr[kh * K + kw], v[kw], acc[r]);
      }
    }
  }
  if (ow >= wo) return;
  const int64_t out_base = plane * static_cast<int64_t>(ho) * wo;
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    if (oh + r < ho) y[out_base + static_cast<int64_t>(oh + r) * wo + ow] = from_f<T>(acc[r]);
  }
}

template <typename T, int K, int S>
__global__ void __launch_bounds__(kThreads)
    fwd_tile_nchw(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                  T* __restrict__ y, TileArgs a) {
  constexpr int RPT = kRowsPerThread;
  extern __shared__ float smem[];
  const int th = a.trows * RPT;
  const int in_rows = (th - 1) * S + K;
  const int in_cols = (a.tw - 1) * S + K;
  const int plane_sz = in_rows * in_cols;

  int64_t bid = blockIdx.x;
  const int tw_i = static_cast<int>(bid % a.tiles_w);
  bid /= a.tiles_w;
  const int th_i = static_cast<int>(bid % a.tiles_h);
  bid /= a.tiles_h;
  const int64_t plane0 = bid * a.pl;
  const int oh0 = th_i * th, ow0 = tw_i * a.tw;
  const int ih0 = oh0 * S - a.ph, iw0 = ow0 * S - a.pw;
  const int64_t hw = static_cast<int64_t>(a.h) * a.w;

  // Stage the halo'd tile; consecutive threads read consecutive columns of a row (coalesced).
  if (a.vec4) {
    // Aligned 4-wide chunks covering [iw0, iw0 + in_cols): a quarter of the loads and index math.
    // W % 4 == 0, so a chunk is wholly inside or wholly outside the row.
    const int c0 = iw0 - (((iw0 % 4) + 4) % 4);
    const int nch = (iw0 + in_cols - c0 + 3) / 4;
    const int row_items = in_rows * nch;
    for (int i = threadIdx.x; i < a.pl * row_items; i += kThreads) {
      const int p = i / row_items;
      const int r = i - p * row_items;
      const int row = r / nch;
      const int col0 = c0 + (r - row * nch) * 4;
      const int64_t plane = plane0 + p;
      const int ih = ih0 + row;
      float v[4] = {0.f, 0.f, 0.f, 0.f};
      if (plane < a.planes && ih >= 0 && ih < a.h && col0 >= 0 && col0 < a.w) {
        load4(x + plane * hw + static_cast<int64_t>(ih) * a.w + col0, v);
      }
      float* dst = smem + p * plane_sz + row * in_cols;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int sc = col0 + e - iw0;
        if (sc >= 0 && sc < in_cols) dst[sc] = v[e];
      }
    }
  } else {
    const int total = a.pl * plane_sz;
    for (int i = threadIdx.x; i < total; i += kThreads) {
      const int p = i / plane_sz;
      const int r = i - p * plane_sz;
      const int row = r / in_cols;
      const int col = r - row * in_cols;
      const int64_t plane = plane0 + p;
      const int ih = ih0 + row, iw = iw0 + col;
      float v = 0.f;
      if (plane < a.planes && ih >= 0 && ih < a.h && iw >= 0 && iw < a.w) {
        v = to_f(x[plane * hw + static_cast<int64_t>(ih) * a.w + iw]);
      }
      smem[i] = v;
    }
  }
  __syncthreads();

  const int tx = threadIdx.x % a.tw;
  const int rest = threadIdx.x / a.tw;
  const int ty = rest % a.trows;
  const int p = rest / a.trows;
  const int64_t plane = plane0 + p;
  if (p >= a.pl || plane >= a.planes) return;
  const int c = static_cast<int>(plane % a.c);
  tile_outputs<T, K, S, RPT>(smem + p * plane_sz + (ty * RPT * S) * in_cols + tx * S, in_cols, wt, bias, y, c,
                             a.flip, plane, a.ho, a.wo, oh0 + ty * RPT, ow0 + tx);
}

// Tile geometry for an output of ho x wo; returns shared-memory bytes (0 when it cannot fit).
int plan_tile(TileArgs& a, int k, int s) {
  a.tw = a.wo > 16 ? 32 : (a.wo > 8 ? 16 : 8);
  const int rows_needed = (a.ho + kRowsPerThread - 1) / kRowsPerThread;
  int trows = 1;
  while (trows < rows_needed && trows * 2 <= kThreads / a.tw) trows *= 2;
  a.trows = trows;
  a.pl = kThreads / a.tw / trows;
  const int in_rows = (trows * kRowsPerThread - 1) * s + k;
  const int in_cols = (a.tw - 1) * s + k;
  while (a.pl > 1 && static_cast<int64_t>(a.pl) > a.planes) a.pl /= 2;
  int bytes = a.pl * in_rows * in_cols * static_cast<int>(sizeof(float));
  while (bytes > kMaxSmemBytes && a.pl > 1) {
    a.pl /= 2;
    bytes = a.pl * in_rows * in_cols * static_cast<int>(sizeof(float));
  }
  // Threads beyond pl*trows*tw exit early; keep 256 so the launch bound holds.
  a.tiles_h = (a.ho + trows * kRowsPerThread - 1) / (trows * kRowsPerThread);
  a.tiles_w = (a.wo + a.tw - 1) / a.tw;
  return bytes > kMaxSmemBytes ? 0 : bytes;
}

template <typename T, int K, int S>
cudaError_t run_tile(const T* x, const T* w, const T* bias, T* y, TileArgs a, cudaStream_t stream) {
  a.vec4 = a.w % 4 == 0 && reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T)) == 0;
  const int bytes = plan_tile(a, K, S);
  if (bytes == 0) return cudaErrorInvalidConfiguration;
  const int64_t blocks = ((a.planes + a.pl - 1) / a.pl) * a.tiles_h * a.tiles_w;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  fwd_tile_nchw<T, K, S><<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(x, w, bias, y, a);
  return cudaGetLastError();
}

// ---- forward, NCHW tiled, v2: no runtime integer division, tiles cut to the plane ----------------
// What v2 changes against v1 (the A/B baseline, still selectable: Variant::V1), each step predicted in
// docs/tuning-log.md from the static SASS report (python -m kernels.sass depthwise):
// * every runtime division is a multiply-high, an add and a shift by a magic number made on the host
//   (FastDiv, as PyTorch's IntDivider), so the block/thread decompositions, the staging loops and the
//   channel lookup hold no div/rem instruction;
// * the tile width is picked for the plane (7 x 2^k widths give tw = 7, 14, 28 or an even split of
//   56/112) instead of 8/16/32, which left about 23 % of the lanes idle on the seed shapes;
// * a block that covers whole planes copies their contiguous span 16 bytes at a time (any W) and
//   scatters it into the zeroed halo'd tiles; other tiles stage by rows (W % 4 == 0) or scalars;
// * the staging mode is a template parameter, so each instance holds exactly one staging loop.
struct FastDiv {
  uint32_t d, mul, shift;
};

// Magic number for dividing any 0 <= n < 2^31 by d >= 1: q = (umulhi(n, mul) + n) >> shift.
FastDiv make_fastdiv(uint32_t d) {
  uint32_t shift = 0;
  while (shift < 31 && (1u << shift) < d) ++shift;
  const uint64_t mul = ((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1;
  return FastDiv{d, static_cast<uint32_t>(mul), shift};
}

__device__ __forceinline__ int fdiv(int n, const FastDiv& f) {
  const uint32_t u = static_cast<uint32_t>(n);
  return static_cast<int>((__umulhi(u, f.mul) + u) >> f.shift);
}

// How a v2 block stages its input tile.
enum StageMode : int { kStageScalar = 0, kStageRows4 = 1, kStagePlanes4 = 2 };

struct Tile2Args {
  int planes;  // N*C, < 2^31 (else the launcher falls back to v1)
  int c, h, w, ho, wo, ph, pw;
  int tw, trows, pl, tiles_h, tiles_w;
  int in_rows, in_cols, plane_sz;
  int nch;  // kStageRows4: 4-wide chunks per staged row
  FastDiv by_tiles_w, by_tiles_h, by_c, by_tw, by_trows;
  FastDiv by_outer, by_inner;  // staging: plane_sz|row_items|h*w, then in_cols|nch|w
  bool flip;
  int planes_units;  // wgrad_tile_nchw: tiles per channel
};

// v2 threads compute 8 vertically adjacent outputs (v1: 4): the weights, addresses and setup of a
// thread are shared by twice the outputs.
constexpr int kRowsPerThreadV2 = 8;

// The tile a block owns in the v2/v3 NCHW tiled forward: block index -> (plane group, tile row,
// tile column) with the host's FastDiv divisors, then its first output and input coordinates.
struct TileOrigin {
  int plane0, oh0, ow0, ih0, iw0;
};

template <int S>
__device__ __forceinline__ TileOrigin tile_origin(const Tile2Args& a, int th) {
  int bid = static_cast<int>(blockIdx.x);
  int q = fdiv(bid, a.by_tiles_w);
  const int tw_i = bid - q * a.tiles_w;
  bid = q;
  q = fdiv(bid, a.by_tiles_h);
  const int th_i = bid - q * a.tiles_h;
  TileOrigin o;
  o.plane0 = q * a.pl;
  o.oh0 = th_i * th;
  o.ow0 = tw_i * a.tw;
  o.ih0 = o.oh0 * S - a.ph;
  o.iw0 = o.ow0 * S - a.pw;
  return o;
}

template <typename T, int K, int S, int M>
__global__ void __launch_bounds__(kThreads)
    fwd_tile_nchw_v2(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                     T* __restrict__ y, Tile2Args a) {
  constexpr int RPT = kRowsPerThreadV2;
  extern __shared__ float smem[];
  const int th = a.trows * RPT;
  const TileOrigin o = tile_origin<S>(a, th);
  const int plane0 = o.plane0, oh0 = o.oh0, ow0 = o.ow0, ih0 = o.ih0, iw0 = o.iw0;
  const int hw = a.h * a.w;
  const T* xb = x + static_cast<int64_t>(plane0) * hw;

  if (M == kStagePlanes4) {
    // Whole, contiguous planes (tiles_w == tiles_h == 1, pl * hw % 4 == 0, x aligned): zero the
    // halo'd tiles, then copy the span 4 elements (16 bytes in fp32) at a time and scatter.
    const int total = a.pl * a.plane_sz;
    float4* smem4 = reinterpret_cast<float4*>(smem);  // dynamic shared memory is 16-byte aligned
#pragma unroll 1
    for (int i = threadIdx.x; i < total / 4; i += kThreads) smem4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (static_cast<int>(threadIdx.x) < total % 4) smem[total - 1 - threadIdx.x] = 0.f;
    __syncthreads();
    const int64_t left = static_cast<int64_t>(a.planes - plane0) * hw;
    const int span = static_cast<int64_t>(a.pl) * hw < left ? a.pl * hw : static_cast<int>(left);
    const int full = span & ~3;
    // Element i of the span goes to (plane p, row, col) + the padding; one FastDiv pair per chunk,
    // then the next three elements step along the row.
    auto put = [&](int i, int p, int row, int col, float v) {
      const int sr = row + a.ph, sc = col + a.pw;
      // Inputs outside every output's window are not staged: past the last one (stride 2, small
      // padding) or before the first (the input grad's negative padding, a crop).
      if (i < span && sr >= 0 && sr < a.in_rows && sc >= 0 && sc < a.in_cols) {
        smem[p * a.plane_sz + sr * a.in_cols + sc] = v;
      }
    };
#pragma unroll 1
    for (int e0 = threadIdx.x * 4; e0 < full; e0 += kThreads * 4) {
      float v[4];
      load4(xb + e0, v);
      int p = fdiv(e0, a.by_outer);
      const int r = e0 - p * hw;
      int row = fdiv(r, a.by_inner);
      int col = r - row * a.w;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        put(e0 + e, p, row, col, v[e]);
        if (++col == a.w) {
          col = 0;
          if (++row == a.h) {
            row = 0;
            ++p;
          }
        }
      }
    }
    if (static_cast<int>(threadIdx.x) < span - full) {  // the last 1-3 elements of an odd span
      const int i = full + static_cast<int>(threadIdx.x);
      const int p = fdiv(i, a.by_outer);
      const int r = i - p * hw;
      const int row = fdiv(r, a.by_inner);
      put(i, p, row, r - row * a.w, to_f(xb[i]));
    }
  } else if (M == kStageRows4) {
    // W % 4 == 0: aligned 4-wide chunks covering [iw0, iw0 + in_cols) of each staged row.
    const int c0 = iw0 & ~3;
    const int row_items = a.in_rows * a.nch;
    const int total = a.pl * row_items;
#pragma unroll 1
    for (int i = threadIdx.x; i < total; i += kThreads) {
      const int p = fdiv(i, a.by_outer);
      const int r = i - p * row_items;
      const int row = fdiv(r, a.by_inner);
      const int col0 = c0 + (r - row * a.nch) * 4;
      const int ih = ih0 + row;
      float v[4] = {0.f, 0.f, 0.f, 0.f};
      if (plane0 + p < a.planes && ih >= 0 && ih < a.h && col0 >= 0 && col0 < a.w) {
        load4(xb + static_cast<int64_t>(p) * hw + ih * a.w + col0, v);
      }
      float* dst = smem + p * a.plane_sz + row * a.in_cols;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int sc = col0 + e - iw0;
        if (sc >= 0 && sc < a.in_cols) dst[sc] = v[e];
      }
    }
  } else {
    const int total = a.pl * a.plane_sz;
#pragma unroll 1
    for (int i = threadIdx.x; i < total; i += kThreads) {
      const int p = fdiv(i, a.by_outer);
      const int r = i - p * a.plane_sz;
      const int row = fdiv(r, a.by_inner);
      const int col = r - row * a.in_cols;
      const int ih = ih0 + row, iw = iw0 + col;
      float v = 0.f;
      if (plane0 + p < a.planes && ih >= 0 && ih < a.h && iw >= 0 && iw < a.w) {
        v = to_f(xb[static_cast<int64_t>(p) * hw + ih * a.w + iw]);
      }
      smem[i] = v;
    }
  }
  __syncthreads();

  const int t = static_cast<int>(threadIdx.x);
  const int rest = fdiv(t, a.by_tw);
  const int tx = t - rest * a.tw;
  const int p = fdiv(rest, a.by_trows);
  const int ty = rest - p * a.trows;
  const int plane = plane0 + p;
  if (p >= a.pl || plane >= a.planes) return;
  const int c = plane - fdiv(plane, a.by_c) * a.c;
  tile_outputs<T, K, S, RPT>(smem + p * a.plane_sz + (ty * RPT * S) * a.in_cols + tx * S, a.in_cols, wt, bias,
                             y, c, a.flip, plane, a.ho, a.wo, oh0 + ty * RPT, ow0 + tx);
}

// v2 tile geometry: the (tw, trows) with the least modelled issue cost, where cost counts the lanes a
// tile wastes on the plane's edge and the halo it stages. Tile widths: the whole output row when it
// is at most 64 wide, else an even split of it; trows a power of two. Returns false when nothing fits.
bool plan_tile_v2(Tile2Args& a, int k, int s) {
  const int rpt = kRowsPerThreadV2;
  const int irt = (rpt - 1) * s + k;  // input rows one thread reads
  double best = -1.0;
  for (int parts = 1; parts <= 16; ++parts) {
    const int tw = (a.wo + parts - 1) / parts;
    if (tw > 64 || (parts > 1 && (a.wo + tw - 1) / tw != parts)) continue;
    for (int trows = 1; tw * trows <= kThreads; trows *= 2) {
      const int th = trows * rpt;
      if (trows > 1 && (trows / 2) * rpt >= a.ho) break;  // taller tiles only add idle rows
      const int in_rows = (th - 1) * s + k;
      const int in_cols = (tw - 1) * s + k;
      int pl = kThreads / (tw * trows);
      while (pl > 1 && pl > a.planes) --pl;
      while (pl > 1 && pl * in_rows * in_cols * 4 > kMaxSmemBytes) --pl;
      if (pl * in_rows * in_cols * 4 > kMaxSmemBytes) continue;
      const int tiles_w = (a.wo + tw - 1) / tw, tiles_h = (a.ho + th - 1) / th;
      const double blocks = static_cast<double>((a.planes + pl - 1) / pl) * tiles_w * tiles_h;
      const int warps = (pl * tw * trows + 31) / 32;
      const double cost = blocks * (warps * 32.0 * (rpt * k * k + irt * k) + pl * in_rows * in_cols * 8.0);
      if (best < 0 || cost < best) {
        best = cost;
        a.tw = tw;
        a.trows = trows;
        a.pl = pl;
        a.tiles_w = tiles_w;
        a.tiles_h = tiles_h;
        a.in_rows = in_rows;
        a.in_cols = in_cols;
      }
    }
  }
  a.plane_sz = a.in_rows * a.in_cols;
  return best >= 0;
}

// Staging mode of a planned v2/v3 tile for chunks of `cw` elements (v2: 4, v3: 16 bytes); `aligned`: x
// is aligned to a chunk. May lower pl so every block's span starts on a chunk boundary.
int choose_stage_mode(Tile2Args& a, int s, bool aligned, int cw = 4) {
  const int hw = a.h * a.w;
  if (aligned && a.tiles_w == 1 && a.tiles_h == 1) {
    int pl = a.pl;
    while (pl > 1 && pl * hw % cw != 0) --pl;
    if (pl * hw % cw == 0) {
      a.pl = pl;
      return kStagePlanes4;
    }
  }
  if (aligned && a.w % cw == 0) {
    // A chunk's offset in the row is fixed when the tile step is a multiple of cw, else take the worst.
    const int off = (a.tw * s) % cw == 0 ? ((-a.pw) & (cw - 1)) : cw - 1;
    a.nch = (a.in_cols + off + cw - 1) / cw;
    return kStageRows4;
  }
  return kStageScalar;
}

// ---- forward, NCHW tiled, v3: a round of staging loads in flight before any is consumed ----------
// v2's staging loops are `unroll 1` and consume each load before the next is issued: the large seed
// shapes run 3 dependent load rounds per block, and on the H100 they reached 60 % of the HBM spec with
// fp16 (8-byte chunks) no faster than fp32 (docs/depthwise-model.md, the calibrated model). v3 issues
// kStageBatch loads per thread into registers, then scatters them into shared memory, with 16-byte
// loads for every dtype (8 elements of fp16/bf16). Planner and compute phase are v2's.
constexpr int kStageBatch = 4;  // vector loads per thread per round: one round on every seed shape
constexpr int kStageBatchScalar = 4;  // 8 spilled the k3 instance at v3_min_blocks' 40 registers

// Stages the halo'd input tile of a.pl planes, one element at a time, into smem (a.plane_sz floats
// a plane): the scalar path of the v3 forward and of wgrad_tile_nchw. The tile's planes are
// first .. first + a.pl - 1 of `src`, `stride` elements apart (planes from a.planes on, and inputs
// outside the image, stage as 0); indexing from `src` itself, not a pointer advanced to `first`,
// kept both kernels' registers and occupancy (sm_90). A round of kStageBatchScalar loads a thread
// is issued before any is stored.
template <typename T>
__device__ __forceinline__ void stage_tile_scalar(float* smem, const T* __restrict__ src, int64_t stride, int first,
                                                  int ih0, int iw0, const Tile2Args& a, int tid) {
  constexpr int SB = kStageBatchScalar;
  const int total = a.pl * a.plane_sz;
#pragma unroll 1
  for (int i0 = 0; i0 < total; i0 += SB * kThreads) {
    float v[SB];
#pragma unroll
    for (int j = 0; j < SB; ++j) {
      const int i = i0 + j * kThreads + tid;
      v[j] = 0.f;
      if (i < total) {
        const int p = fdiv(i, a.by_outer);
        const int r = i - p * a.plane_sz;
        const int row = fdiv(r, a.by_inner);
        const int ih = ih0 + row, iw = iw0 + r - row * a.in_cols;
        if (first + p < a.planes && ih >= 0 && ih < a.h && iw >= 0 && iw < a.w) {
          v[j] = to_f(src[static_cast<int64_t>(first + p) * stride + ih * a.w + iw]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < SB; ++j) {
      const int i = i0 + j * kThreads + tid;
      if (i < total) smem[i] = v[j];
    }
  }
}

// Resident blocks per SM the v3 instances are built for: what the v2 instances reach on sm_90 (38, 56
// and 80 registers for k <= 3, 5, 7 give 6, 4 and 3 blocks of 256). The batch's registers must not cost
// a block: the calibrated model's waves grow as residency falls. Stride 2 and scalar staging (not on a
// seed shape) get one block less: at the budget above ptxas spilled their k3-k7 instances.
template <int K, int S, int M>
constexpr int v3_min_blocks() {
  return (K <= 3 ? 6 : (K == 5 ? 4 : 3)) - (S == 2 || M == kStageScalar ? 1 : 0);
}

// A 16-bit float from its bits, in registers (a memcpy into a T[] put the array on the stack).
template <typename T>
__device__ __forceinline__ T from_bits(unsigned short b);
template <>
__device__ __forceinline__ __half from_bits<__half>(unsigned short b) {
  __half_raw r;
  r.x = b;
  return __half(r);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_bits<__nv_bfloat16>(unsigned short b) {
  __nv_bfloat16_raw r;
  r.x = b;
  return __nv_bfloat16(r);
}

// One 16-byte chunk (16 / sizeof(T) elements) of a staged round, kept packed in 4 registers until it
// is scattered: 8 halves as 8 floats spilled the 16-bit instances.
template <typename T>
__device__ __forceinline__ uint4 load16(const T* p) {
  return *reinterpret_cast<const uint4*>(p);
}

template <typename T>
__device__ __forceinline__ void unpack16(const uint4& q, float (&v)[16 / sizeof(T)]) {
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) memcpy(&v[i], &w[i], sizeof(float));
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = to_f(from_bits<T>(static_cast<unsigned short>(w[i] & 0xffffu)));
      v[2 * i + 1] = to_f(from_bits<T>(static_cast<unsigned short>(w[i] >> 16)));
    }
  }
}

template <typename T, int K, int S, int M>
__global__ void __launch_bounds__(kThreads, v3_min_blocks<K, S, M>())
    fwd_tile_nchw_v3(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                     T* __restrict__ y, Tile2Args a) {
  constexpr int RPT = kRowsPerThreadV2;
  constexpr int CW = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte chunk
  constexpr int NB = kStageBatch;
  extern __shared__ float smem[];
  const int th = a.trows * RPT;
  const TileOrigin o = tile_origin<S>(a, th);
  const int plane0 = o.plane0, oh0 = o.oh0, ow0 = o.ow0, ih0 = o.ih0, iw0 = o.iw0;
  const int hw = a.h * a.w;
  const T* xb = x + static_cast<int64_t>(plane0) * hw;
  const int tid = static_cast<int>(threadIdx.x);

  if (M == kStagePlanes4) {
    // Whole, contiguous planes (tiles_w == tiles_h == 1, pl * hw % CW == 0, x 16-byte aligned).
    const int total = a.pl * a.plane_sz;
    float4* smem4 = reinterpret_cast<float4*>(smem);
#pragma unroll 1
    for (int i = tid; i < total / 4; i += kThreads) smem4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (tid < total % 4) smem[total - 1 - tid] = 0.f;
    __syncthreads();
    const int64_t left = static_cast<int64_t>(a.planes - plane0) * hw;
    const int span = static_cast<int64_t>(a.pl) * hw < left ? a.pl * hw : static_cast<int>(left);
    const int chunks = span / CW;
    auto put = [&](int p, int row, int col, float v) {
      const int sr = row + a.ph, sc = col + a.pw;
      if (sr >= 0 && sr < a.in_rows && sc >= 0 && sc < a.in_cols) smem[p * a.plane_sz + sr * a.in_cols + sc] = v;
    };
#pragma unroll 1
    for (int c0 = 0; c0 < chunks; c0 += NB * kThreads) {
      uint4 raw[NB];
#pragma unroll
      for (int j = 0; j < NB; ++j) {  // every load of the round is issued before any is stored
        const int ch = c0 + j * kThreads + tid;
        if (ch < chunks) raw[j] = load16(xb + ch * CW);
      }
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        const int ch = c0 + j * kThreads + tid;
        if (ch >= chunks) break;
        float v[CW];
        unpack16<T>(raw[j], v);
        int p = fdiv(ch * CW, a.by_outer);
        const int r = ch * CW - p * hw;
        int row = fdiv(r, a.by_inner);
        int col = r - row * a.w;
#pragma unroll
        for (int e = 0; e < CW; ++e) {
          put(p, row, col, v[e]);
          if (++col == a.w) {
            col = 0;
            if (++row == a.h) {
              row = 0;
              ++p;
            }
          }
        }
      }
    }
    if (tid < span - chunks * CW) {  // the last elements of a span that is not whole chunks
      const int i = chunks * CW + tid;
      const int p = fdiv(i, a.by_outer);
      const int r = i - p * hw;
      const int row = fdiv(r, a.by_inner);
      put(p, row, r - row * a.w, to_f(xb[i]));
    }
  } else if (M == kStageRows4) {
    // W % CW == 0, x 16-byte aligned: aligned chunks covering [iw0, iw0 + in_cols) of each staged row.
    const int c0 = iw0 & ~(CW - 1);
    const int row_items = a.in_rows * a.nch;
    const int total = a.pl * row_items;
#pragma unroll 1
    for (int i0 = 0; i0 < total; i0 += NB * kThreads) {
      uint4 raw[NB];
      int dst[NB], sc0[NB];
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        const int i = i0 + j * kThreads + tid;
        dst[j] = -1;
        if (i < total) {
          const int p = fdiv(i, a.by_outer);
          const int r = i - p * row_items;
          const int row = fdiv(r, a.by_inner);
          const int col0 = c0 + (r - row * a.nch) * CW;
          const int ih = ih0 + row;
          dst[j] = p * a.plane_sz + row * a.in_cols;
          sc0[j] = col0 - iw0;
          raw[j] = make_uint4(0u, 0u, 0u, 0u);  // zero bits are 0.0 in every dtype
          if (plane0 + p < a.planes && ih >= 0 && ih < a.h && col0 >= 0 && col0 < a.w) {
            raw[j] = load16(xb + static_cast<int64_t>(p) * hw + ih * a.w + col0);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        if (dst[j] < 0) break;
        float v[CW];
        unpack16<T>(raw[j], v);
#pragma unroll
        for (int e = 0; e < CW; ++e) {
          const int sc = sc0[j] + e;
          if (sc >= 0 && sc < a.in_cols) smem[dst[j] + sc] = v[e];
        }
      }
    }
  } else {
    stage_tile_scalar<T>(smem, x, hw, plane0, ih0, iw0, a, tid);
  }
  __syncthreads();

  const int rest = fdiv(tid, a.by_tw);
  const int tx = tid - rest * a.tw;
  const int p = fdiv(rest, a.by_trows);
  const int ty = rest - p * a.trows;
  const int plane = plane0 + p;
  if (p >= a.pl || plane >= a.planes) return;
  const int c = plane - fdiv(plane, a.by_c) * a.c;
  tile_outputs<T, K, S, RPT>(smem + p * a.plane_sz + (ty * RPT * S) * a.in_cols + tx * S, a.in_cols, wt, bias,
                             y, c, a.flip, plane, a.ho, a.wo, oh0 + ty * RPT, ow0 + tx);
}

// Launches variant V's staged forward with staging mode M: v2 and v3 share the planner, the grid and
// the arguments, only the kernel differs.
template <typename T, int K, int S, Variant V, int M>
void launch_tile_staged(unsigned grid, int bytes, cudaStream_t stream, const T* x, const T* w, const T* bias, T* y,
                        const Tile2Args& a) {
  if constexpr (V == Variant::V3) {
    fwd_tile_nchw_v3<T, K, S, M><<<grid, kThreads, bytes, stream>>>(x, w, bias, y, a);
  } else {
    fwd_tile_nchw_v2<T, K, S, M><<<grid, kThreads, bytes, stream>>>(x, w, bias, y, a);
  }
}

// Host launcher of the staged forwards (V2 or V3): v2 stages 4-element chunks, v3 16-byte chunks for
// every dtype; vector staging needs x aligned to a chunk.
template <typename T, int K, int S, Variant V>
cudaError_t run_tile_staged(const T* x, const T* w, const T* bias, T* y, Tile2Args a, cudaStream_t stream) {
  static_assert(V == Variant::V2 || V == Variant::V3, "only v2 and v3 stage tiles");
  constexpr int CW = V == Variant::V3 ? 16 / static_cast<int>(sizeof(T)) : 4;
  if (!plan_tile_v2(a, K, S)) return cudaErrorInvalidConfiguration;
  const int mode = choose_stage_mode(a, S, reinterpret_cast<uintptr_t>(x) % (CW * sizeof(T)) == 0, CW);
  const int hw = a.h * a.w;
  const int64_t blocks = ((static_cast<int64_t>(a.planes) + a.pl - 1) / a.pl) * a.tiles_h * a.tiles_w;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  a.by_tiles_w = make_fastdiv(a.tiles_w);
  a.by_tiles_h = make_fastdiv(a.tiles_h);
  a.by_c = make_fastdiv(a.c);
  a.by_tw = make_fastdiv(a.tw);
  a.by_trows = make_fastdiv(a.trows);
  const int bytes = a.pl * a.plane_sz * static_cast<int>(sizeof(float));
  const auto grid = static_cast<unsigned>(blocks);
  switch (mode) {
    case kStagePlanes4:
      a.by_outer = make_fastdiv(hw);
      a.by_inner = make_fastdiv(a.w);
      launch_tile_staged<T, K, S, V, kStagePlanes4>(grid, bytes, stream, x, w, bias, y, a);
      break;
    case kStageRows4:
      a.by_outer = make_fastdiv(a.in_rows * a.nch);
      a.by_inner = make_fastdiv(a.nch);
      launch_tile_staged<T, K, S, V, kStageRows4>(grid, bytes, stream, x, w, bias, y, a);
      break;
    default:
      a.by_outer = make_fastdiv(a.plane_sz);
      a.by_inner = make_fastdiv(a.in_cols);
      launch_tile_staged<T, K, S, V, kStageScalar>(grid, bytes, stream, x, w, bias, y, a);
  }
  return cudaGetLastError();
}

// The (k, s) pairs the tiled forward paths (NCHW tile and NHWC rows) are instantiated for: calls
// launch(integral_constant<K>, integral_constant<S>) for the pair, cudaErrorInvalidValue for any other.
template <typename Launch>
cudaError_t dispatch_ks(int k, int s, Launch&& launch) {
  using std::integral_constant;
  switch (k * 10 + s) {
    case 11: return launch(integral_constant<int, 1>{}, integral_constant<int, 1>{});
    case 12: return launch(integral_constant<int, 1>{}, integral_constant<int, 2>{});
    case 31: return launch(integral_constant<int, 3>{}, integral_constant<int, 1>{});
    case 32: return launch(integral_constant<int, 3>{}, integral_constant<int, 2>{});
    case 51: return launch(integral_constant<int, 5>{}, integral_constant<int, 1>{});
    case 52: return launch(integral_constant<int, 5>{}, integral_constant<int, 2>{});
    case 71: return launch(integral_constant<int, 7>{}, integral_constant<int, 1>{});
    case 72: return launch(integral_constant<int, 7>{}, integral_constant<int, 2>{});
    default: return cudaErrorInvalidValue;
  }
}

// v2 indexes planes in 32 bits (FastDiv takes n < 2^31, plus a block's planes); v1 covers the rest.
bool v2_supported(const TileArgs& a) { return a.planes + kThreads < 0x7fffffffLL; }

// The input and output sizes and the padding a tile plan (TileArgs, Tile2Args) takes from a Geom or
// a TileArgs (the same int fields in all three).
template <typename Plan, typename Sizes>
void set_tile_sizes(Plan& a, const Sizes& g) {
  a.h = g.h;
  a.w = g.w;
  a.ho = g.ho;
  a.wo = g.wo;
  a.ph = g.ph;
  a.pw = g.pw;
}

Tile2Args tile2_args(const TileArgs& a) {
  Tile2Args b{};
  b.planes = static_cast<int>(a.planes);
  b.c = a.c;
  set_tile_sizes(b, a);
  b.flip = a.flip;
  return b;
}

// ---- forward, NCHW tiled, v4: U x U outputs per thread from a register window --------------------
// v3 spends about 80 SASS instructions per k3 output, 9 of them FMAs: the rest is index math in the
// staging (a bounds test per staged element) and the epilogue, and K shared loads per output (issue
// 29, docs/tuning-log.md step 5). v4 (CONVPERF_DEPTHWISE_VARIANT=v4; not the default until a GPU has
// measured it):
// * a thread computes U output rows x U adjacent output columns (U = 4, 2 or 1: the planner's pick);
//   per staged input row it reads its (U - 1) * S + K window values once into registers and feeds
//   them to all U columns and every output row that uses the row, weights held in registers;
// * a tile is trows * U output rows by the whole output width, and each staged row keeps the image's
//   columns at a 16-byte aligned offset (`off`): a 16-byte chunk is copied with whole-vector shared
//   stores and no per-element test; one pass over the rows zeroes the halo columns;
// * the block size is the planner's (planes x thread rows x threads per row, rounded up to a warp),
//   and the planner picks the planes per block (and for stride 2 U) so the grid covers kWaveTarget
//   waves of an H100's SMs where it can (v3 covers 0.3-2 waves on EfficientNet-B0's stride-2 layers);
// * U = 4 with Wo % 4 == 0 writes each output row's 4 values with one vector store.
// fp32 and fp16 (bf16 keeps v3); k in {3, 5, 7}; planes < 2^31 (v1 covers the rest); stride 1 only with
// 16-byte chunk staging (W a multiple of 16 bytes, x aligned), else v3.
struct Tile4Args {
  int planes;  // N*C
  int c, h, w, ho, wo, ph, pw;
  int u;         // outputs per thread along each axis (the instance's U)
  int tpr;       // threads per output row: ceil(wo / u)
  int trows;     // thread rows per tile: a tile is trows * u output rows by the whole width
  int pl;        // planes per block
  int tiles_h;   // tiles per plane
  int in_rows;   // staged rows per plane: (trows * u - 1) * s + k
  int off;       // shared-memory column of input column 0: the left halo rounded up to 4
  int sw;        // shared-memory row stride in floats, a multiple of 4
  int plane_sz;  // in_rows * sw
  int threads;   // block size: pl * trows * tpr rounded up to a warp
  int vec;       // 1: 16-byte chunks (W % chunk == 0, x 16-byte aligned); 0: one element per item
  int nch;       // staged items per input row: W / chunk (vec) or W
  int vec_out;   // 1: u == 4, Wo % 4 == 0 and y aligned to 4 elements: a vector store per output row
  FastDiv by_tiles_h, by_c, by_tpr, by_trows, by_in_rows, by_nch;
  bool flip;
};

// The SMs the v4 planner sizes grids for: an H100 SXM's 132 unless set_v4_plan_sms changed it (the
// emulator tests plan small problems for 1-3 SMs to reach every U).
int g_plan_sms = 132;
constexpr int kWaveTarget = 2;   // waves of resident blocks the planner aims for
constexpr int kMinBlockThreads = 64;  // the planner shrinks blocks no further for more waves

// Resident blocks of 256 threads per SM each v4 instance is built for (__launch_bounds__): a register
// cap of 48 (k3, U 4), 64 (k5, U 4), 128 (k7, U 4); 40 / 48 / 80 (U 2); 32 / 48 / 80 (U 1).
constexpr int v4_min_blocks(int k, int u) {
  return u == 4 ? (k <= 3 ? 5 : (k == 5 ? 4 : 2)) : u == 2 ? (k <= 3 ? 6 : (k == 5 ? 5 : 3))
                                                           : (k <= 3 ? 8 : (k == 5 ? 5 : 3));
}

// A staged 16-byte chunk into shared memory at a 16-byte aligned float address: one float4 store
// per 4 elements.
template <typename T>
__device__ __forceinline__ void store_chunk(float* dst, const uint4& q) {
  float v[16 / sizeof(T)];
  unpack16<T>(q, v);
#pragma unroll
  for (int i = 0; i < static_cast<int>(16 / sizeof(T)); i += 4) {
    *reinterpret_cast<float4*>(dst + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
  }
}

// Four outputs to a 4-element aligned address: one 16-byte (fp32) or 8-byte (16-bit) store.
template <typename T>
__device__ __forceinline__ void store4(T* p, const float (&v)[4]) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    const T h[4] = {from_f<T>(v[0]), from_f<T>(v[1]), from_f<T>(v[2]), from_f<T>(v[3])};
    uint2 q;
    memcpy(&q, h, sizeof(q));
    *reinterpret_cast<uint2*>(p) = q;
  }
}

// v4 staging of the image columns of a block's staged rows: item i is chunk (VEC: 16 bytes) or
// element i % nch of staged row i / nch (plane p, row ih0 + row - p * in_rows); rows outside the image
// and planes past the last stage as zeros. A round of kStageBatch items a thread is loaded before any
// is stored; a chunk goes to shared memory as whole float4 stores (off and sw are multiples of 4).
template <typename T, bool VEC>
__device__ __forceinline__ void stage_rows_v4(float* smem, const T* __restrict__ xb, int plane0, int ih0,
                                              const Tile4Args& a, int tid, int nt) {
  constexpr int CW = VEC ? 16 / static_cast<int>(sizeof(T)) : 1;
  constexpr int NB = kStageBatch;
  const int hw = a.h * a.w;
  const int items = a.pl * a.in_rows * a.nch;
#pragma unroll 1
  for (int i0 = 0; i0 < items; i0 += NB * nt) {
    uint4 raw[NB];
    float sv[NB];
    int dst[NB];
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int i = i0 + j * nt + tid;
      dst[j] = -1;
      if (i < items) {
        const int r = fdiv(i, a.by_nch);  // staged row of the block
        const int ch = i - r * a.nch;
        const int p = fdiv(r, a.by_in_rows);
        const int ih = ih0 + r - p * a.in_rows;
        const bool in = plane0 + p < a.planes && ih >= 0 && ih < a.h;
        const int64_t at = static_cast<int64_t>(p) * hw + ih * a.w + ch * CW;  // read only when `in`
        dst[j] = r * a.sw + a.off + ch * CW;
        if constexpr (VEC) {
          raw[j] = make_uint4(0u, 0u, 0u, 0u);  // zero bits are 0.0 in every dtype
          if (in) raw[j] = load16(xb + at);
        } else {
          sv[j] = in ? to_f(xb[at]) : 0.f;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      if (dst[j] < 0) break;
      if constexpr (VEC) {
        store_chunk<T>(smem + dst[j], raw[j]);
      } else {
        smem[dst[j]] = sv[j];
      }
    }
  }
}

template <typename T, int K, int S, int U>
__global__ void __launch_bounds__(kThreads, v4_min_blocks(K, U))
    fwd_tile_nchw_v4(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                     T* __restrict__ y, Tile4Args a) {
  constexpr int WIN = (U - 1) * S + K;  // window values per staged row, and staged rows, of a thread
  extern __shared__ float smem[];
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int bid = static_cast<int>(blockIdx.x);
  const int pg = fdiv(bid, a.by_tiles_h);
  const int oh0 = (bid - pg * a.tiles_h) * a.trows * U;
  const int plane0 = pg * a.pl;
  const int ih0 = oh0 * S - a.ph;
  const int hw = a.h * a.w;
  const T* xb = x + static_cast<int64_t>(plane0) * hw;
  const int rows_all = a.pl * a.in_rows;  // staged row r of the block starts at smem + r * sw

  // Halo columns [0, off) and [off + w, sw) of every staged row (disjoint from the copy below).
  const int right0 = a.off + a.w;
#pragma unroll 1
  for (int r = tid; r < rows_all; r += nt) {
    float* row = smem + r * a.sw;
#pragma unroll 1
    for (int j = 0; j < a.off; ++j) row[j] = 0.f;
#pragma unroll 1
    for (int j = right0; j < a.sw; ++j) row[j] = 0.f;
  }
  // Image columns of every staged row; rows outside the image (and planes past the last) as zeros.
  // One loop per item kind, so neither carries the other's code.
  if (a.vec) {
    stage_rows_v4<T, true>(smem, xb, plane0, ih0, a, tid, nt);
  } else {
    stage_rows_v4<T, false>(smem, xb, plane0, ih0, a, tid, nt);
  }
  __syncthreads();

  const int rest = fdiv(tid, a.by_tpr);
  const int tx = tid - rest * a.tpr;
  const int p = fdiv(rest, a.by_trows);
  const int ty = rest - p * a.trows;
  const int plane = plane0 + p;
  if (p >= a.pl || plane >= a.planes) return;
  const int c = plane - fdiv(plane, a.by_c) * a.c;
  float wr[K * K];
  const T* wc = wt + static_cast<int64_t>(c) * K * K;
#pragma unroll
  for (int i = 0; i < K * K; ++i) wr[i] = to_f(wc[a.flip ? K * K - 1 - i : i]);
  const float b = bias != nullptr ? to_f(bias[c]) : 0.f;
  float acc[U][U];
#pragma unroll
  for (int r = 0; r < U; ++r) {
#pragma unroll
    for (int q = 0; q < U; ++q) acc[r][q] = b;
  }
  // The thread's top-left window value: staged row ty * U * S, input column tx * U * S - pw.
  const float* s = smem + p * a.plane_sz + ty * U * S * a.sw + a.off - a.pw + tx * U * S;
#pragma unroll
  for (int ir = 0; ir < WIN; ++ir) {
    float v[WIN];
#pragma unroll
    for (int j = 0; j < WIN; ++j) v[j] = s[j];
    s += a.sw;
#pragma unroll
    for (int r = 0; r < U; ++r) {
      const int kh = ir - r * S;  // compile-time after unrolling
      if (kh >= 0 && kh < K) {
#pragma unroll
        for (int q = 0; q < U; ++q) {
#pragma unroll
          for (int kw = 0; kw < K; ++kw) acc[r][q] = fmaf(wr[kh * K + kw], v[q * S + kw], acc[r][q]);
        }
      }
    }
  }
  const int ow = tx * U;
  const int oh = oh0 + ty * U;
  T* yp = y + static_cast<int64_t>(plane) * a.ho * a.wo + static_cast<int64_t>(oh) * a.wo + ow;
#pragma unroll
  for (int r = 0; r < U; ++r) {
    if (oh + r >= a.ho) break;
    if constexpr (U == 4) {
      if (a.vec_out) {
        store4(yp, acc[r]);
        yp += a.wo;
        continue;
      }
    }
#pragma unroll
    for (int q = 0; q < U; ++q) {
      if (ow + q < a.wo) yp[q] = from_f<T>(acc[r][q]);
    }
    yp += a.wo;
  }
}

// Resident blocks per SM of `threads` threads at `regs` registers and `smem` bytes (H100: 64 K
// registers allocated per warp in units of 256, 2048 threads, 32 blocks, 228 KB shared memory with
// 1 KB reserved per block).
int resident_blocks(int threads, int regs, int smem) {
  const int warps = (threads + 31) / 32;
  const int per_warp = (regs * 32 + 255) / 256 * 256;
  const int by_regs = 65536 / (warps * per_warp);
  const int by_threads = 2048 / (warps * 32);
  const int by_smem = smem > 0 ? (228 * 1024) / (smem + 1024) : 32;
  const int n = by_regs < by_threads ? by_regs : by_threads;
  const int m = n < by_smem ? n : by_smem;
  return m < 1 ? 1 : (m > 32 ? 32 : m);
}

// The register cap __launch_bounds__(256, v4_min_blocks(k, u)) gives ptxas (an upper bound).
int v4_reg_cap(int k, int u) {
  const int r = 65536 / (kThreads * v4_min_blocks(k, u));
  return (r > 255 ? 255 : r) & ~7;
}

int64_t v4_blocks(const Tile4Args& a) {
  return (static_cast<int64_t>(a.planes) + a.pl - 1) / a.pl * a.tiles_h;
}

// Waves of resident blocks a v4 plan's grid covers on g_plan_sms SMs.
double v4_waves(const Tile4Args& a, int k) {
  const int res = resident_blocks(a.threads, v4_reg_cap(k, a.u), a.pl * a.plane_sz * 4);
  return static_cast<double>(v4_blocks(a)) / (static_cast<double>(g_plan_sms) * res);
}

// v4 geometry for U = u with at most pl_cap planes a block: the thread rows per tile that need the
// fewest thread rows per plane (ties: the tallest tile, the least halo), then as many planes as 256
// threads and 48 KB of shared memory hold. False when no tile fits.
bool plan_tile_v4_u(Tile4Args& a, int k, int s, int u, int pl_cap) {
  a.u = u;
  a.tpr = (a.wo + u - 1) / u;
  if (a.tpr > kThreads) return false;
  a.off = ((a.pw > 0 ? a.pw : 0) + 3) & ~3;
  const int need = a.off - a.pw + (a.tpr * u - 1) * s + k;  // columns the windows reach
  const int cols = need > a.off + a.w ? need : a.off + a.w;
  a.sw = (cols + 3) & ~3;
  int best_total = -1;
  for (int trows = kThreads / a.tpr; trows >= 1; --trows) {
    const int th = trows * u;
    const int tiles_h = (a.ho + th - 1) / th;
    const int in_rows = (th - 1) * s + k;
    if (in_rows * a.sw * 4 > kMaxSmemBytes) continue;
    if (best_total < 0 || tiles_h * trows < best_total) {
      best_total = tiles_h * trows;
      a.trows = trows;
      a.tiles_h = tiles_h;
      a.in_rows = in_rows;
    }
  }
  if (best_total < 0) return false;
  a.plane_sz = a.in_rows * a.sw;
  int pl = kThreads / (a.tpr * a.trows);
  if (pl > a.planes) pl = a.planes;
  if (pl > kMaxSmemBytes / (a.plane_sz * 4)) pl = kMaxSmemBytes / (a.plane_sz * 4);
  if (pl > pl_cap) pl = pl_cap;
  a.pl = pl < 1 ? 1 : pl;
  a.threads = (a.pl * a.tpr * a.trows + 31) / 32 * 32;
  return true;
}

// v4 plan. Planes per block are halved (down to kMinBlockThreads threads) while the grid covers fewer
// than kWaveTarget waves: smaller blocks, more of them, the same instructions per output. Stride 1
// keeps U = 4 (the fewest instructions per output on every seed shape, sm_90 SASS: a thread's fixed
// cost is spread over 16 outputs). Stride 2 (issue 29: grids sized to fill the GPU) takes the largest
// U whose grid covers kWaveTarget waves; when none does, the plan with the most waves. Mirrored by
// kernels/depthwise/plan_v4.py.
bool plan_tile_v4(Tile4Args& a, int k, int s) {
  Tile4Args best = a;
  double best_waves = -1.0;
  const int us[3] = {4, 2, 1};
  for (int ui = 0; ui < (s == 2 ? 3 : 1); ++ui) {
    const int u = us[ui];
    Tile4Args t = a;
    if (!plan_tile_v4_u(t, k, s, u, kThreads)) continue;
    double wv = v4_waves(t, k);
    while (wv < kWaveTarget && t.pl > 1 && t.threads > kMinBlockThreads) {
      Tile4Args t2 = a;
      plan_tile_v4_u(t2, k, s, u, t.pl / 2);
      t = t2;
      wv = v4_waves(t, k);
    }
    if (wv >= kWaveTarget) {
      a = t;
      return true;
    }
    if (wv > best_waves) {
      best = t;
      best_waves = wv;
    }
  }
  if (best_waves < 0) return false;
  a = best;
  return true;
}

template <typename T, int K, int S>
cudaError_t run_tile_v4(const T* x, const T* w, const T* bias, T* y, const TileArgs& t, cudaStream_t stream) {
  constexpr int CW = 16 / static_cast<int>(sizeof(T));
  Tile4Args a{};
  a.planes = static_cast<int>(t.planes);
  a.c = t.c;
  set_tile_sizes(a, t);
  a.flip = t.flip;
  if (!plan_tile_v4(a, K, S)) return cudaErrorNotSupported;
  a.vec = a.w % CW == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 ? 1 : 0;
  // Stride 1 without 16-byte chunks (W = 14, 7 on the seed shapes) costs v4 more SASS instructions per
  // output than v2/v3 (docs/tuning-log.md, step 7): v3 runs it. Stride 2 keeps v4 for its fuller grid.
  if (S == 1 && !a.vec) return cudaErrorNotSupported;
  a.nch = a.vec ? a.w / CW : a.w;
  a.vec_out = a.u == 4 && a.wo % 4 == 0 && reinterpret_cast<uintptr_t>(y) % (4 * sizeof(T)) == 0 ? 1 : 0;
  const int64_t blocks = v4_blocks(a);
  if (blocks > 0x7fffffffLL) return cudaErrorNotSupported;
  a.by_tiles_h = make_fastdiv(a.tiles_h);
  a.by_c = make_fastdiv(a.c);
  a.by_tpr = make_fastdiv(a.tpr);
  a.by_trows = make_fastdiv(a.trows);
  a.by_in_rows = make_fastdiv(a.in_rows);
  a.by_nch = make_fastdiv(a.nch);
  const int bytes = a.pl * a.plane_sz * static_cast<int>(sizeof(float));
  const auto grid = static_cast<unsigned>(blocks);
  if constexpr (S == 2) {  // U = 2 and 1 are planned for stride 2 only
    if (a.u == 2) {
      fwd_tile_nchw_v4<T, K, S, 2><<<grid, a.threads, bytes, stream>>>(x, w, bias, y, a);
      return cudaGetLastError();
    }
    if (a.u == 1) {
      fwd_tile_nchw_v4<T, K, S, 1><<<grid, a.threads, bytes, stream>>>(x, w, bias, y, a);
      return cudaGetLastError();
    }
  }
  fwd_tile_nchw_v4<T, K, S, 4><<<grid, a.threads, bytes, stream>>>(x, w, bias, y, a);
  return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch_tile(int k, int s, const T* x, const T* w, const T* bias, T* y, const TileArgs& a,
                          Variant variant, cudaStream_t st) {
  return dispatch_ks(k, s, [&](auto K, auto S) {
    constexpr int kk = decltype(K)::value, ss = decltype(S)::value;
    // nvcc 13.0's ptxas spills 4 bytes (an 8-byte stack frame) in the 16-bit k5 stride-2 v2 instance
    // on sm_90 only; those problems keep v1 (not instantiated for v2) until a GPU run says whether a
    // register-budget fix of that instance pays. fp32, the seed shapes' dtype, is unaffected.
    constexpr bool kV2Built = std::is_same<T, float>::value || !(kk == 5 && ss == 2);
    if constexpr (kV2Built) {
      if (variant == Variant::V2 && v2_supported(a)) return run_tile_staged<T, kk, ss, Variant::V2>(x, w, bias, y, tile2_args(a), st);
    }
    if constexpr (kk != 1 && !std::is_same<T, __nv_bfloat16>::value) {  // v4: fp32/fp16, k 3/5/7
      if (variant == Variant::V4 && v2_supported(a)) {
        const cudaError_t err = run_tile_v4<T, kk, ss>(x, w, bias, y, a, st);
        if (err != cudaErrorNotSupported) return err;  // not a v4 geometry (run_tile_v4): v3
      }
    }
    if ((variant == Variant::V3 || variant == Variant::V4) && v2_supported(a)) {
      return run_tile_staged<T, kk, ss, Variant::V3>(x, w, bias, y, tile2_args(a), st);
    }
    return run_tile<T, kk, ss>(x, w, bias, y, a, st);
  });
}

// ---- forward, NHWC (channels_last) rows ----------------------------------------------------------
// Threads run along C (coalesced), each computes WPT horizontally adjacent outputs of one channel and
// reuses every input it loads for all of them: ((WPT-1)*S + K) * K loads per WPT outputs instead of
// K*K per output. Reuses TileArgs (planes = N*C; the tile fields are unused).
constexpr int kNhwcWpt = 4;

// minBlocks 3 (<= 85 registers): with no hint ptxas picked 80 and spilled for k = 7; with 3 it needs
// at most 62 and spills nothing (sm_80, sm_90).
template <typename T, int K, int S>
__global__ void __launch_bounds__(kThreads, 3)
    fwd_rows_nhwc(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                  T* __restrict__ y, TileArgs a, int64_t n_batch) {
  constexpr int WPT = kNhwcWpt;
  constexpr int SPAN = (WPT - 1) * S + K;
  const int C = a.c;
  const int wgroups = (a.wo + WPT - 1) / WPT;
  const int per_sample = a.ho * wgroups * C;
  for (int64_t n = blockIdx.y; n < n_batch; n += gridDim.y) {
    for (int i = blockIdx.x * kThreads + threadIdx.x; i < per_sample; i += gridDim.x * kThreads) {
      const int c = i % C;
      const int r = i / C;
      const int wg = r % wgroups;
      const int oh = r / wgroups;
      const int ow0 = wg * WPT;
      const T* wc = wt + static_cast<int64_t>(c) * K * K;
      const float b = bias != nullptr ? to_f(bias[c]) : 0.f;
      float acc[WPT];
#pragma unroll
      for (int o = 0; o < WPT; ++o) acc[o] = b;
      const int iw0 = ow0 * S - a.pw;
      const T* plane = x + n * a.h * static_cast<int64_t>(a.w) * C + c;
      // kh stays a loop (one filter row of weights and SPAN inputs live at a time): fully unrolled,
      // ptxas hoisted every load and needed > 128 registers for k = 7.
#pragma unroll 1
      for (int kh = 0; kh < K; ++kh) {
        const int ih = oh * S - a.ph + kh;
        if (ih < 0 || ih >= a.h) continue;
        float wrow[K];
#pragma unroll
        for (int kw = 0; kw < K; ++kw) {
          wrow[kw] = to_f(wc[a.flip ? (K - 1 - kh) * K + (K - 1 - kw) : kh * K + kw]);
        }
        const T* row = plane + static_cast<int64_t>(ih) * a.w * C;
#pragma unroll
        for (int j = 0; j < SPAN; ++j) {
          const int iw = iw0 + j;
          const float v = (iw >= 0 && iw < a.w) ? to_f(row[static_cast<int64_t>(iw) * C]) : 0.f;
          // input column j feeds output o through tap kw = j - o*S (compile-time after unrolling)
#pragma unroll
          for (int o = 0; o < WPT; ++o) {
            const int kw = j - o * S;
            if (kw >= 0 && kw < K) acc[o] = fmaf(wrow[kw], v, acc[o]);
          }
        }
      }
      T* out = y + ((n * a.ho + oh) * static_cast<int64_t>(a.wo) + ow0) * C + c;
#pragma unroll
      for (int o = 0; o < WPT; ++o) {
        if (ow0 + o < a.wo) out[static_cast<int64_t>(o) * C] = from_f<T>(acc[o]);
      }
    }
  }
}

template <typename T, int K, int S>
cudaError_t run_nhwc(const T* x, const T* w, const T* bias, T* y, const TileArgs& a, cudaStream_t stream) {
  const int64_t n_batch = a.planes / a.c;
  const int64_t per_sample = static_cast<int64_t>(a.ho) * ((a.wo + kNhwcWpt - 1) / kNhwcWpt) * a.c;
  const int64_t bx = (per_sample + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(bx < (1 << 20) ? bx : (1 << 20)),
                  static_cast<unsigned>(n_batch < 65535 ? n_batch : 65535));
  fwd_rows_nhwc<T, K, S><<<grid, kThreads, 0, stream>>>(x, w, bias, y, a, n_batch);
  return cudaGetLastError();
}

// ---- forward, NHWC (channels_last), v3: channel vectors, a column walked down --------------------
// Variant::V3 on channels_last (forward and stride-1 input grad), k in {3, 5, 7}, where C is a multiple
// of the vector width and x, y are 16-byte aligned (else the row kernel above, the measured default):
// * a thread owns VW = 16 / sizeof(T) adjacent channels (fp32 4, fp16/bf16 8) as one 16-byte vector
//   (one LDG.128 per input pixel; the row kernel issues one scalar load per channel);
// * it walks `strip` output rows down one output column: every input row of the strip is loaded once
//   (K vectors, issued together) and fed to each of the up-to-ceil(K/S) output rows that use it, held
//   as a ring of accumulators; a strip of R rows loads ((R - 1) * S + K) * K vectors for R outputs
//   (k3, R 8: 3.75 per output, against 9 without reuse);
// * the block's K*K x (ct * VW) weights sit transposed in shared memory ([tap][channel]): a tap's
//   weights are one 16-byte shared load (two for 16-bit T), shared by the 4 column groups of a warp
//   (8-wide blocks);
// * a block is ct channel vectors x (256 / ct) output positions, position = (strip, column) by FastDiv
//   once per thread, no div/mod in any loop; grid (positions, channel groups, batch).
// Output rows per thread. The ring fills over k - 1 extra iterations that load a row each, so short
// strips pay that per row: the calibrated model (docs/tuning-log.md step 7) predicted 8 best on every
// seed shape, small maps included (strip 2 there: 0.85x instead of 1.00x of cuDNN, geomean fp32).
constexpr int kNhwcVecStrip = 8;
// Channel vectors per block: 8 (8 lanes read one 128-byte line per pixel), fewer where C is narrower,
// more (up to nhwc_vec_ct_max) where a sample has fewer positions than the block's 256 / 8 rows: a
// 7x7 map has 7 positions, and 8-wide blocks left 25 of their 32 rows idle.
constexpr int kNhwcVecCt = 8;
// The widest block: its (k^2 + 1) x ct_max x VW floats of weights and bias stay within 48 KB of
// shared memory (16-bit k7 at 32 would take 51 KB).
constexpr int nhwc_vec_ct_max(int k, int elem_bytes) { return k == 7 && elem_bytes == 2 ? 16 : 32; }

struct NhwcVecArgs {
  int c, h, w, ho, wo, ph, pw;
  int cv;         // C / VW channel vectors
  int strip;      // output rows per thread
  int positions;  // ceil(ho / strip) * wo per sample
  FastDiv by_wo;
  // Always 0, added to the weights' shared-memory offset in the row loop: ptxas cannot prove the loads
  // loop-invariant, so it reads a tap's weights where they are used instead of hoisting all K*K*VW of
  // them into registers (it did, and spilled 50-3700 LDL/STL per instance).
  int zero;
  bool flip;
};

// Resident blocks per SM the instances are built for: fp32 k3 3 on sm_90 (<= 80 registers; it takes
// 62, so 4 resident; bound to 2 it took 83 and 2 resident) but 2 on sm_80, whose ptxas spilled it at
// 3; 16-bit k3 and k5 stride 1 2 (<= 128; 16-bit k3 spilled at 3). At 2 the k5 stride-2 and every k7
// instance spilled 2-6 LDL/STL: those (no seed shape has k7 or stride 2) get 1, so none spills
// (python -m kernels.sass depthwise --gate, --arch 80) and they run 1 block per SM. The per-arch
// value follows the CUDA programming guide's __CUDA_ARCH__ pattern for __launch_bounds__.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr int kNhwcVecFp32K3Blocks = 2;
#else
constexpr int kNhwcVecFp32K3Blocks = 3;
#endif
template <typename T, int K, int S>
constexpr int nhwc_vec_min_blocks() {
  if (K <= 3) return sizeof(T) == 4 ? kNhwcVecFp32K3Blocks : 2;
  return K == 5 && S == 1 ? 2 : 1;
}

// 16 / sizeof(T) floats packed into one 16-byte vector of T (round to nearest even).
template <typename T>
__device__ __forceinline__ uint4 pack16(const float (&v)[16 / sizeof(T)]) {
  unsigned w[4];
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) memcpy(&w[i], &v[i], sizeof(float));
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const T lo = from_f<T>(v[2 * i]), hi = from_f<T>(v[2 * i + 1]);
      unsigned short blo, bhi;
      memcpy(&blo, &lo, sizeof(blo));
      memcpy(&bhi, &hi, sizeof(bhi));
      w[i] = static_cast<unsigned>(blo) | (static_cast<unsigned>(bhi) << 16);
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// A ring slot restarts at the bias (16-byte shared loads).
template <int VW>
__device__ __forceinline__ void ring_reset(float (&acc)[VW], const float* bv) {
#pragma unroll
  for (int e4 = 0; e4 < VW; e4 += 4) {
    const float4 b4 = *reinterpret_cast<const float4*>(bv + e4);
    acc[e4 + 0] = b4.x;
    acc[e4 + 1] = b4.y;
    acc[e4 + 2] = b4.z;
    acc[e4 + 3] = b4.w;
  }
}

// Input row `ir` of a strip (image row ih) at columns iw0 .. iw0 + K - 1 of one channel vector (xs: the
// sample's first pixel of it): the NHWC vector kernels' K 16-byte loads, all issued before any is
// consumed; zeros outside the image and past the strip's `in_rows`. `a`: NhwcVecArgs, WgradNhwcArgs.
template <typename T, int K, typename Args>
__device__ __forceinline__ void load_row16(uint4 (&raw)[K], const T* xs, int ir, int in_rows, int ih, int iw0,
                                           int row_elems, const Args& a) {
  const bool row_ok = ir < in_rows && ih >= 0 && ih < a.h;
  const T* row = xs + (row_ok ? ih * row_elems : 0);
#pragma unroll
  for (int kw = 0; kw < K; ++kw) {
    const int iw = iw0 + kw;
    const bool ok = row_ok && iw >= 0 && iw < a.w;
    raw[kw] = ok ? load16(row + iw * a.c) : make_uint4(0u, 0u, 0u, 0u);
  }
}

// Step t of the NHWC vector kernels' walk down a strip: input rows t*S .. t*S+S-1 (load_row16), each
// vector unpacked once and handed to body(j, kr, kw, v) for every ring slot j the row feeds: slot j is
// output row t - j and takes kernel row kr = j*S + u (compile-time after unrolling). Slots before the
// strip (the ring filling) or past its `rows` (draining) and kernel rows >= KR are skipped.
template <typename T, int K, int S, int D, int KR, typename Args, typename Body>
__device__ __forceinline__ void nhwc_step(const T* xs, int t, int rows, int in_rows, int ih0, int iw0,
                                          int row_elems, const Args& a, Body&& body) {
  constexpr int VW = 16 / sizeof(T);
#pragma unroll
  for (int u = 0; u < S; ++u) {
    const int ir = t * S + u;
    uint4 raw[K];
    load_row16<T, K>(raw, xs, ir, in_rows, ih0 + ir, iw0, row_elems, a);
#pragma unroll
    for (int kw = 0; kw < K; ++kw) {
      float v[VW];
      unpack16<T>(raw[kw], v);
#pragma unroll
      for (int j = 0; j < D; ++j) {
        const int kr = j * S + u;
        if (kr >= KR || t - j < 0 || t - j >= rows) continue;
        body(j, kr, kw, v);
      }
    }
  }
}

// Iteration t of a thread's row loop reads input rows t*S .. t*S+S-1 of its strip; ring slot j holds
// output row t - j (D = ceil(K/S) rows in flight), which takes filter row kh = j*S + u from input row
// t*S + u. After the iteration, slot D-1 is complete: stored, and the ring shifts by one.
template <typename T, int K, int S>
__global__ void __launch_bounds__(kThreads, nhwc_vec_min_blocks<T, K, S>())
    fwd_nhwc_vec(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                 T* __restrict__ y, NhwcVecArgs a, int64_t n_batch) {
  constexpr int VW = 16 / sizeof(T);
  constexpr int KK = K * K;
  constexpr int D = (K + S - 1) / S;
  // [KK + 1][COLS]: the taps, then the bias (read where a ring slot restarts: 8 registers fewer than
  // holding it, which spilled the 16-bit k7 instance at 128). The row stride is the widest block's,
  // a compile-time constant, so every tap's shared load takes an immediate offset.
  constexpr int COLS = nhwc_vec_ct_max(K, sizeof(T)) * VW;
  extern __shared__ float nhwc_w[];
  const int ct = static_cast<int>(blockDim.x);
  const int cols = ct * VW;  // channels of the block
  const int c0 = static_cast<int>(blockIdx.y) * cols;
  const int tid = static_cast<int>(threadIdx.y) * ct + static_cast<int>(threadIdx.x);
  for (int e = tid; e < (KK + 1) * cols; e += kThreads) {
    const int cl = e / (KK + 1);  // compile-time divisor: a multiply and a shift
    const int tap = e - cl * (KK + 1);
    const int c = c0 + cl;
    float v = 0.f;
    if (c < a.c && tap < KK) {
      v = to_f(wt[static_cast<int64_t>(c) * KK + (a.flip ? KK - 1 - tap : tap)]);
    } else if (c < a.c && bias != nullptr) {
      v = to_f(bias[c]);
    }
    nhwc_w[tap * COLS + cl] = v;
  }
  __syncthreads();
  const int cvec = static_cast<int>(blockIdx.y) * ct + static_cast<int>(threadIdx.x);
  const int q = static_cast<int>(blockIdx.x * blockDim.y + threadIdx.y);
  if (cvec >= a.cv || q >= a.positions) return;
  const int si = fdiv(q, a.by_wo);
  const int ow = q - si * a.wo;
  const int oh0 = si * a.strip;
  const int rows = min(a.strip, a.ho - oh0);  // output rows of this strip
  const int in_rows = (rows - 1) * S + K;     // input rows they read
  const int ih0 = oh0 * S - a.ph, iw0 = ow * S - a.pw;
  const int row_elems = a.w * a.c;
  const int out_row = a.wo * a.c;
  const float* bv = nhwc_w + KK * COLS + threadIdx.x * VW;  // the bias row
  for (int64_t n = blockIdx.z; n < n_batch; n += gridDim.z) {
    // 32-bit offsets inside one sample (< 2^31 elements, the binding checks)
    const T* xs = x + n * a.h * row_elems + cvec * VW;
    T* ys = y + (n * a.ho + oh0) * out_row + ow * a.c + cvec * VW;
    float acc[D][VW];
#pragma unroll
    for (int j = 0; j < D; ++j) ring_reset<VW>(acc[j], bv);
#pragma unroll 1
    for (int t = 0; t < rows + D - 1; ++t) {
      const float* wv = nhwc_w + threadIdx.x * VW + t * a.zero;
      nhwc_step<T, K, S, D, K>(xs, t, rows, in_rows, ih0, iw0, row_elems, a,
                               [&](int j, int kh, int kw, const float (&v)[VW]) {
                                 const float* wp = wv + (kh * K + kw) * COLS;
#pragma unroll
                                 for (int e4 = 0; e4 < VW; e4 += 4) {
                                   const float4 w4 = *reinterpret_cast<const float4*>(wp + e4);
                                   acc[j][e4 + 0] = fmaf(w4.x, v[e4 + 0], acc[j][e4 + 0]);
                                   acc[j][e4 + 1] = fmaf(w4.y, v[e4 + 1], acc[j][e4 + 1]);
                                   acc[j][e4 + 2] = fmaf(w4.z, v[e4 + 2], acc[j][e4 + 2]);
                                   acc[j][e4 + 3] = fmaf(w4.w, v[e4 + 3], acc[j][e4 + 3]);
                                 }
                               });
      const int done = t - (D - 1);  // the output row slot D-1 holds, now complete
      if (done >= 0) *reinterpret_cast<uint4*>(ys + done * out_row) = pack16<T>(acc[D - 1]);
#pragma unroll
      for (int j = D - 1; j > 0; --j) {
#pragma unroll
        for (int e = 0; e < VW; ++e) acc[j][e] = acc[j - 1][e];
      }
      ring_reset<VW>(acc[0], bv + t * a.zero);
    }
  }
}

// Whether the v3 NHWC kernel takes a call: k 3/5/7, C a multiple of the vector width, 16-byte aligned
// x and y, the channel groups within grid.y.
template <typename T>
bool nhwc_vec_supported(int k, const T* x, const T* y, const TileArgs& a) {
  constexpr int VW = 16 / sizeof(T);
  return (k == 3 || k == 5 || k == 7) && a.c % VW == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(y) % 16 == 0 && a.c / VW / kNhwcVecCt < 65535;
}

// Channel vectors per block (see kNhwcVecCt) for cv channel vectors and `positions` per sample.
inline int nhwc_vec_ct(int cv, int64_t positions, int ct_max) {
  int ct = 1;
  while (ct < kNhwcVecCt && ct < cv) ct *= 2;
  while (kThreads / ct > positions && ct * 2 <= ct_max && ct < cv) ct *= 2;
  return ct;
}

// `strip` 0: kNhwcVecStrip; any other value forces it (the emulator tests run short and odd strips).
template <typename T, int K, int S>
cudaError_t run_nhwc_vec(const T* x, const T* w, const T* bias, T* y, const TileArgs& a, cudaStream_t stream,
                         int strip = 0) {
  constexpr int VW = 16 / sizeof(T);
  const int64_t n_batch = a.planes / a.c;
  NhwcVecArgs v{};
  set_tile_sizes(v, a);
  v.c = a.c;
  v.cv = a.c / VW;
  v.flip = a.flip;
  v.zero = 0;
  v.strip = strip > 0 ? strip : kNhwcVecStrip;
  const int64_t positions = static_cast<int64_t>((v.ho + v.strip - 1) / v.strip) * v.wo;
  const int ct_max = nhwc_vec_ct_max(K, sizeof(T));
  const int ct = nhwc_vec_ct(v.cv, positions, ct_max);
  const int64_t bx = (positions + kThreads / ct - 1) / (kThreads / ct);
  if (positions > 0x7fffffffLL || bx > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  v.positions = static_cast<int>(positions);
  v.by_wo = make_fastdiv(static_cast<uint32_t>(v.wo));
  const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>((v.cv + ct - 1) / ct),
                  static_cast<unsigned>(n_batch < 65535 ? n_batch : 65535));
  const dim3 block(static_cast<unsigned>(ct), static_cast<unsigned>(kThreads / ct));
  const int bytes = (K * K + 1) * ct_max * VW * static_cast<int>(sizeof(float));
  fwd_nhwc_vec<T, K, S><<<grid, block, bytes, stream>>>(x, w, bias, y, v, n_batch);
  return cudaGetLastError();
}

// channels_last tiled geometries: the v3 vector kernel where it applies (Variant::V3 and V4), else the row
// kernel (v1, v2: the measured one).
template <typename T>
cudaError_t dispatch_nhwc(int k, int s, const T* x, const T* w, const T* bias, T* y, const TileArgs& a,
                          Variant variant, cudaStream_t st) {
  return dispatch_ks(k, s, [&](auto K, auto S) {
    constexpr int kk = decltype(K)::value, ss = decltype(S)::value;
    if constexpr (kk >= 3) {
      const bool vec = variant == Variant::V3 || variant == Variant::V4;
      if (vec && nhwc_vec_supported(kk, x, y, a)) return run_nhwc_vec<T, kk, ss>(x, w, bias, y, a, st);
    }
    return run_nhwc<T, kk, ss>(x, w, bias, y, a, st);
  });
}

bool tile_supported(int kh, int kw, int sh, int sw, int dh, int dw) {
  return kh == kw && (kh == 1 || kh == 3 || kh == 5 || kh == 7) && sh == sw && (sh == 1 || sh == 2) &&
         dh == 1 && dw == 1;
}

// ---- direct kernels (any geometry, NCHW or NHWC) ----------------------------------------------
template <bool CL>
__device__ __forceinline__ int64_t offset(int64_t n, int64_t c, int h, int w, int64_t C, int H, int W) {
  return CL ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * static_cast<int64_t>(W) + w;
}

// Index of one element inside a sample (< 2^31, checked by the binding) -> (c, h, w): 32-bit math only.
template <bool CL>
__device__ __forceinline__ void decompose(int i, int C, int H, int W, int& c, int& h, int& w) {
  if (CL) {
    c = i % C;
    i /= C;
    w = i % W;
    h = i / W;
  } else {
    w = i % W;
    i /= W;
    h = i % H;
    c = i / H;
  }
}

// Direct kernels: grid.y strides over the batch, grid.x over one sample's elements in memory order.
template <typename T, bool CL>
__global__ void __launch_bounds__(kThreads)
    fwd_direct(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
               T* __restrict__ y, Geom g) {
  const int C = static_cast<int>(g.c);
  const int per_sample = C * g.ho * g.wo;
  for (int64_t n = blockIdx.y; n < g.n; n += gridDim.y) {
    for (int i = blockIdx.x * kThreads + threadIdx.x; i < per_sample; i += gridDim.x * kThreads) {
      int c, oh, ow;
      decompose<CL>(i, C, g.ho, g.wo, c, oh, ow);
      float acc = bias != nullptr ? to_f(bias[c]) : 0.f;
      const T* wc = wt + static_cast<int64_t>(c) * g.kh * g.kw;
      for (int kh = 0; kh < g.kh; ++kh) {
        const int ih = oh * g.sh - g.ph + kh * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        for (int kw = 0; kw < g.kw; ++kw) {
          const int iw = ow * g.sw - g.pw + kw * g.dw;
          if (iw < 0 || iw >= g.w) continue;
          acc = fmaf(to_f(wc[kh * g.kw + kw]), to_f(x[offset<CL>(n, c, ih, iw, g.c, g.h, g.w)]), acc);
        }
      }
      y[n * per_sample + i] = from_f<T>(acc);
    }
  }
}

template <typename T, bool CL>
__global__ void __launch_bounds__(kThreads)
    dgrad_direct(const T* __restrict__ dy, const T* __restrict__ wt, T* __restrict__ dx, Geom g) {
  const int C = static_cast<int>(g.c);
  const int per_sample = C * g.h * g.w;
  for (int64_t n = blockIdx.y; n < g.n; n += gridDim.y) {
    for (int i = blockIdx.x * kThreads + threadIdx.x; i < per_sample; i += gridDim.x * kThreads) {
      int c, ih, iw;
      decompose<CL>(i, C, g.h, g.w, c, ih, iw);
      float acc = 0.f;
      const T* wc = wt + static_cast<int64_t>(c) * g.kh * g.kw;
      for (int kh = 0; kh < g.kh; ++kh) {
        const int th = ih + g.ph - kh * g.dh;
        if (th < 0 || th % g.sh != 0) continue;
        const int oh = th / g.sh;
        if (oh >= g.ho) continue;
        for (int kw = 0; kw < g.kw; ++kw) {
          const int tw = iw + g.pw - kw * g.dw;
          if (tw < 0 || tw % g.sw != 0) continue;
          const int ow = tw / g.sw;
          if (ow >= g.wo) continue;
          acc = fmaf(to_f(wc[kh * g.kw + kw]), to_f(dy[offset<CL>(n, c, oh, ow, g.c, g.ho, g.wo)]), acc);
        }
      }
      dx[n * per_sample + i] = from_f<T>(acc);
    }
  }
}

dim3 grid_for(int64_t n, int64_t per_sample) {
  const int64_t bx = (per_sample + kThreads - 1) / kThreads;
  const int64_t by = n < 65535 ? n : 65535;  // the y loop covers larger batches
  return dim3(static_cast<unsigned>(bx < (1 << 20) ? bx : (1 << 20)), static_cast<unsigned>(by > 0 ? by : 1));
}

// ---- input grad, stride 2: four parity phases --------------------------------------------------
// dx[ih][iw] sums w[kh][kw] * dy[oh][ow] over ih + ph - kh = 2 oh (and the same along W): of a filter
// row's K taps only those with kh = ih + ph (mod 2) reach an input row, so each parity class of dx
// (ih, iw mod 2) is a stride-1 correlation of dy with a sub-filter of the taps of one parity. A
// thread computes the 4 outputs of one 2x2 quad (one per phase) from an R x R window of dy read once,
// with no tap test and no div/mod (dgrad_direct: per output, K*K taps with two modulo tests and two
// divisions each). Window row r feeds output row 2qi + a through tap kh = e + a - 2r, where
// e = K - 1 + ((ph - K + 1) & 1) is the same for every thread: holding the filter shifted by
// d = K - e (w'[i] = w[i - d], zero outside) makes the filter index K + a - 2r compile-time.
struct S2Args {
  int qh, qw;  // quads per plane along H and W: ceil(H / 2), ceil(W / 2)
  FastDiv by_outer, by_qw;  // NCHW: quads per plane, then qw; NHWC: C, then qw
};

template <typename T, int K, bool CL>
__global__ void __launch_bounds__(kThreads)
    dgrad_s2(const T* __restrict__ dy, const T* __restrict__ wt, T* __restrict__ dx, Geom g, S2Args a) {
  constexpr int R = (K + 1) / 2 + 1;  // window rows (and columns) a quad reads
  constexpr int KP = K + 1;           // the shifted filter's side
  const int C = static_cast<int>(g.c);
  const int quads = a.qh * a.qw;
  const int per_sample = C * quads;
  const int dh = 1 - ((g.ph - K + 1) & 1), dw = 1 - ((g.pw - K + 1) & 1);  // the shifts d
  for (int64_t n = blockIdx.y; n < g.n; n += gridDim.y) {
    for (int i = blockIdx.x * kThreads + threadIdx.x; i < per_sample; i += gridDim.x * kThreads) {
      int c, q;
      if (CL) {  // channels fastest: coalesced along C
        q = fdiv(i, a.by_outer);
        c = i - q * C;
      } else {  // quad columns fastest: coalesced along W
        c = fdiv(i, a.by_outer);
        q = i - c * quads;
      }
      const int qi = fdiv(q, a.by_qw);
      const int qj = q - qi * a.qw;
      // w'[y][x] = w[y - dh][x - dw]: compile-time (y, x) less one runtime offset
      const T* wc = wt + static_cast<int64_t>(c) * K * K;
      const int wshift = dh * K + dw;
      const int oh0 = (2 * qi + g.ph - K + 1) >> 1, ow0 = (2 * qj + g.pw - K + 1) >> 1;  // floor
      // 32-bit offsets inside the (n, c) plane (one sample is < 2^31 elements, the binding checks)
      const T* dyp = dy + (CL ? n * g.ho * g.wo * g.c + c : (n * g.c + c) * g.ho * g.wo);
      const int col_step = CL ? C : 1, row_step = g.wo * col_step;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};  // (ay, ax) = (0,0), (0,1), (1,0), (1,1)
      // The window streams row by row (R values live, not R * R): k = 7 with the whole window in
      // registers spilled. k >= 5 keeps the row loop rolled: unrolled, ptxas hoisted every row's
      // loads (144-180 registers, and a spill in the 16-bit NHWC k5 instances).
      constexpr int kUnrollRows = K >= 5 ? 1 : R;
#pragma unroll kUnrollRows
      for (int r = 0; r < R; ++r) {
        const int oh = oh0 + r;
        const bool row_ok = oh >= 0 && oh < g.ho;
        float v[R];
#pragma unroll
        for (int s = 0; s < R; ++s) {
          const int ow = ow0 + s;
          v[s] = row_ok && ow >= 0 && ow < g.wo ? to_f(dyp[oh * row_step + ow * col_step]) : 0.f;
        }
#pragma unroll
        for (int ay = 0; ay < 2; ++ay) {
          const int y = K + ay - 2 * r;  // compile-time when the row loop is unrolled
          if (y < 0 || y >= KP) continue;
          // this window row's filter row, read here (L1) rather than held whole: k = 7 spilled
          const bool wy_ok = y - dh >= 0 && y - dh < K;
          float wrow[KP];
#pragma unroll
          for (int x = 0; x < KP; ++x) {
            wrow[x] = wy_ok && x - dw >= 0 && x - dw < K ? to_f(wc[y * K + x - wshift]) : 0.f;
          }
#pragma unroll
          for (int ax = 0; ax < 2; ++ax) {
#pragma unroll
            for (int s = 0; s < R; ++s) {
              const int x = K + ax - 2 * s;
              if (x >= 0 && x < KP) acc[ay * 2 + ax] = fmaf(wrow[x], v[s], acc[ay * 2 + ax]);
            }
          }
        }
      }
#pragma unroll
      for (int ay = 0; ay < 2; ++ay) {
        const int ih = 2 * qi + ay;
#pragma unroll
        for (int ax = 0; ax < 2; ++ax) {
          const int iw = 2 * qj + ax;
          if (ih < g.h && iw < g.w) dx[offset<CL>(n, c, ih, iw, g.c, g.h, g.w)] = from_f<T>(acc[ay * 2 + ax]);
        }
      }
    }
  }
}

template <typename T>
cudaError_t run_dgrad_s2(const T* dy, const T* w, T* dx, const Geom& g, bool cl, cudaStream_t st) {
  S2Args a{};
  a.qh = (g.h + 1) / 2;
  a.qw = (g.w + 1) / 2;
  a.by_outer = make_fastdiv(cl ? static_cast<uint32_t>(g.c) : static_cast<uint32_t>(a.qh * a.qw));
  a.by_qw = make_fastdiv(a.qw);
  const dim3 grid = grid_for(g.n, g.c * a.qh * a.qw);
  return dispatch_ks(g.kh, 2, [&](auto K, auto) {
    constexpr int kk = decltype(K)::value;
    if (cl) {
      dgrad_s2<T, kk, true><<<grid, kThreads, 0, st>>>(dy, w, dx, g, a);
    } else {
      dgrad_s2<T, kk, false><<<grid, kThreads, 0, st>>>(dy, w, dx, g, a);
    }
    return cudaGetLastError();
  });
}

// ---- weight grad --------------------------------------------------------------------------------
// Three variants (WgradVariant, picked at run time so one process can A/B them):
// * W1 (wgrad_partial<..., false> + wgrad_finalize): per-position partial sums into a workspace the
//   caller allocates, then a second launch sums them; the caller adds the bias grad. The position
//   -> (n, oh, ow) decomposition is 4 runtime div/mod per position, the K*K x loads unstaged.
// * W2, the default: one launch, bias grad fused, no runtime division in a loop. The NCHW tiled
//   geometries (tile_supported) run wgrad_tile_nchw, which stages input tiles in shared memory like
//   the forward; the others run wgrad_partial<..., true>. A block writes its partial sums, and the
//   block of a channel that arrives last (an arrival counter per channel) sums every split's partials
//   in split order: the result is bitwise the same whatever order the blocks run in.
// * W3, the default: W2, with wgrad_nhwc_vec for channels_last where its 16-byte vectors apply.
//
// Slots of one channel in W2's partials: its taps, then the bias. Partials: (splits, C, slots).
struct WgradArgs {
  int splits;
  int per_split;  // positions (wgrad_partial) or tiles (wgrad_tile_nchw) per split
  FastDiv by_wo, by_ho;  // wgrad_partial<..., true>: position -> (n, oh, ow)
};

// W2's cross-block step, run by every thread of a block whose partial slots of channels [c0, c0 + cw)
// are written: the block that arrives last at `counter` sums the splits in order into dw / db and
// leaves the counter at zero for the next call (a cached workspace needs no reset).
// The weight grads' fixed-order block reduction of every thread's acc[NV], in two halves around a
// __syncthreads(): warp_partials writes each warp's shuffle-tree sums to red[warp * NV + t], then
// sum_warp_partials adds slot t's warp sums in warp order. The result does not depend on scheduling.
// GROUP > 1 (wgrad_nhwc_vec): lanes l, l + GROUP, l + 2 GROUP, ... of a warp hold summands of the
// same values (GROUP channel vectors side by side), so the tree stops at offset GROUP and lanes
// 0..GROUP-1 write red[(warp * GROUP + lane) * NV + t]; sum_warp_partials then takes a lane's slots.
template <int NV, int GROUP = 1>
__device__ __forceinline__ void warp_partials(const float (&acc)[NV], float* red, unsigned tid) {
  static_assert(GROUP >= 1 && GROUP <= 32 && (GROUP & (GROUP - 1)) == 0, "GROUP: a power of two");
  const int lane = tid % 32, warp = tid / 32;
#pragma unroll
  for (int t = 0; t < NV; ++t) {
    float v = acc[t];
#pragma unroll
    for (int off = 16; off >= GROUP; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane < GROUP) red[(warp * GROUP + lane) * NV + t] = v;
  }
}

template <int NV, int GROUP = 1>
__device__ __forceinline__ float sum_warp_partials(const float* red, int t, int lane = 0) {
  float sum = 0.f;
  for (int wi = 0; wi < kThreads / 32; ++wi) sum += red[(wi * GROUP + lane) * NV + t];
  return sum;
}

// `arrivals`: the blocks that write those channels' slots (splits, or splits x kernel-row groups when
// each group's blocks write only its rows' taps: wgrad_nhwc_vec); 1-D blocks only.
template <typename T>
__device__ __forceinline__ void wgrad_finish(const float* partial, unsigned* counters, int* last, T* dw, T* db,
                                             int counter, int splits, int64_t c0, int cw, int64_t C, int taps,
                                             int arrivals) {
  __threadfence();  // this thread's partial writes are visible before the block's arrival is
  __syncthreads();
  if (threadIdx.x == 0) last[0] = atomicAdd(counters + counter, 1u) == static_cast<unsigned>(arrivals - 1);
  __syncthreads();
  if (last[0] == 0) return;
  __threadfence();
  const int slots = taps + 1;
  const volatile float* vp = partial;  // written by other blocks: no stale L1 line
  for (int cl = 0; cl < cw; ++cl) {
    const int64_t c = c0 + cl;
    for (int t = threadIdx.x; t < slots; t += kThreads) {
      float sum = 0.f;
      for (int s = 0; s < splits; ++s) sum += vp[(static_cast<int64_t>(s) * C + c) * slots + t];
      if (t < taps) {
        dw[c * taps + t] = from_f<T>(sum);
      } else if (db != nullptr) {
        db[c] = from_f<T>(sum);
      }
    }
  }
  if (threadIdx.x == 0) counters[counter] = 0u;
}

// One reduced slot value of channel c: W2 with one split writes dw / db directly, else the partials.
template <typename T, bool W2>
__device__ __forceinline__ void wgrad_store(float* partial, T* dw, T* db, int split, int splits, int64_t c,
                                            int64_t C, int taps, int slot, float v) {
  if (!W2) {
    partial[(static_cast<int64_t>(split) * C + c) * taps + slot] = v;
  } else if (splits > 1) {
    partial[(static_cast<int64_t>(split) * C + c) * (taps + 1) + slot] = v;
  } else if (slot < taps) {
    dw[c * taps + slot] = from_f<T>(v);
  } else if (db != nullptr) {
    db[c] = from_f<T>(v);
  }
}

// One thread per position (NCHW: one channel per block; NHWC: 32 channels, lanes along C).
// K in {1,3,5}: all K*K taps in registers, one pass. K == 7: one kernel row (7 taps) per pass, because
// 49 accumulators made ptxas spill on sm_80. K == 0: any KH x KW, one tap per pass. W2 adds the bias
// slot (pass 0), decomposes positions with FastDiv and finishes in the same launch.
template <typename T, int K, bool CL, bool W2>
__global__ void __launch_bounds__(kThreads)
    wgrad_partial(const T* __restrict__ dy, const T* __restrict__ x, float* __restrict__ partial,
                  unsigned* __restrict__ counters, T* __restrict__ dw, T* __restrict__ db, Geom g, WgradArgs wa) {
  constexpr int KR = K >= 7 ? 1 : (K > 0 ? K : 1);  // kernel rows per pass
  constexpr int NT = K > 0 ? KR * K : 1;
  constexpr int NV = NT + (W2 ? 1 : 0);  // reduced values per pass: the taps, and W2's bias sum
  constexpr int CB = CL ? 32 : 1;  // channels per block (lanes along C for NHWC)
  constexpr int LANES = kThreads / CB;
  __shared__ float red[kThreads / 32 * NV > kThreads ? kThreads / 32 * NV : kThreads];
  __shared__ int last[1];
  const int splits = wa.splits;
  const int64_t n_cb = (g.c + CB - 1) / CB;
  const int64_t cb = blockIdx.x % n_cb;
  const int split = static_cast<int>(blockIdx.x / n_cb);
  const int cl = threadIdx.x % CB;
  const int pl = threadIdx.x / CB;
  const int64_t c = cb * CB + cl;
  const bool active = c < g.c;
  const int positions = static_cast<int>(g.n * g.ho * g.wo);
  const int begin = split * wa.per_split;
  const int end = min(positions, begin + wa.per_split);
  const int taps = g.kh * g.kw;
  const int passes = K > 0 ? K / KR : taps;
  const int64_t hw = static_cast<int64_t>(g.ho) * g.wo;

  int pass_kh = 0, pass_kw = 0;  // K == 0: the pass's tap, stepped with the pass (no div/mod)
  for (int pass = 0; pass < passes; ++pass) {
    float acc[NV];
#pragma unroll
    for (int t = 0; t < NV; ++t) acc[t] = 0.f;
    if (active) {
      for (int p = begin + pl; p < end; p += LANES) {
        int ow, oh;
        int64_t n;
        if (W2) {
          const int rest = fdiv(p, wa.by_wo);
          ow = p - rest * g.wo;
          n = fdiv(rest, wa.by_ho);
          oh = rest - static_cast<int>(n) * g.ho;
        } else {
          ow = p % g.wo;
          const int rest = p / g.wo;
          oh = rest % g.ho;
          n = rest / g.ho;
        }
        const int64_t dy_off = CL ? (n * hw + static_cast<int64_t>(oh) * g.wo + ow) * g.c + c
                                  : (n * g.c + c) * hw + static_cast<int64_t>(oh) * g.wo + ow;
        const float d = to_f(dy[dy_off]);
        if (W2) acc[NV - 1] += d;  // the bias slot (stored in pass 0 only)
        const int ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
        if (K > 0) {
#pragma unroll
          for (int r = 0; r < KR; ++r) {
            const int ih = ih0 + (pass * KR + r) * g.dh;
            const bool row_ok = ih >= 0 && ih < g.h;
#pragma unroll
            for (int kw = 0; kw < (K > 0 ? K : 1); ++kw) {
              const int iw = iw0 + kw * g.dw;
              if (row_ok && iw >= 0 && iw < g.w) {
                acc[r * K + kw] = fmaf(d, to_f(x[offset<CL>(n, c, ih, iw, g.c, g.h, g.w)]), acc[r * K + kw]);
              }
            }
          }
        } else {
          const int ih = ih0 + pass_kh * g.dh, iw = iw0 + pass_kw * g.dw;
          if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) {
            acc[0] = fmaf(d, to_f(x[offset<CL>(n, c, ih, iw, g.c, g.h, g.w)]), acc[0]);
          }
        }
      }
    }
    // Fixed-order reductions (shuffle tree, then warps/lanes in index order): the result does not
    // depend on scheduling. Every acc[] index is a compile-time constant, so acc stays in registers.
    const int nv = W2 && pass == 0 ? NV : NT;  // the bias slot once
    if (!CL) {
      warp_partials<NV>(acc, red, threadIdx.x);
      __syncthreads();
      if (static_cast<int>(threadIdx.x) < nv && active) {
        const float sum = sum_warp_partials<NV>(red, threadIdx.x);
        const int t = threadIdx.x;
        const int slot = t == NT ? taps : (K > 0 ? pass * NT + t : pass);
        wgrad_store<T, W2>(partial, dw, db, split, splits, c, g.c, taps, slot, sum);
      }
      __syncthreads();
    } else {
#pragma unroll
      for (int t = 0; t < NV; ++t) {
        if (t < nv) {
          red[threadIdx.x] = acc[t];
          __syncthreads();
          if (pl == 0 && active) {
            float sum = 0.f;
            for (int l = 0; l < LANES; ++l) sum += red[l * CB + cl];
            const int slot = t == NT ? taps : (K > 0 ? pass * NT + t : pass);
            wgrad_store<T, W2>(partial, dw, db, split, splits, c, g.c, taps, slot, sum);
          }
          __syncthreads();
        }
      }
    }
    if (++pass_kw == g.kw) {
      pass_kw = 0;
      ++pass_kh;
    }
  }
  if (W2 && splits > 1) {
    const int64_t c0 = cb * CB;
    wgrad_finish<T>(partial, counters, last, dw, db, static_cast<int>(cb), splits, c0,
                    static_cast<int>(min(static_cast<int64_t>(CB), g.c - c0)), g.c, taps, splits);
  }
}

template <typename T>
__global__ void wgrad_finalize(const float* __restrict__ partial, T* __restrict__ dw, int64_t ctaps,
                               int splits) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= ctaps) return;
  float sum = 0.f;
  for (int s = 0; s < splits; ++s) sum += partial[s * ctaps + i];
  dw[i] = from_f<T>(sum);
}

// W2, NCHW tiled geometries: the block of (channel c = blockIdx.x, split = blockIdx.y) walks its
// range of tiles. A tile is the forward's (plan_tile_v2 with planes = N: pl samples of channel c, th
// x tw outputs); its halo'd input is staged in shared memory (a round of kStageBatchScalar loads in
// flight per thread), then every thread takes RPT vertically adjacent outputs and feeds each staged
// input row, read once into registers, to the K*K tap sums of every output row that uses it.
template <typename T, int K, int S>
__global__ void __launch_bounds__(kThreads)
    wgrad_tile_nchw(const T* __restrict__ dy, const T* __restrict__ x, float* __restrict__ partial,
                    unsigned* __restrict__ counters, T* __restrict__ dw, T* __restrict__ db, Tile2Args a,
                    WgradArgs wa) {
  constexpr int RPT = kRowsPerThreadV2;
  constexpr int NT = K * K;
  constexpr int NV = NT + 1;  // the taps and the bias
  constexpr int IN_ROWS_T = (RPT - 1) * S + K;  // input rows one thread touches
  extern __shared__ float smem[];
  __shared__ float red[kThreads / 32 * NV];
  __shared__ int last[1];
  const int c = static_cast<int>(blockIdx.x);
  const int split = static_cast<int>(blockIdx.y);
  const int tid = static_cast<int>(threadIdx.x);
  const int th = a.trows * RPT;
  const int hw = a.h * a.w, ohw = a.ho * a.wo;
  const int64_t chw = static_cast<int64_t>(a.c) * hw, cohw = static_cast<int64_t>(a.c) * ohw;
  const T* xc = x + static_cast<int64_t>(c) * hw;
  const T* dyc = dy + static_cast<int64_t>(c) * ohw;
  // The thread's place in a tile (the forward's): fixed for the whole block.
  const int rest = fdiv(tid, a.by_tw);
  const int tx = tid - rest * a.tw;
  const int p = fdiv(rest, a.by_trows);
  const int ty = rest - p * a.trows;

  float acc[NV];
#pragma unroll
  for (int t = 0; t < NV; ++t) acc[t] = 0.f;
  const int u_end = min(a.planes_units, (split + 1) * wa.per_split);
#pragma unroll 1
  for (int u = split * wa.per_split; u < u_end; ++u) {
    int q = fdiv(u, a.by_tiles_w);
    const int ow0 = (u - q * a.tiles_w) * a.tw;
    const int g = fdiv(q, a.by_tiles_h);
    const int oh0 = (q - g * a.tiles_h) * th;
    const int n0 = g * a.pl;
    const int ih0 = oh0 * S - a.ph, iw0 = ow0 * S - a.pw;
    stage_tile_scalar<T>(smem, xc, chw, n0, ih0, iw0, a, tid);
    __syncthreads();
    const int n = n0 + p, oh = oh0 + ty * RPT, ow = ow0 + tx;
    if (p < a.pl && n < a.planes && ow < a.wo) {
      float d[RPT];
      const T* dyp = dyc + static_cast<int64_t>(n) * cohw + ow;
#pragma unroll
      for (int r = 0; r < RPT; ++r) d[r] = oh + r < a.ho ? to_f(dyp[(oh + r) * a.wo]) : 0.f;
      const float* s = smem + p * a.plane_sz + (ty * RPT * S) * a.in_cols + tx * S;
      const int rows = min(RPT, a.ho - oh);  // rows past the output add nothing (0 * inf is NaN)
#pragma unroll
      for (int r = 0; r < RPT; ++r) acc[NT] += d[r];
#pragma unroll
      for (int ir = 0; ir < IN_ROWS_T; ++ir) {
        float v[K];
#pragma unroll
        for (int kw = 0; kw < K; ++kw) v[kw] = s[ir * a.in_cols + kw];
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
          const int kh = ir - r * S;  // compile-time after unrolling
          if (kh >= 0 && kh < K && r < rows) {
#pragma unroll
            for (int kw = 0; kw < K; ++kw) acc[kh * K + kw] = fmaf(d[r], v[kw], acc[kh * K + kw]);
          }
        }
      }
    }
    __syncthreads();  // the tile is read before the next one is staged over it
  }

  warp_partials<NV>(acc, red, tid);
  __syncthreads();
  if (tid < NV) {
    wgrad_store<T, true>(partial, dw, db, split, wa.splits, c, a.c, NT, tid, sum_warp_partials<NV>(red, tid));
  }
  if (wa.splits > 1) wgrad_finish<T>(partial, counters, last, dw, db, c, wa.splits, c, 1, a.c, NT, wa.splits);
}

// W2's tile plan for channel-wise tiles of an NCHW tiled geometry; false when it has none (the
// generic kernel runs). Sets a.planes_units (tiles per channel) and every FastDiv the kernel uses.
bool plan_wgrad_tile(Tile2Args& a, const Geom& g) {
  // k = 1 takes the generic kernel (a dot product per channel; the 16-bit tile instances spilled)
  if (g.kh == 1 || !tile_supported(g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) || g.c > 0x7fffffffLL ||
      g.n + kThreads >= 0x7fffffffLL) {
    return false;
  }
  a = Tile2Args{};
  a.planes = static_cast<int>(g.n);  // a channel's planes: one per sample
  a.c = static_cast<int>(g.c);
  set_tile_sizes(a, g);
  if (!plan_tile_v2(a, g.kh, g.sh)) return false;
  const int64_t units = ((static_cast<int64_t>(a.planes) + a.pl - 1) / a.pl) * a.tiles_h * a.tiles_w;
  if (units > 0x7fffffffLL - kThreads) return false;
  a.planes_units = static_cast<int>(units);
  a.by_tiles_w = make_fastdiv(a.tiles_w);
  a.by_tiles_h = make_fastdiv(a.tiles_h);
  a.by_tw = make_fastdiv(a.tw);
  a.by_trows = make_fastdiv(a.trows);
  a.by_outer = make_fastdiv(a.plane_sz);
  a.by_inner = make_fastdiv(a.in_cols);
  return true;
}

// Blocks per channel (block group) of W2: about 4 waves of 256-thread blocks over the SMs, never more
// splits than work items (tiles or positions) a split needs.
int wgrad_w2_splits(int64_t channel_blocks, int64_t items, int64_t min_items_per_split, int num_sms) {
  const int64_t target = 4LL * (num_sms > 0 ? num_sms : 1);
  int64_t splits = (target + channel_blocks - 1) / channel_blocks;
  const int64_t most = (items + min_items_per_split - 1) / min_items_per_split;
  if (splits > most) splits = most;
  if (splits > 65535) splits = 65535;  // gridDim.y of wgrad_tile_nchw
  return static_cast<int>(splits < 1 ? 1 : splits);
}

// ---- W3, channels_last: wgrad_nhwc_vec --------------------------------------------------------
// A thread owns one 16-byte vector of channels (4 fp32 / 8 fp16 or bf16) and walks items: an item is
// a strip of up to kWgradNhwcStrip output rows down one column (n, ow) of one sample. Down the strip
// it loads each dy vector once and each input row's K vectors once (S rows per step), and a ring of
// the dy vectors of the D output rows still using the current input row feeds every tap: per output
// 1 dy load and about S*K x loads (16-byte, coalesced over 8 channel vectors of a 128-byte line)
// instead of W2 generic's K*K scalar ones. The tap sums of the thread's kernel rows and the bias sum
// stay in registers over all its items. The kernel rows are cut into G groups of KR rows (a grid
// dimension) so the sums fit registers: K*K*VW floats would be 200 (fp32 k7) or 400 (16-bit k7).
// Blocks of (channel block, group, split) reduce through W2's machinery: warp_partials over the
// position lanes, wgrad_store, and wgrad_finish in the block that arrives last among the
// splits x groups of a channel block (fixed split order: deterministic).
constexpr int kWgradNhwcCt = 8;      // channel vectors per block: 8 x 16 B, one 128-byte line per pixel
constexpr int kWgradNhwcStrip = 8;   // output rows per item: fwd_nhwc_vec's strip (the ring fills once)
// Tap-sum floats a kernel-row group is sized to (at most). 104 keeps fp32 k5 in one group (100 sums,
// 184 registers, 1 block per SM): 84 static instructions per output where 80 (two groups of 3 rows,
// 128 registers, 2 blocks) took 112, and the model predicts the k5 seed shapes 4-31 % faster.
constexpr int kWgradNhwcAcc = 104;
// Groups G and kernel rows per group KR (G*KR >= K; the last group's rows past K are skipped):
// fp32 k3 1x3, k5 1x5, k7 3x3; 16-bit k3 1x3, k5 3x2, k7 7x1.
constexpr int wgrad_nhwc_groups(int k, int vw) {
  const int kr_max = kWgradNhwcAcc / (k * vw) > 1 ? kWgradNhwcAcc / (k * vw) : 1;
  return (k + kr_max - 1) / kr_max;
}
constexpr int wgrad_nhwc_rows(int k, int vw) { return (k + wgrad_nhwc_groups(k, vw) - 1) / wgrad_nhwc_groups(k, vw); }

struct WgradNhwcArgs {
  int c, h, w, ho, wo, ph, pw;
  int cv;         // C / VW channel vectors
  int strips;     // ceil(ho / kWgradNhwcStrip)
  int items;      // N * strips * wo
  int per_split;  // items per split
  int splits;
  FastDiv by_wo, by_strips;  // item -> (n, strip, ow), once per item
};

// Resident 256-thread blocks per SM the instances are built for (ptxas -v, sm_80 and sm_90): 2 (<= 128
// registers) for fp32 k3 (88-101 registers) and 16-bit k7 (KR = 1: 56 sums, 124-126); the others hold
// 72-100 sums (16-bit k3 and k5 spilled 16-188 bytes at 2) and take 140-184 registers at 1.
template <typename T, int K, int S>
constexpr int wgrad_nhwc_min_blocks() {
  return (sizeof(T) == 4 && K == 3) || (sizeof(T) == 2 && K == 7) ? 2 : 1;
}

template <typename T, int K, int S>
__global__ void __launch_bounds__(kThreads, wgrad_nhwc_min_blocks<T, K, S>())
    wgrad_nhwc_vec(const T* __restrict__ dy, const T* __restrict__ x, float* __restrict__ partial,
                   unsigned* __restrict__ counters, T* __restrict__ dw, T* __restrict__ db, WgradNhwcArgs a) {
  constexpr int VW = 16 / sizeof(T);
  constexpr int CT = kWgradNhwcCt;
  constexpr int LANES = kThreads / CT;  // position lanes per block
  constexpr int G = wgrad_nhwc_groups(K, VW);
  constexpr int KR = wgrad_nhwc_rows(K, VW);
  constexpr int D = (KR + S - 1) / S;  // output rows one input row feeds (within the group)
  constexpr int NT = KR * K * VW;      // tap sums: [j][kw][e], kernel row kh0 + j, channel e
  constexpr int NV = NT + VW;          // and the bias sums
  __shared__ float red[kThreads / 32 * CT * NV];
  __shared__ int last[1];
  const int tid = static_cast<int>(threadIdx.x);
  const int cl = tid % CT, lane = tid / CT;  // 1-D block (wgrad_finish): channel lanes fastest
  // grid (groups, channel blocks, splits): a channel block's groups run side by side and share its x
  // and dy lines in L2 (one DRAM read for all G)
  const int kg = static_cast<int>(blockIdx.x);
  const int cb = static_cast<int>(blockIdx.y);
  const int split = static_cast<int>(blockIdx.z);
  const int kh0 = kg * KR;
  const int cvec = cb * CT + cl;
  const int row_elems = a.w * a.c, out_row = a.wo * a.c;

  float acc[NV];
#pragma unroll
  for (int t = 0; t < NV; ++t) acc[t] = 0.f;
  const int end = min(a.items, (split + 1) * a.per_split);
  if (cvec < a.cv) {
#pragma unroll 1
    for (int q = split * a.per_split + lane; q < end; q += LANES) {
      const int sq = fdiv(q, a.by_wo);
      const int ow = q - sq * a.wo;
      const int n = fdiv(sq, a.by_strips);
      const int oh0 = (sq - n * a.strips) * kWgradNhwcStrip;
      const int rows = min(kWgradNhwcStrip, a.ho - oh0);  // output rows of this item
      const int in_rows = (rows - 1) * S + KR;           // input rows the group's taps read
      const int ih0 = oh0 * S - a.ph + kh0, iw0 = ow * S - a.pw;
      // 32-bit offsets inside one sample (< 2^31 elements, the binding checks)
      const T* xs = x + static_cast<int64_t>(n) * a.h * row_elems + cvec * VW;
      const T* dys = dy + (static_cast<int64_t>(n) * a.ho + oh0) * out_row + ow * a.c + cvec * VW;
      float d[D][VW];  // ring slot jj: dy of output row t - jj
#pragma unroll
      for (int jj = 0; jj < D; ++jj) {
#pragma unroll
        for (int e = 0; e < VW; ++e) d[jj][e] = 0.f;
      }
#pragma unroll 1
      for (int t = 0; t < rows + D - 1; ++t) {
#pragma unroll
        for (int jj = D - 1; jj > 0; --jj) {
#pragma unroll
          for (int e = 0; e < VW; ++e) d[jj][e] = d[jj - 1][e];
        }
        if (t < rows) {
          unpack16<T>(load16(dys + t * out_row), d[0]);
#pragma unroll
          for (int e = 0; e < VW; ++e) acc[NT + e] += d[0][e];
        }
        // slot jj of the dy ring feeds kernel row j of the group; the last group's rows past K add nothing
        nhwc_step<T, K, S, D, KR>(xs, t, rows, in_rows, ih0, iw0, row_elems, a,
                                  [&](int jj, int j, int kw, const float (&v)[VW]) {
                                    if (G > 1 && kh0 + j >= K) return;
#pragma unroll
                                    for (int e = 0; e < VW; ++e) {
                                      acc[(j * K + kw) * VW + e] =
                                          fmaf(d[jj][e], v[e], acc[(j * K + kw) * VW + e]);
                                    }
                                  });
      }
    }
  }

  warp_partials<NV, CT>(acc, red, tid);
  __syncthreads();
  const int64_t c0 = static_cast<int64_t>(cb) * CT * VW;
  for (int i = tid; i < CT * NV; i += kThreads) {
    const int l = i / NV;  // compile-time divisors: a multiply and a shift
    const int t = i - l * NV;
    if (cb * CT + l >= a.cv) continue;
    const int e = t % VW;
    int slot = K * K;  // the bias
    if (t < NT) {
      const int j = t / VW / K, kw = t / VW - j * K;
      if (kh0 + j >= K) continue;
      slot = (kh0 + j) * K + kw;
    } else if (kg != 0) {
      continue;  // the bias sum is group 0's
    }
    wgrad_store<T, true>(partial, dw, db, split, a.splits, c0 + l * VW + e, a.c, K * K, slot,
                         sum_warp_partials<NV, CT>(red, t, l));
  }
  if (a.splits > 1) {
    const int cw = static_cast<int>(min(static_cast<int64_t>(CT * VW), static_cast<int64_t>(a.c) - c0));
    wgrad_finish<T>(partial, counters, last, dw, db, cb, a.splits, c0, cw, a.c, K * K, a.splits * G);
  }
}

// Whether W3's NHWC kernel takes a call: square k 3/5/7, stride 1 or 2 (both ways), dilation 1, C a
// multiple of the vector width (dtype bytes `eb`), channel blocks within grid.y, N * strips * Wo and
// one sample within int32.
bool wgrad_nhwc_geometry(const Geom& g, int eb) {
  const int vw = 16 / eb;
  const int64_t strips = (g.ho + kWgradNhwcStrip - 1) / kWgradNhwcStrip;
  return g.kh == g.kw && (g.kh == 3 || g.kh == 5 || g.kh == 7) && g.sh == g.sw && (g.sh == 1 || g.sh == 2) &&
         g.dh == 1 && g.dw == 1 && g.c % vw == 0 && g.c / vw / kWgradNhwcCt < 65535 &&
         g.n * strips * g.wo < 0x7fffffffLL - kThreads &&
         g.c * g.h * g.w < 0x7fffffffLL && g.c * g.ho * g.wo < 0x7fffffffLL;
}

// Splits of wgrad_nhwc_vec: wgrad_w2_splits over its (channel block, group) blocks, at least one item
// per position lane per split.
int wgrad_nhwc_splits(const Geom& g, int eb, int num_sms) {
  const int vw = 16 / eb;
  const int64_t channel_blocks = (g.c / vw + kWgradNhwcCt - 1) / kWgradNhwcCt;
  const int64_t items = g.n * ((g.ho + kWgradNhwcStrip - 1) / kWgradNhwcStrip) * g.wo;
  return wgrad_w2_splits(channel_blocks * wgrad_nhwc_groups(g.kh, vw), items, kThreads / kWgradNhwcCt, num_sms);
}

template <typename T>
cudaError_t run_wgrad_nhwc(const T* dy, const T* x, T* dw, T* db, float* ws, unsigned* counters, int splits,
                           const Geom& g, cudaStream_t st) {
  constexpr int VW = 16 / sizeof(T);
  WgradNhwcArgs a{};
  a.c = static_cast<int>(g.c);
  set_tile_sizes(a, g);
  a.cv = a.c / VW;
  a.strips = (g.ho + kWgradNhwcStrip - 1) / kWgradNhwcStrip;
  a.items = static_cast<int>(g.n * a.strips * g.wo);
  a.splits = splits;
  a.per_split = (a.items + splits - 1) / splits;
  a.by_wo = make_fastdiv(static_cast<uint32_t>(g.wo));
  a.by_strips = make_fastdiv(static_cast<uint32_t>(a.strips));
  const int64_t channel_blocks = (a.cv + kWgradNhwcCt - 1) / kWgradNhwcCt;
  if (channel_blocks > 65535 || splits > 65535) return cudaErrorInvalidConfiguration;
  return dispatch_ks(g.kh, g.sh, [&](auto K, auto S) {
    constexpr int kk = decltype(K)::value, ss = decltype(S)::value;
    if constexpr (kk >= 3) {
      const dim3 grid(static_cast<unsigned>(wgrad_nhwc_groups(kk, VW)), static_cast<unsigned>(channel_blocks),
                      static_cast<unsigned>(splits));
      wgrad_nhwc_vec<T, kk, ss><<<grid, kThreads, 0, st>>>(dy, x, ws, counters, dw, db, a);
      return cudaGetLastError();
    } else {
      return cudaErrorInvalidValue;  // wgrad_nhwc_geometry: k 3/5/7 only
    }
  });
}

template <typename T, int K, bool CL>
cudaError_t run_wgrad_w1(const T* dy, const T* x, T* dw, float* ws, int splits, const Geom& g, cudaStream_t st) {
  constexpr int CB = CL ? 32 : 1;
  const int positions = static_cast<int>(g.n * g.ho * g.wo);
  WgradArgs wa{};
  wa.splits = splits;
  wa.per_split = (positions + splits - 1) / splits;
  const int64_t blocks = ((g.c + CB - 1) / CB) * splits;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  wgrad_partial<T, K, CL, false>
      <<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(dy, x, ws, nullptr, dw, nullptr, g, wa);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t ctaps = g.c * g.kh * g.kw;
  wgrad_finalize<T><<<static_cast<unsigned>((ctaps + 255) / 256), 256, 0, st>>>(ws, dw, ctaps, splits);
  return cudaGetLastError();
}

template <typename T, int K, bool CL>
cudaError_t run_wgrad_w2(const T* dy, const T* x, T* dw, T* db, float* ws, unsigned* counters, int splits,
                         const Geom& g, cudaStream_t st) {
  constexpr int CB = CL ? 32 : 1;
  const int positions = static_cast<int>(g.n * g.ho * g.wo);
  WgradArgs wa{};
  wa.splits = splits;
  wa.per_split = (positions + splits - 1) / splits;
  wa.by_wo = make_fastdiv(g.wo);
  wa.by_ho = make_fastdiv(g.ho);
  const int64_t blocks = ((g.c + CB - 1) / CB) * splits;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  wgrad_partial<T, K, CL, true>
      <<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(dy, x, ws, counters, dw, db, g, wa);
  return cudaGetLastError();
}

template <typename T>
cudaError_t run_wgrad_tile(const T* dy, const T* x, T* dw, T* db, float* ws, unsigned* counters, int splits,
                           const Geom& g, const Tile2Args& a, cudaStream_t st) {
  WgradArgs wa{};
  wa.splits = splits;
  wa.per_split = (a.planes_units + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(g.c), static_cast<unsigned>(splits));
  const int bytes = a.pl * a.plane_sz * static_cast<int>(sizeof(float));
  auto run = [&](auto K, auto S) {
    constexpr int kk = decltype(K)::value, ss = decltype(S)::value;
    wgrad_tile_nchw<T, kk, ss><<<grid, kThreads, bytes, st>>>(dy, x, ws, counters, dw, db, a, wa);
    return cudaGetLastError();
  };
  using std::integral_constant;
  using One = integral_constant<int, 1>;
  using Two = integral_constant<int, 2>;
  switch (g.kh * 10 + g.sh) {  // plan_wgrad_tile's geometries: k in {3, 5, 7}, stride 1 or 2
    case 31: return run(integral_constant<int, 3>{}, One{});
    case 32: return run(integral_constant<int, 3>{}, Two{});
    case 51: return run(integral_constant<int, 5>{}, One{});
    case 52: return run(integral_constant<int, 5>{}, Two{});
    case 71: return run(integral_constant<int, 7>{}, One{});
    case 72: return run(integral_constant<int, 7>{}, Two{});
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, bool CL>
cudaError_t dispatch_wgrad(const T* dy, const T* x, T* dw, T* db, float* ws, unsigned* counters,
                           const WgradPlan& plan, const Geom& g, WgradVariant v, cudaStream_t st) {
  if (v != WgradVariant::W1 && !CL) {
    Tile2Args a;
    if (plan_wgrad_tile(a, g)) return run_wgrad_tile<T>(dy, x, dw, db, ws, counters, plan.splits, g, a, st);
  }
  // W3: the channel-vector kernel where its 16-byte loads are legal; W2's generic kernel (planned
  // with the same splits and enough counters) on a misaligned tensor.
  if (v == WgradVariant::W3 && CL && wgrad_nhwc_geometry(g, sizeof(T)) &&
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(dy) % 16 == 0) {
    return run_wgrad_nhwc<T>(dy, x, dw, db, ws, counters, plan.splits, g, st);
  }
  const int k = g.kh == g.kw ? g.kh : 0;
  auto run = [&](auto K) {
    constexpr int kk = decltype(K)::value;
    return v == WgradVariant::W1 ? run_wgrad_w1<T, kk, CL>(dy, x, dw, ws, plan.splits, g, st)
                                 : run_wgrad_w2<T, kk, CL>(dy, x, dw, db, ws, counters, plan.splits, g, st);
  };
  using std::integral_constant;
  switch (k) {
    case 1: return run(integral_constant<int, 1>{});
    case 3: return run(integral_constant<int, 3>{});
    case 5: return run(integral_constant<int, 5>{});
    case 7: return run(integral_constant<int, 7>{});
    default: return run(integral_constant<int, 0>{});
  }
}

// ---- typed entry points ----------------------------------------------------------------------
template <typename T>
cudaError_t forward_t(const void* x, const void* w, const void* bias, void* y, const Geom& g, bool cl,
                      Variant variant, cudaStream_t st) {
  const T* xp = static_cast<const T*>(x);
  const T* wp = static_cast<const T*>(w);
  const T* bp = static_cast<const T*>(bias);
  T* yp = static_cast<T*>(y);
  if (tile_supported(g.kh, g.kw, g.sh, g.sw, g.dh, g.dw)) {
    TileArgs a{};
    a.planes = g.n * g.c;
    a.c = static_cast<int>(g.c);
    set_tile_sizes(a, g);
    a.flip = false;
    return cl ? dispatch_nhwc<T>(g.kh, g.sh, xp, wp, bp, yp, a, variant, st)
              : dispatch_tile<T>(g.kh, g.sh, xp, wp, bp, yp, a, variant, st);
  }
  const dim3 grid = grid_for(g.n, g.c * g.ho * g.wo);
  if (cl) {
    fwd_direct<T, true><<<grid, kThreads, 0, st>>>(xp, wp, bp, yp, g);
  } else {
    fwd_direct<T, false><<<grid, kThreads, 0, st>>>(xp, wp, bp, yp, g);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t input_grad_t(const void* dy, const void* w, void* dx, const Geom& g, bool cl, Variant variant,
                         cudaStream_t st) {
  const T* dyp = static_cast<const T*>(dy);
  const T* wp = static_cast<const T*>(w);
  T* dxp = static_cast<T*>(dx);
  if (g.sh == 1 && g.sw == 1 && tile_supported(g.kh, g.kw, 1, 1, g.dh, g.dw)) {
    // dx = correlation of dy with the flipped filter, padding k-1-p (may be negative: a crop).
    TileArgs a{};
    a.planes = g.n * g.c;
    a.c = static_cast<int>(g.c);
    a.h = g.ho;
    a.w = g.wo;
    a.ho = g.h;
    a.wo = g.w;
    a.ph = g.kh - 1 - g.ph;
    a.pw = g.kw - 1 - g.pw;
    a.flip = true;
    return cl ? dispatch_nhwc<T>(g.kh, 1, dyp, wp, nullptr, dxp, a, variant, st)
              : dispatch_tile<T>(g.kh, 1, dyp, wp, nullptr, dxp, a, variant, st);
  }
  // Stride 2 (square k in {1,3,5,7}, dilation 1): the parity-phase kernel; v1 keeps dgrad_direct,
  // the A/B baseline.
  if (variant != Variant::V1 && g.sh == 2 && g.sw == 2 && tile_supported(g.kh, g.kw, 2, 2, g.dh, g.dw)) {
    return run_dgrad_s2<T>(dyp, wp, dxp, g, cl, st);
  }
  const dim3 grid = grid_for(g.n, g.c * g.h * g.w);
  if (cl) {
    dgrad_direct<T, true><<<grid, kThreads, 0, st>>>(dyp, wp, dxp, g);
  } else {
    dgrad_direct<T, false><<<grid, kThreads, 0, st>>>(dyp, wp, dxp, g);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t weight_grad_t(const void* dy, const void* x, void* dw, void* db, float* ws, unsigned* counters,
                          const WgradPlan& plan, const Geom& g, bool cl, WgradVariant v, cudaStream_t st) {
  const T* dyp = static_cast<const T*>(dy);
  const T* xp = static_cast<const T*>(x);
  T* dwp = static_cast<T*>(dw);
  T* dbp = static_cast<T*>(db);
  return cl ? dispatch_wgrad<T, true>(dyp, xp, dwp, dbp, ws, counters, plan, g, v, st)
            : dispatch_wgrad<T, false>(dyp, xp, dwp, dbp, ws, counters, plan, g, v, st);
}

}  // namespace

// ---- public host API -----------------------------------------------------------------------------
void set_v4_plan_sms(int sms) { g_plan_sms = sms > 0 ? sms : 132; }

cudaError_t launch_forward(DType dtype, const void* x, const void* w, const void* bias, void* y,
                           const Geom& g, bool channels_last, cudaStream_t stream, Variant variant) {
  if (g.n * g.c * g.ho * g.wo == 0) return cudaSuccess;
  return convperf::dispatch_float(dtype, [&](auto t) {
    return forward_t<typename decltype(t)::type>(x, w, bias, y, g, channels_last, variant, stream);
  });
}

cudaError_t launch_input_grad(DType dtype, const void* dy, const void* w, void* dx, const Geom& g,
                              bool channels_last, cudaStream_t stream, Variant variant) {
  if (g.n * g.c * g.h * g.w == 0) return cudaSuccess;
  return convperf::dispatch_float(dtype, [&](auto t) {
    return input_grad_t<typename decltype(t)::type>(dy, w, dx, g, channels_last, variant, stream);
  });
}

int weight_grad_splits(const Geom& g, bool channels_last, int num_sms) {
  const int64_t positions = g.n * g.ho * g.wo;
  if (positions == 0) return 1;
  const int64_t cb = channels_last ? 32 : 1;
  const int64_t lanes = kThreads / cb;
  const int64_t channel_blocks = (g.c + cb - 1) / cb;
  const int64_t target = 4LL * (num_sms > 0 ? num_sms : 1);  // a few waves of resident blocks
  int64_t splits = (target + channel_blocks - 1) / channel_blocks;
  // Keep >= 8 positions per lane per block so the final reduction stays a small fraction.
  const int64_t max_splits = (positions + lanes * 8 - 1) / (lanes * 8);
  if (splits > max_splits) splits = max_splits;
  if (splits < 1) splits = 1;
  return static_cast<int>(splits);
}

WgradPlan weight_grad_plan(const Geom& g, bool channels_last, int num_sms, WgradVariant variant, DType dtype) {
  const int64_t taps = static_cast<int64_t>(g.kh) * g.kw;
  if (variant == WgradVariant::W1) {
    const int splits = weight_grad_splits(g, channels_last, num_sms);
    return WgradPlan{splits, splits * g.c * taps, 0};
  }
  int splits;
  int64_t counters = g.c;
  Tile2Args a;
  const int eb = dtype == DType::F32 ? 4 : 2;
  if (!channels_last && plan_wgrad_tile(a, g)) {
    splits = wgrad_w2_splits(g.c, a.planes_units, 1, num_sms);
  } else if (channels_last && variant == WgradVariant::W3 && wgrad_nhwc_geometry(g, eb)) {
    splits = wgrad_nhwc_splits(g, eb, num_sms);
    counters = (g.c + 31) / 32;  // W2's generic kernel's channel blocks: its fallback takes this plan
  } else {
    const int64_t cb = channels_last ? 32 : 1;
    const int64_t channel_blocks = (g.c + cb - 1) / cb;
    // >= 8 positions per lane per block, as W1
    splits = wgrad_w2_splits(channel_blocks, g.n * g.ho * g.wo, kThreads / cb * 8, num_sms);
    counters = channel_blocks;
  }
  if (splits == 1) return WgradPlan{1, 0, 0};
  return WgradPlan{splits, splits * g.c * (taps + 1), counters};
}

cudaError_t launch_weight_grad(DType dtype, const void* dy, const void* x, void* dw, void* db, float* partial,
                               unsigned* counters, const WgradPlan& plan, const Geom& g, bool channels_last,
                               cudaStream_t stream, WgradVariant variant) {
  if (g.c == 0) return cudaSuccess;
  const bool w1 = variant == WgradVariant::W1;
  // W1 always goes through its workspace and leaves the bias to the caller; W2 needs one with splits.
  if (plan.splits < 1 || (w1 && (db != nullptr || partial == nullptr)) ||
      (!w1 && plan.splits > 1 && (partial == nullptr || counters == nullptr))) {
    return cudaErrorInvalidValue;
  }
  return convperf::dispatch_float(dtype, [&](auto t) {
    return weight_grad_t<typename decltype(t)::type>(dy, x, dw, db, partial, counters, plan, g, channels_last,
                                                     variant, stream);
  });
}

}  // namespace convperf_dw
