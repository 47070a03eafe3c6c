"""What a backend allows and prefers in block sizes (the tuner's side of a backend).

A backend may carry its own ``block_constraints`` attribute (a
:class:`BlockConstraints`); otherwise the table below is used, by backend name, and
an unknown backend gets the cautious :data:`STRICT` (powers of two, the local tier a
hard limit: what a GPU's shared memory needs).
"""

from __future__ import annotations

import attrs


@attrs.frozen
class BlockConstraints:
    min_block: int = 16          # smaller blocks only when the dimension is smaller
    max_block: int = 2048        # larger blocks are not tried
    multiple: int = 8            # block sizes (but a whole dimension) are multiples of it
    powers_of_two: bool = False  # only powers of two (and a whole small dimension)
    #: True: a candidate whose working set exceeds the per-core local capacity is
    #: rejected (shared memory). False: it is allowed but its local traffic is
    #: priced at the global bandwidth (a CPU cache spills to DRAM, BLAS re-blocks).
    hard_capacity: bool = False
    #: Fixed cost of one block step (a loop iteration of generated code: slicing,
    #: a BLAS call's setup), seconds; what makes tiny blocks slow.
    step_overhead_s: float = 2e-6


#: The Numba backend: blocks are views into the arrays, block matmuls call BLAS
#: (which blocks for the caches itself), so the L2 size is a price, not a limit. The
#: step overhead is fitted to issue 13's quiet-machine figures: LayerNorm+matmul
#: 2048³ took 394 ms at 64-blocks (~1.1 M block steps on 2 cores) and 106 ms at
#: 1024-row blocks (compute-bound), so ~0.5 µs a step.
NUMBA = BlockConstraints(min_block=16, max_block=2048, multiple=8, step_overhead_s=5e-7)
#: The reference interpreter: NumPy per block, ~50 µs of Python per block step.
REFERENCE = BlockConstraints(min_block=16, max_block=4096, multiple=8, step_overhead_s=5e-5)
STRICT = BlockConstraints(min_block=16, max_block=256, multiple=16, powers_of_two=True,
                          hard_capacity=True, step_overhead_s=1e-6)

_BY_NAME = {"numba": NUMBA, "reference": REFERENCE}


def constraints_of(backend) -> BlockConstraints:
    own = getattr(backend, "block_constraints", None)
    if isinstance(own, BlockConstraints):
        return own
    return _BY_NAME.get(getattr(backend, "name", None), STRICT)
