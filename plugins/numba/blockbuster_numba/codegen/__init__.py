"""Code generation: a block program becomes the source of a Python module for Numba.

Nothing here knows a workload or a rule: the generator walks the IR, in stages, one
module each (their docstrings say how each works):

1. :mod:`.analyse` — the kernel's stores with one-block loops removed; use counts;
   :mod:`.hoist` — a fused reduction's bodies that the serial loops do not change,
   split off to be computed once.
2. :mod:`.place` — which loop computes each node (CSE and hoisting; the core
   placement rule the cost model shares).
3. :mod:`.schedule` — the kernel's loops: ``prange`` split, the parallel decision,
   ``reduce``/``map`` loops.
4. lower — :mod:`.expressions` (loads, ``dot``, in-block reductions),
   :mod:`.elementwise` (fusion into loop nests), :mod:`.reductions` (per combiner),
   :mod:`.maps`, :mod:`.stores`; index arithmetic in :mod:`.extents`.
5. :mod:`.render` — the function and module text, ``run()``.

:mod:`.values` holds what they pass around (blocks, map arrays, loop frames,
structured block-index code); :mod:`.plan` records every global load emitted with
its loop nest, in the cost model's counting terms.

The reference interpreter (``blockbuster.backends.reference``) is the definition of
every operator; comments name the places where this code must agree with it.
"""

from __future__ import annotations

from blockbuster.ir.program import Program

from .analyse import substitute_var
from .kernel import KernelGenerator
from .module import ModuleGenerator
from .schedule import ITERATIONS_PER_THREAD, PARALLEL_MIN_WORK
from .values import Frame, Namer

__all__ = ["generate_source", "ModuleGenerator", "KernelGenerator", "Frame", "Namer",
           "substitute_var", "ITERATIONS_PER_THREAD", "PARALLEL_MIN_WORK"]


def generate_source(program: Program, dtype: str = "float32", threads: int | None = None,
                    header: str = "", parallel: bool | None = None, hardware=None) -> str:
    """The Python source of ``program`` for Numba: one ``@njit`` function per kernel
    and ``run(inputs) -> outputs``. Deterministic: the same program gives the same
    text (it is the cache key of the compiled module). ``hardware`` (default: this
    CPU) gives the thread count unless ``threads`` is given, and prices each kernel's
    parallel decision."""
    return ModuleGenerator(program, dtype=dtype, threads=threads, header=header,
                           parallel=parallel, hardware=hardware).generate()
