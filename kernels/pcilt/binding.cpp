// Torch binding of the PCILT kernels: schemas, input checks, CUDA dispatch.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cuda_runtime.h>

#include <cstdint>
#ifndef CONVPERF_NS
#define CONVPERF_NS convperf_pcilt
#endif
#include "convperf/ns.h"

cudaError_t launch_quantize_pack(const float* x, uint32_t* out, int64_t rows, int w, int wp, float inv_step, int bits,
                                 cudaStream_t stream);
cudaError_t launch_lut_conv(const uint32_t* packed, const void* tables, void* out, bool is_float, int n, int c, int h,
                            int w, int wp, int cout, int groups, int kh, int kw, int sh, int sw, int ph, int pw,
                            int dh, int dw, int ho, int wo, int bits, int flags, bool fused, float scale,
                            const float* bias, cudaStream_t stream);
int lut_conv_plan(bool is_float, int n, int c, int h, int w, int wp, int cout, int groups, int kh, int kw, int sh,
                  int sw, int ph, int pw, int dh, int dw, int ho, int wo, int bits, int flags);

namespace {

void check_bits(int64_t bits) {
  TORCH_CHECK(bits == 2 || bits == 4 || bits == 8, "pcilt: bits must be 2, 4 or 8, got ", bits);
}

int64_t packed_width(int64_t w, int64_t bits) { return (w * bits + 31) / 32; }

at::Tensor quantize_pack_cuda(const at::Tensor& input, double inv_step, int64_t bits) {
  TORCH_CHECK(input.is_cuda(), "pcilt.quantize_pack: input must be a CUDA tensor");
  TORCH_CHECK(input.scalar_type() == at::kFloat, "pcilt.quantize_pack: input must be float32 (cast first), got ",
              input.scalar_type());
  TORCH_CHECK(input.dim() == 4, "pcilt.quantize_pack: input must be 4-D [N, C, H, W]");
  check_bits(bits);
  const at::Tensor x = input.contiguous();
  const int64_t w = x.size(3), wp = packed_width(w, bits);
  TORCH_CHECK(w < INT32_MAX, "pcilt.quantize_pack: width too large");
  at::Tensor out = at::empty({x.size(0), x.size(1), x.size(2), wp}, x.options().dtype(at::kInt));
  if (out.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaError_t err = launch_quantize_pack(x.data_ptr<float>(), reinterpret_cast<uint32_t*>(out.data_ptr<int32_t>()),
                                               x.size(0) * x.size(1) * x.size(2), static_cast<int>(w),
                                               static_cast<int>(wp), static_cast<float>(inv_step),
                                               static_cast<int>(bits), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "pcilt.quantize_pack launch failed: ", cudaGetErrorString(err));
  return out;
}

// The most threads a grid-stride loop of the naive kernel adds to its 32-bit index in one step
// (65536 blocks x 256 threads): a sample's outputs plus this must stay below 2^31 so it cannot wrap.
constexpr int64_t kMaxGridStride = int64_t{65536} * 256;

// Checked geometry of one lut_conv call (the tensors made contiguous).
struct LutArgs {
  at::Tensor packed, tables;
  int64_t n, c, h, width, wp, cout, kh, kw, ho, wo;
};

LutArgs check_lut_args(const at::Tensor& packed_in, const at::Tensor& tables_in, int64_t width, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, int64_t bits) {
  TORCH_CHECK(packed_in.is_cuda() && tables_in.is_cuda(), "pcilt.lut_conv: packed and tables must be CUDA tensors");
  TORCH_CHECK(packed_in.device() == tables_in.device(), "pcilt.lut_conv: packed and tables are on different devices");
  TORCH_CHECK(packed_in.scalar_type() == at::kInt && packed_in.dim() == 4,
              "pcilt.lut_conv: packed must be int32 [N, C, H, words] from quantize_pack");
  TORCH_CHECK(tables_in.dim() == 5, "pcilt.lut_conv: tables must be [C_out, C_in/groups, kh, kw, 2^bits]");
  TORCH_CHECK(tables_in.scalar_type() == at::kInt || tables_in.scalar_type() == at::kFloat,
              "pcilt.lut_conv: tables must be int32 or float32, got ", tables_in.scalar_type());
  check_bits(bits);
  TORCH_CHECK(stride.size() == 2 && padding.size() == 2 && dilation.size() == 2,
              "pcilt.lut_conv: stride, padding and dilation need 2 entries");
  TORCH_CHECK(stride[0] >= 1 && stride[1] >= 1 && dilation[0] >= 1 && dilation[1] >= 1 && padding[0] >= 0 &&
                  padding[1] >= 0,
              "pcilt.lut_conv: stride/dilation must be >= 1 and padding >= 0");
  LutArgs a;
  a.packed = packed_in.contiguous();
  a.tables = tables_in.contiguous();
  a.n = a.packed.size(0);
  a.c = a.packed.size(1);
  a.h = a.packed.size(2);
  a.wp = a.packed.size(3);
  a.width = width;
  TORCH_CHECK(a.wp == packed_width(width, bits), "pcilt.lut_conv: ", a.wp,
              " packed words per row do not match width ", width, " at ", bits, " bits");
  a.cout = a.tables.size(0);
  const int64_t cg = a.tables.size(1);
  a.kh = a.tables.size(2);
  a.kw = a.tables.size(3);
  TORCH_CHECK(a.tables.size(4) == (int64_t{1} << bits), "pcilt.lut_conv: tables have ", a.tables.size(4),
              " levels, expected 2^", bits);
  TORCH_CHECK(groups >= 1 && a.c % groups == 0 && a.cout % groups == 0 && cg * groups == a.c,
              "pcilt.lut_conv: groups=", groups, " does not match C_in=", a.c, ", C_out=", a.cout,
              ", tables C_in/g=", cg);
  a.ho = (a.h + 2 * padding[0] - dilation[0] * (a.kh - 1) - 1) / stride[0] + 1;
  a.wo = (width + 2 * padding[1] - dilation[1] * (a.kw - 1) - 1) / stride[1] + 1;
  TORCH_CHECK(a.ho >= 1 && a.wo >= 1, "pcilt.lut_conv: the dilated kernel does not fit the padded input");
  TORCH_CHECK(a.cout * a.ho * a.wo + kMaxGridStride < INT32_MAX && a.c * a.h * a.wp < INT32_MAX &&
                  a.tables.numel() < INT32_MAX && a.n < INT32_MAX,
              "pcilt.lut_conv: one sample is too large for the kernels' 32-bit indexing (C_out*Ho*Wo + ",
              kMaxGridStride, " and C*H*words must stay below 2^31); split the image");
  return a;
}

// Which kernel lut_conv runs for these arguments: -1 for the depthwise kernel, the tiled kernel's
// output-channel block (8, 4, 2 or 1), or 0 when the naive kernel runs (requested, or the tiled kernel
// cannot run here). flags: the kernel choice bits of launch_lut_conv (pcilt.cu's kLut*).
int64_t lut_conv_kernel_cuda(const at::Tensor& packed_in, const at::Tensor& tables_in, int64_t width,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                             int64_t bits, int64_t flags) {
  const LutArgs a = check_lut_args(packed_in, tables_in, width, stride, padding, dilation, groups, bits);
  return lut_conv_plan(a.tables.scalar_type() == at::kFloat, a.n, a.c, a.h, a.width, a.wp, a.cout, groups, a.kh,
                       a.kw, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], a.ho, a.wo, bits,
                       static_cast<int>(flags));
}

at::Tensor lut_conv_cuda(const at::Tensor& packed_in, const at::Tensor& tables_in, int64_t width, at::IntArrayRef stride,
                         at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, int64_t bits, int64_t flags,
                         c10::optional<double> scale, const c10::optional<at::Tensor>& bias_in) {
  const LutArgs a = check_lut_args(packed_in, tables_in, width, stride, padding, dilation, groups, bits);
  const at::Tensor& packed = a.packed;
  const at::Tensor& tables = a.tables;
  const int64_t n = a.n, c = a.c, h = a.h, wp = a.wp, cout = a.cout, kh = a.kh, kw = a.kw, ho = a.ho, wo = a.wo;
  const bool fused = scale.has_value();
  TORCH_CHECK(fused || !bias_in.has_value(), "pcilt.lut_conv: bias needs scale (the fused float32 epilogue)");
  at::Tensor bias;
  if (bias_in.has_value()) {
    bias = bias_in->contiguous();
    TORCH_CHECK(bias.scalar_type() == at::kFloat && bias.dim() == 1 && bias.size(0) == cout &&
                    bias.device() == packed.device(),
                "pcilt.lut_conv: bias must be float32 [C_out] on the packed tensor's device");
  }
  at::Tensor out = at::empty({n, cout, ho, wo}, fused ? tables.options().dtype(at::kFloat) : tables.options());
  if (out.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(packed.device());
  const cudaError_t err = launch_lut_conv(
      reinterpret_cast<const uint32_t*>(packed.data_ptr<int32_t>()), tables.data_ptr(), out.data_ptr(),
      tables.scalar_type() == at::kFloat, n, c, h, width, wp, cout, groups, kh, kw, stride[0], stride[1], padding[0],
      padding[1], dilation[0], dilation[1], ho, wo, bits, static_cast<int>(flags), fused, fused ? static_cast<float>(*scale) : 1.0f,
      bias.defined() ? bias.data_ptr<float>() : nullptr, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "pcilt.lut_conv launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

CONVPERF_TORCH_LIBRARY(m) {
  m.def("quantize_pack(Tensor input, float inv_step, int bits) -> Tensor");
  m.def(
      "lut_conv(Tensor packed, Tensor tables, int width, int[2] stride, int[2] padding, int[2] dilation, int groups, "
      "int bits, int flags, float? scale=None, Tensor? bias=None) -> Tensor");
  m.def(
      "lut_conv_kernel(Tensor packed, Tensor tables, int width, int[2] stride, int[2] padding, int[2] dilation, "
      "int groups, int bits, int flags) -> int");
}

CONVPERF_TORCH_LIBRARY_IMPL(CUDA, m) {
  m.impl("quantize_pack", &quantize_pack_cuda);
  m.impl("lut_conv", &lut_conv_cuda);
  m.impl("lut_conv_kernel", &lut_conv_kernel_cuda);
}
