"""Lowering of one expression node to Triton code (reductions: :mod:`.combiners`).

Each function takes the kernel generator ``g``, the node and the frame placement
chose for it, emits the lines computing it into that frame and returns its value.
The reference interpreter (``blockbuster.backends.reference``) defines every
operator; where padding could reach a valid element (a contraction, an in-block
reduction), it is masked here first.
"""

from __future__ import annotations

from blockbuster.errors import BackendError
from blockbuster.ir.expr import Expr
from blockbuster.ir.ops import OPS

from ..lowering import (BLOCK_CODE, BROADCAST, ELEMENTWISE_CODE, ELEMENTWISE_LINES, INBLOCK,
                        STRUCTURAL_CODE)
from .indices import axis_mask, block_access, index_value, positions, substitute_var
from .values import Axis, Binding, Block, Frame, arange, shape_code


def assign(g, frame: Frame, code: str, axes, zero_padded: bool = False, stem: str = "t") -> Block:
    name = g.names.fresh(stem)
    frame.lines.append(f"{name} = {code}")
    return Block(name, tuple(axes), zero_padded)


def masked(g, frame: Frame, x: Block, which: int, fill: str) -> str:
    """``x`` with the padding of axis ``which`` set to ``fill`` (code)."""
    m = axis_mask(g, frame, x.axes, which)
    if m is None or (x.zero_padded and fill == "0.0"):
        return x.code
    return f"tl.where({m}, {x.code}, {fill})"


def emit(g, node: Expr, frame: Frame):
    op = node.op
    if op in ELEMENTWISE_CODE:
        args = [g.value(a, frame) for a in node.args]
        axes = next((a.axes for a in args if a.axes), ())
        code = ELEMENTWISE_CODE[op].format(*(a.code for a in args), shape=shape_code(axes))
        return assign(g, frame, code, axes)
    if op in ELEMENTWISE_LINES:
        x = g.value(node.args[0], frame)
        lines, result = ELEMENTWISE_LINES[op](x.code, g.names.fresh)
        frame.lines.extend(lines)
        return Block(result, x.axes)
    fn = _EMIT.get(op)
    if fn is None:
        raise BackendError(f"triton: no lowering for operator '{op}'")
    return fn(g, node, frame)


def emit_dot(g, node, frame):
    a, b = (g.value(x, frame) for x in node.args)
    code = (f"tl.dot({masked(g, frame, a, 1, '0.0')}, {masked(g, frame, b, 0, '0.0')}, "
            f"input_precision=\"ieee\")")
    return assign(g, frame, code, (a.axes[0], b.axes[1]), a.zero_padded and b.zero_padded)


def emit_inblock(g, node, frame):
    x = g.value(node.args[0], frame)
    axis, fill, template = INBLOCK[node.op]
    kept = tuple(a for i, a in enumerate(x.axes) if i != axis)
    operand = masked(g, frame, x, axis, fill)
    if operand != x.code and template.count("{x}") > 1:
        operand = assign(g, frame, operand, x.axes).code     # used more than once
    return assign(g, frame, template.format(x=operand), kept)


def emit_broadcast(g, node, frame):
    v, a = (g.value(x, frame) for x in node.args)
    axes = tuple(OPS[node.op].result_axes([v.axes, a.axes]))
    return assign(g, frame, BROADCAST[node.op].format(v.code, a.code), axes)


def emit_keep_ge(g, node, frame):
    p, q, a = (g.value(x, frame) for x in node.args)
    code = f"tl.where({p.code}[:, None] >= {q.code}[None, :], {a.code}, -INF)"
    return assign(g, frame, code, a.axes)


def emit_transpose(g, node, frame):
    a = g.value(node.args[0], frame)
    return assign(g, frame, f"tl.trans({a.code})", a.axes[::-1], a.zero_padded)


def emit_relabel(g, node, frame):
    p, a = (g.value(x, frame) for x in node.args)
    if p.axes[0].size != a.axes[-1].size:
        raise BackendError(f"triton: relabel of {a.axes[-1].dim.name} (padded to "
                           f"{a.axes[-1].size}) as {p.axes[0].dim.name} (padded to "
                           f"{p.axes[0].size}): the block sizes must pad alike")
    return Block(a.code, tuple(a.axes[:-1]) + (p.axes[0],), a.zero_padded)


