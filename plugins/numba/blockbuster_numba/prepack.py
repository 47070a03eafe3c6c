"""Right operands of block matmuls packed once per call, not once per kernel instance.

The generated module's ``run`` calls :func:`packed_input` for every program input that
some kernel multiplies by (as the right operand of a ``dot``, itself or transposed)
with the same blocks in every parallel instance; the kernels then call the packed
driver (:func:`.microkernel.driver_packed`), which reads the panels in place.

An input that the library holds constant (:mod:`blockbuster.backends.frozen`: weights
bound with ``CompiledProgram.bind``, prepared weights), passed again as the same
array, is not packed again: its packed copy is kept per module, so a bound layer
packs its weights on its first call only. Any other array is packed on every call:
its owner may have changed it in place.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
from numba import njit, types

from blockbuster.backends.frozen import is_frozen

from . import microkernel
from .threads import parallel_for

_PACKERS: dict[str, object] = {}


def packer(dtype: str):
    """:func:`.microkernel.pack_panels` compiled for ``dtype`` arrays of any strides
    (one compile per dtype, cached on disk)."""
    fn = _PACKERS.get(dtype)
    if fn is None:
        ty = getattr(types, dtype)
        # Typed read-only, so that read-only and writeable sources share one compile.
        sig = types.void(types.Array(ty, 2, "A", readonly=True), types.Array(ty, 1, "C"),
                         types.int64, types.int64)
        fn = _PACKERS[dtype] = njit(sig, cache=True, error_model="numpy", nogil=True,
                                    boundscheck=False)(microkernel.pack_panels)
    return fn


def packer_ready(dtype: str) -> bool:
    """Whether :func:`packer` of ``dtype`` is compiled in this process or (for some
    dtype: a guess, for planning) in Numba's cache on disk."""
    from .gemm_call import numba_cache_index
    return dtype in _PACKERS or numba_cache_index(microkernel.pack_panels).exists()


#: Matrices of at least this many elements are packed by every thread at once (each
#: its share of the column strips): packing is a copy, bound by memory, and one core
#: does not reach the memory's bandwidth (a 2816x1024 float32 weight: 0.9 ms on one
#: core of the 2-core Zen 4 machine, ~0.5 ms on two).
PARALLEL_PACK = 1 << 18


def packed_input(array: np.ndarray, transposed: bool, cache: dict, key: str,
                 threads: int = 1) -> np.ndarray:
    """``array`` (or its transpose) in the pre-packed layout, packed on ``threads``
    threads; for a constant array, kept in ``cache`` (under ``key`` and the array:
    two bound copies of one program share the module) until the array is gone."""
    constant = is_frozen(array)
    slot = (key, id(array))
    hit = cache.get(slot) if constant else None
    if hit is not None and hit[0]() is array:
        return hit[1]
    b = array.T if transposed else array
    out = np.empty(microkernel.packed_size(*b.shape), array.dtype)
    strips = -(-b.shape[1] // microkernel.NR)
    pack = packer(str(array.dtype))
    if b.size >= PARALLEL_PACK and threads > 1:
        parallel_for(pack, strips, threads, b, out)
    else:
        pack(b, out, 0, strips)
    if constant:
        cache[slot] = (weakref.ref(array, _forget(cache, slot)), out)
    return out


def _forget(cache: dict, slot) -> "Callable":
    """A weakref callback dropping ``slot``'s packed copy with its array (unless the
    slot holds a newer array's by then)."""
    def drop(ref):
        entry = cache.get(slot)
        if entry is not None and entry[0] is ref:
            del cache[slot]
    return drop
