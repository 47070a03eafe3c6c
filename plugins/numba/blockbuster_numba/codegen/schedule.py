"""Stage 3, schedule: the loops of the generated code.

* **Kernels.** Each kernel becomes one ``@njit`` function. Its loops over block
  indices become a ``prange`` over the outer loops (flattened when the outermost
  one alone has too few blocks to keep every core busy) and plain ``for`` loops
  inside. A loop over a dimension with a single block is no loop: its index is 0.
* **The parallel decision.** A kernel with too little work (from the cost model)
  runs on one thread: a parallel region costs more than it saves.
* ``reduce`` and ``map`` loops are opened and closed here too (a loop of one trip
  shares its parent's lines).
"""

from __future__ import annotations

from blockbuster.cost.counting import Loop
from blockbuster.ir.index import free_vars
from blockbuster.ir.program import Kernel, Program
from blockbuster.ir.types import Dim

from .plan import plan_index
from .values import Binding, Frame, indent

#: A kernel's parallel loop covers enough of its outer loops to split evenly over the
#: threads, or to give each thread this many iterations (load balance).
ITERATIONS_PER_THREAD = 4

#: Below this much work (FLOPs plus bytes moved, from the cost model) a kernel runs on
#: one thread: a parallel region costs more than it saves, and compiles 3x slower.
PARALLEL_MIN_WORK = 4e6


def parallel_prefix(multi: list[tuple[str, Dim]], threads: int) -> tuple[int, int]:
    """``(loops, iterations)``: how many outer loops the parallel loop covers. It
    covers them until every thread has work: as many iterations per thread, or
    ITERATIONS_PER_THREAD of them. Fewer flattened loops leave more to hoist out of
    the inner ones."""
    npar, total = 0, 1
    while npar < len(multi) and not (
            total >= threads and (total % threads == 0
                                  or total >= threads * ITERATIONS_PER_THREAD)):
        total *= multi[npar][1].nblocks
        npar += 1
    return npar, total


def worth_parallel(kernel: Kernel, program: Program, parallel: bool | None,
                   hardware) -> bool:
    """Whether the kernel runs its outer loops in parallel (``parallel``: forced),
    from its work priced on the backend's ``hardware``."""
    if parallel is not None:
        return parallel
    try:
        from blockbuster.cost.model import kernel_cost
        kc = kernel_cost(kernel, program, hardware)
        work = kc.flops + kc.global_bytes
    except Exception:   # the cost model cannot price it: assume it is worth it
        return True
    return work >= PARALLEL_MIN_WORK


def triangular(kernel: Kernel, var: str) -> bool:
    """Whether a reduction of the kernel has a bound that reads loop variable ``var``
    (its trip count, and the work of an iteration of ``var``, varies with it)."""
    for store in kernel.stores:
        for node in store.value.walk():
            if node.op == "reduce":
                bounds = [b for b in (node.attr.lo, node.attr.hi) if b is not None]
                if any(var in free_vars(b) for b in bounds):
                    return True
    return False


class KernelLoops:
    """The frames of a kernel's own loops (the function's top level first) and the
    header lines that open each loop below the top level."""

    def __init__(self, g):
        k, dims, names = g.kernel, g.dims, g.names
        self.root = root = Frame(None)
        self.frames = [root]
        self.headers: list[list[str]] = []
        self.parallel = False
        multi = []
        for var, dname in k.loops:
            d = dims[dname]
            if d.nblocks == 1:
                root.binds[var] = Binding(var, "0", d)   # a single block: no loop
            else:
                multi.append((var, d))
        npar, total = parallel_prefix(multi, g.m.threads)
        if npar and worth_parallel(k, g.m.program, g.m.parallel, g.m.hardware):
            self.parallel = True
            frame = Frame(root)
            par = multi[:npar]
            loop_names = [names.fresh(v) for v, _ in par]
            if npar == 1 and triangular(k, par[0][0]):
                # Work grows with the index (a reduction bounded by it, e.g. causal
                # attention): Numba splits a prange into equal contiguous chunks, so
                # the last thread would get most of it. Visited as 0, n-1, 1, n-2, ...
                # every chunk holds pairs of equal total work.
                n = par[0][1].nblocks
                flat = names.fresh("it")
                self.headers.append([f"for {flat} in prange({n}):  # {par[0][0]} in "
                                     f"{par[0][1].name}, in parallel, balanced"])
                body = [f"{loop_names[0]} = {flat} // 2 if {flat} % 2 == 0 "
                        f"else {n - 1} - {flat} // 2"]
            elif npar == 1:
                self.headers.append([f"for {loop_names[0]} in prange({par[0][1].nblocks}):"
                                     f"  # {par[0][0]} in {par[0][1].name}, in parallel"])
                body = []
            else:
                flat = names.fresh("it")
                space = ", ".join(f"{v} in {d.name}" for v, d in par)
                self.headers.append([f"for {flat} in prange({total}):  # ({space}) in parallel"])
                body = []
                stride = total
                for i, ((v, d), name) in enumerate(zip(par, loop_names)):
                    stride //= d.nblocks
                    code = flat if stride == 1 else f"{flat} // {stride}"
                    body.append(f"{name} = {code}" if i == 0 else f"{name} = {code} % {d.nblocks}")
            for (v, d), name in zip(par, loop_names):
                frame.binds[v] = Binding(v, name, d, Loop(name, d))
                body += g.x.block_vars(name, d)
            frame.lines.extend(body)
            self.frames.append(frame)
        else:
            npar = 0
        #: Variables of the kernel loops run as plain loops inside an instance.
        self.serial = tuple(v for v, _ in multi[npar:])
        for v, d in multi[npar:]:
            frame = Frame(self.frames[-1])
            name = names.fresh(v)
            frame.binds[v] = Binding(v, name, d, Loop(name, d))
            self.headers.append([f"for {name} in range({d.nblocks}):  # {v} in {d.name}"])
            frame.lines.extend(g.x.block_vars(name, d))
            self.frames.append(frame)

    @property
    def loops(self) -> tuple:
        """The kernel's loops (of more than one block) in counting terms."""
        return tuple(b.loop for f in self.frames for b in f.binds.values() if b.loop)

    @property
    def inner(self) -> Frame:
        return self.frames[-1]

    def close(self) -> list[str]:
        """Nest every loop's lines into its parent, innermost first; the top level's."""
        for frame, header in zip(reversed(self.frames[1:]), reversed(self.headers)):
            frame.parent.lines.extend(header + indent(frame.lines or ["pass"]))
        return self.root.lines


def open_loop(g, var: str, d: Dim, frame: Frame, single: bool, lo=None, hi=None):
    """A frame for the ``reduce``/``map`` loop binding ``var`` inside ``frame``, and
    its binding. ``lo``/``hi``: the loop's bounds for the load plan (IR indices)."""
    if single:
        inner = Frame(frame, share_lines=True)
        b = Binding(var, "0", d)
    else:
        inner = Frame(frame)
        name = g.names.fresh(var)
        b = Binding(var, name, d, Loop(name, d, plan_index(lo, frame), plan_index(hi, frame)))
        inner.lines.extend(g.x.block_vars(name, d))
    inner.binds[var] = b
    return inner, b


def close_loop(frame: Frame, inner: Frame, b: Binding, lo: str, hi: str,
               comment: str) -> None:
    if inner.lines is frame.lines:
        return
    rng = hi if lo == "0" else f"{lo}, {hi}"
    frame.lines.append(f"for {b.name} in range({rng}):  # {comment}")
    frame.lines.extend(indent(inner.lines or ["pass"]))

