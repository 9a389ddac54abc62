// Source of tests/kernels/data/tiny_sm90.sass (nvcc 13.0 -O3 -arch=sm_90 -cubin; cuobjdump -sass).
__global__ void divloop(const float4* __restrict__ x, float* __restrict__ y, int n, int d) {
#pragma unroll 1
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i / d].x + x[i / d].w;
}
__global__ void plain(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = threadIdx.x;
  if (i < n) y[i] = fmaf(x[i], 2.f, 1.f);
}
