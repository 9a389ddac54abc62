"""Run the real kernel ``.cu`` files on the CPU: a thread-per-CUDA-thread emulation for tests.

A family's source is compiled with g++ after a few textual rewrites (``<<<...>>>`` launches, ``__shared__``
declarations) behind a shim that provides ``threadIdx``/``blockIdx`` (thread-locals), ``__syncthreads`` (a
``std::barrier`` over the block's threads), warp shuffles/votes/``__syncwarp`` (a barrier and exchange buffer
per warp of 32 consecutive linear thread ids, so only the warp synchronises), atomics (``std::atomic_ref``),
``__ldg`` and the ``__f*_rn`` intrinsics. Blocks run one after another; each block's threads are real OS
threads running concurrently, with the barriers as their only happens-before edges.

Memory is laid out so the sanitizers see what compute-sanitizer would: every device buffer is its own
exactly-sized allocation (in the sanitized executable), every ``__shared__`` array and the dynamic shared
memory of a launch is an exactly-sized heap allocation per block, filled with 0xff (garbage, like real
shared memory). ``#line`` keeps the ``.cu`` file and line in every compiler and sanitizer message.

Two ways to run an entry point (``extern "C" int entry(void* const* buf, const int64_t* iv, const double*
fv)``, one set per family in ``WRAPPERS``):

- in-process through ctypes on CPU tensors (fast; for property tests against the oracles);
- ``sanitizer="asan"`` (AddressSanitizer + UndefinedBehaviorSanitizer) or ``"tsan"`` (ThreadSanitizer): a
  separate executable reads the buffers from files into exactly-sized allocations, runs the entry and
  writes them back; a sanitizer report raises :class:`SanitizerError` naming the kernel and ``.cu`` line.

Limits (what this cannot check or run): speed, coalescing, bank conflicts, occupancy, register spills and
nvcc's code generation; warps do not run in lockstep (implicit warp-synchronous code without
``__syncwarp``/``*_sync`` is reported as a race, which it is since Volta); shuffles and votes need the full
mask of the warp's live lanes (a partial mask aborts); ``__syncthreads`` reached by only part of a block
deadlocks (it is undefined on a GPU too); ``__constant__`` memory, textures, cooperative groups,
clusters, streams/events, ``cudaMalloc`` inside a launcher, tensor-core/``asm`` code and fp16 arithmetic
intrinsics beyond conversions are not emulated, and a multi-dimensional ``__shared__`` array is refused by
the rewrite with an error; ``__shared__`` declarations must precede the kernel's first shared-memory
access (the per-block allocation takes a mutex, which ThreadSanitizer counts as synchronisation); a
kernel launched with more threads per block than the host can run at once is slow (one OS thread each).
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from kernels import _build

KERNEL = _build.KERNELS_ROOT / "depthwise" / "depthwise.cu"

SHIM = r"""
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <random>
#include <thread>
#include <vector>
#include <cuda_runtime.h>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
using std::min;
using std::max;
namespace emu {
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "CUDA emulator: %s\n", what);
  std::abort();
}
struct Warp {
  explicit Warp(unsigned n) : lanes(n), bar(n) {}
  unsigned lanes;
  std::barrier<> bar;
  alignas(16) unsigned char buf[32][16];
};
struct Block {
  std::mutex mu;
  std::map<int, std::pair<void*, size_t>> arrays;  // static __shared__ arrays by declaration
  void* dynamic = nullptr;
  size_t dynamic_bytes = 0;
  std::vector<std::unique_ptr<Warp>> warps;
};
thread_local uint3 tid;
thread_local unsigned linear;
uint3 bid;
dim3 bdim, gdim;
long launch_count = 0;  // kernel launches since the library was loaded (emu_launches)
const char* last_kernel = "";  // the source name of the latest launch's kernel (emu_last_kernel)
uint64_t order_seed = 0;  // nonzero: each launch runs its blocks in a seeded random order (emu_block_order)
Block* block = nullptr;
std::barrier<>* block_barrier = nullptr;
// Exactly sized and 16-byte aligned (float4 shared arrays), filled with garbage: ASan sees the end.
inline void* alloc(size_t bytes) {
  void* p = ::operator new(bytes, std::align_val_t(16));
  std::memset(p, 0xff, bytes);
  return p;
}
inline void release(void* p) { ::operator delete(p, std::align_val_t(16)); }
template <typename T>
T* shared_array(int id, size_t count) {
  std::lock_guard<std::mutex> lock(block->mu);
  auto& slot = block->arrays[id];
  if (slot.first == nullptr) slot = {alloc(count * sizeof(T)), count * sizeof(T)};
  return static_cast<T*>(slot.first);
}
inline void* dynamic_shared() { return block->dynamic; }
inline void sync() { block_barrier->arrive_and_wait(); }
inline Warp& warp() { return *block->warps[linear / 32]; }
inline unsigned lane() { return linear % 32; }
inline void check_mask(unsigned mask, const Warp& w) {
  const unsigned full = w.lanes == 32 ? 0xffffffffu : (1u << w.lanes) - 1u;
  if (mask != full) fail("warp intrinsic with a mask other than all live lanes of the warp (unsupported)");
}
// Every lane publishes v, then reads lane src's value (its own when src is out of range).
template <typename T>
T exchange(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 16, "emulator: shuffle of a type wider than 16 bytes");
  Warp& w = warp();
  check_mask(mask, w);
  std::memcpy(w.buf[lane()], &v, sizeof(T));
  w.bar.arrive_and_wait();
  T out = v;
  if (src >= 0 && unsigned(src) < w.lanes) std::memcpy(&out, w.buf[src], sizeof(T));
  w.bar.arrive_and_wait();
  return out;
}
inline unsigned ballot(unsigned mask, bool pred) {
  Warp& w = warp();
  check_mask(mask, w);
  w.buf[lane()][0] = pred ? 1 : 0;
  w.bar.arrive_and_wait();
  unsigned out = 0;
  for (unsigned l = 0; l < w.lanes; ++l) out |= unsigned(w.buf[l][0]) << l;
  w.bar.arrive_and_wait();
  return out;
}
template <typename F>
void launch(dim3 grid, dim3 block_dim, size_t smem, const char* name, F&& body) {
  last_kernel = name;
  const unsigned nt = block_dim.x * block_dim.y * block_dim.z;
  if (nt == 0 || nt > 1024) fail("launch with 0 or more than 1024 threads per block");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) fail("launch with an empty grid");
  if (grid.y > 65535 || grid.z > 65535) fail("gridDim.y/z above 65535");
  gdim = grid;
  bdim = block_dim;
  ++launch_count;
  // Blocks run one at a time, in index order unless order_seed asks for a shuffled one: a result that
  // depends on the order blocks finish in (atomics, "last block" logic) changes with the seed.
  const uint64_t nblocks = uint64_t(grid.x) * grid.y * grid.z;
  std::vector<uint64_t> order(nblocks);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (order_seed != 0) std::shuffle(order.begin(), order.end(), std::mt19937_64(order_seed + launch_count));
  for (const uint64_t lin : order) {
        const unsigned x = unsigned(lin % grid.x), y = unsigned(lin / grid.x % grid.y),
                       z = unsigned(lin / grid.x / grid.y);
        bid = uint3{x, y, z};
        Block b;
        b.dynamic = alloc(smem);
        b.dynamic_bytes = smem;
        for (unsigned w0 = 0; w0 < nt; w0 += 32) b.warps.emplace_back(new Warp(std::min(32u, nt - w0)));
        std::barrier<> bar(nt);
        block = &b;
        block_barrier = &bar;
        std::vector<std::thread> threads;
        threads.reserve(nt);
        for (unsigned t = 0; t < nt; ++t)
          threads.emplace_back([&, t] {
            linear = t;
            tid = uint3{t % block_dim.x, (t / block_dim.x) % block_dim.y, t / (block_dim.x * block_dim.y)};
            body();
            // A finished thread no longer holds the others at a barrier.
            b.warps[t / 32]->bar.arrive_and_drop();
            bar.arrive_and_drop();
          });
        for (auto& th : threads) th.join();
        release(b.dynamic);
        for (auto& kv : b.arrays) release(kv.second.first);
  }
}
}  // namespace emu
#define threadIdx (emu::tid)
#define blockIdx (emu::bid)
#define blockDim (emu::bdim)
#define gridDim (emu::gdim)
#define warpSize 32
inline void __syncthreads() { emu::sync(); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  emu::check_mask(mask, emu::warp());
  emu::warp().bar.arrive_and_wait();
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return emu::exchange(mask, v, int(emu::lane() / width * width + unsigned(src) % width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  const unsigned l = emu::lane();
  return emu::exchange(mask, v, int(l % width + d < unsigned(width) ? l + d : l));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  const unsigned l = emu::lane();
  return emu::exchange(mask, v, int(l % width >= d ? l - d : l));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
  const unsigned l = emu::lane(), s = l ^ unsigned(m);
  return emu::exchange(mask, v, int(s / width == l / width ? s : l));
}
inline unsigned __ballot_sync(unsigned mask, int p) { return emu::ballot(mask, p != 0); }
inline int __any_sync(unsigned mask, int p) { return emu::ballot(mask, p != 0) != 0; }
inline int __all_sync(unsigned mask, int p) { return emu::ballot(mask, p != 0) == mask; }
template <typename T>
T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
template <typename T>
T atomicSub(T* p, T v) { return std::atomic_ref<T>(*p).fetch_sub(v); }
template <typename T>
T atomicExch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v); }
template <typename T>
T atomicCAS(T* p, T cmp, T v) {
  std::atomic_ref<T>(*p).compare_exchange_strong(cmp, v);
  return cmp;
}
namespace emu {
template <typename T, typename Better>
T atomic_update(T* p, T v, Better better) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (better(v, old) && !a.compare_exchange_weak(old, v)) {}
  return old;
}
}  // namespace emu
template <typename T>
T atomicMax(T* p, T v) { return emu::atomic_update(p, v, [](T a, T b) { return b < a; }); }
template <typename T>
T atomicMin(T* p, T v) { return emu::atomic_update(p, v, [](T a, T b) { return a < b; }); }
template <typename T>
inline T __ldg(const T* p) { return *p; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
// A macro, not a definition of the real symbol: torch's libcudart, already loaded, would win.
inline cudaError_t emu_get_last_error() { return cudaSuccess; }
#define cudaGetLastError emu_get_last_error
"""

# The executable of a sanitized build: argv[1] is a folder holding call.txt (entry name; buffer sizes,
# -1 for a null pointer; int64 arguments; double arguments) and b<i>.bin; each buffer gets its own
# exactly-sized allocation, and is written back after the call. rc.txt holds the entry's return value.
MAIN = r"""
#include <fstream>
#include <sstream>
#include <string>
namespace {
using Entry = int (*)(void* const*, const int64_t*, const double*);
std::vector<int64_t> ints_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<int64_t> v;
  for (int64_t x; in >> x;) v.push_back(x);
  return v;
}
}  // namespace
int main(int argc, char** argv) {
  if (argc != 2) emu::fail("usage: emu <call folder>");
  const std::string dir = argv[1];
  std::ifstream call(dir + "/call.txt");
  std::string name, sizes_line, ints_line, floats_line;
  std::getline(call, name);
  std::getline(call, sizes_line);
  std::getline(call, ints_line);
  std::getline(call, floats_line);
  Entry entry = nullptr;
  for (const auto& e : kEntries)
    if (name == e.first) entry = e.second;
  if (entry == nullptr) emu::fail("unknown entry point");
  const std::vector<int64_t> sizes = ints_of(sizes_line), iv = ints_of(ints_line);
  std::vector<double> fv;
  std::istringstream fin(floats_line);
  for (double x; fin >> x;) fv.push_back(x);
  std::vector<void*> bufs(sizes.size(), nullptr);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) continue;
    bufs[i] = new unsigned char[size_t(sizes[i])];  // its own allocation: ASan sees both ends
    std::ifstream in(dir + "/b" + std::to_string(i) + ".bin", std::ios::binary);
    in.read(static_cast<char*>(bufs[i]), sizes[i]);
  }
  const int rc = entry(bufs.data(), iv.data(), fv.data());
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) continue;
    std::ofstream out(dir + "/b" + std::to_string(i) + ".bin", std::ios::binary);
    out.write(static_cast<const char*>(bufs[i]), sizes[i]);
    delete[] static_cast<unsigned char*>(bufs[i]);
  }
  std::ofstream(dir + "/rc.txt") << rc << "\n";
  return 0;
}
"""

_DW_GEOM = r"""
convperf_dw::Geom dw_geom(const int64_t* v) {
  convperf_dw::Geom g{};
  g.n = v[0]; g.c = v[1];
  g.h = int(v[2]); g.w = int(v[3]); g.ho = int(v[4]); g.wo = int(v[5]);
  g.kh = int(v[6]); g.kw = int(v[7]); g.sh = int(v[8]); g.sw = int(v[9]);
  g.ph = int(v[10]); g.pw = int(v[11]); g.dh = int(v[12]); g.dw = int(v[13]);
  return g;
}
"""

# Per family: C entry points with one signature (buffers, int64 args, double args); see each family's
# driver in tests/kernels/emulated_families.py for the argument order.
WRAPPERS: dict[str, str] = {
    "depthwise": "namespace {"
    + _DW_GEOM
    + r"""}  // namespace
