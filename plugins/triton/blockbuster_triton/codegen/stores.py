"""Stores: ``A[i, j] = value`` becomes a masked ``tl.store`` of the block; a ``:``
subscript stores every block of a ``map`` array (unrolled, outermost map first)."""

from __future__ import annotations

from blockbuster.errors import BackendError

from .indices import block_access, index_value
from .values import Frame


def emit_store(g, store, frame: Frame) -> None:
    value = g.value(store.value, frame)
    _store(g, store, frame, [], value)


def _store(g, store, frame, blocks: list, value) -> None:
    k = len(blocks)
    if k < len(store.index):
        ix = store.index[k]
        if ix is None:
            if not isinstance(value, list):
                raise BackendError(f"triton: ':' in a store to {store.array} needs a map array")
            for b, item in enumerate(value):
                _store(g, store, frame, blocks + [b], item)
        else:
            _store(g, store, frame, blocks + [index_value(ix, frame)], value)
        return
    name = store.array
    offsets, mask, axes = block_access(g, frame, g.m.array_dims[name], blocks,
                                       g.m.strides[name])
    if value.axes and tuple(a.size for a in value.axes) != tuple(a.size for a in axes):
        raise BackendError(f"triton: the value stored to {name} has padded shape "
                           f"{tuple(a.size for a in value.axes)}, the block "
                           f"{tuple(a.size for a in axes)}")
    code = value.code
    if not value.axes and axes:      # a scalar fills the block
        code = f"tl.full(({', '.join(str(a.size) for a in axes)},), {code}, tl.float32)"
    ptr = g.m.arg_names[name]
    tail = "" if mask is None else f", mask={mask}"
    frame.lines.append(f"tl.store({ptr} + {offsets}, {code}{tail})")
