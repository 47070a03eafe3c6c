"""The builder's tensor handle: a global array (or a view of one) over named dimensions."""

from __future__ import annotations

import attrs

from .tensors.values import Value


@attrs.frozen
class Tensor:
    """A global array produced by the builder (or declared as an input), or a view of
    one (``view``: heads split or merged, a slice; ``name`` is the viewed array)."""

    name: str
    dims: tuple[str, ...]
    view: Value | None = attrs.field(default=None, eq=False, repr=False)
    # The builder that made it: a tensor of another builder names arrays this one
    # does not have (refused with a message, not a KeyError later).
    owner: object = attrs.field(default=None, eq=False, repr=False)
