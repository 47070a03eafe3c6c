"""Code generation: a block program becomes the source of a Python module for Numba.

Nothing here knows a workload or a rule: the generator walks the IR.

* **Kernels.** Each kernel becomes one ``@njit`` function. Its loops over block
  indices become a ``prange`` over the outer loops (flattened when the outermost
  one alone has too few blocks to keep every core busy) and plain ``for`` loops
  inside. A loop over a dimension with a single block is no loop: its index is 0.
* **Placement (CSE and hoisting).** Expression nodes are hash-consed, so a node is
  emitted once per *binding* of its free variables: the memo key is the node plus
  the identity of the loop that binds each of its variables. A node is computed in
  the innermost loop that binds one of its variables; everything else is hoisted.
* **Values.** A local value is a *block* (scalar, vector or 2-D block with symbolic
  extents: the last block of a dimension may be ragged), a *map array* (a padded
  NumPy array with one leading axis per ``map``) or a *tuple* (the outputs of a
  multi-output ``reduce``). Loads are views of the global arrays starting at 0.
* **Elementwise fusion.** Elementwise operators are lazy: a consumer that loops
  over the elements (another elementwise operator, an in-block reduction, an
  accumulation, a store) inlines them as one scalar expression, so a chain such as
  ``exp(rowshift(neg(m), mul(s, c)))`` is one loop with no temporary. A value used
  more than once (unless it costs one operation), or needed by an outer loop, is
  materialised once in a named array. Row-vector operands are read once per row.
* **Block operators** with their own loop structure: ``dot`` calls ``np.dot`` (BLAS)
  on contiguous blocks; row/column sums and maxima are explicit loops.
* **Reductions** keep their combiner's state in accumulators: ``sum``, ``max``,
  ``online_softmax`` (running max, ``runmax`` bound to it, earlier sums rescaled by
  ``exp(m_old - m_new)``), ``meanvar`` (Chan's update). Accumulators are allocated
  before the loop from the shape of the first block's term; an empty range leaves
  each combiner's identity, as in the reference interpreter.

The reference interpreter (``blockbuster.backends.reference``) is the definition of
every operator; comments below name the places where this code must agree with it.
"""

from __future__ import annotations

import keyword
import re
from collections import Counter
from typing import Callable

from blockbuster.errors import BackendError
from blockbuster.ir.combiners import COMBINERS
from blockbuster.ir.expr import Expr
from blockbuster.ir.index import IBin, IConst, Idx, IVar
from blockbuster.ir.printer import format_expr, format_kernel, format_float
from blockbuster.ir.program import Kernel, Program, Store
from blockbuster.ir.types import Dim

from .lowering import CHEAP, INBLOCK, MODULE_NAMES, NARY_CODE, UNARY_CODE
from .runtime import FASTMATH, HELPERS

#: A kernel's parallel loop covers enough of its outer loops to split evenly over the
#: threads, or to give each thread this many iterations (load balance).
ITERATIONS_PER_THREAD = 4

#: Below this much work (FLOPs plus bytes moved, from the cost model) a kernel runs on
#: one thread: a parallel region costs more than it saves, and compiles 3x slower.
PARALLEL_MIN_WORK = 4e6

def _shape_text(items) -> str:
    items = [str(i) for i in items]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _indent(lines: list[str], n: int = 1) -> list[str]:
    pad = "    " * n
    return [pad + line if line else line for line in lines]


class Namer:
    """Unique Python identifiers within one generated function or module."""

    def __init__(self, taken=(), parent: "Namer | None" = None, avoid: set | None = None,
                 record: set | None = None):
        self.taken = set(taken) | MODULE_NAMES
        self.parent = parent
        self.avoid = avoid if avoid is not None else set()      # names used elsewhere
        self.record = record if record is not None else set()   # where to note ours
        self.counts: Counter = Counter()

    def _free(self, name: str) -> bool:
        if name in self.taken or name in self.avoid or keyword.iskeyword(name):
            return False
        return self.parent is None or name not in self.parent.taken

    def fresh(self, hint: str) -> str:
        base = re.sub(r"\W", "_", hint) or "t"
        if base[0].isdigit():
            base = "_" + base
        if self._free(base):
            self.taken.add(base)
            self.record.add(base)
            return base
        while True:
            self.counts[base] += 1
            name = f"{base}_{self.counts[base]}"
            if self._free(name):
                self.taken.add(name)
                self.record.add(name)
                return name


# --- values ------------------------------------------------------------------------

class Axis:
    """One axis of a local block: a dimension and the (code of the) block index it is
    cut at, which fixes its extent (the last block of a dimension may be ragged)."""

    __slots__ = ("dim", "block")

    def __init__(self, dim: Dim, block: str):
        self.dim = dim
        self.block = block

    def subst(self, old: str, new: str) -> "Axis":
        if old == new or not re.search(rf"\b{re.escape(old)}\b", self.block):
            return self
        return Axis(self.dim, re.sub(rf"\b{re.escape(old)}\b", new, self.block))


def _padded(dim: Dim) -> int:
    """Extent of the largest block of ``dim``: map arrays are padded to it."""
    return min(dim.block, dim.size)


class Block:
    """A scalar, vector or 2-D block. Materialised (``name`` holds it) or lazy (an
    elementwise node over ``args`` that consumers inline as a scalar expression)."""

    __slots__ = ("axes", "name", "node", "args", "frame", "contig", "hint", "_contig_name")

    def __init__(self, axes, name=None, node=None, args=(), frame=None, contig=True,
                 hint="t"):
        self.axes = tuple(axes)
        self.name = name
        self.node = node
        self.args = list(args)
        self.frame = frame
        self.contig = contig
        self.hint = hint
        self._contig_name = None

    @property
    def rank(self) -> int:
        return len(self.axes)

    @property
    def lazy(self) -> bool:
        return self.name is None


class MapArray:
    """A ``map`` value: ``name`` is a padded array with one leading axis per map level
    (outermost first); element ``(b...)`` has ``elem_axes`` with each level's loop
    name replaced by ``b``."""

    __slots__ = ("name", "levels", "loop_names", "elem_axes")

    def __init__(self, name, levels, loop_names, elem_axes):
        self.name = name
        self.levels = list(levels)          # Dims, outermost first
        self.loop_names = list(loop_names)  # the map loops' variable names
        self.elem_axes = tuple(elem_axes)

    def element_axes(self, index_codes) -> tuple:
        axes = self.elem_axes
        for old, new in zip(self.loop_names, index_codes):
            axes = tuple(a.subst(old, new) for a in axes)
        return axes

    def padded_shape(self) -> list[int]:
        return [d.nblocks for d in self.levels] + [_padded(a.dim) for a in self.elem_axes]


class Multi:
    """The outputs of a multi-output reduction, read with ``proj``."""

    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)


class Binding:
    """A block-index variable bound by a kernel loop, a ``reduce`` or a ``map``."""

    __slots__ = ("var", "name", "dim", "runmax")

    def __init__(self, var: str, name: str, dim: Dim):
        self.var = var
        self.name = name      # Python code of the block index ('0' for a single block)
        self.dim = dim
        self.runmax = None    # the running max Block inside an online_softmax


class Frame:
    """One loop level of the generated code (or a loop with a single trip, which
    shares its parent's lines): its bindings, its lines and its memo."""

    __slots__ = ("parent", "depth", "binds", "lines", "memo")

    def __init__(self, parent: "Frame | None", share_lines: bool = False):
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.binds: dict[str, Binding] = {}
        self.lines: list[str] = parent.lines if share_lines else []
        self.memo: dict = {}

    def resolve(self, var: str) -> tuple["Frame", Binding]:
        frame = self
        while frame is not None:
            b = frame.binds.get(var)
            if b is not None:
                return frame, b
            frame = frame.parent
        raise BackendError(f"numba: block index variable '{var}' is not bound")