using convperf_dw::DType;
extern "C" int dw_forward(void* const* b, const int64_t* i, const double*) {
  const convperf_dw::Geom g = dw_geom(i + 3);
  return int(convperf_dw::launch_forward(DType(i[0]), b[0], b[1], b[2], b[3], g, i[1] != 0, nullptr,
                                         convperf_dw::Variant(i[2])));
}
extern "C" int dw_input_grad(void* const* b, const int64_t* i, const double*) {
  const convperf_dw::Geom g = dw_geom(i + 3);
  return int(convperf_dw::launch_input_grad(DType(i[0]), b[0], b[1], b[2], g, i[1] != 0, nullptr,
                                            convperf_dw::Variant(i[2])));
}
// The v2 tile plan of a forward (aligned input) into b[0] (8 int32): tw, trows, pl, tiles_w, tiles_h,
// in_rows, in_cols, stage mode; 1 when no tile fits.
extern "C" int dw_plan_v2(void* const* b, const int64_t* i, const double*) {
  const convperf_dw::Geom g = dw_geom(i);
  convperf_dw::TileArgs t{};
  t.planes = g.n * g.c; t.c = int(g.c); t.h = g.h; t.w = g.w; t.ho = g.ho; t.wo = g.wo;
  t.ph = g.ph; t.pw = g.pw;
  convperf_dw::Tile2Args a = convperf_dw::tile2_args(t);
  if (!convperf_dw::plan_tile_v2(a, g.kh, g.sh)) return 1;
  const int mode = convperf_dw::choose_stage_mode(a, g.sh, true);
  const int v[8] = {a.tw, a.trows, a.pl, a.tiles_w, a.tiles_h, a.in_rows, a.in_cols, mode};
  std::memcpy(b[0], v, sizeof(v));
  return 0;
}
// The SMs the v4 planner sizes grids for (i[0]; 0: the default 132).
extern "C" int dw_set_plan_sms(void* const*, const int64_t* i, const double*) {
  convperf_dw::set_v4_plan_sms(int(i[0]));
  return 0;
}
// The v4 tile plan of a forward into b[0] (9 int32): u, tpr, trows, pl, tiles_h, in_rows, sw, threads,
// blocks; 1 when no plan.
extern "C" int dw_plan_v4(void* const* b, const int64_t* i, const double*) {
  const convperf_dw::Geom g = dw_geom(i);
  convperf_dw::TileArgs t{};
  t.planes = g.n * g.c; t.c = int(g.c); t.h = g.h; t.w = g.w; t.ho = g.ho; t.wo = g.wo;
  t.ph = g.ph; t.pw = g.pw;
  convperf_dw::Tile4Args a{};
  a.planes = int(t.planes); a.c = t.c; convperf_dw::set_tile_sizes(a, t);
  if (!convperf_dw::plan_tile_v4(a, g.kh, g.sh)) return 1;
  const int v[9] = {a.u, a.tpr, a.trows, a.pl, a.tiles_h, a.in_rows, a.sw, a.threads,
                    int(convperf_dw::v4_blocks(a))};
  std::memcpy(b[0], v, sizeof(v));
  return 0;
}
// The v3 NHWC kernel with a forced strip height (ints: dtype, strip 2|8, flip, geometry; buffers: x, w,
// bias, y as dw_forward): 1 where it does not take the geometry (k not 3/5/7, C % vector width, stride).
extern "C" int dw_forward_nhwc_vec(void* const* b, const int64_t* i, const double*) {
  const convperf_dw::Geom g = dw_geom(i + 3);
  convperf_dw::TileArgs t{};
  t.planes = g.n * g.c; t.c = int(g.c); t.h = g.h; t.w = g.w; t.ho = g.ho; t.wo = g.wo;
  t.ph = g.ph; t.pw = g.pw; t.flip = i[2] != 0;
  if (g.kh != g.kw || g.sh != g.sw || (g.sh != 1 && g.sh != 2)) return 1;
  return int(convperf::dispatch_float(DType(i[0]), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(b[0]);
    T* y = static_cast<T*>(b[3]);
    return convperf_dw::dispatch_ks(g.kh, g.sh, [&](auto K, auto S) -> cudaError_t {
      constexpr int kk = decltype(K)::value, ss = decltype(S)::value;
      if constexpr (kk >= 3) {
        if (!convperf_dw::nhwc_vec_supported(kk, x, y, t)) return cudaErrorInvalidValue;
        const T* w = static_cast<const T*>(b[1]);
        const T* bias = static_cast<const T*>(b[2]);
        return convperf_dw::run_nhwc_vec<T, kk, ss>(x, w, bias, y, t, nullptr, int(i[1]));
      } else {
        return cudaErrorInvalidValue;
      }
    });
  }));
}
// The v3 NHWC kernel's launch plan of a forward (ints: dtype, geometry) into b[0] (2 int32): channel
// vectors per block, strip height.
extern "C" int dw_nhwc_vec_plan(void* const* b, const int64_t* i, const double*) {
  const convperf_dw::Geom g = dw_geom(i + 1);
  const int vw = DType(i[0]) == DType::F32 ? 4 : 8;
  const int strip = convperf_dw::kNhwcVecStrip;
  const int64_t positions = int64_t((g.ho + strip - 1) / strip) * g.wo;
  const int ct_max = convperf_dw::nhwc_vec_ct_max(g.kh, 16 / vw);
  const int v[2] = {convperf_dw::nhwc_vec_ct(int(g.c) / vw, positions, ct_max), strip};
  std::memcpy(b[0], v, sizeof(v));
  return 0;
}
// ints: dtype, channels_last, SMs, WgradVariant, geometry; buffers: dy, x, dw, db (null: no bias grad).
// The workspace is fresh (NaN partials, zero counters) per call, as the binding's cache holds it; a W2
// call must leave every counter at zero (else 1000), so the next call on a cached one starts clean.
extern "C" int dw_weight_grad(void* const* b, const int64_t* i, const double*) {
  const convperf_dw::Geom g = dw_geom(i + 4);
  const auto v = convperf_dw::WgradVariant(i[3]);
  const convperf_dw::WgradPlan plan = convperf_dw::weight_grad_plan(g, i[1] != 0, int(i[2]), v, DType(i[0]));
  std::vector<float> ws(size_t(plan.floats), std::nanf(""));
  std::vector<unsigned> counters(size_t(plan.counters), 0u);
  const int err = int(convperf_dw::launch_weight_grad(DType(i[0]), b[0], b[1], b[2], b[3],
                                                      ws.empty() ? nullptr : ws.data(),
                                                      counters.empty() ? nullptr : counters.data(), plan, g,
                                                      i[1] != 0, nullptr, v));
  for (const unsigned c : counters)
    if (c != 0) return 1000;
  return err;
}
// The plan of a weight-grad call into b[0] (3 int64): splits, workspace floats, counters (ints:
// channels_last, SMs, WgradVariant, geometry, dtype).
extern "C" int dw_wgrad_plan(void* const* b, const int64_t* i, const double*) {
  const convperf_dw::Geom g = dw_geom(i + 3);
  const auto p = convperf_dw::weight_grad_plan(g, i[0] != 0, int(i[1]), convperf_dw::WgradVariant(i[2]),
                                               DType(i[17]));
  const int64_t v[3] = {p.splits, p.floats, p.counters};
  std::memcpy(b[0], v, sizeof(v));
  return 0;
}
// Emulator controls (in-process runs): kernel launches so far; the block order of later launches.
extern "C" int emu_launches(void* const*, const int64_t*, const double*) { return int(emu::launch_count); }
extern "C" int emu_last_kernel(void* const* b, const int64_t* i, const double*) {  // into b[0], i[0] bytes
  std::snprintf(static_cast<char*>(b[0]), size_t(i[0]), "%s", emu::last_kernel);
  return 0;
}
extern "C" int emu_block_order(void* const*, const int64_t* i, const double*) {
  emu::order_seed = uint64_t(i[0]);
  return 0;
}
""",
    "im2col_gemm": r"""
