"""Stage 4, lower: block matmuls, ``acc += a·b`` through the micro-kernel.

A ``dot`` becomes a call of the micro-kernel's driver (:mod:`..microkernel`:
register-tiled, packs its operands from any strides, so a transposed or
column-sliced block is passed as a view, never copied first). A ``dot`` value is
stored into a new uninitialised block (``gemm_set_``: nothing zeroed or read
first); a ``dot`` that a ``sum`` (or online softmax) adds up is added straight into
its accumulator (``gemm_``), with no product block in between.
"""

from __future__ import annotations

from . import elementwise as ew
from .values import Block, Frame


def matrix(g, v: Block) -> str:
    """Code of ``v`` as a 2-D array ``gemm_`` can take: any strides (it packs its
    operands), so a transpose or a relabel is a view, not a copy."""
    if v.lazy and v.node.op == "transpose" and not v.args[0].lazy:
        return matrix(g, v.args[0]) + ".T"
    if v.lazy and v.node.op == "relabel":     # a view: the same values
        return matrix(g, v.args[1])
    ew.materialize(g, v)
    return v.name


def gemm_into(g, a: Block, b: Block, dest: str, frame: Frame, overwrite: bool = False) -> None:
    """``dest += a·b`` (``dest``: a C-contiguous array of the product's shape), or
    with ``overwrite`` ``dest = a·b`` (``dest`` may be uninitialised), by the
    register-tiled micro-kernel (:mod:`..microkernel`)."""
    call = "gemm_set_" if overwrite else "gemm_"
    frame.lines.append(f"{call}({matrix(g, a)}, {matrix(g, b)}, {dest})")
