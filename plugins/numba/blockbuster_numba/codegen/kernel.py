"""One kernel's function, through the stages: analyse → schedule → (place, lower) → render.

:class:`KernelGenerator` holds what the stages share for one kernel (its names, index
arithmetic, use counts, the load plan) and wires them: the kernel's loops are
scheduled, each store is lowered in the innermost loop, and every value a store needs
is placed (:mod:`.place`) and lowered (:mod:`.expressions`) on demand, once per
binding of its free variables.
"""

from __future__ import annotations

from blockbuster.ir.expr import Expr
from blockbuster.ir.program import Kernel

from .analyse import Analysis
from .expressions import emit
from .extents import Extents
from .hoist import hoist_invariant_bodies
from .place import memo_key, target_frame
from .plan import PlannedLoad
from .render import kernel_function
from .schedule import KernelLoops
from .stores import emit_stores
from .values import Frame, Namer, drop_unused


class KernelGenerator:
    def __init__(self, module, kernel: Kernel):
        self.m = module
        self.kernel = kernel
        self.dims = module.dims
        self.args = module.kernel_args(kernel)
        self.names = Namer(parent=module.module_names, record=module.local_names)
        self.x = Extents(self.names)
        self._analyse(kernel.stores)
        self.parallel = False
        self._checker = None                   # the type checker, for map shapes
        self.loads: list[PlannedLoad] = []     # every global load emitted, in order
        self.kernel_loops: tuple = ()          # the kernel's loops, in counting terms
        self.shared_maps: dict = {}            # reduce -> [(map, sink)] in its loop
        self.removable: set[str] = set()       # views dropped when nothing reads them
        self.in_place: dict = {}               # value -> InPlace: its store's block

    def generate(self) -> list[str]:
        """The lines of the kernel's ``@njit`` function."""
        loops = KernelLoops(self)
        hoisted = hoist_invariant_bodies(self.stores, loops.serial)
        if any(h.value is not s.value for h, s in zip(hoisted, self.stores)):
            self._analyse(hoisted)
        self.parallel = loops.parallel
        self.kernel_loops = loops.loops
        emit_stores(self, self.stores, loops.inner)
        self.args = self.args + self.m.kernel_packed.get(self.kernel.name, [])
        return kernel_function(self, drop_unused(loops.close(), self.removable))

    def _analyse(self, stores) -> None:
        analysis = Analysis(stores, self.dims)
        self.stores = analysis.stores          # what is generated (one-block loops gone)
        self.uses = analysis.uses              # distinct parents (and stores) of a node
        self.parents = analysis.parents

    def value(self, node: Expr, frame: Frame):
        """The value of ``node`` seen from ``frame``: emitted once per binding of its
        free variables, in the frame placement chooses."""
        key = memo_key(node, frame)
        target = target_frame(node, frame)
        hit = target.memo.get(key)
        if hit is None:
            hit = self._emit(node, target)
            target.memo[key] = hit
        return hit

    def _emit(self, node: Expr, frame: Frame):
        return emit(self, node, frame)
