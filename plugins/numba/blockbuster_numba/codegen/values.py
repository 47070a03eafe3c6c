"""What the generator works with: names, block-index code, local values and loop frames.

* **Values.** A local value is a *block* (scalar, vector or 2-D block with symbolic
  extents: the last block of a dimension may be ragged), a *map array* (a padded
  NumPy array with one leading axis per ``map``) or a *tuple* (the outputs of a
  multi-output ``reduce``).
* **Block-index code** (:class:`IndexCode`) keeps the loop variables it reads apart
  from its text, so the extents of an accumulator or of a map element are re-cut at
  another block index structurally (:meth:`IndexCode.subst`), never by rewriting text.
"""

from __future__ import annotations

import keyword
import re
from collections import Counter

from blockbuster.errors import BackendError
from blockbuster.ir.types import Dim

from ..lowering import MODULE_NAMES


def shape_text(items) -> str:
    items = [str(i) for i in items]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def indent(lines: list[str], n: int = 1) -> list[str]:
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


class LoopVar:
    """A block-index loop variable of the generated code, inside an :class:`IndexCode`."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class IndexCode:
    """The Python code of a block index: literal text and :class:`LoopVar` pieces."""

    __slots__ = ("parts", "text")

    def __init__(self, *parts):
        flat = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, IndexCode) else (p,))
        self.parts = tuple(flat)
        self.text = "".join(p.name if isinstance(p, LoopVar) else p for p in self.parts)

    @staticmethod
    def var(name: str) -> "IndexCode":
        return IndexCode(LoopVar(name))

    def __str__(self) -> str:
        return self.text

    def subst(self, old: str, new: "IndexCode") -> "IndexCode":
        """This code with loop variable ``old`` replaced by the code ``new``."""
        if not any(isinstance(p, LoopVar) and p.name == old for p in self.parts):
            return self
        return IndexCode(*(new if isinstance(p, LoopVar) and p.name == old else p
                           for p in self.parts))


class Axis:
    """One axis of a local block: a dimension and the (code of the) block index it is
    cut at, which fixes its extent (the last block of a dimension may be ragged)."""

    __slots__ = ("dim", "index")

    def __init__(self, dim: Dim, index: IndexCode):
        self.dim = dim
        self.index = index

    @property
    def block(self) -> str:
        return self.index.text

    def subst(self, old: str, new: IndexCode) -> "Axis":
        index = self.index.subst(old, new)
        return self if index is self.index else Axis(self.dim, index)


def padded(dim: Dim) -> int:
    """Extent of the largest block of ``dim``: map arrays are padded to it."""
    return min(dim.block, dim.size)


class Direct:
    """Elements of a block of a global array read or written in place, not through a
    view: ``array[start + r, ...]``. A 2-D slice costs Numba ~0.1 CPU s to compile
    (a view's struct, its clamped bounds, runtime strides its loops must check); the
    unit-stride array itself does not. The view is still emitted for what needs an
    array (a ``gemm_`` operand) and dropped when nothing does (:func:`drop_unused`).

    ``pieces``: per dimension of the array, ``(True, start)`` for a block axis (its
    first element; "0" for a whole dimension) or ``(False, index)`` for a point."""

    __slots__ = ("array", "pieces")

    def __init__(self, array: str, pieces):
        self.array = array
        self.pieces = tuple(pieces)

    def at(self, idx) -> str:
        """Code of element ``idx`` (one loop index per block axis)."""
        return f"{self.array}[{', '.join(self._parts(idx))}]"

    def _parts(self, idx) -> list[str]:
        it = iter(idx)
        parts = []
        for axis, code in self.pieces:
            if not axis:
                parts.append(code)
                continue
            i = next(it)
            parts.append(i if code == "0" else f"{code} + {i}")
        return parts

    def in_loop(self, idx, nest: "Nest") -> str:
        """Code of element ``idx`` inside ``nest``. Where the innermost loop's index
        would be offset (``X[m0 + r, n0 + c]``), Numba checks it for a negative
        index on every element, and the loop does not vectorise (4x slower column
        sums of a tall input; CPU-PERFORMANCE.md, pitfall 2): the element is read
        through a view of the row from the block's first column instead
        (``X[m0 + r, n0:]``, made once per row, or once before a loop over one axis)."""
        axis, start = self.pieces[-1] if self.pieces else (False, "")
        inner = nest.idx[-1] if nest.rank else None
        if not axis or start == "0" or not idx or idx[-1] != inner:
            return self.at(idx)
        view = f"{self.array}[{', '.join(self._parts(idx)[:-1] + [f'{start}:'])}]"
        names = set(_WORD.findall(view))
        if inner in names:
            return self.at(idx)
        if nest.rank == 1 or nest.idx[0] not in names:
            if view not in nest.invariant:   # before the loop nest
                nest.invariant[view] = nest.namer.fresh(f"{self.array}_v")
                nest.block.append(f"{nest.invariant[view]} = {view}")
            return f"{nest.invariant[view]}[{inner}]"
        return f"{nest.per_row(view, self.array)}[{inner}]"


_ASSIGNED = re.compile(r"^\s*(\w+) = ")
_WORD = re.compile(r"\w+")


def drop_unused(lines: list[str], removable: set) -> list[str]:
    """``lines`` without the assignments to names in ``removable`` that nothing reads
    (views of blocks accessed in place, see :class:`Direct`). Each name is assigned
    once (:class:`Namer`); code only is counted, not comments."""
    if not removable:
        return lines
    words = Counter(w for line in lines for w in _WORD.findall(line.split("#", 1)[0]))
    unused = {n for n in removable if words[n] == 1}
    kept = [line for line in lines
            if not ((m := _ASSIGNED.match(line)) and m.group(1) in unused)]
    # A loop whose body was only such a line keeps a body.
    out = []
    for at, line in enumerate(kept):
        out.append(line)
        if line.split("#", 1)[0].rstrip().endswith(":"):
            pad = len(line) - len(line.lstrip())
            after = next((x for x in kept[at + 1:] if x.strip() and not x.lstrip().startswith("#")), "")
            if len(after) - len(after.lstrip()) <= pad:
                out.append(" " * (pad + 4) + "pass")
    return out


class Block:
    """A scalar, vector or 2-D block. Materialised (``name`` holds it) or lazy (an
    elementwise node over ``args`` that consumers inline as a scalar expression).
    A block of a global array also has its :class:`Direct` access (``direct``)."""

    __slots__ = ("axes", "name", "node", "args", "frame", "contig", "hint", "_contig_name",
                 "source", "direct")

    def __init__(self, axes, name=None, node=None, args=(), frame=None, contig=True,
                 hint="t", source=None, direct=None):
        self.source = source     # a view of a global array: the load node it came from
        self.direct = direct     # its elements in place (a Direct), or None
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
    variable replaced by ``b``."""

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
        return [d.nblocks for d in self.levels] + [padded(a.dim) for a in self.elem_axes]


class Multi:
    """The outputs of a multi-output reduction, read with ``proj``."""

    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)