extern "C" int im2col(void* const* b, const int64_t* i, const double*) {
  return int(launch_im2col(int(i[0]), b[0], b[1], int(i[1]), int(i[2]), int(i[3]), int(i[4]), int(i[5]),
                           int(i[6]), int(i[7]), int(i[8]), int(i[9]), int(i[10]), int(i[11]), int(i[12]),
                           int(i[13]), int(i[14]), int(i[15]), i[16], i[17], i[18], i[19] != 0, nullptr));
}
extern "C" int col2im(void* const* b, const int64_t* i, const double*) {
  return int(launch_col2im(int(i[0]), b[0], b[1], int(i[1]), int(i[2]), int(i[3]), int(i[4]), int(i[5]),
                           int(i[6]), int(i[7]), int(i[8]), int(i[9]), int(i[10]), int(i[11]), int(i[12]),
                           int(i[13]), int(i[14]), int(i[15]), int(i[16]), int(i[17]), i[18], i[19], i[20],
                           nullptr));
}
""",
    "pcilt": r"""
extern "C" int quantize_pack(void* const* b, const int64_t* i, const double* f) {
  return int(launch_quantize_pack(static_cast<const float*>(b[0]), static_cast<uint32_t*>(b[1]), i[0],
                                  int(i[1]), int(i[2]), float(f[0]), int(i[3]), nullptr));
}
#define EMU_LUT_GEOM int(i[1]), int(i[2]), int(i[3]), int(i[4]), int(i[5]), int(i[6]), int(i[7]), int(i[8]), \
  int(i[9]), int(i[10]), int(i[11]), int(i[12]), int(i[13]), int(i[14]), int(i[15]), int(i[16]), int(i[17]), \
  int(i[18])
