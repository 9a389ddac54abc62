"""Run the real depthwise ``.cu`` on the CPU: a thread-per-CUDA-thread emulation for tests.

The kernel source is compiled with g++ after a few textual rewrites (``<<<...>>>`` launches,
``__shared__`` arrays) and a shim that provides ``threadIdx``/``blockIdx`` (thread-locals),
``__syncthreads`` (a block barrier) and ``__shfl_down_sync`` (through a block buffer; every call site
in our kernels is block-uniform). Blocks run one after another, each as ``blockDim.x`` OS threads.
This checks the index math, tiling, halos, flips and reductions of the kernels without a GPU; it
says nothing about speed, memory coalescing, races the emulated ordering hides, or the compiler.
Assumptions (true for depthwise.cu, asserted where cheap): 1-D blocks, at most one shared array per
kernel, no early exit before a barrier that other threads still reach.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import torch

from kernels import _build

KERNEL = _build.KERNELS_ROOT / "depthwise" / "depthwise.cu"

SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
using std::min;
using std::max;
namespace emu {
thread_local uint3 tid;
uint3 bid;
dim3 bdim, gdim;
std::barrier<>* block_barrier = nullptr;
alignas(16) unsigned char arena[64 * 1024];
float shuffle_buf[1024];
inline void sync() { block_barrier->arrive_and_wait(); }
template <typename F>
void launch(dim3 grid, dim3 block, size_t smem, F&& body) {
  if (block.y != 1 || block.z != 1) throw std::runtime_error("emulator: 1-D blocks only");
  if (smem > sizeof(arena)) throw std::runtime_error("emulator: too much shared memory");
  gdim = grid;
  bdim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        bid = uint3{x, y, z};
        std::memset(arena, 0xff, sizeof(arena));  // garbage, like real shared memory
        std::barrier<> bar(block.x);
        block_barrier = &bar;
        std::vector<std::thread> threads;
        threads.reserve(block.x);
        for (unsigned t = 0; t < block.x; ++t)
          threads.emplace_back([&, t] {
            tid = uint3{t, 0, 0};
            body();
            bar.arrive_and_drop();  // a finished thread no longer holds the others at a barrier
          });
        for (auto& th : threads) th.join();
      }
}
}  // namespace emu
#define threadIdx (emu::tid)
#define blockIdx (emu::bid)
#define blockDim (emu::bdim)
#define gridDim (emu::gdim)
inline void __syncthreads() { emu::sync(); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
inline float __shfl_down_sync(unsigned, float v, int off) {
  const unsigned t = threadIdx.x;
  emu::shuffle_buf[t] = v;
  emu::sync();
  const unsigned lane = t % 32;
  const float out = lane + off < 32 ? emu::shuffle_buf[t + off] : v;
  emu::sync();
  return out;
}
// A macro, not a definition of the real symbol: torch's libcudart, already loaded, would win.
inline cudaError_t emu_get_last_error() { return cudaSuccess; }
#define cudaGetLastError emu_get_last_error
"""

