"""Which program dimension each tensor axis becomes, decided in two passes.

A PyTorch graph says nothing about tiling. The importer lowers the graph twice with
the same code: the first pass (*planning*) creates an anonymous dimension class for
every new axis and records what the lowering learns about it — two axes that meet
(an elementwise operand, a contracted matmul axis) are one class; an axis split into
heads needs a block of exactly the head size; the heads axis itself is iterated one
index at a time (a *point* dimension); axes that a kernel's blocks run over are
*tiled*. Between the passes the classes are resolved into :class:`Dim` objects; the
second pass (*emitting*) asks for classes in the same order and gets those dims.
The lowering is deterministic, so the n-th class of one pass is the n-th of the
other.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from ...ir.types import Dim
from ..tensors import DEFAULT_BLOCK
from ..tensors.errors import TensorError, UnalignedSlice



#: A model cannot be imported (unsupported operator, layout or size); ``node`` names
#: the graph node that could not be lowered. The tensor layer's error, so that what
#: it raises while lowering a node is an import error too.
ImportError_ = TensorError

#: The smallest block a head is cut into where slices cut it (a partial rotary
#: embedding's rotated columns, q/k/v chunked out of a head); a finer cut (a block of
#: a few columns) is an import error naming the slice, not a program of tiny blocks.
MIN_BLOCK_PER_HEAD = 8


@attrs.define
class _Class:
    size: int
    hint: str
    parent: int
    block: int | None = None        # required block size (a split into heads)
    point: bool = False             # iterated one index at a time (heads, batch)
    tiled: bool = False             # some kernel's blocks run over it
    user_block: int | None = None   # from blocks={...}


class DimPlanner:
    """Dimension classes of one import: created, unified, constrained, resolved."""

    def __init__(self, blocks: dict[str, int] | None = None):
        self._classes: list[_Class] = []
        self._blocks = check_blocks(blocks)
        self._resolved: list[Dim] | None = None
        self._cursor = 0
        self._links: list[tuple] = []
        self.fixed_blocks: set[str] = set()    # dims whose block the graph requires
        self._tensors: list[tuple] = []        # each kernel output's axis classes
        self._unit_answers: list[bool] = []    # unit_merge's, replayed when emitting
        self._answer_cursor = 0

    # -- both passes -----------------------------------------------------------------
    def new(self, size: int, hint: str) -> int:
        """A fresh class of ``size`` elements (the n-th call returns class n)."""
        if self._resolved is not None:
            cid = self._cursor
            self._cursor += 1
            if cid >= len(self._classes) or self._classes[cid].size != size:
                raise AssertionError("the emitting pass diverged from the planning pass")
            return cid
        cid = len(self._classes)
        self._classes.append(_Class(size, hint, cid))
        return cid

    def find(self, cid: int) -> int:
        while self._classes[cid].parent != cid:
            self._classes[cid].parent = self._classes[self._classes[cid].parent].parent
            cid = self._classes[cid].parent
        return cid

    def size(self, cid: int) -> int:
        return self._classes[self.find(cid)].size

    def unify(self, a: int, b: int, what: str) -> int:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        ca, cb = self._classes[ra], self._classes[rb]
        if ca.size != cb.size:
            raise ImportError_(f"{what}: sizes {ca.size} and {cb.size} do not match")
        if self._resolved is not None:
            raise AssertionError("the emitting pass unified classes the planning pass kept apart")
        keep, drop = (ra, rb) if ra < rb else (rb, ra)
        ck, cd = self._classes[keep], self._classes[drop]
        if ck.block and cd.block and ck.block != cd.block:
            self._blocks_conflict((ra, rb), ck.size, ck.block, cd.block, what)
        ck.block = ck.block or cd.block
        ck.point |= cd.point
        ck.tiled |= cd.tiled
        cd.parent = keep
        return keep

    def require_block(self, cid: int, block: int, what: str) -> None:
        c = self._classes[self.find(cid)]
        if self._resolved is None:
            if c.block not in (None, block):
                self._blocks_conflict((self.find(cid),), c.size, c.block, block, what)
            c.block = block

    def _blocks_conflict(self, roots, size: int, one: int, other: int, what: str):
        """Raise for an axis asked for blocks of ``one`` and of ``other``: where a
        slice's cut asked for the smaller (8 rotary columns of a 16-wide head whose
        heads are merged back whole), :class:`UnalignedSlice` naming that slice, which
        the next lowering takes through a selection matrix; else an import error."""
        big = max(one, other)
        for kind, a, align, part, cut in self._links:
            if kind == "slice" and align and align % big and \
                    (self.find(a) in roots or self.find(part) in roots):
                raise UnalignedSlice(f"{what}: an axis of {size} is split into blocks of "
                                     f"{one} and of {other}", node=cut)
        raise ImportError_(f"{what}: an axis of {size} is split into blocks of {one} and "
                           f"of {other}", node=what)

    def mark_point(self, cid: int) -> None:
        if self._resolved is None:
            self._classes[self.find(cid)].point = True

    def mark_tiled(self, cid: int) -> None:
        if self._resolved is None:
            self._classes[self.find(cid)].tiled = True

    def link_split(self, axis: int, heads: int, inner: int, what: str) -> None:
        """``axis`` viewed as (``heads``, ``inner``): heads are point dimensions; if
        ``axis`` is tiled, its blocks are the heads (block = inner size), else the
        inner part is a point dimension too."""
        if self._resolved is None:
            self._links.append(("split", axis, heads, inner, what))

    def link_merge(self, outer: int, inner: int | None, merged: int, what: str) -> None:
        """(``outer``, ``inner``) viewed as one axis ``merged``: tiled with blocks of
        the inner size when ``inner`` is tiled (heads merged back), else a point axis."""
        if self._resolved is None:
            self._links.append(("merge", outer, inner, merged, what))

    def unit_merge(self, cid: int) -> bool:
        """Is ``cid`` a batch merged with a stored axis of one element (a sequence
        of one token flattened into rows)? Answered from the links the planning pass
        has made so far, and the same answer given again in the emitting pass (which
        knows every link: answering anew, a merge recorded after the question, a key/
        value cache's new token placed into it, made the passes diverge)."""
        if self._resolved is not None:
            if self._answer_cursor >= len(self._unit_answers):
                raise AssertionError("the emitting pass diverged from the planning pass")
            self._answer_cursor += 1
            return self._unit_answers[self._answer_cursor - 1]
        root = self.find(cid)
        answer = any(kind == "merge" and b is not None and self.find(out) == root
                     and self.size(b) == 1 for kind, a, b, out, _ in self._links)
        self._unit_answers.append(answer)
        return answer

    def link_slice(self, axis: int, part: int, what: str, align: int = 0) -> None:
        """``part`` is a block-aligned slice of ``axis``: tiled alike, same blocks.
        ``align``: what the block must divide (the slice's start, and its end when
        that is not the axis's end; 0 for any block)."""
        if self._resolved is None:
            self._links.append(("slice", axis, align, part, what))

    def _alignment(self, cid: int) -> int:
        """What a block of ``cid``'s class must divide for all of its slices."""
        root, g = self.find(cid), 0
        for kind, a, align, _, _ in self._links:
            if kind == "slice" and align and self.find(a) == root:
                g = math.gcd(g, align)
        return g

    def _tiled(self, cid: int) -> bool:
        c = self._classes[self.find(cid)]
        return c.tiled and not c.point

    def _head_block(self, out: int, seen: frozenset = frozenset()) -> int:
        """The block of a head ``out`` split off a tiled axis: the whole head, or a
        whole number of blocks per head where slices cut it (a partial rotary
        embedding's rotated and passed columns) or where the head is itself split
        into heads (a fused projection viewed as (q/k/v, heads, head size))."""
        size = self.size(out)
        block = math.gcd(size, self._alignment(out))
        if block < MIN_BLOCK_PER_HEAD:
            block = size                  # the slice below reports the cut
        root = self.find(out)
        for kind, a, _, inner, _ in self._links:
            if kind == "split" and self.find(a) == root and root not in seen:
                nested = self._head_block(inner, seen | {root})
                if block % nested == 0:
                    block = nested
        return block

    def _apply_links(self) -> None:
        # Slices pass block sizes both ways and splits need tiling decided: a few
        # sweeps settle them; slices with no required block get the default last.
        for _ in range(3):
            self._apply_links_once(defaults=False)
        self._apply_links_once(defaults=True)

    def _apply_links_once(self, defaults: bool) -> None:
        for kind, a, b, out, what in self._links:
            if kind == "slice":
                ca, co = self._classes[self.find(a)], self._classes[self.find(out)]
                if ca.point or co.point:
                    self.mark_point(a)
                    self.mark_point(out)
                elif ca.tiled or co.tiled:
                    self.mark_tiled(a)
                    self.mark_tiled(out)
                    block = ca.block or co.block
                    if block is None and defaults:
                        block = self._blocks.get(ca.hint) or _aligned_block(
                            min(ca.size, DEFAULT_BLOCK), self._alignment(a))
                    if block and b and b % block:
                        raise UnalignedSlice(f"slicing at {b} an axis tiled in blocks "
                                             f"of {block} (only whole blocks can be "
                                             f"sliced)", node=what)
                    if block:
                        self.require_block(a, block, what)
                        self.require_block(out, block, what)
            elif kind == "split":
                self.mark_point(b)
                if self._classes[self.find(out)].point:
                    # the inner part is iterated one index at a time (merged with a
                    # tiled axis: an image's rows cut into patches, each patch row
                    # beside its columns), so is the whole axis
                    self.mark_point(a)
                elif self._tiled(a):
                    # head h is column block h: the blocks of both are one head,
                    # or a whole number of blocks per head where slices cut a head
                    # (a partial rotary embedding's rotated and passed columns)
                    block = self._head_block(out)
                    self.require_block(a, block, what)
                    self.require_block(out, block, what)
                    self.mark_tiled(out)
                else:
                    self.mark_point(out)
            elif b is not None and self._tiled(b) and \
                    not self._classes[self.find(out)].point:
                # (heads, head columns) merged back, or any axis merged with a
                # tiled one (``nn.Flatten`` of [B, C, F]): block m of the merged
                # axis is index m of the outer one, which is then a point axis
                self.require_block(b, self.size(b), what)
                self.require_block(out, self.size(b), what)
                self.mark_tiled(out)
                self.mark_point(a)
            else:
                # (batch, heads) merged: the batch is iterated one index at a time,
                # though a linear layer applied to ``[T, B, E]`` first took it for
                # its rows; so is an axis merged with an expanded one (a padding
                # mask's batch, ``[B, 1, 1, S]`` expanded over the heads and viewed
                # as ``[B·H, 1, S]``: index m reads element m // H of it). A merged
                # axis that is a point axis elsewhere (Bloom's ALiBi ``[B, H, S]``
                # viewed as ``[B·H, 1, S]`` beside the scores' batch × heads) is
                # iterated one index at a time with both of its parts.
                self.mark_point(out)
                self.mark_point(a)
                if b is not None:
                    self.mark_point(b)

    # -- between the passes ------------------------------------------------------------
    @property
    def planning(self) -> bool:
        return self._resolved is None

    def note_tensor(self, axes) -> None:
        """A kernel output's axes (planning pass): see :meth:`_at_most_two_tiled`."""
        if self._resolved is None:
            self._tensors.append(tuple(c for c in axes if c is not None))

    def _at_most_two_tiled(self) -> None:
        """Blocks run over at most two axes: where a tensor would have more tiled
        axes (a padding mask ``[B, T]``, whose two axes an input's blocks would run
        over, broadcast into scores ``[B, H, T, S]``), its leading ones are iterated
        one index at a time instead."""
        changed = True
        while changed:
            changed = False
            for axes in self._tensors:
                tiled = [c for c in axes if self._tiled(c)]
                for c in tiled[:-2]:
                    self.mark_point(c)
                    changed = True
            if changed:
                self._apply_links()

    def resolve(self) -> None:
        """Give every class a dimension; the next pass emits with them."""
        self._apply_links()
        self._at_most_two_tiled()
        names: dict[str, int] = {}
        dims: dict[int, Dim] = {}
        for cid, c in enumerate(self._classes):
            root = self.find(cid)
            if root in dims:
                continue
            r = self._classes[root]
            base = r.hint or f"N{r.size}"
            names[base] = names.get(base, 0) + 1
            name = base if names[base] == 1 else f"{base}{_suffix(names[base])}"
            dims[root] = self._make_dim(name, root)
        self._resolved = [dims[self.find(cid)] for cid in range(len(self._classes))]
        self._cursor = 0

    def _make_dim(self, name: str, root: int) -> Dim:
        c = self._classes[root]
        point = c.point or not c.tiled
        if point:
            return Dim(name, c.size, 1, point=True)
        block = c.block or self._blocks.get(name) or min(c.size, DEFAULT_BLOCK)
        if c.block and self._blocks.get(name, c.block) != c.block:
            cut = self._slice_cutting(root, c.block)
            if cut is not None:     # the slice's cut asks for it: lowered again, that
                raise UnalignedSlice(f"a slice asks for block {c.block} of dimension "
                                     f"{name}, given {self._blocks[name]}", node=cut)
            raise ImportError_(f"blocks: dimension {name} must have block {c.block} "
                               f"(it is split into heads of that size)")
        if c.size % block and c.block:
            cut = self._slice_cutting(root, block)
            if cut is not None:     # lowered again, that slice through a selection
                raise UnalignedSlice(f"slicing an axis of {c.size} at a multiple of "
                                     f"{block} that does not divide it", node=cut)
            raise ImportError_(f"an axis of {c.size} cannot be cut into blocks of {block}, "
                               f"the size its heads or slices need ({c.size} is not a "
                               f"multiple of {block}: split or chunk it into equal, "
                               f"block-aligned pieces)")
        if c.block:
            self.fixed_blocks.add(name)
        return Dim(name, c.size, min(block, c.size))

    def _slice_cutting(self, root: int, block: int) -> str | None:
        """The node of a slice whose cut asks for ``block`` on the class ``root``
        (an axis of 29 cut at 10), if one does."""
        for kind, a, align, part, what in self._links:
            if kind == "slice" and align and align % block == 0 and \
                    root in (self.find(a), self.find(part)):
                return what
        return None

    # -- the emitting pass -----------------------------------------------------------------
    def dim(self, cid: int) -> Dim:
        if self._resolved is None:
            return Dim(f"_plan{self.find(cid)}", self.size(cid), 1, point=True)
        return self._resolved[cid]

    def dims(self) -> tuple[Dim, ...]:
        seen: dict[str, Dim] = {}
        for d in self._resolved or ():
            seen.setdefault(d.name, d)
        return tuple(seen.values())


def check_blocks(blocks) -> dict[str, int]:
    """``blocks=`` as given by a user: {dimension name: positive integer block}."""
    from ...errors import UsageError
    if blocks is None:
        return {}
    if not isinstance(blocks, dict):
        raise UsageError(f"blocks: expected a dict of dimension name to block size, "
                         f"got {type(blocks).__name__}")
    for name, block in blocks.items():
        if not isinstance(name, str) or isinstance(block, bool) or \
                not isinstance(block, (int, np.integer)) or block < 1:
            raise UsageError(f"blocks: {name!r}: a block size is a positive integer, "
                             f"got {block!r}")
    return {name: int(block) for name, block in blocks.items()}


def _aligned_block(block: int, align: int) -> int:
    """The largest block up to ``block`` that divides ``align`` (any if 0)."""
    if not align:
        return block
    return max(b for b in range(1, block + 1) if align % b == 0)


def _suffix(n: int) -> str:
    """b, c, ..., z, then numbers: the second N64 is N64b."""
    return chr(ord("a") + n - 1) if n <= 26 else f"_{n}"
