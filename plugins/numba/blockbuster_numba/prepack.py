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

_PACKERS: dict[str, object] = {}


def packer(dtype: str):
    """:func:`.microkernel.pack_panels` compiled for ``dtype`` arrays of any strides
    (one compile per dtype, cached on disk)."""
    fn = _PACKERS.get(dtype)
    if fn is None:
        ty = getattr(types, dtype)
        # Typed read-only, so that read-only and writeable sources share one compile.
        sig = types.void(types.Array(ty, 2, "A", readonly=True), types.Array(ty, 1, "C"))
        fn = _PACKERS[dtype] = njit(sig, cache=True, error_model="numpy", nogil=True,
                                    boundscheck=False)(microkernel.pack_panels)
    return fn


def packer_ready(dtype: str) -> bool:
    """Whether :func:`packer` of ``dtype`` is compiled in this process or (for some
    dtype: a guess, for planning) in Numba's cache on disk."""
    from .gemm_call import numba_cache_index
    return dtype in _PACKERS or numba_cache_index(microkernel.pack_panels).exists()


def packed_input(array: np.ndarray, transposed: bool, cache: dict, key: str) -> np.ndarray:
    """``array`` (or its transpose) in the pre-packed layout; for a constant array,
    kept in ``cache`` (under ``key`` and the array: two bound copies of one program
    share the module) until the array is gone."""
    constant = is_frozen(array)
    slot = (key, id(array))
    hit = cache.get(slot) if constant else None
    if hit is not None and hit[0]() is array:
        return hit[1]
    b = array.T if transposed else array
    out = np.empty(microkernel.packed_size(*b.shape), array.dtype)
    packer(str(array.dtype))(b, out)
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
