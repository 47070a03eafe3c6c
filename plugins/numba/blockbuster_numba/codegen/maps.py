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
    var, d = node.attr.var, g.dims[node.attr.dim]
    own = sink is None
    if own:
        name = g.names.fresh("map_" + node.attr.var)
        shape = map_shape(g, node, frame)
        frame.lines.append(f"{name} = np.zeros({shape_text(shape)}, DT)"
                           f"  # map({var} in {d.name}): one padded block per index")
        sink = Sink(name)
    single = d.nblocks == 1
    inner, b = open_loop(g, var, d, frame, single)
    body = node.args[0]
    here = sink.at([b.code])
    if body.op == "map":
        sub = emit_map(g, body, inner, here)
        levels, loops, elem = [d] + sub.levels, [b.name] + sub.loop_names, sub.elem_axes
    else:
        v = g.value(body, inner)
        if isinstance(v, MapArray):   # shared nested map computed elsewhere
            op = {"set": "=", "add": "+="}.get(sink.mode)
            if here.view is not None:
                raise BackendError("numba: a map array cannot be stored as a block")
            if op is None:
                raise BackendError(f"numba: cannot {sink.mode}-combine a map array")
            inner.lines.append(f"{here.array}[{', '.join(map(str, here.prefix))}] {op} {v.name}")
            levels, loops, elem = [d] + v.levels, [b.name] + v.loop_names, v.elem_axes
        elif isinstance(v, Block):
            if here.view is not None:   # straight into a store's destination block
                view, axes = here.view(here.prefix, inner)
                write(g, v, Sink(view), inner, axes)
            else:
                write(g, v, here, inner)
            levels, loops, elem = [d], [b.name], v.axes
        else:
            raise BackendError("numba: a map element cannot be a tuple")
    close_loop(frame, inner, b, "0", str(d.nblocks), f"map {var} in {d.name}")
    return MapArray(sink.array if own else None, levels, loops, elem)
