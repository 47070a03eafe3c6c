"""Block temporaries from the allocator's heap, not from fresh pages on every call.

A generated kernel allocates its block temporaries (a product block, its ``exp``:
4 MiB each at 1024x1024 blocks) afresh in every iteration of its loops. glibc's
``malloc`` serves a request above its mmap threshold with a new mapping, and gives
memory freed at the top of a heap back to the system above its trim threshold; the
first touch of every page of such a block then faults, and the system zeroes the
page. glibc raises both thresholds by itself after the first large free (to the
size freed, and twice that), so the cost depended on what the process had done
before: fused attention at N=S=4096 (1024x1024 blocks) took 50 ms and 32,000 page
faults per call in a fresh process, and 24.7 ms and none once the heap kept its
blocks, in the same process with the thresholds set below.

:func:`keep_block_memory` sets them once, before the first generated module runs:
requests up to 32 MiB (the largest threshold glibc allows, and the one its own
adjustment stops at) come from the heap, and up to 64 MiB of free memory stays at
a heap's top instead of going back to the system. That is the state a warmed-up
process is in anyway, reached from the start. Not glibc (macOS, musl, Windows),
or ``BLOCKBUSTER_KEEP_MALLOC=0`` in the environment: the allocator is left alone.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

#: glibc's ``mallopt`` parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

#: Requests up to this size come from the heap (glibc refuses more: HEAP_MAX_SIZE / 2).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of a heap kept for the next call (glibc's own ratio: 2x).
TRIM_THRESHOLD = 64 << 20

_DONE: list[bool | None] = [None]     # None: not tried yet; else whether it was set
_LOCK = threading.Lock()


def keep_block_memory() -> bool:
    """Set glibc's mmap and trim thresholds (once per process); whether they are set."""
    with _LOCK:
        if _DONE[0] is None:
            _DONE[0] = _set_thresholds()
        return _DONE[0]


def _set_thresholds() -> bool:
    if os.environ.get("BLOCKBUSTER_KEEP_MALLOC", "1") == "0":
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt returns 1 on success; the mmap threshold first (it also fixes the
    # trim threshold's dynamic adjustment off).
    return (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