extern "C" int lut_plan(void* const*, const int64_t* i, const double*) {
  return lut_conv_plan(i[0] != 0, EMU_LUT_GEOM, int(i[19]));
}
extern "C" int lut_conv(void* const* b, const int64_t* i, const double* f) {
  return int(launch_lut_conv(static_cast<const uint32_t*>(b[0]), b[1], b[2], i[0] != 0, EMU_LUT_GEOM,
                             int(i[19]), i[20] != 0, float(f[0]), static_cast<const float*>(b[3]), nullptr));
}
""",
    "edsr": r"""
extern "C" int sep_conv(void* const* b, const int64_t* i, const double* f) {
  auto p = [&](int k) { return static_cast<float*>(b[k]); };
  return int(convperf_edsr::launch_sep_conv_fwd_fp32(p(0), p(1), p(2), p(3), p(4), p(5), p(6), int(i[0]),
                                                     int(i[1]), int(i[2]), int(i[3]), float(f[0]), i[4] != 0,
                                                     int(i[5]), nullptr));
}
""",
    "_controls": r"""
extern "C" int control(void* const* b, const int64_t* i, const double*) {
  const int64_t* v = i + 3;
  convperf_controls::Geom g{};
  g.n = v[0]; g.c = v[1];
  g.h = int(v[2]); g.w = int(v[3]); g.ho = int(v[4]); g.wo = int(v[5]);
  g.kh = int(v[6]); g.kw = int(v[7]); g.sh = int(v[8]); g.sw = int(v[9]);
  g.ph = int(v[10]); g.pw = int(v[11]); g.dh = int(v[12]); g.dw = int(v[13]);
  return int(convperf_controls::launch_control(convperf_controls::Mode(i[0]), convperf_controls::DType(i[1]),
                                               b[0], b[1], b[2], b[3], g, i[2], nullptr));
}
""",
}

SANITIZERS = ("asan", "tsan")
# -O0: a third of -O1's compile time (the sanitized builds dominate the cold CI cost) and the small cases
# run fast enough; -g1: line tables, all the reports need.
_FLAGS = {
    None: ["-O1", "-shared", "-fPIC"],
    "asan": [
        "-O0",
        "-g1",
        "-fno-omit-frame-pointer",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
    ],
    "tsan": ["-O0", "-g1", "-fsanitize=thread"],
}
# Sanitizer reports end the run with a recognisable exit code; UBSan prints the stack it stopped at.
_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=86",
    "TSAN_OPTIONS": "halt_on_error=1:exitcode=86:report_signal_unsafe=0",
}

_LAUNCH = re.compile(r"([\w:]+(?:<[^<>;]*>)?)\s*<<<(.*?)>>>\((.*?)\);", re.S)
_ALIGN = r"(?:__align__\(\s*\d+\s*\)\s+)?"
_TYPE = r"((?:unsigned\s+|signed\s+|const\s+)*[\w:]+)"
_EXTERN_SHARED = re.compile(rf"extern\s+__shared__\s+{_ALIGN}{_TYPE}\s+{_ALIGN}(\w+)\s*\[\s*\]\s*;")
_SHARED = re.compile(rf"__shared__\s+{_ALIGN}{_TYPE}\s+{_ALIGN}(\w+)\s*\[([^\]]+)\]\s*;")
# __launch_bounds__'s arguments may hold one level of parentheses (v3_min_blocks<...>(), v4_min_blocks(K, U)).
_KERNEL_NAME = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(")


def family_source(family: str) -> Path:
    """The one ``.cu`` of a family (every family has exactly one today)."""
    sources = sorted((_build.KERNELS_ROOT / family).glob("*.cu"))
    if len(sources) != 1:
        raise RuntimeError(f"emulator: expected one .cu in kernels/{family}, found {len(sources)}")
    return sources[0]


def kernel_names(text: str) -> list[str]:
    """The ``__global__`` kernels a source defines (the names a sanitizer failure is attributed to)."""
    return _KERNEL_NAME.findall(text)


def _header(cu: Path, name: str) -> Path:
    """Where nvcc finds ``#include "name"`` of ``cu``: beside it, else in the shared include folder."""
    local = cu.parent / name
    return local if local.exists() else _build.SHARED_INCLUDE / name


