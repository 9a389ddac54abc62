// Torch binding of the depthwise conv2d kernels: schemas and CUDA impls with input checks.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#ifndef CONVPERF_NS
#define CONVPERF_NS convperf_depthwise
#endif
#include "convperf/ns.h"
#include "depthwise.cuh"

namespace {

using convperf_dw::DType;
using convperf_dw::Geom;

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::F32;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    default:
      TORCH_CHECK(false, "convperf_depthwise: dtype ", t.scalar_type(),
                  " is not supported; use float32, float16 or bfloat16");
  }
  return DType::F32;
}

std::pair<int64_t, int64_t> pair_of(at::IntArrayRef v, const char* name) {
  TORCH_CHECK(v.size() == 2, "convperf_depthwise: ", name, " must have 2 values (h, w), got ", v.size());
  return {v[0], v[1]};
}

// The layout the kernels run in: NHWC when the tensor is channels_last (and not also NCHW-contiguous).
bool wants_channels_last(const at::Tensor& t) {
  return !t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

at::MemoryFormat layout(bool cl) { return cl ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous; }

at::Tensor dense(const at::Tensor& t, bool cl) {
  return t.contiguous(layout(cl));
}

void check_tensor(const at::Tensor& t, const char* name, const at::Tensor& like) {
  TORCH_CHECK(t.is_cuda(), "convperf_depthwise: ", name, " must be a CUDA tensor, got ", t.device());
  TORCH_CHECK(t.device() == like.device(), "convperf_depthwise: ", name, " is on ", t.device(), " but ",
              "input is on ", like.device(), "; move both to the same GPU");
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "convperf_depthwise: ", name, " has dtype ",
              t.scalar_type(), " but input has ", like.scalar_type(), "; cast them to the same dtype");
}

Geom make_geom(int64_t n, int64_t c, int64_t h, int64_t w, const at::Tensor& weight, at::IntArrayRef stride,
               at::IntArrayRef padding, at::IntArrayRef dilation) {
  TORCH_CHECK(weight.dim() == 4 && weight.size(0) == c && weight.size(1) == 1,
              "convperf_depthwise: weight must have shape (C, 1, kh, kw) with C = ", c,
              " (depthwise, channel multiplier 1), got ", weight.sizes());
  auto [sh, sw] = pair_of(stride, "stride");
  auto [ph, pw] = pair_of(padding, "padding");
  auto [dh, dw] = pair_of(dilation, "dilation");
  const int64_t kh = weight.size(2), kw = weight.size(3);
  TORCH_CHECK(sh >= 1 && sw >= 1, "convperf_depthwise: stride must be >= 1, got ", stride);
  TORCH_CHECK(dh >= 1 && dw >= 1, "convperf_depthwise: dilation must be >= 1, got ", dilation);
  TORCH_CHECK(ph >= 0 && pw >= 0, "convperf_depthwise: padding must be >= 0, got ", padding);
  TORCH_CHECK(kh >= 1 && kw >= 1, "convperf_depthwise: kernel must be at least 1x1, got ", weight.sizes());
  const int64_t ho = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  const int64_t wo = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  TORCH_CHECK(h + 2 * ph >= dh * (kh - 1) + 1 && w + 2 * pw >= dw * (kw - 1) + 1,
              "convperf_depthwise: input (", h, "x", w, ") plus padding is smaller than the dilated kernel (",
              dh * (kh - 1) + 1, "x", dw * (kw - 1) + 1, ")");
  // Element offsets are 64-bit; per-sample and per-channel index math is 32-bit. The direct and
  // NHWC-row kernels walk one sample with a 32-bit grid-stride loop (at most 2^20 blocks x 256
  // threads a step): a sample plus one stride must stay below 2^31 so the counter cannot wrap.
  constexpr int64_t kMaxGridStride = int64_t{1} << 28;
  TORCH_CHECK(c * std::max(h * w, ho * wo) + kMaxGridStride <= kMaxInt && n * std::max(h * w, ho * wo) <= kMaxInt,
              "convperf_depthwise: one sample (C*H*W, input or output) must have fewer than 2^31 - 2^28 elements "
              "(32-bit grid-stride loops) and one channel over the batch (N*H*W) fewer than 2^31; split the "
              "batch or the image");
  Geom g{};
  g.n = n;
  g.c = c;
  g.h = static_cast<int>(h);
  g.w = static_cast<int>(w);
  g.ho = static_cast<int>(ho);
  g.wo = static_cast<int>(wo);
  g.kh = static_cast<int>(kh);
  g.kw = static_cast<int>(kw);
  g.sh = static_cast<int>(sh);
  g.sw = static_cast<int>(sw);
  g.ph = static_cast<int>(ph);
  g.pw = static_cast<int>(pw);
  g.dh = static_cast<int>(dh);
  g.dw = static_cast<int>(dw);
  return g;
}