class Binding:
    """A block-index variable bound by a kernel loop, a ``reduce`` or a ``map``."""

    __slots__ = ("var", "name", "dim", "runmax", "runmax_of", "loop")

    def __init__(self, var: str, name: str, dim: Dim, loop=None):
        self.var = var
        self.name = name      # Python code of the block index ('0' for a single block)
        self.dim = dim
        self.runmax = None    # the running max Block inside an online_softmax
        self.runmax_of = None  # the expression it is the running row max of
        self.loop = loop      # its counting Loop (None: a single block, index 0)

    @property
    def code(self) -> IndexCode:
        return IndexCode(self.name) if self.name == "0" else IndexCode.var(self.name)


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

    def chain(self) -> list["Frame"]:
        """The frames from the function's top level down to this one."""
        frames, f = [], self
        while f is not None:
            frames.append(f)
            f = f.parent
        return frames[::-1]


class Nest:
    """A loop nest over the elements of a block being generated: its index names, the
    per-row prelude (row-vector operands read once per row) and the lines it goes to."""

    def __init__(self, block: list, rank: int, namer: Namer):
        self.block = block
        self.rank = rank
        self.idx = ("r", "c")[:rank]
        self.prelude: list[str] = []
        self._hoisted: dict[str, str] = {}
        self.invariant: dict[str, str] = {}   # views made before the nest, by code
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


class InPlace:
    """A store's destination block, where the sum of products that is its value is
    accumulated directly (:func:`.stores.in_place_target`): the view's name, the
    code of its shape and the names of its axes' dimensions (a product of another
    shape or layout is not accumulated there)."""

    __slots__ = ("view", "shape", "dims")

    def __init__(self, view: str, shape: str, dims: tuple[str, ...]):
        self.view = view
        self.shape = shape
        self.dims = dims

    def fits(self, g, axes) -> bool:
        """Whether a product block with ``axes`` is exactly this block."""
        return (g.x.shape(axes) == self.shape
                and tuple(a.dim.name for a in axes) == self.dims)


class Sink:
    """Where elementwise results go: ``array[prefix..., r, c]`` combined by ``mode``
    (set, add, max, or rescale-add with the row factors ``alpha``)."""

    def __init__(self, array: str | None, prefix=(), mode: str = "set",
                 alpha: str | None = None, view=None, direct: Direct | None = None):
        self.array = array
        self.prefix = tuple(prefix)
        self.mode = mode
        self.alpha = alpha
        self.view = view      # (prefix, frame) -> (view name, axes, Direct): a store's destination
        self.direct = direct  # ``array``'s elements in place (no prefix then)

    def at(self, index) -> "Sink":
        return Sink(self.array, self.prefix + tuple(index), self.mode, self.alpha, self.view)
