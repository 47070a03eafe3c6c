"""Stage 4, lower: block matmuls, ``acc += a·b`` through the micro-kernel.

A ``dot`` becomes a call of the micro-kernel's driver (:mod:`..microkernel`:
register-tiled, packs its operands from any strides, so a transposed or
column-sliced block is passed as a view, never copied first). A ``dot`` value is
stored into a new uninitialised block (``gemm_set_``: nothing zeroed or read
first); a ``dot`` that a ``sum`` (or online softmax) adds up is added straight into
its accumulator (``gemm_``), with no product block in between.

A right operand that is a block of a program input read by several parallel
instances of the kernel (a weight, or attention's keys and values), or of an array
an earlier kernel computed (keys and values projected in the same program), is
packed once per call by the module (:mod:`..prepack`) instead of once per instance:
the kernel takes the packed copy as an argument and calls ``gemm_packed_`` with the
block's first row and column.
"""

from __future__ import annotations

import math

from blockbuster.ir.index import free_vars

from ..microkernel import NARROW, NR
from ..prepack import PARALLEL_PACK
from . import elementwise as ew
from .values import Axis, Block, Frame


def matrix(g, v: Block) -> str:
    """Code of ``v`` as a 2-D array ``gemm_`` can take: any strides (it packs its
    operands), so a transpose or a relabel is a view, not a copy."""
    if v.lazy and v.node.op == "transpose":
        inner = v.args[0]
        if inner.lazy and inner.node.op not in ("transpose", "relabel"):
            # Computed in its own layout and passed transposed: its loops then read
            # the source's rows along their unit stride (a transposed loop nest read
            # them down columns, element by element: a scaled Kᵀ took longer than
            # the product it fed).
            ew.materialize(g, inner)
        return matrix(g, inner) + ".T"
    if v.lazy and v.node.op == "relabel":     # a view: the same values
        return matrix(g, v.args[1])
    ew.materialize(g, v)
    return v.name


def gemm_into(g, a: Block, b: Block, dest: str, frame: Frame, overwrite: bool = False) -> None:
    """``dest += a·b`` (``dest``: an array of the product's shape with unit column
    stride, any row stride: a ragged corner of a padded slot does), or
    with ``overwrite`` ``dest = a·b`` (``dest`` may be uninitialised), by the
    register-tiled micro-kernel (:mod:`..microkernel`)."""
    frame.lines.append(gemm_calls(g, a, b, dest, frame)[0 if overwrite else 1])


def gemm_calls(g, a: Block, b: Block, dest: str, frame: Frame) -> tuple[str, str]:
    """The lines ``dest = a·b`` and ``dest += a·b`` (see :func:`gemm_into`)."""
    packed = packed_operand(g, b, frame)
    if packed is not None:
        args = f"({matrix(g, a)}, {packed}, {dest})"
        return "gemm_packed_set_" + args, "gemm_packed_" + args
    args = f"({matrix(g, a)}, {matrix(g, b)}, {dest})"
    return "gemm_set_" + args, "gemm_" + args


def packed_operand(g, b: Block, frame: Frame) -> str | None:
    """``PK, kfull, nfull, r0, c0`` (code) when ``b`` can be read from a packed copy
    of a whole array, else None. It can when ``b`` is a view of a 2-D input or of an
    array an earlier kernel wrote (or its transpose), the same block in several products (its block indices do not
    depend on one of the loops around this one: a parallel loop's other instances, or
    a ``map`` or ``sum`` inside the kernel that multiplies every block of its own by
    it; packing the input once saves the other products' packing) and its first
    column is at a column strip of the packed layout."""
    transposed, v = False, b
    while v.lazy:
        if v.node.op == "transpose" and not v.args[0].lazy:
            transposed, v = not transposed, v.args[0]
        elif v.node.op == "relabel":
            v = v.args[1]
        else:
            return None
    load = v.source
    if load is None or v.rank != 2:
        return None
    array = load.attr.array
    m = g.m
    dims = m.array_dims[array]
    if len(dims) != 2 or any(d.point for d in dims) or array in g.kernel.writes():
        return None                     # (an array this kernel writes is not complete yet)
    used = set().union(*(free_vars(ix) for ix in load.attr.index))
    # Products that read the same block: one packing instead of this many.
    trips = {var: g.dims[d].nblocks for var, d in g.kernel.loops}
    for f in frame.chain():
        for var, binding in f.binds.items():
            trips.setdefault(var, binding.dim.nblocks)
    sharing = math.prod(n for var, n in trips.items() if var not in used)
    # An input is packed once per call (once per binding when constant); an array an
    # earlier kernel computed, on every call. A large array is packed by all threads
    # at once (prepack.PARALLEL_PACK), in 1/threads of the time of one packing:
    # worth it for two products. A small one is packed by one thread, while the
    # products would share their packing among the threads: worth it only past that
    # many. A weight is packed even for one product: bound (as a module holds it), it
    # is packed once per binding, not in every call as the driver would.
    together = m.threads > 1 and math.prod(d.size for d in dims) >= PARALLEL_PACK
    least = (1 if array in m.program.weights else 2) if array in m.program.inputs \
        else 2 if together else m.threads + 1
    if sharing < least:
        return None
    rows, cols = v.axes[::-1] if transposed else v.axes
    if cols.dim.nblocks > 1 and cols.dim.block % NR:
        return None                     # a block may start inside a strip
    if min(cols.dim.block, cols.dim.size) <= NARROW:
        return None                     # the driver's narrow products read B unpacked
    kfull, nfull = (d.size for d in (dims[::-1] if transposed else dims))
    name = m.packed_operand(array, transposed, kernel_gen=g)
    return f"{name}, {kfull}, {nfull}, {start(g, rows)}, {start(g, cols)}"


def start(g, axis: Axis) -> str:
    return "0" if axis.dim.nblocks == 1 else g.x.start(axis)