// The tiled kernel to run (NCHW; v3 and v4 also switch NHWC to the channel-vector kernel), read on
// every call so one process can A/B them by setting CONVPERF_DEPTHWISE_VARIANT=v1|v2|v3|v4 between
// calls (default v2 until a GPU has measured v3/v4).
convperf_dw::Variant variant_from_env() {
  const char* v = std::getenv("CONVPERF_DEPTHWISE_VARIANT");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "v2") == 0) return convperf_dw::Variant::V2;
  if (std::strcmp(v, "v3") == 0) return convperf_dw::Variant::V3;
  if (std::strcmp(v, "v4") == 0) return convperf_dw::Variant::V4;
  TORCH_CHECK(std::strcmp(v, "v1") == 0, "convperf_depthwise: CONVPERF_DEPTHWISE_VARIANT=", v,
              " is not a variant; set it to v1 (first tiled kernel), v2 (default), v3 (batched 16-byte "
              "staging; NHWC channel vectors) or v4 (register-window tiles, grids sized to the GPU; NHWC as "
              "v3), or unset it");
  return convperf_dw::Variant::V1;
}

void check_launch(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "convperf_depthwise: ", what, " launch failed: ", cudaGetErrorString(err));
}

at::Tensor forward_cuda(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  TORCH_CHECK(input.dim() == 4, "convperf_depthwise.forward: input must be 4-D (N, C, H, W), got ",
              input.sizes());
  check_tensor(input, "input", input);
  dtype_of(input);
  check_tensor(weight, "weight", input);
  const Geom g = make_geom(input.size(0), input.size(1), input.size(2), input.size(3), weight, stride, padding,
                           dilation);
  at::Tensor b;
  if (bias.has_value() && bias->defined()) {
    check_tensor(*bias, "bias", input);
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == g.c, "convperf_depthwise: bias must have shape (",
                g.c, "), got ", bias->sizes());
    b = bias->contiguous();
  }
  const bool cl = wants_channels_last(input);
  const c10::cuda::CUDAGuard guard(input.device());
  const at::Tensor x = dense(input, cl);
  const at::Tensor w = weight.contiguous();
  at::Tensor y = at::empty({g.n, g.c, g.ho, g.wo}, input.options().memory_format(layout(cl)));
  check_launch(convperf_dw::launch_forward(dtype_of(input), x.data_ptr(), w.data_ptr(),
                                           b.defined() ? b.data_ptr() : nullptr, y.data_ptr(), g, cl,
                                           at::cuda::getCurrentCUDAStream(), variant_from_env()),
               "forward");
  return y;
}