def _headers_text(cu: Path) -> str:
    """Every header a family's source can include (its own and the shared ones): part of the build hash,
    so a header edit rebuilds the emulation."""
    files = sorted(cu.parent.glob("*.cuh")) + sorted(
        p for p in _build.SHARED_INCLUDE.rglob("*") if p.is_file()
    )
    return "".join(f.read_text() for f in files)


def emulated_source(cu: Path = KERNEL, wrappers: str | None = None, text: str | None = None) -> str:
    """``cu`` (or its mutated ``text``) rewritten for the host compiler, with the shim and C wrappers.

    Line numbers are kept (``#line``), so the compiler and the sanitizers point into the ``.cu``.
    """
    text = cu.read_text() if text is None else text
    text = re.sub(r'#include "([^"]+)"', lambda m: f'#include "{_header(cu, m.group(1))}"', text)
    text = _EXTERN_SHARED.sub(r"\1* const \2 = reinterpret_cast<\1*>(emu::dynamic_shared());", text)
    slots = iter(range(1 << 30))
    text = _SHARED.sub(
        lambda m: (
            f"{m.group(1)}* const {m.group(2)} = emu::shared_array<{m.group(1)}>"
            f"({next(slots)}, size_t({m.group(3)}));"
        ),
        text,
    )
    if "__shared__" in text:
        raise RuntimeError("emulator: a __shared__ declaration it cannot rewrite (see its docstring)")

    def launch(m: re.Match[str]) -> str:
        cfg = [p.strip() for p in m.group(2).split(",")]
        smem = cfg[2] if len(cfg) > 2 else "0"
        newlines = "\n" * m.group(0).count("\n")  # keep the .cu's line numbers below
        return (
            f'emu::launch(dim3({cfg[0]}), dim3({cfg[1]}), {smem}, "{m.group(1)}", '
            f"[&] {{ {m.group(1)}({m.group(3)}); }});" + newlines
        )

    text, count = _LAUNCH.subn(launch, text)
    if count == 0 or "<<<" in text:
        raise RuntimeError("emulator: could not rewrite every kernel launch")
    family = cu.parent.name
    glue = WRAPPERS[family] if wrappers is None else wrappers
    return SHIM + f'#line 1 "{cu}"\n' + text + '\n#line 1 "emulator-wrappers"\n' + glue


