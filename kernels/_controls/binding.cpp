// Torch binding of the negative-control kernels: one op, the defect chosen by `mode`.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <string>

#include "controls.cuh"
#ifndef CONVPERF_NS
#define CONVPERF_NS convperf_controls
#endif
#include "convperf/ns.h"

namespace {

using convperf_controls::DType;
using convperf_controls::Geom;
using convperf_controls::Mode;

Mode parse_mode(const std::string& mode) {
  if (mode == "correct") return Mode::Correct;
  if (mode == "noop") return Mode::NoOp;
  if (mode == "wrong_border") return Mode::WrongBorder;
  if (mode == "wrong_odd_stride2") return Mode::WrongOddStride2;
  TORCH_CHECK(false, "convperf_controls: unknown mode '", mode,
              "'; use correct, noop, wrong_border or wrong_odd_stride2");
  return Mode::Correct;
}

DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::F32;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    default: TORCH_CHECK(false, "convperf_controls: dtype ", t.scalar_type(), " is not supported");
  }
  return DType::F32;
}

at::Tensor forward_cuda(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                        const std::string& mode, double slow_fraction) {
  TORCH_CHECK(input.is_cuda() && weight.is_cuda(), "convperf_controls: input and weight must be CUDA tensors");
  TORCH_CHECK(input.dim() == 4 && weight.dim() == 4 && weight.size(0) == input.size(1) && weight.size(1) == 1,
              "convperf_controls: need input (N, C, H, W) and a depthwise weight (C, 1, kh, kw), got ",
              input.sizes(), " and ", weight.sizes());
  TORCH_CHECK(weight.scalar_type() == input.scalar_type(), "convperf_controls: weight dtype must match input");
  TORCH_CHECK(stride.size() == 2 && padding.size() == 2 && dilation.size() == 2,
              "convperf_controls: stride, padding and dilation need 2 values each");
  TORCH_CHECK(slow_fraction >= 0.0 && slow_fraction <= 1.0, "convperf_controls: slow_fraction must be in [0, 1]");
  const Mode m = parse_mode(mode);
  const c10::cuda::CUDAGuard guard(input.device());
  Geom g{};
  g.n = input.size(0);
  g.c = input.size(1);
  g.h = static_cast<int>(input.size(2));
  g.w = static_cast<int>(input.size(3));
  g.kh = static_cast<int>(weight.size(2));
  g.kw = static_cast<int>(weight.size(3));
  g.sh = static_cast<int>(stride[0]);
  g.sw = static_cast<int>(stride[1]);
  g.ph = static_cast<int>(padding[0]);
  g.pw = static_cast<int>(padding[1]);
  g.dh = static_cast<int>(dilation[0]);
  g.dw = static_cast<int>(dilation[1]);
  g.ho = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.wo = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  TORCH_CHECK(g.ho >= 1 && g.wo >= 1, "convperf_controls: empty output");
  const at::Tensor x = input.contiguous();
  const at::Tensor w = weight.contiguous();
  if (bias.has_value() && bias->defined()) {  // the depthwise binding's checks
    TORCH_CHECK(bias->is_cuda(), "convperf_controls: bias must be a CUDA tensor, got ", bias->device());
    TORCH_CHECK(bias->device() == input.device(), "convperf_controls: bias is on ", bias->device(), " but input is on ",
                input.device(), "; move both to the same GPU");
    TORCH_CHECK(bias->scalar_type() == input.scalar_type(), "convperf_controls: bias has dtype ", bias->scalar_type(),
                " but input has ", input.scalar_type(), "; cast them to the same dtype");
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == input.size(1), "convperf_controls: bias must have shape (",
                input.size(1), "), got ", bias->sizes());
  }
  const at::Tensor b = bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();
  // noop: at::empty, like a kernel that forgot to launch; the others overwrite every element.
  at::Tensor y = at::empty({g.n, g.c, g.ho, g.wo}, input.options());
  const int64_t repeat = static_cast<int64_t>(std::ceil(slow_fraction * static_cast<double>(g.n * g.c)));
  const cudaError_t err = convperf_controls::launch_control(m, dtype_of(x), x.data_ptr(), w.data_ptr(),
                                                            b.defined() ? b.data_ptr() : nullptr, y.data_ptr(), g,
                                                            repeat, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "convperf_controls: launch failed: ", cudaGetErrorString(err));
  return y;
}

}  // namespace

CONVPERF_TORCH_LIBRARY(m) {
  m.def("forward(Tensor input, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, int[2] dilation, "
        "str mode, float slow_fraction) -> Tensor");
}

CONVPERF_TORCH_LIBRARY_IMPL(CUDA, m) { m.impl("forward", &forward_cuda); }
