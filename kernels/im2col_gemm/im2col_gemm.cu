// im2col and col2im for the im2col+GEMM conv2d family (plain CUDA, no torch headers).
//
// The column buffer holds, for a band of output rows [row0, row0 + rows) of a chunk of samples,
// element (n, k, l) with k = (c * kh + ky) * kw + kx and l = (oy - row0) * Wo + ox at
//   col[n * sn + k * sk + l * sl]
// so one kernel serves the layouts the GEMMs want: [n, K, L] (batched dense GEMM), [K, n, L]
// (one 2-D sparse GEMM) and [n, L, K] (int8 GEMM, K contiguous). The GEMMs themselves run in
// cuBLAS/cuSPARSE through torch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "convperf/convert.cuh"

namespace {

using convperf::DType;
using convperf::from_f;
using convperf::to_f;

struct Geometry {
  int n, c, h, w;        // chunk of the input: n samples, c channels
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int wo;                // output width
  int row0, rows;        // band of output rows held by the column buffer
  bool ones_row;         // write a row of ones at k = C*kh*kw (the bias's row of the GEMM's K)
};

// One thread per (n, c, band row, ox); it writes the kh*kw column entries of its output pixel (layouts with sl == 1).
// Consecutive threads take consecutive ox, so reads of x and writes of col (sl == 1) coalesce.
template <typename T, typename Index>
__global__ void __launch_bounds__(256) im2col_kernel(const T* __restrict__ x, T* __restrict__ col,
                                                     Geometry g, int64_t sn, int64_t sk, int64_t sl) {
  const Index total = static_cast<Index>(g.n) * g.c * g.rows * g.wo;
  const Index kk = static_cast<Index>(g.kh) * g.kw;
  for (Index idx = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<Index>(gridDim.x) * blockDim.x) {
    const int ox = static_cast<int>(idx % g.wo);
    Index t = idx / g.wo;
    const int r = static_cast<int>(t % g.rows);
    t /= g.rows;
    const int ci = static_cast<int>(t % g.c);
    const Index ni = t / g.c;
    const int oy = g.row0 + r;
    const int iy0 = oy * g.sh - g.ph;
    const int ix0 = ox * g.sw - g.pw;
    const T* xp = x + (ni * g.c + ci) * static_cast<Index>(g.h) * g.w;
    T* cp = col + ni * sn + static_cast<Index>(ci) * kk * sk + (static_cast<Index>(r) * g.wo + ox) * sl;
    for (int ky = 0; ky < g.kh; ++ky) {
      const int iy = iy0 + ky * g.dh;
      const bool row_ok = iy >= 0 && iy < g.h;
      for (int kx = 0; kx < g.kw; ++kx) {
        const int ix = ix0 + kx * g.dw;
        T v = from_f<T>(0.0f);
        if (row_ok && ix >= 0 && ix < g.w) v = xp[static_cast<Index>(iy) * g.w + ix];
        *cp = v;
        cp += sk;
      }
    }
    // The last channel's thread ends at row C*kh*kw: the ones that multiply the bias column of the
    // weight matrix, so the GEMM adds the bias (no separate pass over the output).
    if (g.ones_row && ci == g.c - 1) *cp = from_f<T>(1.0f);
  }
}

// K-contiguous layouts (sk == 1, "nlk": the int8 GEMM's): one thread per column element with k
// fastest, so consecutive threads write consecutive bytes. The pixel-per-thread kernel above would
// have consecutive threads writing addresses K elements apart (2304 B for 256 channels x 3x3 int8).
template <typename T, typename Index>
__global__ void __launch_bounds__(256) im2col_kfast_kernel(const T* __restrict__ x, T* __restrict__ col,
                                                           Geometry g, int64_t sn, int64_t sl) {
  const int kk = g.kh * g.kw;
  const Index k_count = static_cast<Index>(g.c) * kk;
  const Index length = static_cast<Index>(g.rows) * g.wo;
  const Index total = static_cast<Index>(g.n) * length * k_count;
  for (Index idx = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index k = idx % k_count;
    Index t = idx / k_count;
    const Index l = t % length;
    const Index ni = t / length;
    const int ci = static_cast<int>(k / kk);
    const int tap = static_cast<int>(k % kk);
    const int ky = tap / g.kw, kx = tap % g.kw;
    const int r = static_cast<int>(l / g.wo), ox = static_cast<int>(l % g.wo);
    const int iy = (g.row0 + r) * g.sh - g.ph + ky * g.dh;
    const int ix = ox * g.sw - g.pw + kx * g.dw;
    T v = from_f<T>(0.0f);
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) v = x[((ni * g.c + ci) * g.h + iy) * g.w + ix];
    col[ni * sn + l * sl + k] = v;
  }
}

