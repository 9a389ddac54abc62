// Fused depthwise-separable conv for EDSR residual blocks (fp32, NCHW):
//
//   z = depthwise3x3(x, wd, bd)            (stride 1, padding 1, groups = C)
//   u = pointwise1x1(z, wp, bp)            (C -> C)
//   v = relu ? max(u, 0) : u
//   y = residual ? residual + res_scale * v : v
//
// One block computes a TILE_H x TILE_W spatial tile of one image for all C output channels.
// Input channels are consumed in chunks of CK: the chunk's halo tile is staged in shared memory,
// its depthwise output is written to shared memory (never to global memory), and the pointwise
// contribution of the chunk is accumulated in registers. So z and u never touch HBM: the fused
// block reads x (plus a 1-pixel halo, served mostly by L2) and writes y once, where the unfused
// PyTorch block writes and re-reads z, u and v.
//
// Register tiling of the pointwise GEMM: each thread owns PX consecutive pixels of one row times
// CO_T = C / CO_GROUPS output channels, so every shared-memory float4 of z feeds 4 * CO_T FMAs,
// and the weights are warp-uniform (broadcast) loads.
//
// Plain CUDA: no torch headers. The host launcher takes raw pointers, sizes and a stream.

#include <cuda_runtime.h>

namespace convperf_edsr {

// 8 x 16 tiles: EDSR's 48 x 48 training patches split into whole tiles (3 x 6 per image), and a
// 16 x 64 x 48 x 48 batch gives 288 blocks, about two per SM on an H100 (132 SMs).
constexpr int TILE_H = 8;
constexpr int TILE_W = 16;
constexpr int THREADS = 128;
// Minimum resident blocks per SM for ptxas: caps registers at 168 (C=64 uses ~134: 3 blocks/SM).
constexpr int BLOCKS_PER_SM = 3;
constexpr int PX = 4;                               // consecutive pixels per thread
constexpr int PIX_GROUPS = TILE_H * TILE_W / PX;    // 32: one warp covers the tile for one co group
constexpr int CO_GROUPS = THREADS / PIX_GROUPS;     // 4
constexpr int CK = 8;                               // input channels per chunk
constexpr int HALO_H = TILE_H + 2;
constexpr int HALO_W = TILE_W + 2;

static_assert(THREADS == TILE_H * TILE_W, "the depthwise step maps one thread to one pixel");
static_assert(PIX_GROUPS % 32 == 0, "a warp must share one output-channel group (broadcast weights)");
static_assert(TILE_W % PX == 0, "a thread's pixels must lie in one row");

// v2 (PF, CONVPERF_EDSR_VARIANT=v2; issue 29): the chunk's halo loads, all PF_LOADS of a thread in
// flight together, are issued for chunk c + 1 right after chunk c is in shared memory, so they land
// while chunk c's depthwise and pointwise steps run. v1 (the measured kernel, the default until a GPU
// measures v2) stages each chunk in 3 dependent rounds of 4 loads after the previous chunk's compute:
// 24 exposed load rounds a block, at 2 blocks an SM nothing hides them (docs/tuning-log.md, EDSR).
constexpr int STAGE_ITEMS = CK * HALO_H * HALO_W;
constexpr int PF_LOADS = (STAGE_ITEMS + THREADS - 1) / THREADS;  // 12 a thread

template <int C, bool PF>
__global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM)
sep_conv_fwd_kernel(const float* __restrict__ x, const float* __restrict__ wd, const float* __restrict__ bd,
                    const float* __restrict__ wp, const float* __restrict__ bp,
                    const float* __restrict__ residual, float* __restrict__ y, int H, int W,
                    float res_scale, int relu) {
  constexpr int CO_T = C / CO_GROUPS;
  static_assert(C % (CO_GROUPS * 4) == 0, "C must split into float4 groups per thread");
  static_assert(C % CK == 0, "C must be a multiple of the channel chunk");

  __shared__ __align__(16) float w_s[C * C];                 // pointwise weights as [ci][co]
  __shared__ float wd_s[C * 9];
  __shared__ float bd_s[C];
  __shared__ float in_s[CK * HALO_H * HALO_W];
  __shared__ __align__(16) float z_s[CK * TILE_H * TILE_W];  // depthwise output of one chunk

  const int tid = threadIdx.x;
  const int n = blockIdx.z;
  const int h0 = blockIdx.y * TILE_H;
  const int w0 = blockIdx.x * TILE_W;
  const long long plane = static_cast<long long>(H) * W;
  const float* xn = x + static_cast<long long>(n) * C * plane;

  // Transpose wp [co][ci] into w_s [ci][co]. Consecutive threads take consecutive co, so the
  // shared-memory stores are conflict-free; the strided global reads are served by L1 (16 KB).
  for (int i = tid; i < C * C; i += THREADS) {
    const int ci = i / C;
    const int co = i - ci * C;
    w_s[i] = __ldg(wp + co * C + ci);
  }
  for (int i = tid; i < C * 9; i += THREADS) wd_s[i] = wd[i];
  for (int i = tid; i < C; i += THREADS) bd_s[i] = bd[i];

  const int pg = tid % PIX_GROUPS;
  const int cg = tid / PIX_GROUPS;
  const int p0 = pg * PX;
  const int co0 = cg * CO_T;

  float acc[CO_T][PX];
#pragma unroll
  for (int j = 0; j < CO_T; ++j) {
#pragma unroll
    for (int k = 0; k < PX; ++k) acc[j][k] = 0.f;
  }

  const int ty = tid / TILE_W;
  const int tx = tid % TILE_W;

  // v2: the halo tile of the chunk at c, into registers (zeros outside the image: padding 1).
  float pf[PF ? PF_LOADS : 1];
  auto fetch = [&](int c) {
#pragma unroll
    for (int j = 0; j < PF_LOADS; ++j) {
      const int i = tid + j * THREADS;
      float v = 0.f;
      if (i < STAGE_ITEMS) {
        const int ci = i / (HALO_H * HALO_W);
        const int r = i - ci * (HALO_H * HALO_W);
        const int hy = r / HALO_W;
        const int gy = h0 - 1 + hy;
        const int gx = w0 - 1 + (r - hy * HALO_W);
        if (gy >= 0 && gy < H && gx >= 0 && gx < W) {
          v = __ldg(xn + (c + ci) * plane + static_cast<long long>(gy) * W + gx);
        }
      }
      pf[j] = v;
    }
  };
  if constexpr (PF) fetch(0);

  for (int c0 = 0; c0 < C; c0 += CK) {
    if constexpr (PF) {
#pragma unroll
      for (int j = 0; j < PF_LOADS; ++j) {
        if (tid + j * THREADS < STAGE_ITEMS) in_s[tid + j * THREADS] = pf[j];
      }
      __syncthreads();
      if (c0 + CK < C) fetch(c0 + CK);  // in flight during this chunk's compute
    } else {
    // Stage the chunk's halo tile; zero outside the image (padding 1).
    for (int i = tid; i < CK * HALO_H * HALO_W; i += THREADS) {
      const int ci = i / (HALO_H * HALO_W);
      const int r = i - ci * (HALO_H * HALO_W);
      const int hy = r / HALO_W;
      const int hx = r - hy * HALO_W;
      const int gh = h0 - 1 + hy;
      const int gw = w0 - 1 + hx;
      float v = 0.f;
      if (gh >= 0 && gh < H && gw >= 0 && gw < W) v = __ldg(xn + (c0 + ci) * plane + static_cast<long long>(gh) * W + gw);
      in_s[i] = v;
    }
    __syncthreads();
    }

    // Depthwise 3x3: one output pixel per thread per channel of the chunk.
#pragma unroll
    for (int ci = 0; ci < CK; ++ci) {
      const float* src = in_s + ci * HALO_H * HALO_W + ty * HALO_W + tx;
      const float* k = wd_s + (c0 + ci) * 9;
      float s = bd_s[c0 + ci];
#pragma unroll
      for (int dy = 0; dy < 3; ++dy) {
#pragma unroll
        for (int dx = 0; dx < 3; ++dx) s = fmaf(k[dy * 3 + dx], src[dy * HALO_W + dx], s);
      }
      z_s[ci * TILE_H * TILE_W + tid] = s;
    }
    __syncthreads();

    // Pointwise: accumulate this chunk's CK input channels into the register tile.
#pragma unroll
    for (int ci = 0; ci < CK; ++ci) {
      const float4 z = *reinterpret_cast<const float4*>(z_s + ci * TILE_H * TILE_W + p0);
      const float* wrow = w_s + (c0 + ci) * C + co0;
#pragma unroll
      for (int j = 0; j < CO_T; j += 4) {
        const float4 w = *reinterpret_cast<const float4*>(wrow + j);
        const float wv[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          acc[j + q][0] = fmaf(wv[q], z.x, acc[j + q][0]);
          acc[j + q][1] = fmaf(wv[q], z.y, acc[j + q][1]);
          acc[j + q][2] = fmaf(wv[q], z.z, acc[j + q][2]);
          acc[j + q][3] = fmaf(wv[q], z.w, acc[j + q][3]);
        }
      }
    }
    __syncthreads();  // the next chunk overwrites in_s and z_s
  }

  // Epilogue: bias, optional ReLU, optional scaled residual; float4 stores when aligned.
  const int gh = h0 + p0 / TILE_W;
  const int gw = w0 + p0 % TILE_W;
  if (gh >= H) return;
  const bool vec = (W % 4 == 0) && (gw + PX <= W);
  float* yn = y + static_cast<long long>(n) * C * plane + static_cast<long long>(gh) * W + gw;
  const float* rn = residual == nullptr ? nullptr
                                        : residual + static_cast<long long>(n) * C * plane +
                                              static_cast<long long>(gh) * W + gw;
#pragma unroll
  for (int j = 0; j < CO_T; ++j) {
    const int co = co0 + j;
    const float b = __ldg(bp + co);
    float v[PX];
#pragma unroll
    for (int k = 0; k < PX; ++k) {
      float t = acc[j][k] + b;
      if (relu) t = fmaxf(t, 0.f);
      v[k] = t;
    }
    const long long off = co * plane;
    if (vec) {
      if (rn != nullptr) {
        const float4 r = __ldg(reinterpret_cast<const float4*>(rn + off));
        v[0] = fmaf(res_scale, v[0], r.x);
        v[1] = fmaf(res_scale, v[1], r.y);
        v[2] = fmaf(res_scale, v[2], r.z);
        v[3] = fmaf(res_scale, v[3], r.w);
      }
      *reinterpret_cast<float4*>(yn + off) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
      for (int k = 0; k < PX; ++k) {
        if (gw + k < W) {
          float t = v[k];
          if (rn != nullptr) t = fmaf(res_scale, t, __ldg(rn + off + k));
          yn[off + k] = t;
        }
      }
    }
  }
}