class Nest:
    """A loop nest over the elements of a block being generated: its index names, the
    per-row prelude (row-vector operands read once per row) and the lines it goes to."""

    def __init__(self, block: list, rank: int, namer: Namer):
        self.block = block
        self.rank = rank
        self.idx = ("r", "c")[:rank]
        self.prelude: list[str] = []
        self._hoisted: dict[str, str] = {}
        self.namer = namer

    def per_row(self, code: str, hint: str = "v") -> str:
        """``code`` depends on the row index only: compute it once per row."""
        if self.rank < 2:
            return code
        name = self._hoisted.get(code)
        if name is None:
            name = self._hoisted[code] = self.namer.fresh(hint + "_r")
            self.prelude.append(f"{name} = {code}")
        return name


class Sink:
    """Where elementwise results go: ``array[prefix..., r, c]`` combined by ``mode``
    (set, add, max, or rescale-add with the row factors ``alpha``)."""

    def __init__(self, array: str | None, prefix=(), mode: str = "set",
                 alpha: str | None = None, view=None):
        self.array = array
        self.prefix = tuple(prefix)
        self.mode = mode
        self.alpha = alpha
        self.view = view      # (prefix, frame) -> (view name, axes): a store's destination

    def at(self, index) -> "Sink":
        return Sink(self.array, self.prefix + tuple(index), self.mode, self.alpha, self.view)


# --- the generator ----------------------------------------------------------------------

class ModuleGenerator:
    """Generates the module source for one program (``generate_source``)."""

    def __init__(self, program: Program, dtype: str = "float32", threads: int = 2,
                 header: str = "", parallel: bool | None = None):
        if dtype not in HELPERS:
            raise BackendError(f"numba: dtype must be float32 or float64, got {dtype}")
        self.program = program
        self.dtype = dtype
        self.threads = max(1, threads)
        self.parallel = parallel     # None: decided per kernel from its work
        self.header = header
        self.dims = program.dim_map
        self.array_dims = {a.name: [self.dims[d] for d in a.dims] for a in program.arrays}
        self.consts: dict[str, str] = {}          # float hex -> module constant name
        self.const_lines: list[str] = []
        self.local_names: set[str] = set()      # every kernel's locals (consts avoid them)
        self.module_names = Namer(avoid=self.local_names)
        # Array names become the kernels' argument names (and the driver's locals).
        self.arg_names = {a.name: self.module_names.fresh(a.name) for a in program.arrays}
        self.kernel_names: dict[str, str] = {}

    # -- module -------------------------------------------------------------------------
    def generate(self) -> str:
        kernels = [self._kernel_source(k) for k in self.program.kernels]
        helpers = HELPERS[self.dtype]
        lines = [
            f"# Generated by blockbuster-numba from block program '{self.program.name}'.",
            "# One @njit function per kernel (prange over the parallel block loops), then",
            "# run(): allocate the global arrays and call the kernels in order.",
        ]
        if self.header:
            lines += [f"# {line}" for line in self.header.splitlines()]
        lines += [
            "import math",
            "",
            "import numpy as np",
            "from numba import njit, prange",
            "",
            "from blockbuster_numba.runtime import "
            + ", ".join(f"{fn} as {alias}" for alias, fn in helpers.items()),
            "",
            f"DT = np.{self.dtype}",
            "ONE = DT(1.0)",
            "ZERO = DT(0.0)",
            "NEG_INF = DT(-np.inf)",
            *self.const_lines,
            "FASTMATH = {" + ", ".join(repr(f) for f in sorted(FASTMATH))
            + "}  # IEEE otherwise: see blockbuster_numba.runtime.FASTMATH",
            "",
            "",
            "@njit(inline=\"always\", fastmath=FASTMATH, error_model=\"numpy\")",
            "def square_(x):",
            "    return x * x",
            "",
        ]
        for source in kernels:
            lines += ["", *source, ""]
        lines += ["", *self._driver()]
        return "\n".join(lines) + "\n"

    def const(self, value: float) -> str:
        key = float(value).hex()
        name = self.consts.get(key)
        if name is None:
            name = self.module_names.fresh(f"C{len(self.consts)}")
            self.consts[key] = name
            text = format_float(value)
            literal = {"inf": "np.inf", "-inf": "-np.inf", "nan": "np.nan"}.get(text, text)
            self.const_lines.append(f"{name} = DT({literal})")
        return name

    def _driver(self) -> list[str]:
        p = self.program
        names = self.arg_names
        last_use: dict[str, int] = {}
        for i, k in enumerate(p.kernels):
            for a in k.reads() | set(k.writes()):
                last_use[a] = i
        lines = ["def run(inputs):",
                 f'    """Run program {p.name}: inputs by name (C-contiguous {self.dtype}'
                 ' arrays) -> outputs by name."""']
        for name in p.inputs:
            lines.append(f"    {names[name]} = inputs[{name!r}]")
        for i, k in enumerate(p.kernels):
            for a in k.writes():
                shape = [self.dims[d].size for d in p.array(a).dims]
                lines.append(f"    {names[a]} = np.empty({_shape_text(shape)}, DT)")
            args = ", ".join(names[a] for a in self._kernel_args(k))
            lines.append(f"    {self._kernel_fn(k)}({args})")
            dead = sorted(a for a, j in last_use.items() if j == i and a in p.intermediates)
            if dead:  # free intermediates as soon as nothing reads them any more
                lines.append(f"    del {', '.join(names[a] for a in dead)}")
        outs = ", ".join(f"{o!r}: {names[o]}" for o in p.outputs)
        lines.append(f"    return {{{outs}}}")
        fns = ", ".join(self._kernel_fn(k) for k in p.kernels)
        lines += ["", "", f"KERNELS = [{fns}]"]
        return lines

    def _kernel_fn(self, kernel: Kernel) -> str:
        name = self.kernel_names.get(kernel.name)
        if name is None:
            name = self.kernel_names[kernel.name] = self.module_names.fresh("kernel_" + kernel.name)
        return name

    def _kernel_args(self, kernel: Kernel) -> list[str]:
        used = kernel.reads() | set(kernel.writes())
        return [a.name for a in self.program.arrays if a.name in used]

    # -- one kernel ---------------------------------------------------------------------
    def _kernel_source(self, kernel: Kernel) -> list[str]:
        return KernelGenerator(self, kernel).generate()


