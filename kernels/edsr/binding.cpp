// Torch binding of the fused depthwise-separable EDSR conv (edsr.cu).
//
// convperf_edsr::sep_conv(x, dw_weight, dw_bias, pw_weight, pw_bias, residual, res_scale, relu)
//   = [residual + res_scale *] [relu](conv1x1(conv3x3_depthwise(x, pad 1) , pw))
// fp32, CUDA, any memory layout (made contiguous NCHW here).

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#ifndef CONVPERF_NS
#define CONVPERF_NS convperf_edsr
#endif
#include "convperf/ns.h"

namespace convperf_edsr {
bool sep_conv_supports_channels(int C);
cudaError_t launch_sep_conv_fwd_fp32(const float* x, const float* wd, const float* bd, const float* wp,
                                     const float* bp, const float* residual, float* y, int N, int C, int H,
                                     int W, float res_scale, bool relu, int variant, cudaStream_t stream);
}  // namespace convperf_edsr

namespace {

void check_tensor(const at::Tensor& t, const char* name, const at::Tensor& x) {
  TORCH_CHECK(t.is_cuda(), "convperf_edsr::sep_conv: ", name, " must be a CUDA tensor (got ", t.device(),
              "); on a CPU use kernels.edsr.reference.sep_conv");
  TORCH_CHECK(t.device() == x.device(), "convperf_edsr::sep_conv: ", name, " is on ", t.device(),
              " but x is on ", x.device(), "; move all tensors to one GPU");
  TORCH_CHECK(t.scalar_type() == at::kFloat, "convperf_edsr::sep_conv: ", name,
              " must be float32 (got ", t.scalar_type(), "); the fused kernel is fp32 only");
}

at::Tensor aligned_contiguous(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  // The epilogue uses float4 loads; a view with an odd storage offset gets a fresh copy.
  if (reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 != 0) c = c.clone();
  return c;
}

at::Tensor sep_conv_cuda(const at::Tensor& x, const at::Tensor& dw_weight, const at::Tensor& dw_bias,
                         const at::Tensor& pw_weight, const at::Tensor& pw_bias,
                         const c10::optional<at::Tensor>& residual, double res_scale, bool relu) {
  TORCH_CHECK(x.dim() == 4, "convperf_edsr::sep_conv: x must be (N, C, H, W), got shape ", x.sizes());
  check_tensor(x, "x", x);
  check_tensor(dw_weight, "dw_weight", x);
  check_tensor(dw_bias, "dw_bias", x);
  check_tensor(pw_weight, "pw_weight", x);
  check_tensor(pw_bias, "pw_bias", x);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  TORCH_CHECK(convperf_edsr::sep_conv_supports_channels(static_cast<int>(C)),
              "convperf_edsr::sep_conv: C=", C, " is not supported (the fused kernel is compiled for "
              "C in {16, 32, 64}); use kernels.edsr.reference.sep_conv for other widths");
  TORCH_CHECK(dw_weight.sizes() == at::IntArrayRef({C, 1, 3, 3}),
              "convperf_edsr::sep_conv: dw_weight must be (C, 1, 3, 3) = (", C, ", 1, 3, 3), got ",
              dw_weight.sizes());
  TORCH_CHECK(pw_weight.sizes() == at::IntArrayRef({C, C, 1, 1}),
              "convperf_edsr::sep_conv: pw_weight must be (C, C, 1, 1) = (", C, ", ", C,
              ", 1, 1), got ", pw_weight.sizes(), " (the block keeps the width)");
  TORCH_CHECK(dw_bias.dim() == 1 && dw_bias.size(0) == C, "convperf_edsr::sep_conv: dw_bias must be (", C,
              "), got ", dw_bias.sizes());
  TORCH_CHECK(pw_bias.dim() == 1 && pw_bias.size(0) == C, "convperf_edsr::sep_conv: pw_bias must be (", C,
              "), got ", pw_bias.sizes());
  TORCH_CHECK(N <= 65535, "convperf_edsr::sep_conv: batch N=", N, " exceeds 65535; split the batch");
  TORCH_CHECK(H * W * C * N < (int64_t{1} << 62), "convperf_edsr::sep_conv: tensor too large");

  c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  const at::Tensor wd = dw_weight.contiguous();
  const at::Tensor bd = dw_bias.contiguous();
  const at::Tensor wp = pw_weight.contiguous();
  const at::Tensor bp = pw_bias.contiguous();
  at::Tensor rc;
  if (residual.has_value()) {
    check_tensor(*residual, "residual", x);
    TORCH_CHECK(residual->sizes() == x.sizes(), "convperf_edsr::sep_conv: residual must have x's shape ",
                x.sizes(), ", got ", residual->sizes());
    rc = aligned_contiguous(*residual);
  }
  // CONVPERF_EDSR_VARIANT=v1|v2, read per call so one process can A/B them: v1 (default, measured) or v2
  // (the next chunk's halo loads in flight during the current chunk's compute).
  const char* ve = std::getenv("CONVPERF_EDSR_VARIANT");
  int variant = 1;
  if (ve != nullptr && *ve != '\0' && std::strcmp(ve, "v1") != 0) {
    TORCH_CHECK(std::strcmp(ve, "v2") == 0, "convperf_edsr::sep_conv: CONVPERF_EDSR_VARIANT=", ve,
                " is not a variant; set it to v1 (default) or v2 (prefetched chunk staging), or unset it");
    variant = 2;
  }
  at::Tensor y = at::empty({N, C, H, W}, x.options().memory_format(at::MemoryFormat::Contiguous));
  const cudaError_t err = convperf_edsr::launch_sep_conv_fwd_fp32(
      xc.data_ptr<float>(), wd.data_ptr<float>(), bd.data_ptr<float>(), wp.data_ptr<float>(),
      bp.data_ptr<float>(), rc.defined() ? rc.data_ptr<float>() : nullptr, y.data_ptr<float>(),
      static_cast<int>(N), static_cast<int>(C), static_cast<int>(H), static_cast<int>(W),
      static_cast<float>(res_scale), relu, variant, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "convperf_edsr::sep_conv: kernel launch failed: ", cudaGetErrorString(err),
              " (N=", N, " C=", C, " H=", H, " W=", W, ")");
  return y;
}

}  // namespace

CONVPERF_TORCH_LIBRARY(m) {
  m.def(
      "sep_conv(Tensor x, Tensor dw_weight, Tensor dw_bias, Tensor pw_weight, Tensor pw_bias, "
      "Tensor? residual, float res_scale, bool relu) -> Tensor");
}

CONVPERF_TORCH_LIBRARY_IMPL(CUDA, m) { m.impl("sep_conv", &sep_conv_cuda); }