at::Tensor input_grad_cuda(const at::Tensor& grad_output, const at::Tensor& weight, at::IntArrayRef input_hw,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  TORCH_CHECK(grad_output.dim() == 4, "convperf_depthwise.input_grad: grad_output must be 4-D, got ",
              grad_output.sizes());
  check_tensor(grad_output, "grad_output", grad_output);
  dtype_of(grad_output);
  check_tensor(weight, "weight", grad_output);
  auto [h, w] = pair_of(input_hw, "input_hw");
  const Geom g = make_geom(grad_output.size(0), grad_output.size(1), h, w, weight, stride, padding, dilation);
  TORCH_CHECK(grad_output.size(2) == g.ho && grad_output.size(3) == g.wo,
              "convperf_depthwise.input_grad: grad_output is ", grad_output.sizes(), " but input_hw ", input_hw,
              " gives an output of ", g.ho, "x", g.wo);
  const bool cl = wants_channels_last(grad_output);
  const c10::cuda::CUDAGuard guard(grad_output.device());
  const at::Tensor dy = dense(grad_output, cl);
  const at::Tensor wt = weight.contiguous();
  at::Tensor dx = at::empty({g.n, g.c, g.h, g.w}, grad_output.options().memory_format(layout(cl)));
  check_launch(convperf_dw::launch_input_grad(dtype_of(dy), dy.data_ptr(), wt.data_ptr(), dx.data_ptr(), g, cl,
                                              at::cuda::getCurrentCUDAStream(), variant_from_env()),
               "input_grad");
  return dx;
}

// Which weight-grad kernel runs, read per call so one process can A/B them:
// CONVPERF_DEPTHWISE_WGRAD=w1 (two launches, a workspace per call, the bias grad a separate sum), w2
// (one launch, bias fused, a cached workspace; channels_last on the generic kernel) or w3 (the
// default: w2 with channels_last k 3/5/7 on the channel-vector kernel wgrad_nhwc_vec).
convperf_dw::WgradVariant wgrad_variant_from_env() {
  const char* v = std::getenv("CONVPERF_DEPTHWISE_WGRAD");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "w3") == 0) return convperf_dw::WgradVariant::W3;
  if (std::strcmp(v, "w2") == 0) return convperf_dw::WgradVariant::W2;
  TORCH_CHECK(std::strcmp(v, "w1") == 0, "convperf_depthwise: CONVPERF_DEPTHWISE_WGRAD=", v,
              " is not a weight-grad variant; set it to w1 (two launches), w2 (one launch, bias fused, "
              "generic NHWC kernel) or w3 (default: w2 with the NHWC channel-vector kernel), or unset it");
  return convperf_dw::WgradVariant::W1;
}

// W2's workspace, one per (device, stream), grown when a call needs more and never shrunk: a call
// allocates nothing and launches no memset (the kernel leaves its counters at zero). Per stream,
// because calls on one stream run in order and two streams would share the counters. The map is
// never destroyed (its tensors must not be freed after the CUDA context at exit).
struct Workspace {
  at::Tensor buf;  // floats partials, then counters (zero-initialised)
  int64_t floats = 0, counters = 0;
};

std::pair<float*, unsigned*> cached_workspace(const at::Tensor& like, cudaStream_t stream, int64_t floats,
                                               int64_t counters) {
  static std::mutex mu;
  static auto* cache = new std::map<std::pair<int, cudaStream_t>, Workspace>();
  const std::lock_guard<std::mutex> lock(mu);
  Workspace& ws = (*cache)[{like.get_device(), stream}];
  if (ws.floats < floats || ws.counters < counters) {
    ws.floats = std::max(ws.floats, floats);
    ws.counters = std::max(ws.counters, counters);
    static_assert(sizeof(float) == sizeof(unsigned), "counters live in float slots");
    ws.buf = at::zeros({ws.floats + ws.counters}, like.options().dtype(at::kFloat));
  }
  float* base = ws.buf.data_ptr<float>();
  return {base, reinterpret_cast<unsigned*>(base + ws.floats)};
}