class KernelGenerator:
    def __init__(self, module: ModuleGenerator, kernel: Kernel):
        self.m = module
        self.kernel = kernel
        self.dims = module.dims
        self.args = module._kernel_args(kernel)
        self.names = Namer(parent=module.module_names, record=module.local_names)
        self.start_names: dict[str, str] = {}   # block-index name -> its first element
        self.len_names: dict[str, str] = {}     # block-index name -> its extent
        self.uses: Counter = Counter()       # distinct parents (and stores) of a node
        self.parents: dict[Expr, list[Expr]] = {}
        self._seen: set = set()
        self.stores = self._single_blocks(kernel.stores)
        self.register([s.value for s in self.stores])
        self.parallel = False
        self._checker = None
        self.lengths: dict[int, str] = {}      # constant loop length -> opaque variable

    def _single_blocks(self, stores) -> list[Store]:
        """The stores with the variable of every reduce/map over a single block replaced
        by the constant 0 in its bodies (except an online_softmax's: its runmax needs
        the binding). Such a loop has one trip and is no loop, and what its bodies
        compute is then placed (hoisted) by their other variables alone."""
        memo: dict = {}
        sub: dict = {}
        for store in stores:
            for n in store.value.walk():       # children first
                if n in memo:
                    continue
                args = tuple(memo[a] for a in n.args)
                new = n if all(x is y for x, y in zip(args, n.args)) else Expr(n.op, args, n.attr)
                if new.op in ("reduce", "map") and self.dims[new.attr.dim].nblocks == 1:
                    a = new.attr
                    full = new.op == "map" or (self._range_is_full(a))
                    if full and not (new.op == "reduce" and a.combiner == "online_softmax"):
                        memo_var = sub.setdefault(a.var, {})
                        new = Expr(new.op, tuple(substitute_var(b, a.var, 0, memo_var)
                                                 for b in new.args), a)
                memo[n] = new
        return [Store(s.array, s.index, memo[s.value]) for s in stores]

    @staticmethod
    def _range_is_full(a) -> bool:
        """A reduce range that is every block of a one-block dimension."""
        def const(ix, want):
            return ix is None or (isinstance(ix, IConst) and
                                  (ix.value <= 0 if want == 0 else ix.value >= 1))
        return const(a.lo, 0) and const(a.hi, 1)

    def register(self, roots) -> None:
        """Count the uses of the nodes below ``roots`` (each root used once more)."""
        for root in roots:
            self.uses[root] += 1
            for node in root.walk():
                if node in self._seen:
                    continue
                self._seen.add(node)
                for child in set(node.args):
                    self.uses[child] += 1
                    self.parents.setdefault(child, []).append(node)

    # -- the function -------------------------------------------------------------------
    def generate(self) -> list[str]:
        k = self.kernel
        root = Frame(None)
        frames = [root]
        multi = []
        for var, dname in k.loops:
            d = self.dims[dname]
            if d.nblocks == 1:
                root.binds[var] = Binding(var, "0", d)   # a single block: no loop
            else:
                multi.append((var, d))
        # The parallel loop covers the outer loops until every thread has work: as many
        # iterations per thread, or ITERATIONS_PER_THREAD of them. Fewer flattened
        # loops leave more to hoist out of the inner ones.
        threads = self.m.threads
        npar = 0
        total = 1
        while npar < len(multi) and not (
                total >= threads and (total % threads == 0
                                      or total >= threads * ITERATIONS_PER_THREAD)):
            total *= multi[npar][1].nblocks
            npar += 1
        headers: list[list[str]] = []
        if npar and self._worth_parallel():
            self.parallel = True
            frame = Frame(root)
            par = multi[:npar]
            names = [self.names.fresh(v) for v, _ in par]
            if npar == 1:
                headers.append([f"for {names[0]} in prange({par[0][1].nblocks}):"
                                f"  # {par[0][0]} in {par[0][1].name}, in parallel"])
                body = []
            else:
                flat = self.names.fresh("it")
                space = ", ".join(f"{v} in {d.name}" for v, d in par)
                headers.append([f"for {flat} in prange({total}):  # ({space}) in parallel"])
                body = []
                stride = total
                for i, ((v, d), name) in enumerate(zip(par, names)):
                    stride //= d.nblocks
                    code = flat if stride == 1 else f"{flat} // {stride}"
                    body.append(f"{name} = {code}" if i == 0 else f"{name} = {code} % {d.nblocks}")
            for (v, d), name in zip(par, names):
                frame.binds[v] = Binding(v, name, d)
                body += self._block_vars(name, d)
            frame.lines.extend(body)
            frames.append(frame)
        else:
            npar = 0
        for v, d in multi[npar:]:
            frame = Frame(frames[-1])
            name = self.names.fresh(v)
            frame.binds[v] = Binding(v, name, d)
            headers.append([f"for {name} in range({d.nblocks}):  # {v} in {d.name}"])
            frame.lines.extend(self._block_vars(name, d))
            frames.append(frame)
        inner = frames[-1]
        for store in self.stores:
            self.emit_store(store, inner)
        fn = self.m._kernel_fn(k)
        args = [self.m.arg_names[a] for a in self.args]
        sig = ", ".join(self._array_type(a) for a in self.args)
        text = "\n".join(format_kernel(k))
        doc = ['    """' + text.splitlines()[0]] + _indent(text.splitlines()[1:]) + ['    """']
        writes = ", ".join(k.writes())
        # Close the loops, innermost first.
        for frame, header in zip(reversed(frames[1:]), reversed(headers)):
            frame.parent.lines.extend(header + _indent(frame.lines or ["pass"]))
        deco = (f'@njit("void({sig})", parallel={self.parallel}, fastmath=FASTMATH, '
                'error_model="numpy", cache=True, nogil=True)')
        lengths = [f"{name} = opaque_({n})" for n, name in sorted(self.lengths.items())]
        if lengths:
            lengths[0] += "  # loop lengths LLVM cannot see (no full unrolling: fast compile)"
        return ([f"# kernel {k.name}: writes {writes}", deco,
                 f"def {fn}({', '.join(args)}):"] + doc + _indent(lengths + root.lines))

    def _worth_parallel(self) -> bool:
        if self.m.parallel is not None:
            return self.m.parallel
        try:
            from blockbuster.cost import kernel_cost
            kc = kernel_cost(self.kernel, self.m.program)
            work = kc.flops + kc.global_bytes
        except Exception:   # the cost model cannot price it: assume it is worth it
            return True
        return work >= PARALLEL_MIN_WORK

    def _array_type(self, name: str) -> str:
        rank = len(self.m.array_dims[name])
        return f"{self.m.dtype}[{', '.join([':'] * (rank - 1) + ['::1'])}]"

    def _block_vars(self, name: str, d: Dim) -> list[str]:
        """First element and extent of block ``name`` of ``d`` (only when needed)."""
        lines = []
        if d.point:
            self.start_names[name] = name
            return lines
        start = self.names.fresh(name + "0")
        self.start_names[name] = start
        lines.append(f"{start} = {name} * {d.block}")
        if d.size % d.block:
            ln = self.names.fresh(name + "_len")
            self.len_names[name] = ln
            lines.append(f"{ln} = {self._ext_expr(name, d)}")
        return lines

    # -- index arithmetic ---------------------------------------------------------------
    def idx_code(self, ix: Idx, frame: Frame) -> str:
        if isinstance(ix, IVar):
            return frame.resolve(ix.name)[1].name
        if isinstance(ix, IConst):
            return str(ix.value)
        if isinstance(ix, IBin):
            return f"({self.idx_code(ix.a, frame)} {ix.op} {self.idx_code(ix.b, frame)})"
        raise BackendError(f"numba: unknown block index {ix!r}")

    def block_index(self, ix: Idx, d: Dim, frame: Frame) -> str:
        """Code of a block index into ``d``, clamped to the blocks that exist where it
        cannot be proved in range (the reference clamps in its shape probe too)."""
        if d.nblocks == 1:
            return "0"
        if isinstance(ix, IVar):
            b = frame.resolve(ix.name)[1]
            if b.dim.name == d.name:
                return b.name
        if isinstance(ix, IConst) and 0 <= ix.value < d.nblocks:
            return str(ix.value)
        return f"min(max({self.idx_code(ix, frame)}, 0), {d.nblocks - 1})"

    def _ext_expr(self, block: str, d: Dim) -> str:
        last = d.size - (d.nblocks - 1) * d.block
        return f"{d.block} if {block} < {d.nblocks - 1} else {last}"

    def ext(self, axis: Axis) -> str:
        d = axis.dim
        if d.nblocks == 1:
            return str(d.size)
        if d.size % d.block == 0:
            return str(d.block)
        name = self.len_names.get(axis.block)
        return name if name else f"({self._ext_expr(axis.block, d)})"

    def loop_len(self, axis: Axis) -> str:
        """The trip count of a loop over the elements of ``axis``. A constant one is
        read from a variable LLVM cannot see through: fully unrolled and vectorised
        block loops made parallel kernels take 3-4x longer to compile, for nothing."""
        code = self.ext(axis)
        if not code.isdigit() or int(code) <= 4:
            return code
        name = self.lengths.get(int(code))
        if name is None:
            name = self.lengths[int(code)] = self.names.fresh(f"L{code}")
        return name

    def start(self, axis: Axis) -> str:
        d = axis.dim
        if d.nblocks == 1:
            return "0"
        name = self.start_names.get(axis.block)
        if name:
            return name
        return axis.block if d.block == 1 else f"{axis.block} * {d.block}"

    def shape(self, axes) -> str:
        return _shape_text(self.ext(a) for a in axes)

    # -- placement ----------------------------------------------------------------------
    def memo_key(self, node: Expr, frame: Frame) -> tuple:
        return (node, tuple(id(frame.resolve(v)[1]) for v in sorted(node.free_vars)))

    def value(self, node: Expr, frame: Frame):
        """The value of ``node`` seen from ``frame``: emitted once per binding of its
        free variables, in the innermost frame that binds one of them."""
        target = frame
        bindings = []
        deepest = None
        for var in sorted(node.free_vars):
            f, b = frame.resolve(var)
            bindings.append(id(b))
            if deepest is None or f.depth > deepest.depth:
                deepest = f
        if deepest is None:
            while target.parent is not None:
                target = target.parent
        else:
            target = deepest
        key = (node, tuple(bindings))
        hit = target.memo.get(key)
        if hit is None:
            hit = self._emit(node, target)
            target.memo[key] = hit
        return hit

    # -- expressions --------------------------------------------------------------------
    def _emit(self, node: Expr, frame: Frame):
        op = node.op
        if op == "const":
            return Block((), name=self.m.const(node.attr), frame=frame)
        if op == "load":
            return self.emit_load(node, frame)
        if op == "pos":
            d = self.dims[node.attr.dim]
            axis = Axis(d, self.block_index(node.attr.index, d, frame))
            return Block((axis,), node=node, frame=frame, hint="pos")
        if op == "runmax":
            _, b = frame.resolve(node.attr)
            if b.runmax is None:
                raise BackendError(f"numba: runmax({node.attr}) outside its online_softmax")
            return b.runmax
        if op == "proj":
            multi = self.value(node.args[0], frame)
            if not isinstance(multi, Multi):
                raise BackendError("numba: proj of a single-output value")
            return multi.items[node.attr]
        if op == "reduce":
            return self.emit_reduce(node, frame)
        if op == "map":
            return self.emit_map(node, frame)
        if op == "get":
            return self.emit_get(node, frame)
        args = [self.value(a, frame) for a in node.args]
        for a in args:
            if not isinstance(a, Block):
                raise BackendError(f"numba: '{op}' cannot take a map array or a tuple "
                                   f"in `{format_expr(node)[:80]}`")
        if op == "dot":
            return self.emit_dot(args, frame)
        if op in INBLOCK:
            return self.emit_inblock_reduce(node, args[0], frame)
        if op in UNARY_CODE:
            axes = args[0].axes
        elif op in NARY_CODE:     # a scalar operand broadcasts
            axes = next((x.axes for x in args if x.rank), ())
        elif op in ("rowscale", "rowshift", "colscale", "colshift"):
            axes = args[1].axes
        elif op == "keep_ge":
            axes = args[2].axes
        elif op == "outer":
            axes = (args[0].axes[0], args[1].axes[0])
        elif op == "transpose":
            axes = args[0].axes[::-1]
        elif op == "rotate_half":
            axes = args[0].axes
        elif op == "relabel":       # a's values, its columns renamed to p's dimension
            axes = (args[1].axes[0], args[0].axes[0])
        else:
            raise BackendError(f"numba: no code for operator '{op}'")
        return Block(axes, node=node, args=args, frame=frame, hint=op)

    def block_subscripts(self, blocks, dims) -> tuple[list[str], list]:
        """Python subscripts selecting block ``blocks`` (index expressions) of an
        array over ``dims``, and the axes of the resulting view: a point dimension
        takes one element, a one-block dimension all of it, others a slice."""
        subs, axes = [], []
        for b, d in zip(blocks, dims):
            if d.point:
                subs.append(b)
            elif d.nblocks == 1:
                subs.append(":")
                axes.append(Axis(d, "0"))
            else:
                axis = Axis(d, b)
                s = self.start(axis)
                subs.append(f"{s}:{s} + {self.ext(axis)}")
                axes.append(axis)
        return subs, axes

    def emit_load(self, node: Expr, frame: Frame) -> Block:
        array = node.attr.array
        dims = self.m.array_dims[array]
        subs, axes = self.block_subscripts(
            [self.block_index(ix, d, frame) for ix, d in zip(node.attr.index, dims)], dims)
        # C-contiguous when every subscript after the first non-integer one is ':'.
        first = next((i for i, (s, d) in enumerate(zip(subs, dims)) if not d.point), None)
        contig = first is not None and all(s == ":" for s in subs[first + 1:])
        while subs and subs[-1] == ":" and len(subs) > 1:
            subs.pop()   # X[a:b] is typed C-contiguous by Numba, X[a:b, :] is not
        arg = self.m.arg_names[array]
        if not axes:   # every dimension a point: a scalar element
            return Block((), name=f"{arg}[{', '.join(subs)}]", frame=frame)
        name = self.names.fresh(f"{array}_blk")
        frame.lines.append(f"{name} = {arg}[{', '.join(subs)}]")
        return Block(axes, name=name, frame=frame, contig=contig, hint=array)

    def emit_get(self, node: Expr, frame: Frame):
        """Block ``var`` of a map array: a view of the padded array, cut to the
        element's actual extents where they may be smaller (ragged)."""
        arr = self.value(node.args[0], frame)
        if not isinstance(arr, MapArray):
            raise BackendError(f"numba: get needs a map array in `{format_expr(node)[:80]}`")
        _, b = frame.resolve(node.attr)
        loop, rest = arr.loop_names[0], arr.loop_names[1:]
        axes = tuple(a.subst(loop, b.name) for a in arr.elem_axes)
        name = self.names.fresh(arr.name + "_get")
        if rest:   # an array of arrays: one level less
            frame.lines.append(f"{name} = {arr.name}[{b.name}]")
            return MapArray(name, arr.levels[1:], rest, axes)
        cuts = [self.ext(a) for a in axes]
        exact = all(cut == str(_padded(a.dim)) for cut, a in zip(cuts, axes))
        if exact:
            frame.lines.append(f"{name} = {arr.name}[{b.name}]")
        else:
            subs = [":" if cut == str(_padded(a.dim)) else ":" + cut for cut, a in zip(cuts, axes)]
            frame.lines.append(f"{name} = {arr.name}[{b.name}, {', '.join(subs)}]")
        return Block(axes, name=name, frame=frame, contig=exact or len(axes) < 2, hint="get")

    # -- elementwise code ---------------------------------------------------------------
    def cheap(self, v: Block) -> bool:
        if v.node is None or v.node.op not in CHEAP:
            return False
        return all(not a.lazy or (a.node is not None and a.node.op == "pos") for a in v.args)

    def ew(self, v: Block, idx: tuple, nest: Nest, repeated: bool = False) -> str:
        """Scalar code of ``v`` at element ``idx`` inside ``nest``."""
        if v.lazy:
            inline = (v.frame.lines is nest.block and
                      (self.cheap(v) or (self.uses[v.node] <= 1 and not repeated)))
            if v.rank == 0 and nest.rank > 0:
                inline = False        # a scalar: computed once, outside the loop
            if not inline:
                self.materialize(v)
        if not v.lazy:
            if v.rank == 0:
                return v.name
            code = f"{v.name}[{', '.join(idx)}]"
        else:
            code = self.ew_op(v, idx, nest)
        if nest.rank == 2 and v.rank == 1 and idx == (nest.idx[0],):
            return nest.per_row(code, v.hint)
        return code

    def ew_op(self, v: Block, idx: tuple, nest: Nest) -> str:
        op, a = v.node.op, v.args

        def arg(i, ix):
            return self.ew(a[i], ix, nest)

        if op in UNARY_CODE:
            return UNARY_CODE[op].format(arg(0, idx))
        if op in NARY_CODE:
            return NARY_CODE[op].format(*(arg(i, idx if x.rank else ()) for i, x in enumerate(a)))
        if op == "rowscale":
            return f"({arg(0, idx[:1])} * {arg(1, idx)})"
        if op == "rowshift":
            return f"({arg(1, idx)} + {arg(0, idx[:1])})"
        if op == "colscale":
            return f"({arg(1, idx)} * {arg(0, idx[1:])})"
        if op == "colshift":
            return f"({arg(1, idx)} + {arg(0, idx[1:])})"
        if op == "outer":
            return f"({arg(0, idx[:1])} * {arg(1, idx[1:])})"
        if op == "keep_ge":  # a where p[r] >= q[c], else -inf
            return f"({arg(2, idx)} if {arg(0, idx[:1])} >= {arg(1, idx[1:])} else NEG_INF)"
        if op == "transpose":
            return arg(0, idx[::-1])
        if op == "relabel":
            return arg(1, idx)
        if op == "rotate_half":  # concat(-x2, x1) of the column halves
            x = a[0]
            self.materialize(x)
            i, j = idx
            h = self.names.fresh("half")
            x.frame.lines.append(f"{h} = {self.ext(x.axes[1])} // 2")
            return f"(-{x.name}[{i}, {j} + {h}] if {j} < {h} else {x.name}[{i}, {j} - {h}])"
        if op == "pos":
            return f"DT({self.start(v.axes[0])} + {idx[0]})"
        raise BackendError(f"numba: no elementwise code for '{op}'")

    def loop_nest(self, frame_lines: list, axes, body: Callable[[Nest], tuple]) -> None:
        """Emit ``for r: [row_init]; for c: [inner]; [row_final]`` over ``axes``.
        ``body(nest)`` returns ``(row_init, inner, row_final)`` line lists."""
        nest = Nest(frame_lines, len(axes), self.names)
        row_init, inner, row_final = body(nest)
        exts = [self.loop_len(a) for a in axes]
        if nest.rank == 0:
            lines = nest.prelude + row_init + inner + row_final
        elif nest.rank == 1:
            lines = [f"for r in range({exts[0]}):"] + _indent(
                nest.prelude + row_init + inner + row_final)
        else:
            lines = [f"for r in range({exts[0]}):"] + _indent(
                nest.prelude + row_init + [f"for c in range({exts[1]}):"]
                + _indent(inner) + row_final)
        frame_lines.extend(lines)

    def materialize(self, v: Block, want: Expr | None = None) -> Block | None:
        """Compute a lazy block into a named array (or a named scalar) in its frame.

        Row and column sums/maxima of the block that the kernel uses (``want``, and
        any other such parent not computed yet) are accumulated in the same loop
        nest, as a person would write it; returns ``want``'s value."""
        if not v.lazy:
            return None
        name = self.names.fresh(v.hint)
        lines = v.frame.lines
        if v.rank == 0:
            nest = Nest(lines, 0, self.names)
            code = self.ew_op(v, (), nest)
            lines.extend(nest.prelude + [f"{name} = {code}"])
            v.name, v.contig, v.args = name, True, []
            return None
        reds = [want] if want is not None else []
        if v.rank == 2:
            for p in self.parents.get(v.node, ()):
                if p.op in INBLOCK and p is not want and p.args[0] is v.node \
                        and self.memo_key(p, v.frame) not in v.frame.memo:
                    reds.append(p)
        lines.append(f"{name} = np.empty({self.shape(v.axes)}, DT)")
        outs = {}
        row_init, inner_upd, row_final = [], [], []
        elem = self.names.fresh("x") if reds else None
        for p in reds:
            out = self.names.fresh(p.op)
            total = p.op.endswith("sum")
            init = "ZERO" if total else "NEG_INF"
            if p.op.startswith("row"):
                axes = (v.axes[0],)
                acc = self.names.fresh("acc")
                lines.append(f"{out} = np.empty({self.shape(axes)}, DT)")
                row_init.append(f"{acc} = {init}")
                inner_upd.append(f"{acc} = {acc} + {elem}" if total
                                 else f"{acc} = maximum_({acc}, {elem})")
                row_final.append(f"{out}[r] = {acc}")
            else:
                axes = (v.axes[1],)
                fill = "np.zeros" if total else "np.full"
                lines.append(f"{out} = {fill}({self.shape(axes)}{'' if total else ', NEG_INF'}, DT)")
                inner_upd.append(f"{out}[c] = {out}[c] + {elem}" if total
                                 else f"{out}[c] = maximum_({out}[c], {elem})")
            outs[p] = Block(axes, name=out, frame=v.frame, hint=p.op)

        def body(n: Nest):
            code = self.ew_op(v, n.idx, n)
            idx = ", ".join(n.idx)
            if not reds:
                return [], [f"{name}[{idx}] = {code}"], []
            return row_init, [f"{elem} = {code}", f"{name}[{idx}] = {elem}"] + inner_upd, row_final

        self.loop_nest(lines, v.axes, body)
        v.name, v.contig, v.args = name, True, []
        for p, blk in outs.items():
            if p is not want:
                v.frame.memo[self.memo_key(p, v.frame)] = blk
        return outs.get(want)

    def write(self, v: Block, sink: Sink, frame: Frame, axes=None) -> None:
        """Combine ``v`` into ``sink`` element by element (one fused loop nest)."""
        axes = v.axes if axes is None else axes

        def body(n: Nest):
            x = self.ew(v, n.idx, n)
            target = f"{sink.array}[{', '.join(sink.prefix + n.idx)}]"
            if target.endswith("[]"):
                target = sink.array
            if sink.mode == "set":
                line = f"{target} = {x}"
            elif sink.mode == "add":
                line = f"{target} += {x}"
            elif sink.mode == "max":
                line = f"{target} = maximum_({target}, {x})"
            elif sink.mode == "scale_add":  # online_softmax: rescale, then add
                alpha = f"{sink.alpha}[{n.idx[0]}]" if n.rank else sink.alpha
                line = f"{target} = {target} * {n.per_row(alpha, 'alpha')} + {x}"
            else:
                raise AssertionError(sink.mode)
            return [], [line], []

        self.loop_nest(frame.lines, axes, body)

    # -- block operators ----------------------------------------------------------------
    def matrix(self, v: Block) -> str:
        """Code of ``v`` as a 2-D array ``np.dot`` can take without copying."""
        if v.lazy and v.node.op == "transpose" and not v.args[0].lazy:
            return self.matrix(v.args[0]) + ".T"
        if v.lazy and v.node.op == "relabel":     # a view: the same values
            return self.matrix(v.args[1])
        self.materialize(v)
        if v.contig:
            return v.name
        if v._contig_name is None:
            v._contig_name = self.names.fresh(v.hint + "_c")
            v.frame.lines.append(f"{v._contig_name} = np.ascontiguousarray({v.name})")
        return v._contig_name

    def emit_dot(self, args, frame: Frame) -> Block:
        a, b = args
        name = self.names.fresh("dot")
        frame.lines.append(f"{name} = np.dot({self.matrix(a)}, {self.matrix(b)})")
        return Block((a.axes[0], b.axes[1]), name=name, frame=frame, hint="dot")

    def emit_inblock_reduce(self, node: Expr, a: Block, frame: Frame) -> Block:
        op = node.op
        if a.lazy and a.rank == 2 and not (
                a.frame.lines is frame.lines and (self.cheap(a) or self.uses[a.node] <= 1)):
            # The operand is needed elsewhere too: store it, reducing in the same loop.
            return self.materialize(a, want=node)
        name = self.names.fresh(op)
        axes = (a.axes[0],) if op.startswith("row") else (a.axes[1],)
        combine = "{0} + {1}" if op.endswith("sum") else "maximum_({0}, {1})"
        init = "ZERO" if op.endswith("sum") else "NEG_INF"
        if op.startswith("row"):
            frame.lines.append(f"{name} = np.empty({self.shape(axes)}, DT)")
            acc = self.names.fresh("acc")

            def body(n: Nest):
                x = self.ew(a, n.idx, n)
                return ([f"{acc} = {init}"], [f"{acc} = {combine.format(acc, x)}"],
                        [f"{name}[r] = {acc}"])
        else:
            fill = "np.zeros" if op.endswith("sum") else "np.full"
            extra = "" if op.endswith("sum") else ", NEG_INF"
            frame.lines.append(f"{name} = {fill}({self.shape(axes)}{extra}, DT)")

            def body(n: Nest):
                x = self.ew(a, n.idx, n)
                return [], [f"{name}[c] = {combine.format(f'{name}[c]', x)}"], []
        self.loop_nest(frame.lines, a.axes, body)
        return Block(axes, name=name, frame=frame, hint=op)

    # -- reductions -----------------------------------------------------------------------
    def _range(self, node: Expr, frame: Frame) -> tuple[str, str, bool]:
        """``(lo, hi, single)``: clamped bounds of a reduce; single when the range is
        the whole of a one-block dimension (no loop)."""
        a = node.attr
        d = self.dims[a.dim]
        n = d.nblocks

        def bound(ix, default):
            if ix is None:
                return str(default)
            if isinstance(ix, IConst):
                return str(min(max(ix.value, 0), n))
            return f"min(max({self.idx_code(ix, frame)}, 0), {n})"

        lo, hi = bound(a.lo, 0), bound(a.hi, n)
        return lo, hi, (lo == "0" and hi == str(n) and n == 1)

    def _open_loop(self, var: str, d: Dim, frame: Frame, single: bool):
        if single:
            inner = Frame(frame, share_lines=True)
            b = Binding(var, "0", d)
        else:
            inner = Frame(frame)
            name = self.names.fresh(var)
            b = Binding(var, name, d)
            inner.lines.extend(self._block_vars(name, d))
        inner.binds[var] = b
        return inner, b

    def _close_loop(self, frame: Frame, inner: Frame, b: Binding, lo: str, hi: str,
                    comment: str) -> None:
        if inner.lines is frame.lines:
            return
        rng = hi if lo == "0" else f"{lo}, {hi}"
        frame.lines.append(f"for {b.name} in range({rng}):  # {comment}")
        frame.lines.extend(_indent(inner.lines or ["pass"]))

    def emit_reduce(self, node: Expr, frame: Frame):
        a = node.attr
        comb = COMBINERS.get(a.combiner)
        if comb is None:
            raise BackendError(f"numba: unknown combiner '{a.combiner}'")
        d = self.dims[a.dim]
        lo, hi, single = self._range(node, frame)
        inner, b = self._open_loop(a.var, d, frame, single)
        # Accumulators take the sizes of the first block's terms (clamped: an empty
        # range still needs shapes, which the reference takes from a real block).
        first = (str(min(int(lo), d.nblocks - 1)) if lo.isdigit()
                 else f"min({lo}, {d.nblocks - 1})")

        def acc_axes(axes):
            return tuple(x.subst(b.name, first) for x in axes)

        what = f"{a.combiner}({a.var} in {a.dim}"
        if a.lo is not None or a.hi is not None:
            what += f"[{'' if a.lo is None else a.lo} : {'' if a.hi is None else a.hi}]"
        what += ")"
        bodies = f"{len(node.args)} bod{'y' if len(node.args) == 1 else 'ies'}"
        frame.lines.append(f"# {what}: {bodies}" + (", one block: no loop" if single else ""))
        combine = getattr(self, "_reduce_" + a.combiner)
        outs = combine(node, frame, inner, b, single, acc_axes)
        self._close_loop(frame, inner, b, lo, hi, f"{a.var} in {a.dim}")
        return outs[0] if len(outs) == 1 else Multi(outs)

    def _passenger(self, body: Expr, inner: Frame, frame: Frame, single: bool, mode: str,
                   acc_axes, alpha=None):
        """Emit one passenger body and combine it into a new accumulator; returns the
        accumulator's value (or the term itself when the loop has a single trip)."""
        if single:
            return self.value(body, inner)
        if body.op == "map":   # accumulate straight into the accumulator array
            arr = self._map_shape(body, inner)
            name = self.names.fresh("acc")
            fill = "np.full" if mode == "max" else "np.zeros"
            extra = ", NEG_INF" if mode == "max" else ""
            frame.lines.append(f"{name} = {fill}({_shape_text(arr)}{extra}, DT)")
            m = self.emit_map(body, inner, Sink(name, (), mode, alpha))
            return MapArray(name, m.levels, m.loop_names, acc_axes(m.elem_axes))
        t = self.value(body, inner)
        name = self.names.fresh("acc")
        if isinstance(t, MapArray):
            frame.lines.append(f"{name} = np.zeros({_shape_text(t.padded_shape())}, DT)")
            if mode == "add":
                inner.lines.append(f"{name} += {t.name}")
            elif mode == "scale_add":
                lv = len(t.levels)
                inner.lines.append(f"for r in range({alpha}.shape[0]):")
                inner.lines.append(f"    {name}[{':, ' * lv}r] *= {alpha}[r]")
                inner.lines.append(f"{name} += {t.name}")
            else:
                raise BackendError(f"numba: cannot {mode}-accumulate a map array")
            return MapArray(name, t.levels, t.loop_names, acc_axes(t.elem_axes))
        if isinstance(t, Multi):
            raise BackendError("numba: a reduction cannot accumulate a tuple")
        axes = acc_axes(t.axes)
        if t.rank == 0:
            init = "NEG_INF" if mode == "max" else "ZERO"
            frame.lines.append(f"{name} = {init}")
        elif mode == "max":
            frame.lines.append(f"{name} = np.full({self.shape(axes)}, NEG_INF, DT)")
        else:
            frame.lines.append(f"{name} = np.zeros({self.shape(axes)}, DT)")
        self.write(t, Sink(name, (), mode, alpha), inner)
        return Block(axes, name=name, frame=frame, hint="acc")

    def _reduce_sum(self, node, frame, inner, b, single, acc_axes):
        return [self._passenger(t, inner, frame, single, "add", acc_axes) for t in node.args]

    def _reduce_max(self, node, frame, inner, b, single, acc_axes):
        return [self._passenger(t, inner, frame, single, "max", acc_axes) for t in node.args]

    def _reduce_online_softmax(self, node, frame, inner, b, single, acc_axes):
        # Reference: m_new = max(m, rowmax(x)); seen = m_new with -inf -> 0 (a row of
        # -inf logits sees runmax 0, so its terms are exp(-inf) = 0, not nan); terms
        # use runmax = seen; sums = exp(m - seen) * sums + terms.
        x = self.value(node.args[0], inner)
        rows = (x.axes[0],)
        m = self.names.fresh("m_run")
        seen = self.names.fresh("m_seen")
        mx = self.names.fresh("mx")
        if single:
            frame.lines.append(f"{m} = np.empty({self.shape(rows)}, DT)")
            frame.lines.append(f"{seen} = np.empty({self.shape(rows)}, DT)")

            def body(n: Nest):
                v = self.ew(x, n.idx, n)
                return ([f"{mx} = NEG_INF"], [f"{mx} = maximum_({mx}, {v})"],
                        [f"{m}[r] = {mx}", f"{seen}[r] = ZERO if {mx} == NEG_INF else {mx}"])
            self.loop_nest(inner.lines, x.axes, body)
            b.runmax = Block(rows, name=seen, frame=inner, hint="m_seen")
            outs = [Block(rows, name=m, frame=frame, hint="m_run")]
            outs += [self.value(t, inner) for t in node.args[1:]]
            return outs
        acc_rows = acc_axes(rows)
        alpha = self.names.fresh("alpha")
        frame.lines.append(f"{m} = np.full({self.shape(acc_rows)}, NEG_INF, DT)  # running max")
        frame.lines.append(f"{seen} = np.empty({self.shape(acc_rows)}, DT)  # runmax: the max, -inf as 0")
        frame.lines.append(f"{alpha} = np.empty({self.shape(acc_rows)}, DT)  # rescaling of earlier sums")
        sn = self.names.fresh("sn")

        def body(n: Nest):
            v = self.ew(x, n.idx, n)
            return ([f"{mx} = {m}[r]"], [f"{mx} = maximum_({mx}, {v})"],
                    [f"{sn} = ZERO if {mx} == NEG_INF else {mx}",
                     f"{alpha}[r] = exp_({m}[r] - {sn})",
                     f"{seen}[r] = {sn}",
                     f"{m}[r] = {mx}"])
        self.loop_nest(inner.lines, x.axes, body)
        b.runmax = Block(rows, name=seen, frame=inner, hint="m_seen")
        outs = [Block(acc_rows, name=m, frame=frame, hint="m_run")]
        for t in node.args[1:]:
            outs.append(self._passenger(t, inner, frame, False, "scale_add", acc_axes, alpha))
        return outs

    def _reduce_meanvar(self, node, frame, inner, b, single, acc_axes):
        # Chan et al.: merge each block's (count, mean, M2) into the running one; the
        # outputs are (n, row sums, row sums of squared deviations). Passengers: sums.
        x = self.value(node.args[0], inner)
        self.materialize(x)        # read twice per row: mean, then squared deviations
        xs = x.name
        rows, cols = (x.axes[0],), x.axes[1]
        nb = self.names.fresh("n_blk")
        nsum, mean, s, q = (self.names.fresh(h) for h in ("mv_n", "mv_mean", "mv_s", "mv_q"))
        sb, mb, qb, dv, delta = (self.names.fresh(h) for h in ("s_b", "mean_b", "q_b", "dev", "delta"))
        lines = inner.lines
        if single:
            frame.lines.append(f"{s} = np.empty({self.shape(rows)}, DT)")
            frame.lines.append(f"{q} = np.empty({self.shape(rows)}, DT)")
            lines.append(f"{nsum} = DT({self.ext(cols)})")
            lines.append(f"for r in range({self.loop_len(rows[0])}):")
            lines.extend(_indent([
                f"{sb} = ZERO",
                f"for c in range({self.loop_len(cols)}):",
                f"    {sb} += {xs}[r, c]",
                f"{mb} = {sb} / {nsum}",
                f"{qb} = ZERO",
                f"for c in range({self.loop_len(cols)}):",
                f"    {dv} = {xs}[r, c] - {mb}",
                f"    {qb} += {dv} * {dv}",
                f"{s}[r] = {sb}",
                f"{q}[r] = {qb}",
            ]))
            outs = [Block((), name=nsum, frame=frame), Block(rows, name=s, frame=frame),
                    Block(rows, name=q, frame=frame)]
            return outs + [self.value(t, inner) for t in node.args[1:]]
        # Block means are merged in a frame shifted by the row's first element: a mean
        # of 1e3-sized values rounds at ulp(1e3), and Chan's merge term (delta²) would
        # carry that error to first order; shifted means are O(σ) (as the reference).
        acc_rows = acc_axes(rows)
        shift = self.names.fresh("mv_shift")
        frame.lines.append(f"{nsum} = ZERO  # elements per row so far")
        for v in (mean, s, q, shift):
            frame.lines.append(f"{v} = np.zeros({self.shape(acc_rows)}, DT)")
        w1, w2, tot = (self.names.fresh(h) for h in ("w_new", "w_cross", "n_tot"))
        lines.append(f"{nb} = DT({self.ext(cols)})")
        lines.append(f"{tot} = {nsum} + {nb}")
        lines.append(f"{w1} = {nb} / {tot}")
        lines.append(f"{w2} = {nsum} * {nb} / {tot}")
        lines.append(f"for r in range({self.loop_len(rows[0])}):")
        lines.extend(_indent([
            f"if {nsum} == ZERO:",
            f"    {shift}[r] = {xs}[r, 0]",
            f"{sb} = ZERO",
            f"{mb} = ZERO",
            f"for c in range({self.loop_len(cols)}):",
            f"    {sb} += {xs}[r, c]",
            f"    {mb} += {xs}[r, c] - {shift}[r]",
            f"{mb} = {mb} / {nb}",
            f"{qb} = ZERO",
            f"for c in range({self.loop_len(cols)}):",
            f"    {dv} = ({xs}[r, c] - {shift}[r]) - {mb}",
            f"    {qb} += {dv} * {dv}",
            f"{delta} = {mb} - {mean}[r]",
            f"{mean}[r] += {delta} * {w1}",
            f"{q}[r] += {qb} + {delta} * {delta} * {w2}",
            f"{s}[r] += {sb}",
        ]))
        lines.append(f"{nsum} = {tot}")
        outs = [Block((), name=nsum, frame=frame), Block(acc_rows, name=s, frame=frame),
                Block(acc_rows, name=q, frame=frame)]
        for t in node.args[1:]:
            outs.append(self._passenger(t, inner, frame, False, "add", acc_axes))
        return outs

    # -- maps -----------------------------------------------------------------------------
    def _map_shape(self, node: Expr, frame: Frame) -> list[int]:
        """Padded shape of the map array ``node`` evaluates to (from its type)."""
        from blockbuster.ir.types import ArrayType, BlockType
        scope = {}
        chain = []
        f = frame
        while f is not None:
            chain.append(f)
            f = f.parent
        for fr in reversed(chain):       # inner bindings shadow outer ones
            for var, b in fr.binds.items():
                rows = b.runmax.axes[0].dim.name if b.runmax is not None else None
                scope[var] = (b.dim.name, rows)
        if self._checker is None:
            from blockbuster.ir.verify import TypeChecker
            self._checker = TypeChecker(self.m.program)
        t = self._checker.type_of(node, scope, f"kernel '{self.kernel.name}'")
        shape = []
        while isinstance(t, ArrayType):
            shape.append(self.dims[t.dim].nblocks)
            t = t.elem
        if not isinstance(t, BlockType):
            raise BackendError(f"numba: a map element must be a block, got {t}")
        return shape + [_padded(self.dims[a]) for a in t.axes]

    def emit_map(self, node: Expr, frame: Frame, sink: Sink | None = None) -> MapArray:
        var, d = node.attr.var, self.dims[node.attr.dim]
        own = sink is None
        if own:
            name = self.names.fresh("map_" + node.attr.var)
            shape = self._map_shape(node, frame)
            frame.lines.append(f"{name} = np.zeros({_shape_text(shape)}, DT)"
                               f"  # map({var} in {d.name}): one padded block per index")
            sink = Sink(name)
        single = d.nblocks == 1
        inner, b = self._open_loop(var, d, frame, single)
        body = node.args[0]
        here = sink.at([b.name])
        if body.op == "map":
            sub = self.emit_map(body, inner, here)
            levels, loops, elem = [d] + sub.levels, [b.name] + sub.loop_names, sub.elem_axes
        else:
            v = self.value(body, inner)
            if isinstance(v, MapArray):   # shared nested map computed elsewhere
                op = {"set": "=", "add": "+="}.get(sink.mode)
                if here.view is not None:
                    raise BackendError("numba: a map array cannot be stored as a block")
                if op is None:
                    raise BackendError(f"numba: cannot {sink.mode}-combine a map array")
                inner.lines.append(f"{here.array}[{', '.join(here.prefix)}] {op} {v.name}")
                levels, loops, elem = [d] + v.levels, [b.name] + v.loop_names, v.elem_axes
            elif isinstance(v, Block):
                if here.view is not None:   # straight into a store's destination block
                    view, axes = here.view(here.prefix, inner)
                    self.write(v, Sink(view), inner, axes)
                else:
                    self.write(v, here, inner)
                levels, loops, elem = [d], [b.name], v.axes
            else:
                raise BackendError("numba: a map element cannot be a tuple")
        self._close_loop(frame, inner, b, "0", str(d.nblocks), f"map {var} in {d.name}")
        return MapArray(sink.array if own else None, levels, loops, elem)

    # -- stores ---------------------------------------------------------------------------
    def emit_store(self, store: Store, frame: Frame) -> None:
        array = store.array
        dims = self.m.array_dims[array]
        text = ", ".join(":" if i is None else str(i) for i in store.index)
        frame.lines.append(f"# store {array}[{text}]")
        colons = [k for k, ix in enumerate(store.index) if ix is None]
        depth, node = 0, store.value
        while node.op == "map":
            depth, node = depth + 1, node.args[0]
        if colons and depth == len(colons) and self.uses[store.value] == 1:
            # map(...) stored with ':': each element goes straight to its block.
            fixed = {k: self.block_index(ix, d, frame)
                     for k, (ix, d) in enumerate(zip(store.index, dims)) if ix is not None}

            def view(prefix, at: Frame):
                it = iter(prefix)
                blocks = [fixed[k] if k in fixed else next(it) for k in range(len(dims))]
                return self._dest_view(array, blocks, at)

            self.emit_map(store.value, frame, Sink(None, view=view))
            return
        v = self.value(store.value, frame)
        if not colons:
            if not isinstance(v, Block):
                raise BackendError(f"numba: store to {array} needs a block value")
            blocks = [self.block_index(ix, d, frame) for ix, d in zip(store.index, dims)]
            self._store_block(array, blocks, v, frame)
            return
        if not isinstance(v, MapArray) or len(v.levels) < len(colons):
            raise BackendError(f"numba: ':' store to {array} needs a map value")
        # One loop per ':', outermost map level first; each element is a view of the
        # padded map array (its actual extents come from the element's axes).
        sub = Frame(frame)
        names = []
        for k in colons:
            name = self.names.fresh(dims[k].name.lower() + "_b")
            names.append(name)
            sub.lines.extend(self._block_vars(name, dims[k]))
        it = iter(names)
        blocks = [next(it) if ix is None else self.block_index(ix, d, frame)
                  for ix, d in zip(store.index, dims)]
        elem = self.names.fresh(v.name + "_elem")
        sub.lines.append(f"{elem} = {v.name}[{', '.join(names)}]")
        src = Block(v.element_axes(names), name=elem, frame=sub, contig=False)
        self._store_block(array, blocks, src, sub)
        nested = sub.lines
        for k, name in reversed(list(zip(colons, names))):
            nested = [f"for {name} in range({dims[k].nblocks}):"] + _indent(nested)
        frame.lines.extend(nested)

    def _store_block(self, array: str, blocks, v: Block, frame: Frame) -> None:
        """``array[blocks] = v`` through a view of the destination block."""
        view, axes = self._dest_view(array, blocks, frame)
        if not axes:
            self.materialize(v)
            frame.lines.append(f"{view} = {v.name}")
            return
        self.write(v, Sink(view), frame, axes)

    def _dest_view(self, array: str, blocks, frame: Frame):
        """A view of block ``blocks`` of ``array`` (emitted in ``frame``) and its axes;
        for a block of point dimensions only, the element itself and no axes."""
        arg = self.m.arg_names[array]
        subs, axes = self.block_subscripts(blocks, self.m.array_dims[array])
        while len(subs) > 1 and subs[-1] == ":":
            subs.pop()
        if not axes:
            return f"{arg}[{', '.join(subs)}]", ()
        view = self.names.fresh(array + "_out")
        frame.lines.append(f"{view} = {arg}[{', '.join(subs)}]")
        return view, tuple(axes)


