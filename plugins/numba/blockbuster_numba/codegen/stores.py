"""Stage 4, lower: a kernel's stores, each into its destination block (in place, or
through a view of the block where an array is needed).

A block is written element by element by the loop nest that computes it (the lazy
elementwise chain is fused into the store); a ``map`` stored with ``:`` writes each
element straight to its block; a held map array is copied out block by block.
"""

from __future__ import annotations

from blockbuster.errors import BackendError
from blockbuster.ir.placement import shared_loops
from blockbuster.ir.program import Store

from .elementwise import materialize, write
from .maps import emit_maps
from .place import computed_here
from .values import Block, Frame, IndexCode, InPlace, MapArray, Sink, indent


def emit_stores(g, stores, frame: Frame) -> None:
    """Every store of the kernel, in order; maps over one variable stored with ``:``
    share one loop (what their elements share is loaded once per index)."""
    sinks = [direct_sink(g, s, frame) for s in stores]
    # A map sharing a sibling reduction's loop is written by that loop (emit_reduce).
    shared = shared_loops(g.kernel)
    for store, sink in zip(stores, sinks):
        partner = shared.get(store.value)
        if partner is not None:
            if sink is None:
                raise BackendError(f"numba: store to {store.array} shares a loop but "
                                   f"has no direct destination")
            store_comment(store, frame)
            g.shared_maps.setdefault(partner, []).append((store.value, sink))
    groups: dict = {}
    for i, (store, sink) in enumerate(zip(stores, sinks)):
        if store.value in shared:
            continue
        key = (store.value.attr.var, store.value.attr.dim) if sink else ("", i)
        groups.setdefault(key, []).append(i)
    for group in groups.values():
        for i in group:
            store_comment(stores[i], frame)
        if sinks[group[0]] is None:
            emit_store(g, stores[group[0]], frame)
        else:
            emit_maps(g, [stores[i].value for i in group], frame, [sinks[i] for i in group])


def store_comment(store: Store, frame: Frame) -> None:
    text = ", ".join(":" if i is None else str(i) for i in store.index)
    frame.lines.append(f"# store {store.array}[{text}]")


def direct_sink(g, store: Store, frame: Frame) -> Sink | None:
    """For a ``map(...)`` stored with ``:`` and used nowhere else, the sink that puts
    each element straight into its destination block; else None."""
    dims = g.m.array_dims[store.array]
    colons = [k for k, ix in enumerate(store.index) if ix is None]
    depth, node = 0, store.value
    while node.op == "map":
        depth, node = depth + 1, node.args[0]
    if not (colons and depth == len(colons) and g.uses[store.value] == 1):
        return None
    fixed = {k: g.x.block_index(ix, d, frame)
             for k, (ix, d) in enumerate(zip(store.index, dims)) if ix is not None}

    def view(prefix, at: Frame):
        it = iter(prefix)
        blocks = [fixed[k] if k in fixed else next(it) for k in range(len(dims))]
        return dest_view(g, store.array, blocks, at)

    return Sink(None, view=view)


def emit_store(g, store: Store, frame: Frame) -> None:
    """A store of a block, or of a map array computed as a value."""
    array = store.array
    dims = g.m.array_dims[array]
    colons = [k for k, ix in enumerate(store.index) if ix is None]
    if not colons:
        blocks = [g.x.block_index(ix, d, frame) for ix, d in zip(store.index, dims)]
        target = in_place_target(g, store, blocks, frame)
        v = g.value(store.value, frame)
        g.in_place.pop(store.value, None)
        if target is not None and isinstance(v, Block) and v.name == target.view:
            return                      # the products were added up in the block itself
        if not isinstance(v, Block):
            raise BackendError(f"numba: store to {array} needs a block value")
        store_block(g, array, blocks, v, frame)
        return
    v = g.value(store.value, frame)
    if not isinstance(v, MapArray) or len(v.levels) < len(colons):
        raise BackendError(f"numba: ':' store to {array} needs a map value")
    # One loop per ':', outermost map level first; each element is a view of the
    # padded map array (its actual extents come from the element's axes).
    sub = Frame(frame)
    names = []
    for k in colons:
        name = g.names.fresh(dims[k].name.lower() + "_b")
        names.append(name)
        sub.lines.extend(g.x.block_vars(name, dims[k]))
    it = iter(names)
    blocks = [IndexCode.var(next(it)) if ix is None else g.x.block_index(ix, d, frame)
              for ix, d in zip(store.index, dims)]
    elem = g.names.fresh(v.name + "_elem")
    sub.lines.append(f"{elem} = {v.name}[{', '.join(names)}]")
    src = Block(v.element_axes([IndexCode.var(n) for n in names]), name=elem, frame=sub, contig=False)
    store_block(g, array, blocks, src, sub)
    nested = sub.lines
    for k, name in reversed(list(zip(colons, names))):
        nested = [f"for {name} in range({dims[k].nblocks}):"] + indent(nested)
    frame.lines.extend(nested)


def in_place_target(g, store: Store, blocks, frame: Frame) -> InPlace | None:
    """Where a block that is a sum of products (or one product) can be accumulated in
    the destination block itself, and registered for the ``dot`` or ``sum`` to find
    (:func:`.reductions.gemm_passenger`); None where it cannot. Without it the sum
    is added up in a new block, then copied out element by element: at 1024x1024
    blocks, 4 MiB zeroed, then read and written again, per block.

    It can where nothing else reads the value, the kernel does not read the
    destination array (its old values are not needed), the value is computed at the
    store (not hoisted out of the store's loops) and the destination's last axis is
    the array's last (unit stride, as the micro-kernel writes ``C``)."""
    node = store.value
    summed = node.args[0] if node.op == "reduce" and len(node.args) == 1 else None
    if not (node.op == "dot" or (summed is not None and summed.op == "dot"
                                 and node.attr.combiner == "sum")):
        return None
    if g.uses[node] != 1 or store.array in g.kernel.reads() or not computed_here(node, frame):
        return None
    dims = g.m.array_dims[store.array]
    view, axes, _ = dest_view(g, store.array, blocks, frame)
    if len(axes) != 2 or axes[-1].dim is not dims[-1]:
        return None
    target = InPlace(view, g.x.shape(axes), tuple(a.dim.name for a in axes))
    g.in_place[node] = target
    return target


def store_block(g, array: str, blocks, v: Block, frame: Frame) -> None:
    """``array[blocks] = v``, element by element in place."""
    view, axes, direct = dest_view(g, array, blocks, frame)
    if not axes:
        materialize(g, v)
        frame.lines.append(f"{view} = {v.name}")
        return
    write(g, v, Sink(view, direct=direct), frame, axes)


def dest_view(g, array: str, blocks, frame: Frame):
    """A view of block ``blocks`` of ``array`` (emitted in ``frame``; dropped when
    nothing reads it), its axes and its :class:`.values.Direct` access; for a block
    of point dimensions only, the element itself, no axes and no access."""
    arg = g.m.arg_names[array]
    dims = g.m.array_dims[array]
    subs, axes = g.x.block_subscripts(blocks, dims)
    while len(subs) > 1 and subs[-1] == ":":
        subs.pop()
    if not axes:                  # a scalar element (of a 0-d array: ``a[()]``)
        return f"{arg}[{', '.join(subs) or '()'}]", (), None
    direct = g.x.direct(arg, blocks, dims, frame.lines, g.removable)
    view = g.names.fresh(array + "_out")
    frame.lines.append(f"{view} = {arg}[{', '.join(subs)}]")
    g.removable.add(view)
    return view, tuple(axes), direct
