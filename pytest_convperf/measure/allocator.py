"""One allocator state for both sides of a CPU comparison (issue 24 item 1).

glibc's malloc serves a block above its mmap threshold with ``mmap`` and returns it with
``munmap``; the threshold moves at run time (freeing an mmapped block raises it to that block's
size), and memory at the top of the heap above the trim threshold goes back to the kernel. So
whether a conv's output or workspace of a few MiB costs fresh pages (a page fault and the
kernel's zeroing per 4 KiB) depends on what was freed before it, and the two sides of a paired
round, which alternate, do not see the same history. The thread CPU clock counts that kernel
work: a conv timed against itself read 0.67-1.17 with CIs excluding 1.

The fix chosen here is the one that removes the cause rather than averaging over it: at the
first CPU timer of a process, fix glibc's mmap threshold at its maximum (32 MiB on 64-bit) and
the trim threshold at 1 GiB (``mallopt``), so blocks up to 32 MiB are always reused from the
heap and never handed back: after warm-up neither side pays page faults, whatever the order.
Blocks above 32 MiB still come from ``mmap`` every call, for both sides alike. Setting a
threshold turns off glibc's dynamic adjustment, which is the point. The cost is memory the
process keeps (up to the trim threshold) after large frees.

Not glibc (musl, macOS, a preloaded jemalloc/tcmalloc): nothing is changed; the fact says so
(their allocators do not have glibc's moving threshold; a preloaded allocator's own settings
are the user's).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's maximum on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 1024 * 1024 * 1024

_state: list[str] = []


def _preloaded() -> str | None:
    pre = os.environ.get("LD_PRELOAD", "")
    for name in ("jemalloc", "tcmalloc", "mimalloc"):
        if name in pre:
            return name
    return None


def fix_allocator() -> str:
    """Fix glibc's mmap and trim thresholds once per process; returns what was done (a fact)."""
    if _state:
        return _state[0]
    _state.append(_fix())
    return _state[0]


def _fix() -> str:
    if platform.libc_ver()[0] != "glibc":
        return "not glibc: allocator left as is (no moving mmap threshold to fix)"
    other = _preloaded()
    if other is not None:
        return f"{other} preloaded: allocator left as is (its own settings apply)"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        ok = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    except (OSError, AttributeError) as exc:
        return f"glibc mallopt unavailable ({exc}): allocator left as is"
    if not ok:
        return "glibc mallopt refused the thresholds: allocator left as is"
    return (
        f"glibc: mmap threshold fixed at {MMAP_THRESHOLD >> 20} MiB, trim threshold at "
        f"{TRIM_THRESHOLD >> 20} MiB (both sides reuse heap pages)"
    )


def release_free_heap() -> None:
    """Hand glibc's free heap pages back to the kernel (``malloc_trim(0)``); a no-op elsewhere.

    The trim threshold :func:`fix_allocator` raises keeps freed memory resident, so a later
    allocation may reuse it without growing the resident set: a peak-RSS measurement
    (:mod:`pytest_convperf.measure.memory`) would then read ~0 for a call that allocates 64 MiB. Trimming
    first makes every byte a measured call touches fresh again.
    """
    if platform.libc_ver()[0] != "glibc" or _preloaded() is not None:
        return
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return
