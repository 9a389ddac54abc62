// Negative controls: deliberately wrong or slowed depthwise conv2d kernels (see controls.cuh).
#include "controls.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "convperf/convert.cuh"

namespace convperf_controls {
namespace {

constexpr int kThreads = 256;

using convperf::from_f;
using convperf::to_f;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    control_fwd(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias, T* __restrict__ y,
                Geom g, int64_t planes, Mode mode) {
  const int64_t plane_out = static_cast<int64_t>(g.ho) * g.wo;
  const int64_t total = planes * plane_out;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t plane = i / plane_out;
    const int r = static_cast<int>(i - plane * plane_out);
    const int oh = r / g.wo, ow = r % g.wo;
    const int c = static_cast<int>(plane % g.c);
    const T* xp = x + plane * static_cast<int64_t>(g.h) * g.w;
    float acc = bias != nullptr ? to_f(bias[c]) : 0.f;
    for (int kh = 0; kh < g.kh; ++kh) {
      int ih = oh * g.sh - g.ph + kh * g.dh;
      if (mode == Mode::WrongBorder && ih >= g.h) ih = g.h - 1;
      if (ih < 0 || ih >= g.h) continue;
      for (int kw = 0; kw < g.kw; ++kw) {
        int iw = ow * g.sw - g.pw + kw * g.dw;
        if (mode == Mode::WrongBorder && iw >= g.w) iw = g.w - 1;
        if (iw < 0 || iw >= g.w) continue;
        acc = fmaf(to_f(wt[(static_cast<int64_t>(c) * g.kh + kh) * g.kw + kw]), to_f(xp[ih * g.w + iw]), acc);
      }
    }
    if (mode == Mode::WrongOddStride2 && g.sw == 2 && (g.w % 2) == 1 && ow == g.wo - 1) acc = 0.f;
    y[i] = from_f<T>(acc);
  }
}

template <typename T>
cudaError_t run(Mode mode, const void* x, const void* w, const void* bias, void* y, const Geom& g,
                int64_t repeat_planes, cudaStream_t st) {
  const int64_t planes = g.n * g.c;
  const int64_t plane_out = static_cast<int64_t>(g.ho) * g.wo;
  for (int pass = 0; pass < 2; ++pass) {
    const int64_t count = pass == 0 ? planes : (repeat_planes < planes ? repeat_planes : planes);
    if (count <= 0) continue;
    int64_t blocks = (count * plane_out + kThreads - 1) / kThreads;
    if (blocks > (1 << 20)) blocks = 1 << 20;
    control_fwd<T><<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y), g,
        count, mode);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_control(Mode mode, DType dtype, const void* x, const void* w, const void* bias, void* y,
                           const Geom& g, int64_t repeat_planes, cudaStream_t stream) {
  if (mode == Mode::NoOp || g.n * g.c * g.ho * g.wo == 0) return cudaSuccess;
  return convperf::dispatch_float(dtype, [&](auto t) {
    return run<typename decltype(t)::type>(mode, x, w, bias, y, g, repeat_planes, stream);
  });
}

}  // namespace convperf_controls
