"""The load plan: every global load the generated code performs, with its loop nest.

The generator records each ``load`` it emits (one view of a global block per
execution of the loop it is placed in) as the loops around it and the extents of
the block, in the cost model's counting terms (:mod:`blockbuster.cost.counting`).
Summed over the loops' iterations, that is what the generated code loads, and a test
holds it equal to what the cost model counts.
"""

from __future__ import annotations

import attrs

from blockbuster.cost.counting import Extent, Loop, LoopSums
from blockbuster.ir.index import IConst, IVar, free_vars, substitute

from .values import Frame


@attrs.frozen
class PlannedLoad:
    array: str
    loops: tuple[Loop, ...]        # outermost first
    extents: tuple[Extent, ...]    # the block's non-point dimensions
    kernel_loops: tuple[Loop, ...]  # the kernel's own loops (of more than one block)

    def elements(self, sums: LoopSums | None = None) -> int:
        """Elements this load moves over every iteration of its loops."""
        return (sums or LoopSums()).count(self.loops, self.extents)

    def elements_per_instance(self, sums: LoopSums | None = None) -> int:
        """Elements moved if the load ran once per kernel instance (iteration of the
        kernel's loops) at least, as the cost model counts: the generator hoists a
        load no kernel loop needs out of those loops, which the cost model, whose
        kernel instances share nothing, does not."""
        inner = tuple(loop for loop in self.loops if loop not in self.kernel_loops)
        return (sums or LoopSums()).count(self.kernel_loops + inner, self.extents)


def plan_index(ix, frame: Frame):
    """An IR block index in terms of the generated loops' counting names, seen from
    ``frame`` (a variable bound to a single block is block 0)."""
    if ix is None:
        return None
    mapping = {}
    for v in free_vars(ix):
        b = frame.resolve(v)[1]
        mapping[v] = IConst(0) if b.loop is None else IVar(b.loop.name)
    return substitute(ix, mapping)


def planned_load(array: str, index, dims, frame: Frame, kernel_loops) -> PlannedLoad:
    """The load ``array[index]`` (over ``dims``) emitted in ``frame``."""
    loops = tuple(b.loop for f in frame.chain() for b in f.binds.values()
                  if b.loop is not None)
    extents = tuple((d, plan_index(ix, frame)) for ix, d in zip(index, dims) if not d.point)
    return PlannedLoad(array, loops, extents, tuple(kernel_loops))
