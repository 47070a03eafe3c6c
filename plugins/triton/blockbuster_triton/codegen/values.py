"""What the generator passes around: values of the block program as Triton code.

* :class:`Axis` — one axis of a local block: its dimension and the block index along
  it (an ``int`` when known while generating, else the code of a runtime index).
  Triton tensors have power-of-two shapes, so an axis is padded to
  :func:`padded` elements; the valid ones are the first ``extent`` (smaller for the
  ragged last block). What the padding holds is unspecified: it is masked wherever
  it could reach a valid element (stores, contractions, in-block reductions).
* :class:`Block` — a local value: the Triton expression (a name) and its axes
  (``()`` a scalar). ``zero_padded``: its padding is known to be 0 (a masked load),
  so a contraction need not mask it again.
* map arrays are Python lists of values (a ``map`` is unrolled while generating:
  Triton has no arrays of tensors), multi-output reductions are tuples.
* :class:`Frame` — one scope of the generated code: the kernel's top level, a loop
  body, or one unrolled ``map``/one-trip ``reduce`` step (which shares its parent's
  lines). It binds block-index variables and memoises the values computed in it.
"""

from __future__ import annotations

import attrs

from blockbuster.errors import BackendError
from blockbuster.ir.types import Dim

#: ``tl.dot`` needs every dimension of its operands to be at least 16 (on GPUs and in
#: the interpreter), and Triton shapes are powers of two.
MIN_PADDED = 16


def padded(dim: Dim) -> int:
    """The Triton extent of an axis along ``dim``: a power of two, at least 16."""
    p = MIN_PADDED
    while p < dim.block:
        p *= 2
    return p


@attrs.frozen
class Axis:
    dim: Dim
    block: object            # int: known block index; str: code of a runtime one

    @property
    def size(self) -> int:
        return padded(self.dim)

    def extent(self):
        """Valid elements along the axis: an int, or the code computing it."""
        d = self.dim
        if isinstance(self.block, int):
            return d.extent(self.block)
        if d.size % d.block == 0:
            return d.block
        return f"tl.minimum({d.size} - ({self.block}) * {d.block}, {d.block})"

    def start(self) -> str:
        """Code of the first element's position along the dimension."""
        if isinstance(self.block, int):
            return str(self.block * self.dim.block)
        return f"({self.block}) * {self.dim.block}"

    def full(self) -> bool:
        """Whether every padded element is valid (no mask needed)."""
        return self.extent() == self.size

    def mask(self) -> str | None:
        """Code of a boolean vector of the axis's valid elements; None when all are."""
        if self.full():
            return None
        return f"{arange(self.dim)} < {self.extent()}"


def arange(dim: Dim) -> str:
    """The kernel-level name of ``tl.arange(0, padded(dim))`` for ``dim``."""
    return f"ar_{dim.name}"


def shape_code(axes) -> str:
    if not axes:
        return "()"
    return "(" + ", ".join(str(a.size) for a in axes) + ("," if len(axes) == 1 else "") + ")"


@attrs.frozen
class Block:
    code: str
    axes: tuple = ()
    zero_padded: bool = False


@attrs.define(eq=False)
class Binding:
    var: str
    value: object            # int (known while generating) or str (runtime code)


class Frame:
    def __init__(self, parent: "Frame | None", share_lines: bool = False):
        self.parent = parent
        self.binds: dict[str, Binding] = {}
        self.lines: list[str] = parent.lines if share_lines else []
        self.memo: dict = {}
        self.runmax: dict[str, Block] = {}     # online_softmax variable -> running max

    def chain(self) -> list["Frame"]:
        out, f = [], self
        while f is not None:
            out.append(f)
            f = f.parent
        return out[::-1]

    def resolve(self, var: str) -> Binding:
        f = self
        while f is not None:
            b = f.binds.get(var)
            if b is not None:
                return b
            f = f.parent
        raise BackendError(f"triton: block-index variable '{var}' is not bound")

    def find_runmax(self, var: str) -> Block:
        f = self
        while f is not None:
            if var in f.binds:
                hit = f.runmax.get(var)
                if hit is None:
                    break
                return hit
            f = f.parent
        raise BackendError(f"triton: runmax({var}) outside an online_softmax over {var}")


class Namer:
    """Fresh local names of one kernel."""

    def __init__(self):
        self.count = 0

    def fresh(self, stem: str = "t") -> str:
        self.count += 1
        return f"{stem}{self.count}"


def indent(lines: list[str], by: str = "    ") -> list[str]:
    return [by + line for line in lines]