WRAPPERS = r"""
namespace {
convperf_dw::Geom geom(const int64_t* v) {
  convperf_dw::Geom g{};
  g.n = v[0]; g.c = v[1];
  g.h = int(v[2]); g.w = int(v[3]); g.ho = int(v[4]); g.wo = int(v[5]);
  g.kh = int(v[6]); g.kw = int(v[7]); g.sh = int(v[8]); g.sw = int(v[9]);
  g.ph = int(v[10]); g.pw = int(v[11]); g.dh = int(v[12]); g.dw = int(v[13]);
  return g;
}
}  // namespace
using convperf_dw::DType;
extern "C" int emu_forward(int dt, const void* x, const void* w, const void* b, void* y, const int64_t* g,
                           int cl, int variant) {
  return int(convperf_dw::launch_forward(DType(dt), x, w, b, y, geom(g), cl != 0, nullptr,
                                         convperf_dw::Variant(variant)));
}
extern "C" int emu_input_grad(int dt, const void* dy, const void* w, void* dx, const int64_t* g, int cl,
                              int variant) {
  return int(convperf_dw::launch_input_grad(DType(dt), dy, w, dx, geom(g), cl != 0, nullptr,
                                            convperf_dw::Variant(variant)));
}
// The v2 tile plan of a forward (aligned input): tw, trows, pl, tiles_w, tiles_h, in_rows, in_cols, mode.
extern "C" int emu_plan_v2(const int64_t* g, int* out) {
  const convperf_dw::Geom gg = geom(g);
  convperf_dw::TileArgs t{};
  t.planes = gg.n * gg.c; t.c = int(gg.c); t.h = gg.h; t.w = gg.w; t.ho = gg.ho; t.wo = gg.wo;
  t.ph = gg.ph; t.pw = gg.pw;
  convperf_dw::Tile2Args a = convperf_dw::tile2_args(t);
  if (!convperf_dw::plan_tile_v2(a, gg.kh, gg.sh)) return 1;
  const int mode = convperf_dw::choose_stage_mode(a, gg.sh, true);
  const int v[8] = {a.tw, a.trows, a.pl, a.tiles_w, a.tiles_h, a.in_rows, a.in_cols, mode};
  std::memcpy(out, v, sizeof(v));
  return 0;
}
extern "C" int emu_weight_grad(int dt, const void* dy, const void* x, void* dw, const int64_t* g, int cl,
                               int sms) {
  const convperf_dw::Geom gg = geom(g);
  const int splits = convperf_dw::weight_grad_splits(gg, cl != 0, sms);
  std::vector<float> ws(size_t(splits) * gg.c * gg.kh * gg.kw, std::nanf(""));
  return int(convperf_dw::launch_weight_grad(DType(dt), dy, x, dw, ws.data(), splits, gg, cl != 0, nullptr));
}
"""

_LAUNCH = re.compile(r"([\w:]+(?:<[^<>;]*>)?)<<<(.*?)>>>\((.*?)\);", re.S)
_SHARED = re.compile(r"__shared__ float (\w+)\[[^;]*\];")


def emulated_source(cu: Path = KERNEL) -> str:
    """The kernel source rewritten for the host compiler, with the shim and C wrappers."""
    text = cu.read_text()
    text = text.replace('#include "depthwise.cuh"', f'#include "{cu.parent / "depthwise.cuh"}"')
    text = text.replace(
        "extern __shared__ float smem[];", "float* smem = reinterpret_cast<float*>(emu::arena);"
    )
    text = _SHARED.sub(r"float* \1 = reinterpret_cast<float*>(emu::arena);", text)

    def launch(m: re.Match[str]) -> str:
        cfg = [p.strip() for p in m.group(2).split(",")]
        smem = cfg[2] if len(cfg) > 2 else "0"
        return f"emu::launch(dim3({cfg[0]}), dim3({cfg[1]}), {smem}, [&] {{ {m.group(1)}({m.group(3)}); }});"

    text, count = _LAUNCH.subn(launch, text)
    if count == 0 or "<<<" in text:
        raise RuntimeError("emulator: could not rewrite every kernel launch")
    return SHIM + text + WRAPPERS


def build(out_dir: Path) -> ctypes.CDLL:
    """Compile the emulated kernels into ``out_dir`` (cached by source hash) and load them."""
    cxx = shutil.which("g++") or shutil.which("c++")
    home = _build.cuda_home()
    if cxx is None or home is None or not (home / "include" / "cuda_fp16.h").exists():
        raise FileNotFoundError("the CUDA emulation needs g++ and the CUDA headers (CUDA_HOME/include)")
    source = emulated_source()
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    lib = out_dir / f"dw_emu_{digest}.so"
    if not lib.exists():
        src = out_dir / f"dw_emu_{digest}.cpp"
        src.write_text(source)
        cmd = [cxx, "-std=c++20", "-O1", "-pthread", "-shared", "-fPIC", "-w", "-I", str(home / "include"),
               str(src), "-o", str(lib)]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"emulator build failed:\n{res.stderr[-4000:]}\n{' '.join(cmd)}")
    return ctypes.CDLL(str(lib))


DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def geometry(x_shape: tuple[int, ...], k: tuple[int, int], s: tuple[int, int], p: tuple[int, int],
             d: tuple[int, int]) -> list[int]:  # fmt: skip
    n, c, h, w = x_shape
    ho = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    wo = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    return [n, c, h, w, ho, wo, k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]]


def _geom_arg(g: list[int]) -> ctypes.Array[ctypes.c_int64]:
    return (ctypes.c_int64 * len(g))(*g)


def _ptr(t: torch.Tensor | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr() if t is not None else None)


# The kernel variants ``depthwise.cuh`` names (``Variant``): the NCHW tiled forward / input grad.
VARIANTS = {"v1": 1, "v2": 2}


class EmulatedDepthwise:
    """The three host entry points of depthwise.cu, run on CPU tensors through the emulator, with the
    NCHW tiled kernels of ``variant`` (``"v1"`` or ``"v2"``, see ``VARIANTS``)."""

    def __init__(self, lib: ctypes.CDLL, variant: str = "v2") -> None:
        self.lib = lib
        self.variant = VARIANTS[variant]

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, s: tuple[int, int],
                p: tuple[int, int], d: tuple[int, int], channels_last: bool) -> torch.Tensor:  # fmt: skip
        g = geometry(tuple(x.shape), (w.shape[2], w.shape[3]), s, p, d)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = x.contiguous(memory_format=fmt)
        y = torch.full((g[0], g[1], g[4], g[5]), float("nan"), dtype=x.dtype).contiguous(memory_format=fmt)
        err = self.lib.emu_forward(DTYPE_CODES[x.dtype], _ptr(x), _ptr(w.contiguous()),
                                   _ptr(b.contiguous() if b is not None else None), _ptr(y), _geom_arg(g),
                                   int(channels_last), self.variant)  # fmt: skip
        assert err == 0, f"launch_forward returned cudaError {err}"
        return y

    def input_grad(self, dy: torch.Tensor, w: torch.Tensor, hw: tuple[int, int], s: tuple[int, int],
                   p: tuple[int, int], d: tuple[int, int], channels_last: bool) -> torch.Tensor:  # fmt: skip
        n, c = dy.shape[0], dy.shape[1]
        g = geometry((n, c, *hw), (w.shape[2], w.shape[3]), s, p, d)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        dy = dy.contiguous(memory_format=fmt)
        dx = torch.full((n, c, *hw), float("nan"), dtype=dy.dtype).contiguous(memory_format=fmt)
        err = self.lib.emu_input_grad(DTYPE_CODES[dy.dtype], _ptr(dy), _ptr(w.contiguous()), _ptr(dx),
                                      _geom_arg(g), int(channels_last), self.variant)  # fmt: skip
        assert err == 0, f"launch_input_grad returned cudaError {err}"
        return dx

    def weight_grad(self, dy: torch.Tensor, x: torch.Tensor, k: tuple[int, int], s: tuple[int, int],
                    p: tuple[int, int], d: tuple[int, int], channels_last: bool,
                    sms: int = 3) -> torch.Tensor:  # fmt: skip
        g = geometry(tuple(x.shape), k, s, p, d)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = x.contiguous(memory_format=fmt)
        dy = dy.contiguous(memory_format=fmt)
        dw = torch.full((g[1], 1, *k), float("nan"), dtype=x.dtype)
        err = self.lib.emu_weight_grad(DTYPE_CODES[x.dtype], _ptr(dy), _ptr(x), _ptr(dw), _geom_arg(g),
                                       int(channels_last), sms)  # fmt: skip
        assert err == 0, f"launch_weight_grad returned cudaError {err}"
        return dw
