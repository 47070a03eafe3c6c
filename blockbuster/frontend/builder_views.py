"""The builder's view operations over any leading dimensions: split and merge heads,
attention (with shared key/value heads), slices, split, concat, rotate_half and copy
(a mixin of :class:`~blockbuster.frontend.builder.GraphBuilder`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import IRError, UsageError
from ..ir.types import Dim
from .builder_tensor import Tensor
from .tensors import values as V
from .tensors import reshapes as R
from .tensors.attention import attend
from .tensors.values import Value


class ViewOps:
    """Heads, attention and slices on views; concatenation and copies."""

    # -- heads, attention and slices on views (any leading dimensions) ------------------
    # ``split_heads`` views a projection ``x[..., T, C]`` whose column blocks are heads
    # as ``[..., H, T, HD]`` (H a point dimension, HD one block of the head size);
    # ``merge_heads`` views it back. No kernel: the consumers read ``x`` itself.

    def _known(self, what: str, *dims: str) -> None:
        for d in dims:
            if d not in self.dims:
                raise IRError(f"{what}: unknown dimension '{d}'")

    def split_heads(self, x: Tensor, heads: str, head_dim: str) -> Tensor:
        """``x[..., T, C]`` as ``[..., heads, T, head_dim]``: head h is column block h
        of x (C's block is the head size), or blocks ``h·n ..`` when ``head_dim`` has
        n blocks of C's block size. A view: no kernel, no name."""
        self._fixes_blocks('split_heads')
        what = f"split_heads {x.name}"
        self._known(what, heads, head_dim)
        if len(x.dims) < 2:
            raise IRError(f"{what}: needs rows and columns, got {list(x.dims)}")
        self._heads_of(what, x.dims[-1], heads, head_dim)
        r = len(x.dims)
        v = R.split_view(self._k.planner, self._value(x), r - 1, heads, head_dim, what)
        return self._view(V.permute(v, list(range(r - 2)) + [r - 1, r - 2, r]), x)

    def merge_heads(self, o: Tensor, cols: str) -> Tensor:
        """``o[..., H, T, HD]`` as ``[..., T, cols]`` whose column block h is head h
        (the concatenated heads). A view: no kernel, no name."""
        self._fixes_blocks('merge_heads')
        what = f"merge_heads {o.name}"
        self._known(what, cols)
        if len(o.dims) < 3:
            raise IRError(f"{what}: needs heads, rows and columns, got {list(o.dims)}")
        heads, hd = o.dims[-3], o.dims[-1]
        self._heads_of(what, cols, heads, hd)
        r = len(o.dims)
        v = V.permute(self._value(o), list(range(r - 3)) + [r - 2, r - 3, r - 1])
        return self._view(R.merge_view(self._k.planner, v, r - 2, cols, what), o)

    def _shared_heads(self, kv: Tensor, heads: str, what: str) -> Value:
        """``kv[..., G, S, D]`` read by ``heads`` query heads, ``heads/G`` per key/value
        head: head h reads ``h // (heads/G)``. A view (GQA), as the importer's."""
        v, r = self._value(kv), len(kv.dims)
        g, h = self.dims[kv.dims[-3]], self.dims[heads]
        if not g.point or h.size % g.size:
            raise IRError(f"{what}: {h.size} query heads ({heads}) cannot share the "
                          f"{g.size} heads ({g.name}) of {kv.name}")
        copies = V.expand(V.insert_axis(v, r - 2),
                          v.shape[:r - 2] + (h.size // g.size,) + v.shape[r - 2:])
        return R.merge_view(self._k.planner, copies, r - 3, heads, what)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                  scale: float | None = None, mask: Tensor | None = None,
                  name: str | None = None) -> Tensor:
        """``softmax(q·kᵀ·scale [+ mask]) · v`` over the last two dimensions:
        ``q[..., T, D]``, ``k[..., S, D]``, ``v[..., S, Dv]``; result ``[..., T, Dv]``.
        With heads (``q[..., H, T, HD]`` from :meth:`split_heads`), key/value tensors
        over fewer heads ``G`` are shared (GQA: head h reads ``h // (H/G)``).
        ``causal`` masks keys after the query (needs S = T) and reduces over the
        keys ``[: i + 1]`` only; ``scale`` defaults to ``1/√D``; ``mask`` is added to
        the scores (broadcast by name). Kernels: scores, scale, mask, softmax (5),
        ``P·V``."""
        self._fixes_blocks('attention')
        what = f"attention {q.name}, {k.name}, {v.name}"
        r = len(q.dims)
        if r < 2 or len(k.dims) != r or len(v.dims) != r:
            raise IRError(f"{what}: query, key and value need the same rank (at least "
                          f"2), got {list(q.dims)}, {list(k.dims)} and {list(v.dims)}")
        vq, vk, vv = self._value(q), self._value(k), self._value(v)
        kd, vd = list(k.dims), list(v.dims)
        if r >= 3 and k.dims[-3] != q.dims[-3]:
            vk, kd[-3] = self._shared_heads(k, q.dims[-3], what), q.dims[-3]
        if r >= 3 and v.dims[-3] != q.dims[-3]:
            vv, vd[-3] = self._shared_heads(v, q.dims[-3], what), q.dims[-3]
        if kd[:-2] != list(q.dims[:-2]) or vd[:-2] != list(q.dims[:-2]) or \
                kd[-1] != q.dims[-1] or kd[-2] != vd[-2]:
            raise IRError(f"{what}: {q.name}{list(q.dims)}, {k.name}{list(k.dims)} and "
                          f"{v.name}{list(v.dims)} do not match")
        if causal and kd[-2] != q.dims[-2]:
            raise IRError(f"{what}: causal attention needs the keys over the queries' "
                          f"dimension {q.dims[-2]}, got {kd[-2]}")
        if scale is None:
            scale = 1.0 / math.sqrt(self.dims[q.dims[-1]].size)
        vm = None
        if mask is not None:
            vm = self._aligned(mask, tuple(q.dims[:-1]) + (kd[-2],), None, what)
        out = attend(self._k, vq, vk, vv, scale, causal, vm, what, self._new_name(name))
        return self._array_out(out)

    def slice(self, x: Tensor, along: str, start: int, end: int,
              dim: str | None = None) -> Tensor:
        """``x[..., start:end, ...]`` along dimension ``along``, a view over a new
        dimension ``dim`` (declared here if new; default ``{along}_{start}``). Any
        range of a point dimension; whole blocks of a tiled one (``start`` a multiple
        of the block, ``end`` too or the end). No kernel, no name."""
        self._fixes_blocks('slice')
        what = f"slice {x.name}"
        if x.dims.count(along) != 1:
            raise UsageError(f"{what}: along must name one of its dimensions "
                             f"{list(x.dims)} once, got {along!r}")
        d = self.dims[along]
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= d.size):
            raise UsageError(f"{what}: [{start}:{end}] is not a range of {along} "
                             f"(size {d.size})")
        if (start, end) == (0, d.size):
            return x
        if not d.point and (start % d.block or (end % d.block and end != d.size)):
            default = (f" (the default block: declare one, g.dim({along!r}, {d.size}, "
                       f"block))" if along in self._free_blocks else "")
            raise UsageError(f"{what}: [{start}:{end}] of {along} is not whole blocks of "
                             f"{d.block}{default}")
        dim = dim or f"{along}_{start}"
        length = end - start
        if dim not in self.dims:
            if d.point:
                self.point_dim(dim, length)
            else:
                self.dim(dim, length, d.block)
        p = self.dims[dim]
        if p.size != length or p.point != d.point or \
                (not d.point and p.block != min(d.block, length)):
            raise IRError(f"{what}: dimension {dim} ({p.size} in blocks of {p.block}) "
                          f"is not {along}[{start}:{end}] in blocks of {d.block}")
        axis = x.dims.index(along)
        return self._view(V.slice_view(self._k.planner, self._value(x), axis, start, end,
                                       dim, what), x)

    def split(self, x: Tensor, along: str, sizes: Sequence[int],
              dims: Sequence[str] | None = None) -> list[Tensor]:
        """Consecutive slices of ``sizes`` along ``along`` (a fused q/k/v projection
        split into q, k and v): views over the dimensions ``dims``."""
        self._fixes_blocks('split')
        if sum(sizes) != self.dims.get(along, Dim(along, 1, 1)).size:
            raise UsageError(f"split {x.name}: sizes {list(sizes)} do not add up to "
                             f"{along}")
        names = list(dims) if dims is not None else [None] * len(sizes)
        if len(names) != len(sizes):
            raise UsageError(f"split {x.name}: {len(sizes)} sizes but {len(names)} dims")
        out, start = [], 0
        for size, dim in zip(sizes, names):
            out.append(self.slice(x, along, start, start + size, dim))
            start += size
        return out

    def concat(self, pieces: Sequence[Tensor], dim: str, axis: int = -1,
               name: str | None = None) -> Tensor:
        """``cat(pieces)`` along position ``axis`` as the dimension ``dim`` (declared
        here if new): the pieces agree on every other dimension and each has the same
        whole number of blocks along ``axis`` (the halves of a rotary head, q/k/v
        columns). One kernel."""
        self._fixes_blocks('concat')
        pieces = list(pieces)
        what = "concat " + ", ".join(getattr(t, "name", repr(t)) for t in pieces)
        if not pieces or not all(isinstance(t, Tensor) for t in pieces):
            raise UsageError(f"{what}: needs a list of tensors")
        rank = len(pieces[0].dims)
        if not -rank <= axis < rank:
            raise UsageError(f"{what}: axis {axis} out of range for rank {rank}")
        axis %= rank
        rest = [t.dims[:axis] + t.dims[axis + 1:] for t in pieces]
        if any(len(t.dims) != rank for t in pieces) or len(set(rest)) != 1:
            raise IRError(f"{what}: the pieces differ beyond axis {axis}: "
                          + ", ".join(f"{t.name}{list(t.dims)}" for t in pieces))
        d = self.dims[pieces[0].dims[axis]]
        sizes = {(self.dims[t.dims[axis]].size, self.dims[t.dims[axis]].block) for t in pieces}
        if len(sizes) != 1 or d.point or (len(pieces) > 1 and d.size % d.block):
            raise UsageError(f"{what}: the pieces need the same whole number of blocks "
                             f"along axis {axis}: " + ", ".join(
                                 f"{t.name}{list(t.dims)}" for t in pieces))
        if dim not in self.dims:
            self.dim(dim, d.size * len(pieces), d.block)
        return self._array_out(self._k.concat([self._value(t) for t in pieces], axis, dim,
                                              what, self._new_name(name)))

    def rotate_half(self, x: Tensor, name: str | None = None) -> Tensor:
        """``cat(-x2, x1)`` of the two halves of each row of every column block (the
        rotary embeddings' rotation when a block is one head): one kernel."""
        self._fixes_blocks('rotate_half')
        return self._array_out(self._k.rotate_half(self._value(x), f"rotate_half {x.name}",
                                                   self._new_name(name)))

    def copy(self, x: Tensor, name: str | None = None) -> Tensor:
        """A new array holding ``x`` (a view materialised): one kernel."""
        v = self._value(x)
        return self._array_out(self._k.emit("copy", v.shape, v.axes,
                                            lambda index: self._k.block(v, index),
                                            self._new_name(name)))
