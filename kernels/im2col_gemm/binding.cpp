// Torch binding of the im2col / col2im kernels: schemas, input checks, CUDA dispatch.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>
#ifndef CONVPERF_NS
#define CONVPERF_NS convperf_im2col_gemm
#endif
#include "convperf/ns.h"

cudaError_t launch_im2col(int dtype, const void* x, void* col, int n, int c, int h, int w, int kh, int kw, int sh,
                          int sw, int ph, int pw, int dh, int dw, int wo, int row0, int rows, int64_t sn,
                          int64_t sk, int64_t sl, bool ones_row, cudaStream_t stream);
cudaError_t launch_col2im(int dtype, const void* col, void* dx, int n, int c, int h, int w, int kh, int kw, int sh,
                          int sw, int ph, int pw, int dh, int dw, int wo, int row0, int rows, int h0, int hs,
                          int64_t sn, int64_t sk, int64_t sl, cudaStream_t stream);

namespace {

int dtype_code(const at::Tensor& t, bool allow_int8) {
  switch (t.scalar_type()) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    case at::kChar:
      if (allow_int8) return 3;
      break;
    default: break;
  }
  TORCH_CHECK(false, "im2col_gemm: dtype ", t.scalar_type(),
              " is not supported; use float32, float16 or bfloat16", allow_int8 ? " (or int8 for im2col)" : "");
  return -1;
}

struct Params {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

Params params(at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  TORCH_CHECK(kernel.size() == 2 && stride.size() == 2 && padding.size() == 2 && dilation.size() == 2,
              "im2col_gemm: kernel, stride, padding and dilation must each have 2 entries");
  Params p{kernel[0], kernel[1], stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]};
  TORCH_CHECK(p.kh >= 1 && p.kw >= 1, "im2col_gemm: kernel must be >= 1, got ", kernel);
  TORCH_CHECK(p.sh >= 1 && p.sw >= 1, "im2col_gemm: stride must be >= 1, got ", stride);
  TORCH_CHECK(p.dh >= 1 && p.dw >= 1, "im2col_gemm: dilation must be >= 1, got ", dilation);
  TORCH_CHECK(p.ph >= 0 && p.pw >= 0, "im2col_gemm: padding must be >= 0, got ", padding);
  return p;
}

// The kernels take sizes as int: every one passed narrowed must fit in int32.
void check_int32(const char* op, std::initializer_list<std::pair<const char*, int64_t>> sizes) {
  for (const auto& [name, v] : sizes) {
    TORCH_CHECK(v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(), op, ": ",
                name, "=", v, " does not fit in int32 (the kernels take 32-bit sizes); split the input");
  }
}

int64_t out_size(int64_t size, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (size + 2 * p - d * (k - 1) - 1) / s + 1;
}

// Column strides (sn, sk, sl) and shape for a layout name; k_total may be padded beyond C*kh*kw.
void layout_strides(const std::string& layout, int64_t n, int64_t k_total, int64_t l, int64_t& sn, int64_t& sk,
                    int64_t& sl, std::vector<int64_t>& shape) {
  if (layout == "nkl") {
    sn = k_total * l; sk = l; sl = 1; shape = {n, k_total, l};
  } else if (layout == "knl") {
    sk = n * l; sn = l; sl = 1; shape = {k_total, n, l};
  } else if (layout == "nlk") {
    sn = l * k_total; sl = k_total; sk = 1; shape = {n, l, k_total};
  } else {
    TORCH_CHECK(false, "im2col_gemm: layout must be 'nkl', 'knl' or 'nlk', got '", layout, "'");
  }
}

at::Tensor im2col_cuda(const at::Tensor& input, at::IntArrayRef kernel, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, int64_t row_start, int64_t rows,
                       c10::string_view layout, int64_t pad_k_to, bool ones_row) {
  TORCH_CHECK(input.is_cuda(), "im2col: input must be a CUDA tensor (use kernels.im2col_gemm.reference on the CPU)");
  TORCH_CHECK(input.dim() == 4, "im2col: input must be 4-D [N, C, H, W], got ", input.dim(), "-D");
  const int code = dtype_code(input, true);
  const Params p = params(kernel, stride, padding, dilation);
  const at::Tensor x = input.contiguous();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t ho = out_size(h, p.kh, p.sh, p.ph, p.dh), wo = out_size(w, p.kw, p.sw, p.pw, p.dw);
  TORCH_CHECK(ho >= 1 && wo >= 1, "im2col: the dilated kernel does not fit the padded input (output ", ho, "x", wo,
              "); use more padding or a smaller kernel");
  TORCH_CHECK(row_start >= 0 && rows >= 1 && row_start + rows <= ho, "im2col: output rows [", row_start, ", ",
              row_start + rows, ") are outside [0, ", ho, ")");
  TORCH_CHECK(pad_k_to >= 1, "im2col: pad_k_to must be >= 1, got ", pad_k_to);
  TORCH_CHECK(!ones_row || layout != "nlk", "im2col: ones_row needs layout nkl or knl, not nlk");
  const int64_t k = c * p.kh * p.kw + (ones_row ? 1 : 0);  // the ones row is K's last written row
  const int64_t k_total = (k + pad_k_to - 1) / pad_k_to * pad_k_to;
  const int64_t l = rows * wo;
  int64_t sn = 0, sk = 0, sl = 0;
  std::vector<int64_t> shape;
  layout_strides(std::string(layout), n, k_total, l, sn, sk, sl, shape);
  at::Tensor col = at::empty(shape, x.options());
  if (col.numel() == 0) return col;
  // Only the padding rows of K need zeros (they must not add to the GEMM); the kernel writes the rest.
  // Zeroing just them, not the whole buffer: a padded K (the 2:4 GEMM's multiple of 64) would
  // otherwise write the column buffer twice.
  if (k_total != k) {
    const int64_t k_dim = std::string(layout) == "knl" ? 0 : (std::string(layout) == "nkl" ? 1 : 2);
    col.narrow(k_dim, k, k_total - k).zero_();
  }
  check_int32("im2col", {{"N", n}, {"C", c}, {"H", h}, {"W", w}, {"kh", p.kh}, {"kw", p.kw}, {"stride_h", p.sh},
                         {"stride_w", p.sw}, {"pad_h", p.ph}, {"pad_w", p.pw}, {"dilation_h", p.dh},
                         {"dilation_w", p.dw}, {"W_out", wo}, {"row_start", row_start}, {"rows", rows}});
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaError_t err = launch_im2col(code, x.data_ptr(), col.data_ptr(), n, c, h, w, p.kh, p.kw, p.sh, p.sw, p.ph,
                                        p.pw, p.dh, p.dw, wo, row_start, rows, sn, sk, sl, ones_row,
                                        at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "im2col kernel launch failed: ", cudaGetErrorString(err));
  return col;
}