// col2im as a gather: one thread per input element of rows [h0, h0 + hs) sums every column entry
// that read it, so no atomics are needed and the result is deterministic. Accumulates in fp32.
template <typename T, typename Index>
__global__ void __launch_bounds__(256) col2im_kernel(const T* __restrict__ col, T* __restrict__ dx,
                                                     Geometry g, int h0, int hs, int64_t sn, int64_t sk,
                                                     int64_t sl) {
  const Index total = static_cast<Index>(g.n) * g.c * hs * g.w;
  const int kk = g.kh * g.kw;
  for (Index idx = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<Index>(gridDim.x) * blockDim.x) {
    const int ix = static_cast<int>(idx % g.w);
    Index t = idx / g.w;
    const int iy = h0 + static_cast<int>(t % hs);
    t /= hs;
    const int ci = static_cast<int>(t % g.c);
    const Index ni = t / g.c;
    const T* cp = col + ni * sn + static_cast<Index>(ci) * kk * sk;
    float acc = 0.0f;
    for (int ky = 0; ky < g.kh; ++ky) {
      const int ty = iy + g.ph - ky * g.dh;
      if (ty < 0 || ty % g.sh) continue;
      const int oy = ty / g.sh - g.row0;
      if (oy < 0 || oy >= g.rows) continue;
      for (int kx = 0; kx < g.kw; ++kx) {
        const int tx = ix + g.pw - kx * g.dw;
        if (tx < 0 || tx % g.sw) continue;
        const int ox = tx / g.sw;
        if (ox >= g.wo) continue;
        acc += to_f(cp[static_cast<Index>(ky * g.kw + kx) * sk + (static_cast<Index>(oy) * g.wo + ox) * sl]);
      }
    }
    dx[idx] = from_f<T>(acc);
  }
}

int grid_for(int64_t total) {
  const int64_t blocks = (total + 255) / 256;
  // Grid-stride loops: cap the grid at a few waves of a large GPU.
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

template <typename T>
cudaError_t im2col_typed(const void* x, void* col, const Geometry& g, int64_t sn, int64_t sk, int64_t sl,
                         cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(g.n) * g.c * g.rows * g.wo;
  if (total == 0) return cudaSuccess;
  if (g.ones_row && sk == 1) return cudaErrorInvalidValue;  // the k-fast kernel writes no ones row
  const int64_t extent = static_cast<int64_t>(g.n) * g.c * g.h * g.w;
  const int64_t col_extent = (g.n - 1) * sn + (static_cast<int64_t>(g.c) * g.kh * g.kw + g.ones_row - 1) * sk +
                             (static_cast<int64_t>(g.rows) * g.wo - 1) * sl + 1;
  const bool small = extent < INT32_MAX && col_extent < INT32_MAX && total * g.kh * g.kw < INT32_MAX;
  if (sk == 1) {  // K contiguous: the k-fastest mapping keeps the writes coalesced
    if (small) {
      im2col_kfast_kernel<T, int32_t><<<grid_for(total * g.kh * g.kw), 256, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(col), g, sn, sl);
    } else {
      im2col_kfast_kernel<T, int64_t><<<grid_for(total * g.kh * g.kw), 256, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(col), g, sn, sl);
    }
  } else if (small) {
    im2col_kernel<T, int32_t><<<grid_for(total), 256, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(col),
                                                                   g, sn, sk, sl);
  } else {
    im2col_kernel<T, int64_t><<<grid_for(total), 256, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(col),
                                                                   g, sn, sk, sl);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t col2im_typed(const void* col, void* dx, const Geometry& g, int h0, int hs, int64_t sn, int64_t sk,
                         int64_t sl, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(g.n) * g.c * hs * g.w;
  if (total == 0) return cudaSuccess;
  const int64_t col_extent = (g.n - 1) * sn + (static_cast<int64_t>(g.c) * g.kh * g.kw - 1) * sk +
                             (static_cast<int64_t>(g.rows) * g.wo - 1) * sl + 1;
  if (total < INT32_MAX && col_extent < INT32_MAX) {
    col2im_kernel<T, int32_t><<<grid_for(total), 256, 0, stream>>>(static_cast<const T*>(col), static_cast<T*>(dx),
                                                                   g, h0, hs, sn, sk, sl);
  } else {
    col2im_kernel<T, int64_t><<<grid_for(total), 256, 0, stream>>>(static_cast<const T*>(col), static_cast<T*>(dx),
                                                                   g, h0, hs, sn, sk, sl);
  }
  return cudaGetLastError();
}

Geometry make_geometry(int n, int c, int h, int w, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw,
                       int wo, int row0, int rows) {
  Geometry g;
  g.n = n; g.c = c; g.h = h; g.w = w;
  g.kh = kh; g.kw = kw; g.sh = sh; g.sw = sw; g.ph = ph; g.pw = pw; g.dh = dh; g.dw = dw;
  g.wo = wo; g.row0 = row0; g.rows = rows;
  g.ones_row = false;
  return g;
}

}  // namespace

// x: contiguous [n, c, h, w]; col: see the layout note at the top. Returns the launch status.
cudaError_t launch_im2col(int dtype, const void* x, void* col, int n, int c, int h, int w, int kh, int kw, int sh,
                          int sw, int ph, int pw, int dh, int dw, int wo, int row0, int rows, int64_t sn,
                          int64_t sk, int64_t sl, bool ones_row, cudaStream_t stream) {
  Geometry g = make_geometry(n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, wo, row0, rows);
  g.ones_row = ones_row;
  return convperf::dispatch_float_or_i8(DType(dtype), [&](auto t) {
    return im2col_typed<typename decltype(t)::type>(x, col, g, sn, sk, sl, stream);
  });
}

// dx: contiguous [n, c, hs, w] holding input rows [h0, h0 + hs); every element is written.
cudaError_t launch_col2im(int dtype, const void* col, void* dx, int n, int c, int h, int w, int kh, int kw, int sh,
                          int sw, int ph, int pw, int dh, int dw, int wo, int row0, int rows, int h0, int hs,
                          int64_t sn, int64_t sk, int64_t sl, cudaStream_t stream) {
  const Geometry g = make_geometry(n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, wo, row0, rows);
  return convperf::dispatch_float(DType(dtype), [&](auto t) {
    return col2im_typed<typename decltype(t)::type>(col, dx, g, h0, hs, sn, sk, sl, stream);
  });
}