// dw, and db when `bias` (else an undefined tensor).
std::tuple<at::Tensor, at::Tensor> weight_grads(const at::Tensor& grad_output, const at::Tensor& input,
                                                at::IntArrayRef kernel_hw, at::IntArrayRef stride,
                                                at::IntArrayRef padding, at::IntArrayRef dilation, bool bias) {
  TORCH_CHECK(grad_output.dim() == 4 && input.dim() == 4,
              "convperf_depthwise.weight_grad: grad_output and input must be 4-D, got ", grad_output.sizes(),
              " and ", input.sizes());
  check_tensor(input, "input", input);
  dtype_of(input);
  check_tensor(grad_output, "grad_output", input);
  auto [kh, kw] = pair_of(kernel_hw, "kernel_hw");
  TORCH_CHECK(kh >= 1 && kw >= 1, "convperf_depthwise.weight_grad: kernel_hw must be >= 1, got ", kernel_hw);
  const int64_t c = input.size(1);
  // Geometry only needs the weight's shape.
  const at::Tensor shape_only = at::empty({c, 1, kh, kw}, input.options().device(at::kMeta));
  const Geom g = make_geom(input.size(0), c, input.size(2), input.size(3), shape_only, stride, padding, dilation);
  TORCH_CHECK(grad_output.size(0) == g.n && grad_output.size(1) == g.c && grad_output.size(2) == g.ho &&
                  grad_output.size(3) == g.wo,
              "convperf_depthwise.weight_grad: grad_output is ", grad_output.sizes(), ", expected (", g.n, ", ",
              g.c, ", ", g.ho, ", ", g.wo, ")");
  // Both operands in one layout: channels_last only when the input is.
  const bool cl = wants_channels_last(input);
  const c10::cuda::CUDAGuard guard(input.device());
  const at::Tensor x = dense(input, cl);
  const at::Tensor dy = dense(grad_output, cl);
  at::Tensor dw = at::empty({g.c, 1, kh, kw}, input.options());
  const convperf_dw::WgradVariant variant = wgrad_variant_from_env();
  const bool w1 = variant == convperf_dw::WgradVariant::W1;
  at::Tensor db = bias && !w1 ? at::empty({g.c}, input.options()) : at::Tensor();
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const convperf_dw::WgradPlan plan = convperf_dw::weight_grad_plan(g, cl, sms, variant, dtype_of(x));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  float* partial = nullptr;
  unsigned* counters = nullptr;
  at::Tensor per_call;  // W1's workspace, the A/B baseline's allocation per call
  if (w1) {
    per_call = at::empty({plan.floats}, input.options().dtype(at::kFloat));
    partial = per_call.data_ptr<float>();
  } else if (plan.floats > 0) {
    std::tie(partial, counters) = cached_workspace(input, stream, plan.floats, plan.counters);
  }
  check_launch(convperf_dw::launch_weight_grad(dtype_of(x), dy.data_ptr(), x.data_ptr(), dw.data_ptr(),
                                               db.defined() ? db.data_ptr() : nullptr, partial, counters, plan,
                                               g, cl, stream, variant),
               "weight_grad");
  if (bias && w1) db = grad_output.sum({0, 2, 3}, false, at::kFloat).to(grad_output.scalar_type());
  return {dw, db};
}

at::Tensor weight_grad_cuda(const at::Tensor& grad_output, const at::Tensor& input, at::IntArrayRef kernel_hw,
                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  return std::get<0>(weight_grads(grad_output, input, kernel_hw, stride, padding, dilation, false));
}

std::tuple<at::Tensor, at::Tensor> weight_bias_grad_cuda(const at::Tensor& grad_output, const at::Tensor& input,
                                                         at::IntArrayRef kernel_hw, at::IntArrayRef stride,
                                                         at::IntArrayRef padding, at::IntArrayRef dilation) {
  return weight_grads(grad_output, input, kernel_hw, stride, padding, dilation, true);
}

// ---- autograd, in C++ (issue 29): no Python on the per-call path of forward + backward ------------
#define CONVPERF_STR2(x) #x
#define CONVPERF_STR(x) CONVPERF_STR2(x)

using ForwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                              at::IntArrayRef, at::IntArrayRef, at::IntArrayRef);
using GradSig = at::Tensor(const at::Tensor&, const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
                           at::IntArrayRef, at::IntArrayRef);