at::Tensor col2im_cuda(const at::Tensor& col_in, at::IntArrayRef input_shape, at::IntArrayRef kernel,
                       at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t row_start,
                       int64_t rows, c10::string_view layout, int64_t h_start, int64_t h_rows) {
  TORCH_CHECK(col_in.is_cuda(), "col2im: col must be a CUDA tensor");
  TORCH_CHECK(input_shape.size() == 4, "col2im: input_shape must be [N, C, H, W]");
  const int code = dtype_code(col_in, false);
  const Params p = params(kernel, stride, padding, dilation);
  const int64_t n = input_shape[0], c = input_shape[1], h = input_shape[2], w = input_shape[3];
  const int64_t ho = out_size(h, p.kh, p.sh, p.ph, p.dh), wo = out_size(w, p.kw, p.sw, p.pw, p.dw);
  TORCH_CHECK(row_start >= 0 && rows >= 1 && row_start + rows <= ho, "col2im: output rows out of range");
  TORCH_CHECK(h_start >= 0 && h_rows >= 0 && h_start + h_rows <= h, "col2im: input rows [", h_start, ", ",
              h_start + h_rows, ") are outside [0, ", h, ")");
  const at::Tensor col = col_in.contiguous();
  const int64_t k = c * p.kh * p.kw, l = rows * wo;
  int64_t sn = 0, sk = 0, sl = 0;
  std::vector<int64_t> shape;
  const int64_t k_total = std::string(layout) == "knl" ? col.size(0) : (std::string(layout) == "nkl" ? col.size(1)
                                                                                                    : col.size(2));
  TORCH_CHECK(k_total >= k, "col2im: column buffer holds ", k_total, " rows of K, needs ", k);
  layout_strides(std::string(layout), n, k_total, l, sn, sk, sl, shape);
  TORCH_CHECK(col.sizes() == at::IntArrayRef(shape), "col2im: column buffer has shape ", col.sizes(),
              ", expected ", at::IntArrayRef(shape), " for layout ", layout);
  at::Tensor dx = at::empty({n, c, h_rows, w}, col.options());
  if (dx.numel() == 0) return dx;
  check_int32("col2im", {{"N", n}, {"C", c}, {"H", h}, {"W", w}, {"kh", p.kh}, {"kw", p.kw}, {"stride_h", p.sh},
                         {"stride_w", p.sw}, {"pad_h", p.ph}, {"pad_w", p.pw}, {"dilation_h", p.dh},
                         {"dilation_w", p.dw}, {"W_out", wo}, {"row_start", row_start}, {"rows", rows},
                         {"h_start", h_start}, {"h_rows", h_rows}});
  const c10::cuda::CUDAGuard guard(col.device());
  const cudaError_t err = launch_col2im(code, col.data_ptr(), dx.data_ptr(), n, c, h, w, p.kh, p.kw, p.sh, p.sw,
                                        p.ph, p.pw, p.dh, p.dw, wo, row_start, rows, h_start, h_rows, sn, sk, sl,
                                        at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "col2im kernel launch failed: ", cudaGetErrorString(err));
  return dx;
}

}  // namespace

CONVPERF_TORCH_LIBRARY(m) {
  m.def(
      "im2col(Tensor input, int[2] kernel, int[2] stride, int[2] padding, int[2] dilation, int row_start, "
      "int rows, str layout, int pad_k_to, bool ones_row=False) -> Tensor");
  m.def(
      "col2im(Tensor col, int[4] input_shape, int[2] kernel, int[2] stride, int[2] padding, int[2] dilation, "
      "int row_start, int rows, str layout, int h_start, int h_rows) -> Tensor");
}

CONVPERF_TORCH_LIBRARY_IMPL(CUDA, m) {
  m.impl("im2col", &im2col_cuda);
  m.impl("col2im", &col2im_cuda);
}
