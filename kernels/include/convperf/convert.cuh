// Device helpers shared by the kernel families: fp32 <-> storage type conversions and the dtype
// dispatch of a launcher. Include from .cu files only (binding.cpp takes dtype.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "convperf/dtype.h"

namespace convperf {

// Load as fp32 (every family accumulates in fp32); integer types convert exactly.
template <typename T>
__device__ __forceinline__ float to_f(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_f<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Store an fp32 result in the storage type, round to nearest even.
template <typename T>
__device__ __forceinline__ T from_f(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Runs f(TypeTag<T>{}) with T the storage type of a floating dtype (fp32, fp16, bf16): a launcher
// writes its typed body once as a generic lambda. Any other code is cudaErrorInvalidValue.
template <typename F>
cudaError_t dispatch_float(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32: return f(TypeTag<float>{});
    case DType::F16: return f(TypeTag<__half>{});
    case DType::BF16: return f(TypeTag<__nv_bfloat16>{});
    default: return cudaErrorInvalidValue;
  }
}

// dispatch_float, plus int8 (T = int8_t).
template <typename F>
cudaError_t dispatch_float_or_i8(DType dtype, F&& f) {
  if (dtype == DType::I8) return f(TypeTag<int8_t>{});
  return dispatch_float(dtype, static_cast<F&&>(f));
}

}  // namespace convperf
