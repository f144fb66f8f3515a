"""Keep freed heap memory in the process, so that the simulator's array temporaries do not pay a page
fault per 4 KiB every time they are allocated (glibc only; a no-op elsewhere).

Why: a chunk of :data:`explorer.simulate.CHUNK_ROWS` rows makes float64 temporaries of 100-400 KB
(12,500 rows since 2026-12-02, 50,000 when this was measured) and stacked GEMM planes of 8-30 MB.  glibc serves blocks above its mmap threshold (128 KiB at start,
raised dynamically) with fresh ``mmap`` pages and returns heap tops above its trim threshold to the
kernel on ``free``; every later allocation of that size then touches new pages.  Measured on the
2-core machine (2026-12-01, 200,000-row tables, best of 3, the code before and after in alternating processes on
an idle machine): 20,000-30,000 minor page faults per ``simulate`` call before, under 10 after; the
sweep-like one-kind table 488,000-495,000 -> 515,000-539,000 points/s (about 1.06x); the random
15-kind mix unchanged within noise (272,000-294,000: its per-kind calls are small enough for the
default thresholds).  Peak RSS is the same (775 MB in that run): the process keeps what it already
used instead of handing it back and asking again.  (Also tried: a pool that kept the closed-loop
GEMM planes, 30-70 MB per chunk and above the largest mmap threshold, across chunks -- another
~3 %, not kept: pooled planes would be overwritten under any caller still holding a view of them.)

What it sets (``mallopt``, glibc's documented tunables, man 3 mallopt):

* ``M_MMAP_THRESHOLD`` = 32 MiB (the largest value glibc accepts on 64-bit, DEFAULT_MMAP_THRESHOLD_MAX):
  blocks below it come from the heap, whose pages are reused;
* ``M_TRIM_THRESHOLD`` = 256 MiB: up to that much free memory stays at the heap's top instead of
  being returned (a chunk's working set is ~200 MB; 64 MiB left ~5,000 faults per call).

Process-wide and permanent (glibc has no "restore dynamic thresholds"), applied once, on the first
:func:`explorer.simulate.simulate` call.  ``EXPLORER_MALLOPT=0`` leaves the allocator alone
(results are the same either way: only where memory comes from changes).
"""

from __future__ import annotations

import os

#: glibc's parameter numbers (malloc.h): M_TRIM_THRESHOLD -1, M_MMAP_THRESHOLD -3.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: bytes; see the module docstring for the measurement behind each
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024

_applied: bool | None = None  # None: not tried yet; True: set; False: not glibc, refused, or disabled


def keep_freed_memory() -> bool:
    """Set the glibc thresholds of the module docstring once per process; returns whether they are
    set.  Cheap to call again (the first answer is remembered)."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("EXPLORER_MALLOPT", "1") == "0":
        return False
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    _applied = bool(ok)
    return _applied

