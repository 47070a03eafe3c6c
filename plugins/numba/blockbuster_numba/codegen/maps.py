"""Stage 4, lower: ``map``, a local array of blocks (one padded block per index).

A map array has one leading axis per ``map`` level, each element padded to the
largest block of its dimensions; a ragged element is a view cut to its actual
extents. A map stored with ``:`` (or accumulated by a reduction) is written element
by element straight into its destination, never built first.
"""

from __future__ import annotations

from blockbuster.errors import BackendError
from blockbuster.ir.expr import Expr
from blockbuster.ir.types import ArrayType, BlockType

from .elementwise import write
from .matmul import gemm_into
from .place import computed_here, memo_key
from .schedule import close_loop, open_loop
from .values import Block, Frame, MapArray, Sink, padded, shape_text


def map_shape(g, node: Expr, frame: Frame) -> list[int]:
    """Padded shape of the map array ``node`` evaluates to (from its type)."""
    scope = {}
    for fr in frame.chain():         # inner bindings shadow outer ones
        for var, b in fr.binds.items():
            rows = b.runmax.axes[0].dim.name if b.runmax is not None else None
            scope[var] = (b.dim.name, rows)
    if g._checker is None:
        from blockbuster.ir.verify import TypeChecker
        g._checker = TypeChecker(g.m.program)
    t = g._checker.type_of(node, scope, f"kernel '{g.kernel.name}'")
    shape = []
    while isinstance(t, ArrayType):
        shape.append(g.dims[t.dim].nblocks)
        t = t.elem
    if not isinstance(t, BlockType):
        raise BackendError(f"numba: a map element must be a block, got {t}")
    return shape + [padded(g.dims[a]) for a in t.axes]


def emit_map(g, node: Expr, frame: Frame, sink: Sink | None = None) -> MapArray:
    """The map array of ``node`` (a new one), or ``node`` written into ``sink``."""
    var, d = node.attr.var, g.dims[node.attr.dim]
    own = sink is None
    if own:
        name = g.names.fresh("map_" + node.attr.var)
        shape = map_shape(g, node, frame)
        frame.lines.append(f"{name} = np.zeros({shape_text(shape)}, DT)"
                           f"  # map({var} in {d.name}): one padded block per index")
        sink = Sink(name)
    out = emit_maps(g, [node], frame, [sink])[0]
    return MapArray(sink.array if own else None, out.levels, out.loop_names, out.elem_axes)


def sibling_groups(nodes) -> list[list[int]]:
    """Indices of ``nodes`` grouped into ``map``s over the same variable and dimension
    (in order of first appearance); every other node is a group of its own."""
    groups: dict = {}
    for i, n in enumerate(nodes):
        key = (n.attr.var, n.attr.dim) if n.op == "map" else ("", i)
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def emit_maps(g, nodes, frame: Frame, sinks) -> list[MapArray]:
    """Sibling maps over one variable and dimension, each written into its sink, in
    one loop: what their elements share (a loaded weight block, a scaled block) is
    loaded and computed once per index, as the cost model counts it."""
    var, d = nodes[0].attr.var, g.dims[nodes[0].attr.dim]
    single = d.nblocks == 1
    inner, b = open_loop(g, var, d, frame, single)
    outs = map_elements(g, nodes, inner, sinks, d, b)
    close_loop(frame, inner, b, "0", str(d.nblocks), f"map {var} in {d.name}")
    return outs


def map_elements(g, nodes, inner: Frame, sinks, d, b) -> list[MapArray]:
    """The elements of sibling maps at index ``b`` (bound in ``inner``, their loop or
    one they share with a reduction), each written into its sink."""
    heres = [sink.at([b.code]) for sink in sinks]
    bodies = [node.args[0] for node in nodes]
    outs: list = [None] * len(nodes)
    for group in sibling_groups(bodies):
        if bodies[group[0]].op == "map":
            subs = emit_maps(g, [bodies[i] for i in group], inner, [heres[i] for i in group])
            for i, sub in zip(group, subs):
                outs[i] = MapArray(None, [d] + sub.levels, [b.name] + sub.loop_names,
                                   sub.elem_axes)
        else:
            i = group[0]
            outs[i] = element(g, bodies[i], inner, heres[i], d, b)
    return outs


def element(g, body: Expr, inner: Frame, here: Sink, d, b) -> MapArray:
    """Write one map element (not itself a map) into ``here``; the array's layout."""
    axes = gemm_element(g, body, inner, here)
    if axes is not None:
        return MapArray(None, [d], [b.name], axes)
    v = g.value(body, inner)
    if isinstance(v, MapArray):   # shared nested map computed elsewhere
        op = {"set": "=", "add": "+="}.get(here.mode)
        if here.view is not None:
            raise BackendError("numba: a map array cannot be stored as a block")
        if op is None:
            raise BackendError(f"numba: cannot {here.mode}-combine a map array")
        inner.lines.append(f"{here.array}[{', '.join(map(str, here.prefix))}] {op} {v.name}")
        return MapArray(None, [d] + v.levels, [b.name] + v.loop_names, v.elem_axes)
    if isinstance(v, Block):
        if here.view is not None:   # straight into a store's destination block
            view, axes, direct = here.view(here.prefix, inner)
            write(g, v, Sink(view, direct=direct), inner, axes)
        else:
            write(g, v, here, inner)
        return MapArray(None, [d], [b.name], v.axes)
    raise BackendError("numba: a map element cannot be a tuple")


def gemm_element(g, body: Expr, inner: Frame, here: Sink):
    """A map element that is a block matmul (``dot``), set in or added to an element
    of a local map array (a map's own array, a reduction's accumulator of a ``sum``
    of ``map``s): the micro-kernel stores or adds it in place, with no product block
    and no copy loop between (2-4 % of a Llama call under torch.compile at 64-row
    blocks). Returns the element's axes, or None when ``body`` is anything
    else, needed elsewhere, or combined otherwise (max, rescaled, into a store)."""
    if body.op != "dot" or here.mode not in ("set", "add") or here.view is not None \
            or here.direct is not None or here.array is None or g.uses[body] > 1:
        return None
    if not computed_here(body, inner) or memo_key(body, inner) in inner.memo:
        return None
    a, b = (g.value(x, inner) for x in body.args)
    if not (isinstance(a, Block) and isinstance(b, Block)):
        return None
    axes = (a.axes[0], b.axes[1])
    # A ragged element is the corner of its padded slot (unit column stride: the
    # micro-kernel takes any row stride).
    cuts = [":" if g.x.ext(ax) == str(padded(ax.dim)) else f":{g.x.ext(ax)}" for ax in axes]
    subscripts = [str(i) for i in here.prefix] + ([] if cuts == [":", ":"] else cuts)
    gemm_into(g, a, b, f"{here.array}[{', '.join(subscripts)}]", inner,
              overwrite=here.mode == "set")
    return axes
