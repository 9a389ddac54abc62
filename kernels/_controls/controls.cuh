// Host API of the negative-control kernels (plain CUDA): a direct depthwise conv2d (NCHW, one thread
// per output) with a selectable, deliberate defect. The perf plugin's tests must catch every one.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "convperf/dtype.h"

namespace convperf_controls {

enum class Mode : int {
  Correct = 0,
  NoOp = 1,             // launches nothing: the output is whatever the allocator handed out
  WrongBorder = 2,      // reads past the bottom/right edge clamp to the last row/column instead of zero
  WrongOddStride2 = 3,  // stride_w == 2 and odd W: the last output column is left at zero
};

using DType = convperf::DType;  // fp32, fp16, bf16 (I8 is not taken)

struct Geom {
  int64_t n, c;
  int h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw;
};

// `repeat_planes` > 0 recomputes the first repeat_planes (n, c) planes once more (same values): a
// correct kernel slowed by a fixed fraction of its work.
cudaError_t launch_control(Mode mode, DType dtype, const void* x, const void* w, const void* bias, void* y,
                           const Geom& g, int64_t repeat_planes, cudaStream_t stream);

}  // namespace convperf_controls
