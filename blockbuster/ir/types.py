"""Dimensions, global arrays, and the types of local values."""

from __future__ import annotations

import attrs

from ..errors import IRError


@attrs.frozen(cache_hash=True)
class Dim:
    """A named tensor dimension tiled into blocks.

    ``size`` elements in blocks of ``block``; the last block is ragged when the size
    is not a multiple of the block size. A ``point`` dimension (batch, heads) is
    iterated one index at a time and does not appear in the type of a loaded block.
    """

    name: str
    size: int
    block: int
    point: bool = False

    def __attrs_post_init__(self):
        if self.size < 1:
            raise IRError(f"dimension {self.name}: size must be positive, got {self.size}")
        if self.block < 1:
            raise IRError(f"dimension {self.name}: block size must be positive, got {self.block}")
        if self.point and self.block != 1:
            raise IRError(f"dimension {self.name}: a point dimension has block size 1")

    @property
    def nblocks(self) -> int:
        return -(-self.size // self.block)

    def extent(self, b: int) -> int:
        """Number of elements in block ``b`` (smaller for the ragged last block)."""
        return min(self.block, self.size - b * self.block)

    def start(self, b: int) -> int:
        return b * self.block


@attrs.frozen(cache_hash=True)
class GlobalArray:
    """An array in the global memory tier (inputs, outputs, unfused intermediates)."""

    name: str
    dims: tuple[str, ...]


# --- local value types -------------------------------------------------------

@attrs.frozen(cache_hash=True)
class BlockType:
    """A local tile: ``()`` scalar, ``(R,)`` vector along R, ``(R, C)`` block."""

    axes: tuple[str, ...]

    def __str__(self) -> str:
        return "scalar" if not self.axes else "block[" + ", ".join(self.axes) + "]"


@attrs.frozen(cache_hash=True)
class TupleType:
    """The accumulators of a multi-output reduction; read with ``proj``."""

    items: tuple

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.items)) + ")"


@attrs.frozen(cache_hash=True)
class ArrayType:
    """A local array of values, one per block index of ``dim`` (built by ``map``)."""

    dim: str
    elem: object

    def __str__(self) -> str:
        return f"array[{self.dim}] of {self.elem}"


SCALAR = BlockType(())