// The ops through the dispatcher (so a meta or CPU kernel registered elsewhere serves them too),
// each looked up once.
const c10::TypedOperatorHandle<ForwardSig>& forward_op() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow(CONVPERF_STR(CONVPERF_NS) "::forward", "").typed<ForwardSig>();
  return op;
}
const c10::TypedOperatorHandle<GradSig>& input_grad_op() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow(CONVPERF_STR(CONVPERF_NS) "::input_grad", "").typed<GradSig>();
  return op;
}
const c10::TypedOperatorHandle<GradSig>& weight_grad_op() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow(CONVPERF_STR(CONVPERF_NS) "::weight_grad", "").typed<GradSig>();
  return op;
}
using GradsSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, at::IntArrayRef,
                                                     at::IntArrayRef, at::IntArrayRef, at::IntArrayRef);
const c10::TypedOperatorHandle<GradsSig>& weight_bias_grad_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(CONVPERF_STR(CONVPERF_NS) "::weight_bias_grad", "")
                             .typed<GradsSig>();
  return op;
}

// Gradients of input, weight and bias (the gradient ops are not differentiable again).
class DepthwiseFunction : public torch::autograd::Function<DepthwiseFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["stride"] = stride.vec();
    ctx->saved_data["padding"] = padding.vec();
    ctx->saved_data["dilation"] = dilation.vec();
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    at::AutoDispatchBelowADInplaceOrView below;
    return forward_op().call(input, weight, bias, stride, padding, dilation);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const auto stride = ctx->saved_data["stride"].toIntVector();
    const auto padding = ctx->saved_data["padding"].toIntVector();
    const auto dilation = ctx->saved_data["dilation"].toIntVector();
    const at::Tensor& grad = grads[0];
    at::Tensor gi, gw, gb;
    if (ctx->needs_input_grad(0)) {
      gi = input_grad_op().call(grad, weight, {input.size(2), input.size(3)}, stride, padding, dilation);
    }
    const bool wants_bias = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    const std::vector<int64_t> khw = {weight.size(2), weight.size(3)};
    if (ctx->needs_input_grad(1) && wants_bias) {  // one kernel for both (bias fused)
      std::tie(gw, gb) = weight_bias_grad_op().call(grad, input, khw, stride, padding, dilation);
    } else if (ctx->needs_input_grad(1)) {
      gw = weight_grad_op().call(grad, input, khw, stride, padding, dilation);
    } else if (wants_bias) {
      gb = grad.sum({0, 2, 3}, false, at::kFloat).to(grad.scalar_type());
    }
    return {gi, gw, gb, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor forward_autograd(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  return DepthwiseFunction::apply(input, weight, bias, stride, padding, dilation);
}

}  // namespace

CONVPERF_TORCH_LIBRARY(m) {
  m.def("forward(Tensor input, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, int[2] dilation) "
        "-> Tensor");
  m.def("input_grad(Tensor grad_output, Tensor weight, int[2] input_hw, int[2] stride, int[2] padding, "
        "int[2] dilation) -> Tensor");
  m.def("weight_grad(Tensor grad_output, Tensor input, int[2] kernel_hw, int[2] stride, int[2] padding, "
        "int[2] dilation) -> Tensor");
  m.def("weight_bias_grad(Tensor grad_output, Tensor input, int[2] kernel_hw, int[2] stride, int[2] padding, "
        "int[2] dilation) -> (Tensor, Tensor)");
}

CONVPERF_TORCH_LIBRARY_IMPL(CUDA, m) {
  m.impl("forward", &forward_cuda);
  m.impl("input_grad", &input_grad_cuda);
  m.impl("weight_grad", &weight_grad_cuda);
  m.impl("weight_bias_grad", &weight_bias_grad_cuda);
}

CONVPERF_TORCH_LIBRARY_IMPL(Autograd, m) { m.impl("forward", &forward_autograd); }
