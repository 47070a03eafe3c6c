"""Stage 4, lower: block matmuls, ``acc += a·b`` through the micro-kernel.

A ``dot`` becomes a call of ``gemm_`` (:mod:`..microkernel`: register-tiled, packs its
operands from any strides, so a transposed or column-sliced block is passed as a
view, never copied first). The product is added into a C-contiguous destination:
a zeroed block for a ``dot`` value, or straight into the accumulator of a ``sum``
(or online softmax) that adds the products up, with no product block in between.
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


def gemm_into(g, a: Block, b: Block, dest: str, frame: Frame) -> None:
    """``dest += a·b`` (``dest``: a C-contiguous array of the product's shape), by
    the register-tiled micro-kernel (:mod:`..microkernel`)."""
    frame.lines.append(f"gemm_({matrix(g, a)}, {matrix(g, b)}, {dest})")