def _entries(glue: str) -> list[str]:
    return re.findall(r'extern "C" int (\w+)\(', glue)


def build(out_dir: Path, family: str = "depthwise", sanitizer: str | None = None,
          text: str | None = None) -> Path:  # fmt: skip
    """Compile the emulated family into ``out_dir`` (cached by source hash); the library or executable.

    ``text`` replaces the ``.cu`` source (a mutated kernel for the sanitizer controls).
    """
    if sanitizer not in (None, *SANITIZERS):
        raise ValueError(f"sanitizer={sanitizer!r} must be None or one of {SANITIZERS}")
    cxx = shutil.which("g++") or shutil.which("c++")
    home = _build.cuda_home()
    if cxx is None or home is None or not (home / "include" / "cuda_fp16.h").exists():
        raise FileNotFoundError("the CUDA emulation needs g++ and the CUDA headers (CUDA_HOME/include)")
    cu = family_source(family)
    source = emulated_source(cu, text=text)
    if sanitizer is not None:
        table = ", ".join(f'{{"{e}", &{e}}}' for e in _entries(WRAPPERS[family]))
        source += (
            "\nstatic const std::pair<const char*, int (*)(void* const*, const int64_t*, const double*)> "
        )
        source += f"kEntries[] = {{{table}}};\n" + MAIN
    flags = _FLAGS[sanitizer]
    digest = hashlib.sha256((source + _headers_text(cu) + " ".join(flags)).encode()).hexdigest()[:16]
    out = out_dir / f"{family.strip('_')}_{sanitizer or 'plain'}_{digest}{'.so' if sanitizer is None else ''}"
    if not out.exists():
        src = out_dir / f"{out.name}.cpp"
        src.write_text(source)
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        cmd = [
            cxx,
            "-std=c++20",
            "-pthread",
            "-w",
            *flags,
            "-I",
            str(home / "include"),
            "-I",
            str(_build.SHARED_INCLUDE),
            str(src),
            "-o",
            str(tmp),
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"emulator build failed:\n{res.stderr[-4000:]}\n{' '.join(cmd)}")
        tmp.replace(out)  # atomic: a concurrent worker never loads a half-written file
    return out


class SanitizerError(AssertionError):
    """A sanitizer report from an emulated kernel; the message names the kernel and the ``.cu`` line."""


_FRAME = re.compile(r"#\d+\s+(?:0x[0-9a-f]+\s+in\s+)?(.+?)\s+(/\S+?\.cu):(\d+)")
_ERROR = re.compile(r"(AddressSanitizer|ThreadSanitizer|runtime error)[: ]+([^\n]*)")


def describe_report(report: str, kernels: Sequence[str]) -> str:
    """One line for a sanitizer report: what, in which ``__global__`` kernel, at which ``.cu`` lines."""
    err = _ERROR.search(report)
    what = f"{err.group(1)}: {err.group(2).strip()}" if err else "sanitizer report"
    frames = _FRAME.findall(report)
    sites = list(dict.fromkeys(f"{Path(f).parent.name}/{Path(f).name}:{line}" for _, f, line in frames))
    kernel = next((k for fn, _, _ in frames for k in kernels if re.search(rf"\b{k}\b", fn)), "?")
    ub = re.search(r"(/\S+?\.cu):(\d+):\d+: runtime error", report)
    if ub and not sites:
        sites = [f"{Path(ub.group(1)).parent.name}/{Path(ub.group(1)).name}:{ub.group(2)}"]
    return f"{what} in kernel {kernel} at {', '.join(sites) or '?'}"


@dataclasses.dataclass
class Emulation:
    """One built family: ``call(entry, buffers, ints, floats)`` runs an entry point on CPU tensors.

    Buffers are dense CPU tensors (any memory format) or None; outputs are written in place.
    """

    family: str
    path: Path
    sanitizer: str | None
    kernels: list[str]

    def __post_init__(self) -> None:
        self._lib = ctypes.CDLL(str(self.path)) if self.sanitizer is None else None

    def call(self, entry: str, buffers: Sequence[torch.Tensor | None], ints: Sequence[int],
             floats: Sequence[float] = ()) -> int:  # fmt: skip
        for b in buffers:
            if b is not None and not (b.device.type == "cpu" and _dense(b)):
                raise ValueError(f"{entry}: buffers must be dense CPU tensors")
        iv = (ctypes.c_int64 * max(1, len(ints)))(*ints)
        fv = (ctypes.c_double * max(1, len(floats)))(*floats)
        if self._lib is not None:
            ptrs = (ctypes.c_void_p * max(1, len(buffers)))(
                *[None if b is None else b.data_ptr() for b in buffers]
            )
            fn: Callable[..., int] = getattr(self._lib, entry)
            return int(fn(ptrs, iv, fv))
        return self._run_sanitized(entry, buffers, ints, floats)

    def _run_sanitized(self, entry: str, buffers: Sequence[torch.Tensor | None], ints: Sequence[int],
                       floats: Sequence[float]) -> int:  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="convperf-emu-") as tmp:
            d = Path(tmp)
            raws = [None if b is None else _raw_bytes(b) for b in buffers]
            for i, raw in enumerate(raws):
                if raw is not None:
                    raw.numpy().tofile(d / f"b{i}.bin")
            sizes = " ".join(str(-1 if r is None else r.numel()) for r in raws)
            (d / "call.txt").write_text(
                f"{entry}\n{sizes}\n{' '.join(map(str, ints))}\n{' '.join(repr(float(f)) for f in floats)}\n"
            )
            res = subprocess.run([str(self.path), str(d)], capture_output=True, text=True, check=False,
                                 env={**os.environ, **_ENV}, timeout=600)  # fmt: skip
            if res.returncode != 0:
                summary = describe_report(res.stderr, self.kernels)
                raise SanitizerError(f"{self.sanitizer} run of {self.family}/{entry} failed: {summary}\n"
                                     f"{res.stderr[-6000:]}")  # fmt: skip
            for i, raw in enumerate(raws):
                if raw is not None and raw.numel():
                    raw.copy_(torch.from_file(str(d / f"b{i}.bin"), size=raw.numel(), dtype=torch.uint8))
            return int((d / "rc.txt").read_text())