def emit_rotate_half(g, node, frame):
    # concat(-x2, x1) of the halves of the valid columns: a column gather.
    x = g.value(node.args[0], frame)
    col = x.axes[1]
    ext = col.extent()
    if isinstance(ext, int) and ext % 2:
        raise BackendError(f"triton: rotate_half needs an even number of columns, got {ext}")
    half = g.names.fresh("half")
    src = g.names.fresh("src")
    ar = arange(col.dim)
    frame.lines.append(f"{half} = ({ext}) // 2")
    frame.lines.append(f"{src} = tl.where({ar} < {half}, {ar} + {half}, {ar} - {half})")
    rows = x.axes[0].size
    gathered = f"tl.gather({x.code}, tl.broadcast_to({src}[None, :], ({rows}, {col.size})), axis=1)"
    g_name = assign(g, frame, gathered, x.axes)
    return assign(g, frame, f"tl.where(({ar} < {half})[None, :], -{g_name.code}, {g_name.code})",
                  x.axes)


def emit_load(g, node, frame):
    name = node.attr.array
    dims = g.m.array_dims[name]
    blocks = [index_value(ix, frame) for ix in node.attr.index]
    offsets, mask, axes = block_access(g, frame, dims, blocks, g.m.strides[name])
    ptr = g.m.arg_names[name]
    if mask is None:
        code = f"tl.load({ptr} + {offsets})"
    else:
        code = f"tl.load({ptr} + {offsets}, mask={mask}, other=0.0)"
    return assign(g, frame, code, axes, True, stem="x")


def emit_const(g, node, frame):
    return Block(g.m.const(node.attr))


def emit_pos(g, node, frame):
    d = g.m.dims[node.attr.dim]
    axis = Axis(d, index_value(node.attr.index, frame))
    return assign(g, frame, f"{positions(g, frame, axis)}.to(tl.float32)", (axis,), stem="p")


def emit_runmax(g, node, frame):
    return frame.find_runmax(node.attr)


def emit_proj(g, node, frame):
    return g.value(node.args[0], frame)[node.attr]


def emit_get(g, node, frame):
    items = g.value(node.args[0], frame)
    b = frame.resolve(node.attr).value
    if isinstance(b, int):
        return items[b]
    return select(g, frame, items, b)


def select(g, frame, items: list, index: str):
    """Item ``index`` (runtime code) of a map array: a chain of ``tl.where``. An axis
    along which item k is block k (the map's own dimension) is at block ``index``."""
    if isinstance(items[0], list):
        return [select(g, frame, [it[k] for it in items], index) for k in range(len(items[0]))]
    axes = []
    for pos, axis in enumerate(items[0].axes):
        blocks = [it.axes[pos].block for it in items]
        if all(b == blocks[0] for b in blocks):
            axes.append(axis)
        elif blocks == list(range(len(items))):
            axes.append(Axis(axis.dim, index))
        else:
            raise BackendError(f"triton: a map array whose items lie at blocks {blocks} "
                               f"of {axis.dim.name} is read at a runtime index")
    out = items[0]
    for k, item in enumerate(items[1:], start=1):
        out = assign(g, frame, f"tl.where({index} == {k}, {item.code}, {out.code})", axes)
    return Block(out.code, tuple(axes))


def emit_map(g, node, frame):
    a = node.attr
    d = g.m.dims[a.dim]
    out = []
    for b in range(d.nblocks):
        inner = Frame(frame, share_lines=True)
        inner.binds[a.var] = Binding(a.var, b)
        out.append(g.value(substitute_var(node.args[0], a.var, b, {}), inner))
    return out


def emit_reduce(g, node, frame):
    from .combiners import emit_reduce as fold
    return fold(g, node, frame)


_EMIT = {name: globals()[fn] for name, fn in {**BLOCK_CODE, **STRUCTURAL_CODE}.items()}