template <int C>
static cudaError_t launch_c(const float* x, const float* wd, const float* bd, const float* wp, const float* bp,
                            const float* residual, float* y, int N, int H, int W, float res_scale, int relu,
                            int variant, cudaStream_t stream) {
  const dim3 grid((W + TILE_W - 1) / TILE_W, (H + TILE_H - 1) / TILE_H, N);
  if (variant == 2) {
    sep_conv_fwd_kernel<C, true><<<grid, THREADS, 0, stream>>>(x, wd, bd, wp, bp, residual, y, H, W, res_scale,
                                                               relu);
  } else {
    sep_conv_fwd_kernel<C, false><<<grid, THREADS, 0, stream>>>(x, wd, bd, wp, bp, residual, y, H, W,
                                                                res_scale, relu);
  }
  return cudaGetLastError();
}

bool sep_conv_supports_channels(int C) { return C == 16 || C == 32 || C == 64; }

// x, y, residual: (N, C, H, W) contiguous fp32; wd: (C, 1, 3, 3); bd, bp: (C); wp: (C, C, 1, 1).
// residual may be null. variant: 1 (the measured kernel) or 2 (prefetched chunk staging). Returns
// cudaErrorInvalidValue for an unsupported C, grid size or variant.
cudaError_t launch_sep_conv_fwd_fp32(const float* x, const float* wd, const float* bd, const float* wp,
                                     const float* bp, const float* residual, float* y, int N, int C, int H,
                                     int W, float res_scale, bool relu, int variant, cudaStream_t stream) {
  if (N == 0 || H == 0 || W == 0) return cudaSuccess;
  if (N > 65535 || (H + TILE_H - 1) / TILE_H > 65535 || (variant != 1 && variant != 2)) {
    return cudaErrorInvalidValue;
  }
  const int r = relu ? 1 : 0;
  switch (C) {
    case 16: return launch_c<16>(x, wd, bd, wp, bp, residual, y, N, H, W, res_scale, r, variant, stream);
    case 32: return launch_c<32>(x, wd, bd, wp, bp, residual, y, N, H, W, res_scale, r, variant, stream);
    case 64: return launch_c<64>(x, wd, bd, wp, bp, residual, y, N, H, W, res_scale, r, variant, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace convperf_edsr
