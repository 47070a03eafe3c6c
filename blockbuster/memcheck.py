"""Checking, before anything is allocated, that a run fits in memory.

``blockbuster run`` holds the float32 inputs and outputs of the fused program (and the
global arrays fusion left), and the float64 oracle: float64 copies of the inputs plus
every intermediate of the unfused program (the oracle computes the tensors the
unfused program stores, e.g. attention's N×S scores). :func:`modeled_bytes` adds
these up from the programs' shapes — Python integers, so no size overflows — and
:func:`check_fits_memory` turns "too big" into a one-line :class:`UsageError` instead
of a NumPy allocation failure seconds later.
"""

from __future__ import annotations

import math
import os

from .errors import UsageError
from .ir.program import Program

#: Part of the available memory a run may plan to use (the interpreter, NumPy
#: temporaries and the rest of the machine need the remainder).
USABLE_FRACTION = 0.75


def _elements(program: Program, names) -> int:
    return sum(math.prod(program.shape(n)) for n in names)


def modeled_bytes(unfused: Program, fused: Program | None = None) -> int:
    """Peak bytes of a validated run: float32 arrays of the fused program, float64
    arrays of the oracle (all arrays of the unfused program) and the float64 draw of
    the largest input (random inputs are drawn in float64, then cast)."""
    fused = fused or unfused
    run32 = 4 * _elements(fused, [a.name for a in fused.arrays])
    oracle64 = 8 * _elements(unfused, [a.name for a in unfused.arrays])
    draw64 = 8 * max((math.prod(unfused.shape(n)) for n in unfused.inputs), default=0)
    return run32 + oracle64 + draw64


def available_bytes() -> int | None:
    """Memory available to a new allocation (Linux ``MemAvailable``; else free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None             # unknown: do not refuse


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_fits_memory(unfused: Program, fused: Program | None = None,
                      available: int | None = None) -> int:
    """The modeled bytes, or a UsageError naming the sizes when they cannot fit."""
    need = modeled_bytes(unfused, fused)
    have = available_bytes() if available is None else available
    if have is not None and need > USABLE_FRACTION * have:
        sizes = " ".join(f"{d.name}={d.size}" for d in unfused.dims)
        raise UsageError(f"{unfused.name} with {sizes} needs about {_gib(need)} for its "
                         f"inputs, outputs and the float64 oracle, more than the "
                         f"{_gib(int(USABLE_FRACTION * have))} of memory it may use "
                         f"({_gib(have)} available): choose smaller --size values")
    return need