def _dense(t: torch.Tensor) -> bool:
    return t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last))


def _raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a dense tensor's memory, as a uint8 view (writes go to the tensor)."""
    es = t.element_size()
    return torch.empty(0, dtype=torch.uint8).set_(
        t.untyped_storage(), t.storage_offset() * es, (t.numel() * es,), (1,)
    )


def emulation(family: str, sanitizer: str | None = None, text: str | None = None) -> Emulation:
    """Build (or reuse) and open a family's emulation; ``text`` is a mutated ``.cu`` source."""
    out = _build.extensions_root() / "convperf_cuda_emulation"
    out.mkdir(parents=True, exist_ok=True)
    path = build(out, family, sanitizer, text)
    src = family_source(family).read_text() if text is None else text
    return Emulation(family, path, sanitizer, kernel_names(src))


DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def geometry(x_shape: tuple[int, ...], k: tuple[int, int], s: tuple[int, int], p: tuple[int, int],
             d: tuple[int, int]) -> list[int]:  # fmt: skip
    n, c, h, w = x_shape
    ho = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    wo = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    return [n, c, h, w, ho, wo, k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]]


# The kernel variants ``depthwise.cuh`` names (``Variant``): the NCHW tiled forward / input grad, and
# with v3 and v4 the NHWC vector kernel (``fwd_nhwc_vec``) where it applies.
VARIANTS = {"v1": 1, "v2": 2, "v3": 3, "v4": 4}
# The weight-grad variants (``WgradVariant``): w1 (two launches, the caller sums the bias), w2 (one),
# w3 (w2 with channels_last k 3/5/7 on ``wgrad_nhwc_vec``; the default).
WGRAD_VARIANTS = {"w1": 1, "w2": 2, "w3": 3}


