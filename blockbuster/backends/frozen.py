"""Arrays that nobody changes any more: what a backend may derive things from once.

``CompiledProgram.bind`` snapshots the weights it is given and computes the weight
preparation once; both are then constant for the bound program's life. A backend
that keeps something derived from an input between calls (the Numba backend's
packed copies of matmul operands) may do so only for arrays registered here: an
array a caller passes may be changed in place before the next call.
"""

from __future__ import annotations

import weakref

import numpy as np

_FROZEN: "weakref.WeakValueDictionary[int, np.ndarray]" = weakref.WeakValueDictionary()


def freeze(array: np.ndarray) -> np.ndarray:
    """Register ``array`` (one this library owns and never writes again) as constant;
    returns it."""
    if isinstance(array, np.ndarray):
        _FROZEN[id(array)] = array
    return array


def is_frozen(array) -> bool:
    """Whether ``array`` itself (not an equal array) was registered by :func:`freeze`."""
    return _FROZEN.get(id(array)) is array
