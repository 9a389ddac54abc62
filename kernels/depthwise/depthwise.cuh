// Host API of the depthwise conv2d kernels (plain CUDA, no torch headers).
// All tensors are dense in either NCHW (contiguous) or NHWC (channels_last) order; the weight is
// (C, 1, KH, KW) contiguous. Element offsets are 64-bit; one channel's N*Ho*Wo and N*H*W must fit
// in 32 bits (the binding checks this).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "convperf/dtype.h"

namespace convperf_dw {

using DType = convperf::DType;  // fp32, fp16, bf16 (I8 is not taken)

// Which tiled kernel the forward and the stride-1 input grad run: V1 (the first NCHW tiled kernel, kept
// so one process can A/B it), V2 (division-free, plane-sized tiles; the default), V3 (NCHW: v2 with
// each thread's staging loads of a round in flight together, 16-byte loads for every dtype; NHWC, k 3/5/7,
// C a multiple of 16 / sizeof(T), 16-byte aligned tensors: fwd_nhwc_vec, 16-byte channel vectors walking
// down a column) or V4 (NCHW: U x U outputs per thread from a register window, grids sized to the GPU;
// fp32/fp16 with k 3/5/7, else V3; NHWC as V3). V1 and V2 run the same NHWC row kernel; direct and
// weight-grad kernels are the same in all.
enum class Variant : int { V1 = 1, V2 = 2, V3 = 3, V4 = 4 };

struct Geom {
  int64_t n;   // batch
  int64_t c;   // channels (= groups, multiplier 1)
  int h, w;    // input
  int ho, wo;  // output
  int kh, kw;
  int sh, sw;
  int ph, pw;
  int dh, dw;
};

// The SMs the V4 planner sizes its grids for (default 132, an H100 SXM; <= 0 restores it). Not
// thread-safe: for tests, which plan small problems for a few SMs to reach every V4 tile shape.
void set_v4_plan_sms(int sms);

// y = depthwise_conv(x, w) + bias (bias may be null). fp32 accumulation for every dtype.
cudaError_t launch_forward(DType dtype, const void* x, const void* w, const void* bias, void* y,
                           const Geom& g, bool channels_last, cudaStream_t stream,
                           Variant variant = Variant::V2);

// dx = d(loss)/d(x) from dy and w.
cudaError_t launch_input_grad(DType dtype, const void* dy, const void* w, void* dx, const Geom& g,
                              bool channels_last, cudaStream_t stream, Variant variant = Variant::V2);

// Which weight-grad kernel runs: W1 (per-position partial sums into a caller's workspace, then a
// finalize launch; the bias grad is the caller's; kept so one process can A/B it) or W2 (the default:
// staged input tiles for the NCHW tiled geometries, bias grad fused, one launch; the last block of a
// channel sums the per-split partials in split order, so the result is deterministic), or W3 (the
// default: W2, and channels_last with square k 3/5/7, stride 1/2, C a multiple of 16 / sizeof(T) and
// 16-byte aligned tensors runs wgrad_nhwc_vec, 16-byte channel vectors walking strips down a column;
// W2 keeps W2's generic NHWC kernel there, the A/B baseline).
enum class WgradVariant : int { W1 = 1, W2 = 2, W3 = 3 };

// Number of position splits of the W1 reduction (workspace = splits * C * KH * KW floats).
int weight_grad_splits(const Geom& g, bool channels_last, int num_sms);

// What one weight-grad call needs: `splits` blocks per channel, `floats` partial sums and `counters`
// arrival counters of workspace (W2: both 0 when one block per channel covers the positions; its
// counters must be zero before the first call and are left zero by every call, so a cached
// workspace needs no reset).
struct WgradPlan {
  int splits;
  int64_t floats;
  int64_t counters;
};
// `dtype` sizes W3's channel vectors (its NHWC splits depend on it).
WgradPlan weight_grad_plan(const Geom& g, bool channels_last, int num_sms, WgradVariant variant,
                           DType dtype = DType::F32);

// dw (C,1,KH,KW) from dy and x, and with W2 db (C) when `db` is not null (W1 takes db == null).
// `partial` / `counters` hold plan.floats / plan.counters elements (null when 0).
cudaError_t launch_weight_grad(DType dtype, const void* dy, const void* x, void* dw, void* db, float* partial,
                               unsigned* counters, const WgradPlan& plan, const Geom& g, bool channels_last,
                               cudaStream_t stream, WgradVariant variant);

}  // namespace convperf_dw