class EmulatedDepthwise:
    """The three host entry points of depthwise.cu, run on CPU tensors through the emulator, with the
    NCHW tiled kernels of ``variant`` (see ``VARIANTS``) and the weight grad of ``wgrad`` (see
    ``WGRAD_VARIANTS``)."""

    def __init__(self, emu: Emulation, variant: str = "v2", wgrad: str | None = None) -> None:
        self.emu = emu
        self.variant = VARIANTS[variant]
        # By default v1 (the A/B baselines) pairs with w1 and every newer variant with w3, so a test
        # parametrised over VARIANTS covers both weight grads.
        self.wgrad = WGRAD_VARIANTS[wgrad or ("w1" if variant == "v1" else "w3")]

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, s: tuple[int, int],
                p: tuple[int, int], d: tuple[int, int], channels_last: bool) -> torch.Tensor:  # fmt: skip
        g = geometry(tuple(x.shape), (w.shape[2], w.shape[3]), s, p, d)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = x.contiguous(memory_format=fmt)
        y = torch.full((g[0], g[1], g[4], g[5]), float("nan"), dtype=x.dtype).contiguous(memory_format=fmt)
        bias = b.contiguous() if b is not None else None
        err = self.emu.call(
            "dw_forward",
            [x, w.contiguous(), bias, y],
            [DTYPE_CODES[x.dtype], int(channels_last), self.variant, *g],
        )
        assert err == 0, f"launch_forward returned cudaError {err}"
        return y

    def forward_nhwc_vec(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, s: int, p: int,
                         strip: int, flip: bool = False) -> torch.Tensor:  # fmt: skip
        """The v3 NHWC kernel (``fwd_nhwc_vec``) on channels_last ``x`` with a forced strip height;
        ``flip`` convolves with the flipped filter (the input grad's use). ``x`` is taken as it is (its
        alignment included)."""
        k = w.shape[2]
        g = geometry(tuple(x.shape), (k, k), (s, s), (p, p), (1, 1))
        y = torch.full((g[0], g[1], g[4], g[5]), float("nan"), dtype=x.dtype)
        y = y.contiguous(memory_format=torch.channels_last)
        bias = b.contiguous() if b is not None else None
        err = self.emu.call(
            "dw_forward_nhwc_vec", [x, w.contiguous(), bias, y], [DTYPE_CODES[x.dtype], strip, int(flip), *g]
        )
        assert err == 0, f"run_nhwc_vec returned {err} (1: geometry not taken; else a cudaError)"
        return y

    def input_grad(self, dy: torch.Tensor, w: torch.Tensor, hw: tuple[int, int], s: tuple[int, int],
                   p: tuple[int, int], d: tuple[int, int], channels_last: bool) -> torch.Tensor:  # fmt: skip
        n, c = dy.shape[0], dy.shape[1]
        g = geometry((n, c, *hw), (w.shape[2], w.shape[3]), s, p, d)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        dy = dy.contiguous(memory_format=fmt)
        dx = torch.full((n, c, *hw), float("nan"), dtype=dy.dtype).contiguous(memory_format=fmt)
        err = self.emu.call(
            "dw_input_grad",
            [dy, w.contiguous(), dx],
            [DTYPE_CODES[dy.dtype], int(channels_last), self.variant, *g],
        )
        assert err == 0, f"launch_input_grad returned cudaError {err}"
        return dx

    def weight_grad(self, dy: torch.Tensor, x: torch.Tensor, k: tuple[int, int], s: tuple[int, int],
                    p: tuple[int, int], d: tuple[int, int], channels_last: bool, bias: bool = False,
                    sms: int = 3) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
        """(dw, db): db from the kernel (w2, w3) or a sum over dy here (w1, as the binding does); None
        without ``bias``."""
        g = geometry(tuple(x.shape), k, s, p, d)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = x.contiguous(memory_format=fmt)
        dy = dy.contiguous(memory_format=fmt)
        dw = torch.full((g[1], 1, *k), float("nan"), dtype=x.dtype)
        fused = bias and self.wgrad != WGRAD_VARIANTS["w1"]
        db = torch.full((g[1],), float("nan"), dtype=x.dtype) if fused else None
        err = self.emu.call(
            "dw_weight_grad", [dy, x, dw, db], [DTYPE_CODES[x.dtype], int(channels_last), sms, self.wgrad, *g]
        )
        assert err == 0, f"launch_weight_grad returned cudaError {err} (1000: a counter left nonzero)"
        if bias and not fused:
            db = dy.sum(dim=(0, 2, 3), dtype=torch.float32).to(dy.dtype)
        return dw, db

    def wgrad_plan(self, g: Sequence[int], channels_last: bool, sms: int = 3,
                   dtype: torch.dtype = torch.float32) -> tuple[int, int, int]:  # fmt: skip
        """(splits, workspace floats, counters) of a weight-grad call (``weight_grad_plan``)."""
        out = torch.zeros(3, dtype=torch.int64)
        self.emu.call("dw_wgrad_plan", [out], [int(channels_last), sms, self.wgrad, *g, DTYPE_CODES[dtype]])
        a, b, c = out.tolist()
        return a, b, c

    def launches(self) -> int:
        """Kernel launches the emulation has run since it was loaded (in-process runs only)."""
        return self.emu.call("emu_launches", [], [])

    def last_kernel(self) -> str:
        """The source name (with template arguments) of the kernel the latest launch ran."""
        out = torch.zeros(256, dtype=torch.uint8)
        self.emu.call("emu_last_kernel", [out], [out.numel()])
        return bytes(out.tolist()).split(b"\0", 1)[0].decode()

    def block_order(self, seed: int) -> None:
        """Run the blocks of later launches in a seeded random order (0: index order)."""
        self.emu.call("emu_block_order", [], [seed])

    def nhwc_vec_plan(self, dtype: torch.dtype, g: Sequence[int]) -> tuple[int, int]:
        """``depthwise.cu``'s (channel vectors per block, strip height) of a v3 NHWC forward on ``g``."""
        out = torch.zeros(2, dtype=torch.int32)
        self.emu.call("dw_nhwc_vec_plan", [out], [DTYPE_CODES[dtype], *g])
        ct, strip = out.tolist()
        return ct, strip

    def plan_v2(self, g: Sequence[int]) -> list[int] | None:
        """``depthwise.cu``'s v2 tile plan of a forward on geometry ``g`` (see ``dw_plan_v2``), or None."""
        out = torch.zeros(8, dtype=torch.int32)
        return None if self.emu.call("dw_plan_v2", [out], list(g)) != 0 else out.tolist()

    def plan_sms(self, sms: int) -> None:
        """The SMs the v4 planner sizes grids for in later calls (0: the default 132)."""
        self.emu.call("dw_set_plan_sms", [], [sms])

    def plan_v4(self, g: Sequence[int]) -> list[int] | None:
        """``depthwise.cu``'s v4 plan of a forward on geometry ``g`` (see ``dw_plan_v4``), or None."""
        out = torch.zeros(9, dtype=torch.int32)
        return None if self.emu.call("dw_plan_v4", [out], list(g)) != 0 else out.tolist()


def depthwise_candidate(emu: EmulatedDepthwise) -> Any:
    """A conv2d candidate (``F.conv2d``'s signature, with autograd) running depthwise.cu's entry points."""

    class EmulatedConv(torch.autograd.Function):
        @staticmethod
        def forward(
            ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, s: Any, p: Any, d: Any
        ) -> Any:
            cl = not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
            ctx.save_for_backward(x, w)
            ctx.args = (tuple(s), tuple(p), tuple(d), cl, b is not None)
            return emu.forward(x, w, b, tuple(s), tuple(p), tuple(d), cl)

        @staticmethod
        def backward(ctx: Any, gy: torch.Tensor) -> Any:
            x, w = ctx.saved_tensors
            s, p, d, cl, has_bias = ctx.args
            dx = emu.input_grad(gy, w, (x.shape[2], x.shape[3]), s, p, d, cl)
            dw, db = emu.weight_grad(gy, x, (w.shape[2], w.shape[3]), s, p, d, cl, has_bias)
            return dx, dw, db, None, None, None

    def emulated_conv2d(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: Any, padding: Any,
                        dilation: Any, groups: int) -> torch.Tensor:  # fmt: skip
        assert groups == x.shape[1]
        out: torch.Tensor = EmulatedConv.apply(x, w, b, stride, padding, dilation)
        return out

    return emulated_conv2d