def substitute_var(node: Expr, var: str, value: int, memo: dict | None = None) -> Expr:
    """``node`` with the block-index variable ``var`` replaced by the constant ``value``
    (loads, positions and reduce bounds; a binder of ``var`` shadows it below)."""
    from blockbuster.ir.expr import LoadAttr, PosAttr, ReduceAttr
    from blockbuster.ir.index import substitute

    memo = {} if memo is None else memo
    mapping = {var: IConst(value)}

    def go(n: Expr) -> Expr:
        if var not in n.free_vars:
            return n
        hit = memo.get(n)
        if hit is not None:
            return hit
        op, attr = n.op, n.attr
        if op == "load":
            out = Expr(op, (), LoadAttr(attr.array, tuple(substitute(i, mapping)
                                                            for i in attr.index)))
        elif op == "pos":
            out = Expr(op, (), PosAttr(attr.dim, substitute(attr.index, mapping)))
        elif op == "runmax":
            raise BackendError(f"numba: cannot substitute runmax({var})")
        elif op == "reduce":
            lo = None if attr.lo is None else substitute(attr.lo, mapping)
            hi = None if attr.hi is None else substitute(attr.hi, mapping)
            args = n.args if attr.var == var else tuple(go(a) for a in n.args)
            out = Expr(op, args, ReduceAttr(attr.combiner, attr.var, attr.dim, lo, hi))
        else:   # map (of another variable) and every operator
            out = Expr(op, tuple(go(a) for a in n.args), attr)
        memo[n] = out
        return out

    return go(node)


def generate_source(program: Program, dtype: str = "float32", threads: int | None = None,
                    header: str = "", parallel: bool | None = None) -> str:
    """The Python source of ``program`` for Numba: one ``@njit`` function per kernel
    and ``run(inputs) -> outputs``. Deterministic: the same program gives the same
    text (it is the cache key of the compiled module)."""
    if threads is None:
        from .hardware import cpu_count
        threads = cpu_count()
    return ModuleGenerator(program, dtype=dtype, threads=threads, header=header,
                           parallel=parallel).generate()
