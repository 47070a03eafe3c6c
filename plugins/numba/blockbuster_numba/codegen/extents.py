"""Index arithmetic of one kernel: block indices, first elements, extents, trip counts.

A block of a dimension starts at ``index * block``; its extent is ``block``, except
the last block of a ragged dimension. Both are computed once per loop iteration (in
variables named after the loop's) and only when the dimension needs them.
"""

from __future__ import annotations

from blockbuster.errors import BackendError
from blockbuster.ir.index import IBin, IConst, Idx, IVar
from blockbuster.ir.types import Dim

from .values import Axis, Direct, Frame, IndexCode, Namer, shape_text


class Extents:
    """Codes of block indices, starts and extents in one generated function."""

    def __init__(self, names: Namer):
        self.names = names
        self.start_names: dict[str, str] = {}   # block-index name -> its first element
        self.len_names: dict[str, str] = {}     # block-index name -> its extent
        self.lengths: dict[int, str] = {}       # constant loop length -> opaque variable

    def block_vars(self, name: str, d: Dim) -> list[str]:
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
            lines.append(f"{ln} = {ext_expr(name, d)}")
        return lines

    # -- block indices --------------------------------------------------------------
    def idx_code(self, ix: Idx, frame: Frame) -> IndexCode:
        if isinstance(ix, IVar):
            return frame.resolve(ix.name)[1].code
        if isinstance(ix, IConst):
            return IndexCode(str(ix.value))
        if isinstance(ix, IBin):
            return IndexCode("(", self.idx_code(ix.a, frame), f" {ix.op} ",
                             self.idx_code(ix.b, frame), ")")
        raise BackendError(f"numba: unknown block index {ix!r}")

    def block_index(self, ix: Idx, d: Dim, frame: Frame) -> IndexCode:
        """Code of a block index into ``d``, clamped to the blocks that exist where it
        cannot be proved in range (the reference clamps in its shape probe too)."""
        if d.nblocks == 1:
            return IndexCode("0")
        if isinstance(ix, IVar):
            b = frame.resolve(ix.name)[1]
            if b.dim.name == d.name:
                return b.code
        if isinstance(ix, IConst) and 0 <= ix.value < d.nblocks:
            return IndexCode(str(ix.value))
        return IndexCode("min(max(", self.idx_code(ix, frame), f", 0), {d.nblocks - 1})")

    # -- extents ----------------------------------------------------------------------
    def ext(self, axis: Axis) -> str:
        d = axis.dim
        if d.nblocks == 1:
            return str(d.size)
        if d.size % d.block == 0:
            return str(d.block)
        name = self.len_names.get(axis.block)
        return name if name else f"({ext_expr(axis.block, d)})"

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
        return shape_text(self.ext(a) for a in axes)

    def block_subscripts(self, blocks, dims) -> tuple[list[str], list]:
        """Python subscripts selecting block ``blocks`` (index codes) of an array over
        ``dims``, and the axes of the resulting view: a point dimension takes one
        element, a one-block dimension all of it, others a slice."""
        subs, axes = [], []
        for b, d in zip(blocks, dims):
            if d.point:
                subs.append(str(b))
            elif d.nblocks == 1:
                subs.append(":")
                axes.append(Axis(d, IndexCode("0")))
            else:
                axis = Axis(d, b)
                s = self.start(axis)
                subs.append(f"{s}:{s} + {self.ext(axis)}")
                axes.append(axis)
        return subs, axes

    def direct(self, array: str, blocks, dims, lines: list, removable: set):
        """The :class:`Direct` access of block ``blocks`` of ``array`` (its first
        elements computed once in ``lines`` where they are not a name already)."""
        pieces = []
        for b, d in zip(blocks, dims):
            if d.point:
                pieces.append((False, str(b)))
                continue
            start = "0" if d.nblocks == 1 else self.start(Axis(d, b))
            if not (start.isidentifier() or start.isdigit()):
                name = self.names.fresh(f"{array}_at")
                lines.append(f"{name} = {start}")
                removable.add(name)
                start = name
            pieces.append((True, start))
        return Direct(array, pieces)


def ext_expr(block: str, d: Dim) -> str:
    """Code of the extent of block ``block`` of ragged ``d``."""
    last = d.size - (d.nblocks - 1) * d.block
    return f"{d.block} if {block} < {d.nblocks - 1} else {last}"
