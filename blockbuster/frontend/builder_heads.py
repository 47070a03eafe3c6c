"""The builder's per-head kernels on fixed-rank arrays: rotary embeddings per head,
causal attention per head and the merge-heads matmul, written as explicit loops (a
mixin of :class:`~blockbuster.frontend.builder.GraphBuilder`)."""

from __future__ import annotations

from ..errors import IRError
from ..ir import expr as E
from ..ir.expr import Expr
from ..ir.index import Idx, IVar
from ..ir.program import Kernel, Store
from .builder_tensor import Tensor


class HeadOps:
    """``rope_heads``, ``causal_attention``, ``merge_heads_matmul`` and their checks."""

    # -- heads (multi-head attention) -------------------------------------------
    # A projection's columns are tiled by a dimension whose *block* is the head size
    # (``QD`` for the query heads, ``KD`` for the key/value heads), so column block h
    # is head h. Per-head tensors (scores, probabilities, rotated q/k, the attention
    # output) carry the head as a *point* dimension (``H`` queries, ``G`` key/value
    # heads), so their blocks are 2-D, and a ``HD`` dimension (size = block = head
    # size) for their columns. A head variable reaches the column blocks of a
    # projection through an index expression ``h // group`` (``group`` query heads
    # share one key/value head; 1 for the query heads themselves), and ``relabel``
    # renames a head-sized column block between the projection's dimension and
    # ``HD``.

    def _emit_loops(self, op: str, loops: tuple[tuple[str, str], ...], value,
                    name: str | None) -> Tensor:
        """One kernel with explicit ``(variable, dimension)`` loops (a dimension may
        occur twice, e.g. query and key blocks of T) storing ``value`` (an Expr over
        those variables) into a new array over the loops' dimensions."""
        dims = tuple(d for _, d in loops)
        out = Tensor(name or self._fresh(op), dims, owner=self)
        if out.name in self.arrays:
            raise IRError(f"array {out.name} is defined twice")
        self.kernels.append(Kernel(out.name, tuple(loops),
                                   (Store(out.name, tuple(IVar(v) for v, _ in loops), value),)))
        self.arrays[out.name] = out
        return out

    def _head_dims(self, what: str, cols: str, heads: str, hd: str) -> None:
        """Check that the column blocks of ``cols`` are the heads of point dim ``heads``
        and that ``hd`` is one head (a single block)."""
        c, h, d = self.dims[cols], self.dims[heads], self.dims[hd]
        if not h.point or h.size != c.nblocks or c.block * c.nblocks != c.size:
            raise IRError(f"{what}: {cols} ({c.size} in blocks of {c.block}) is not "
                          f"{heads} heads of a whole block each")
        if d.point or d.size != c.block or d.block != d.size:
            raise IRError(f"{what}: {hd} must be one block of the head size {c.block}")

    def _heads_of(self, what: str, cols: str, heads: str, hd: str) -> None:
        """As :meth:`_head_dims`, or a head of several whole blocks (``hd`` tiled like
        ``cols``: rotary halves sliced by hand)."""
        c, h, d = self.dims[cols], self.dims[heads], self.dims[hd]
        if d.point or d.block != c.block or d.size % d.block:
            self._head_dims(what, cols, heads, hd)
        elif not h.point or h.size * d.size != c.size:
            raise IRError(f"{what}: {cols} ({c.size}) is not {heads} ({h.size}) heads "
                          f"of {hd} ({d.size})")

    @staticmethod
    def _plain(what: str, *tensors: tuple[Tensor, int]) -> None:
        """The per-head methods read arrays of a fixed rank directly (not views)."""
        for t, rank in tensors:
            if not isinstance(t, Tensor) or t.view is not None or len(t.dims) != rank:
                got = list(t.dims) if isinstance(t, Tensor) else repr(t)
                raise IRError(f"{what}: needs {getattr(t, 'name', t)} to be an array "
                              f"over {rank} dimensions, got {got}"
                              + (" (a view)" if getattr(t, "view", None) else ""))

    @staticmethod
    def _head_block(var: str, group: int) -> Idx:
        """The column block of the projection read by head ``var``: ``var // group``."""
        return IVar(var) // group

    def rope_heads(self, x: Tensor, cos: Tensor, sin: Tensor, heads: str,
                   name: str | None = None) -> Tensor:
        """Split ``x[T, C]`` into heads and apply rotary embeddings (rotate-half):
        ``out[h] = xh·cos + rotate_half(xh)·sin`` with ``xh`` column block h of x;
        ``cos``/``sin`` are ``[T, HD]`` tables. Result ``[heads, T, HD]``; one kernel."""
        self._fixes_blocks('rope_heads')
        self._plain(f"rope {x.name}", (x, 2), (cos, 2), (sin, 2))
        (rows, cols), (crow, hd) = x.dims, cos.dims
        if sin.dims != cos.dims or crow != rows:
            raise IRError(f"rope {x.name}: tables {cos.name}{list(cos.dims)} and "
                          f"{sin.name}{list(sin.dims)} do not match {list(x.dims)}")
        self._head_dims(f"rope {x.name}", cols, heads, hd)
        h, t, d = self._distinct(heads, rows, hd)
        xh = E.call("relabel", E.pos(hd, d), E.load(x.name, t, self._head_block(h, 1)))
        value = E.call("add", E.call("mul", xh, E.load(cos.name, t, d)),
                       E.call("mul", E.call("rotate_half", xh), E.load(sin.name, t, d)))
        return self._emit_loops("rope", ((h, heads), (t, rows), (d, hd)), value, name)

    def causal_attention(self, q: Tensor, k: Tensor, v: Tensor, scale: float,
                         name: str | None = None) -> Tensor:
        """Causal softmax attention per head: ``q[H, T, HD]``, ``k[G, T, HD]`` (head h
        uses key head ``h // (H/G)``), ``v[T, C]`` whose column blocks are the G value
        heads. Result ``[H, T, HD]``. Kernels: scores, scale, causal mask (``keep_ge``
        on global positions), row max, shift, exp, row sum, normalise, ``P·V``. The
        row max, row sum and ``P·V`` reduce over the causal key range ``T[: i + 1]``
        (blocks above the diagonal are never read); the element-wise kernels cover
        every block (above the diagonal the probabilities are 0)."""
        self._fixes_blocks('causal_attention')
        self._plain(f"attention {q.name}", (q, 3), (k, 3), (v, 2))
        heads, rows, hd = q.dims
        kv_heads, krows, khd = k.dims
        vrows, vcols = v.dims
        if (krows, khd, vrows) != (rows, hd, rows):
            raise IRError(f"attention: {q.name}{list(q.dims)}, {k.name}{list(k.dims)} and "
                          f"{v.name}{list(v.dims)} do not match")
        self._head_dims(f"attention {v.name}", vcols, kv_heads, hd)
        nh, nkv = self.dims[heads].size, self.dims[kv_heads].size
        if not self.dims[heads].point or nh % nkv:
            raise IRError(f"attention: {nh} query heads cannot share {nkv} key/value heads")
        group = nh // nkv
        h, i, j, e = self._distinct(heads, "i", "j", hd)
        hij = ((h, heads), (i, rows), (j, rows))
        hi = ((h, heads), (i, rows))
        kv = self._head_block(h, group)
        causal = dict(hi=IVar(i) + 1)

        def ld(t: Tensor, *index) -> Expr:
            return E.load(t.name, *index)

        scores = self._emit_loops("scores", hij, E.reduce(
            "sum", e, hd, E.call("dot", ld(q, h, i, e),
                                 E.call("transpose", ld(k, kv, j, e)))), None)
        scaled = self._emit_loops("mul", hij, E.call("mul", ld(scores, h, i, j),
                                                     E.const(scale)), None)
        masked = self._emit_loops("mask", hij, E.call(
            "keep_ge", E.pos(rows, i), E.pos(rows, j), ld(scaled, h, i, j)), None)
        rmax = self._emit_loops("rowmax", hi, E.reduce(
            "max", j, rows, E.call("rowmax", ld(masked, h, i, j)), **causal), None)
        shifted = self._emit_loops("sub", hij, E.call(
            "rowshift", E.call("neg", ld(rmax, h, i)), ld(masked, h, i, j)), None)
        expd = self._emit_loops("exp", hij, E.call("exp", ld(shifted, h, i, j)), None)
        rsum = self._emit_loops("rowsum", hi, E.reduce(
            "sum", j, rows, E.call("rowsum", ld(expd, h, i, j)), **causal), None)
        probs = self._emit_loops("div", hij, E.call(
            "rowscale", E.call("recip", ld(rsum, h, i)), ld(expd, h, i, j)), None)
        vh = E.call("relabel", E.pos(hd, e), ld(v, j, kv))
        return self._emit_loops("attend", ((h, heads), (i, rows), (e, hd)), E.reduce(
            "sum", j, rows, E.call("dot", ld(probs, h, i, j), vh), **causal), name)

    def merge_heads_matmul(self, o: Tensor, w: Tensor, name: str | None = None) -> Tensor:
        """``concat(heads of o) @ w`` for ``o[H, T, HD]`` and ``w[C, N]`` whose row blocks
        are the heads: a sum over heads ``h`` of ``o[h] @ w[h-th row block]``."""
        self._fixes_blocks('merge_heads_matmul')
        self._plain(f"matmul {o.name} x {w.name}", (o, 3), (w, 2))
        heads, rows, hd = o.dims
        cols, n = w.dims
        self._head_dims(f"matmul {o.name} x {w.name}", cols, heads, hd)
        t, c, h = self._distinct(rows, n, heads)
        blk = self._head_block(h, 1)
        value = E.reduce("sum", h, heads, E.call(
            "dot", E.call("relabel", E.pos(cols, blk), E.load(o.name, h, t, 0)),
            E.load(w.name, blk, c)))
        return self._emit_loops("matmul", ((t, rows), (c, n)), value, name)
