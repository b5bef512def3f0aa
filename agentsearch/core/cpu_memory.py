"""Keep freed memory for reuse: glibc malloc's defaults cost CPU runs much of their time.

torch's CPU allocator takes every tensor from ``malloc``. With glibc's defaults a block over the
mmap threshold (128 KiB, raised as big blocks are freed, to 32 MiB at most) is mapped fresh
when allocated and unmapped when freed, and the heap's free top is handed back to the kernel
past 128 KiB. A forward pass allocates and frees large activations layer after layer (a
prefill of 64 rows x 600 tokens: hundreds of MB per layer), so their pages are faulted in and
zeroed again and again. On this project's 2-core VM (2026-12-08, AMD EPYC) one training
step's 64 rollouts of SmolLM2-135M took 430-505 s with the defaults and 287-296 s with this
(``scripts/bench_hf_generate.py --rollout [--malloc keep]``, both kept in
``docs/results/vs_trl/bench_hf_rollout.jsonl``); a probe without a record counted 26 to 57
million page faults and 102 to 216 s of system time in one 64-row, 16-token generation with the
defaults, 1.6 million and 21 s with this. The cost of a fault differs from one machine to the
next, so with the defaults the same run took different times on machines of one CPU kind.

``keep_freed_memory`` turns that off: ``M_MMAP_MAX=0`` (no block is mapped on its own: all come
from the heap) and ``M_TRIM_THRESHOLD`` at its largest (the heap's free top is kept), in this
process (``mallopt``, effective for every allocation from then on) and in the processes it
starts (the ``MALLOC_MMAP_MAX_`` and ``MALLOC_TRIM_THRESHOLD_`` environment variables glibc reads
at start). The price: the process keeps its peak heap resident (freed memory is reused, not
returned). jemalloc or tcmalloc through ``LD_PRELOAD`` are the usual alternative where
installed; this needs nothing beyond glibc. Elsewhere (macOS, musl) it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["keep_freed_memory", "MALLOC_ENV"]

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's malloc.h parameter numbers
_TRIM_MAX = 2**31 - 1  # mallopt takes an int
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(_TRIM_MAX)}
"""What child processes get (glibc reads these at start); set only where not set already."""


def keep_freed_memory() -> dict:
    """Make glibc malloc keep freed memory for reuse (module doc). Returns what it did:
    ``{"malloc": "keep"}``, or ``{"malloc": "default", "why": ...}`` where it cannot (not
    glibc, or ``mallopt`` refused)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return {"malloc": "default", "why": f"not glibc ({platform.system()})"}
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    ok = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_MAX) == 1
    if not ok:
        return {"malloc": "default", "why": "mallopt refused M_MMAP_MAX / M_TRIM_THRESHOLD"}
    for key, value in MALLOC_ENV.items():
        os.environ.setdefault(key, value)
    return {"malloc": "keep"}
