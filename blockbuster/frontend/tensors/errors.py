"""The one error the tensor layer raises."""

from __future__ import annotations

from ...errors import UsageError


class TensorError(UsageError):
    """A tensor operation cannot be lowered (unsupported layout, size or operand).
    ``node`` names the graph node to blame when the PyTorch importer lowers one."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node


class UnalignedSlice(TensorError):
    """A slice of a tiled axis that does not fall on its block boundaries: not a
    view. The PyTorch importer lowers the graph again taking that slice of a last
    axis through a selection matrix (``aten_indexing.unaligned_slice``)."""
