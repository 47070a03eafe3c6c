"""Stage 4, lower: elementwise fusion, the loop nests over the elements of a block.

**Elementwise fusion.** Elementwise operators are lazy: a consumer that loops over
the elements (another elementwise operator, an in-block reduction, an accumulation,
a store) inlines them as one scalar expression, so a chain such as
``exp(rowshift(neg(m), mul(s, c)))`` is one loop with no temporary. A value used
more than once (unless it costs one operation), or needed by an outer loop, is
materialised once in a named array. Row-vector operands are read once per row.
The scalar code of each operator comes from the backend's table (:mod:`..lowering`).
"""

from __future__ import annotations

from typing import Callable

from blockbuster.errors import BackendError
from blockbuster.ir.expr import Expr

from ..lowering import CHEAP, INBLOCK, NARY_CODE, UNARY_CODE
from .place import memo_key
from .values import Block, Nest, Sink, indent


def cheap(v: Block) -> bool:
    if v.node is None or v.node.op not in CHEAP:
        return False
    return all(not a.lazy or (a.node is not None and a.node.op == "pos") for a in v.args)


def ew(g, v: Block, idx: tuple, nest: Nest, repeated: bool = False) -> str:
    """Scalar code of ``v`` at element ``idx`` inside ``nest``."""
    if v.lazy:
        inline = (v.frame.lines is nest.block and
                  (cheap(v) or (g.uses[v.node] <= 1 and not repeated)))
        if v.rank == 0 and nest.rank > 0:
            inline = False        # a scalar: computed once, outside the loop
        if not inline:
            materialize(g, v)
    if not v.lazy:
        if v.rank == 0:
            return v.name
        code = (v.direct.in_loop(idx, nest) if v.direct is not None
                else f"{v.name}[{', '.join(idx)}]")
    else:
        code = ew_op(g, v, idx, nest)
    if nest.rank == 2 and v.rank == 1 and idx == (nest.idx[0],):
        return nest.per_row(code, v.hint)
    return code


def ew_op(g, v: Block, idx: tuple, nest: Nest) -> str:
    op, a = v.node.op, v.args

    def arg(i, ix):
        return ew(g, a[i], ix, nest)

    if op == "exp" and softmax_term(v):
        return f"exp_ftz_({arg(0, idx)})"
    if op in UNARY_CODE:
        return UNARY_CODE[op].format(arg(0, idx))
    if op in NARY_CODE:       # a scalar operand broadcasts
        return NARY_CODE[op].format(*(arg(i, idx if x.rank else ())
                                      for i, x in enumerate(a)))
    if op == "rowscale":
        return f"({arg(0, idx[:1])} * {arg(1, idx)})"
    if op == "rowshift":
        return f"({arg(1, idx)} + {arg(0, idx[:1])})"
    if op == "colscale":
        return f"({arg(1, idx)} * {arg(0, idx[1:])})"
    if op == "colshift":
        return f"({arg(1, idx)} + {arg(0, idx[1:])})"
    if op == "outer":
        return f"({arg(0, idx[:1])} * {arg(1, idx[1:])})"
    if op == "keep_ge":  # a where p[r] >= q[c], else -inf
        return f"({arg(2, idx)} if {arg(0, idx[:1])} >= {arg(1, idx[1:])} else NEG_INF)"
    if op == "transpose":
        return arg(0, idx[::-1])
    if op == "relabel":
        return arg(1, idx)
    if op == "rotate_half":  # concat(-x2, x1) of the column halves
        x = a[0]
        materialize(g, x)
        i, j = idx
        h = g.names.fresh("half")
        x.frame.lines.append(f"{h} = {g.x.ext(x.axes[1])} // 2")
        return f"(-{x.name}[{i}, {j} + {h}] if {j} < {h} else {x.name}[{i}, {j} - {h}])"
    if op == "pos":
        return f"DT({g.x.start(v.axes[0])} + {idx[0]})"
    raise BackendError(f"numba: no elementwise code for '{op}'")


def softmax_term(v: Block) -> bool:
    """Whether ``v`` is an online softmax's term ``exp(x - runmax(x))``, x its own
    logits: at most exp(0) = 1 where the row's largest term is 1, and only summed
    (the combiner's terms are linear in it), so a term under 2^-125 is lost in the
    sums whether flushed or not. Such an exp takes ``exp_ftz_`` (runtime.exp_ftz32:
    one multiply less; ~2.5 % of fused attention's time)."""
    shifted = v.node.args[0]
    if shifted.op != "rowshift" or shifted.args[0].op != "neg":
        return False
    runmax = shifted.args[0].args[0]
    if runmax.op != "runmax":
        return False
    try:
        _, b = v.frame.resolve(runmax.attr)
    except BackendError:
        return False
    return b.runmax_of is shifted.args[1]


def loop_nest(g, frame_lines: list, axes, body: Callable[[Nest], tuple]) -> None:
    """Emit ``for r: [row_init]; for c: [inner]; [row_final]`` over ``axes``.
    ``body(nest)`` returns ``(row_init, inner, row_final)`` line lists."""
    nest = Nest(frame_lines, len(axes), g.names)
    row_init, inner, row_final = body(nest)
    exts = [g.x.loop_len(a) for a in axes]
    if nest.rank == 0:
        lines = nest.prelude + row_init + inner + row_final
    elif nest.rank == 1:
        lines = [f"for r in range({exts[0]}):"] + indent(
            nest.prelude + row_init + inner + row_final)
    else:
        lines = [f"for r in range({exts[0]}):"] + indent(
            nest.prelude + row_init + [f"for c in range({exts[1]}):"]
            + indent(inner) + row_final)
    frame_lines.extend(lines)


def materialize(g, v: Block, want: Expr | None = None) -> Block | None:
    """Compute a lazy block into a named array (or a named scalar) in its frame.

    Row and column sums/maxima of the block that the kernel uses (``want``, and
    any other such parent not computed yet) are accumulated in the same loop
    nest, as a person would write it; returns ``want``'s value."""
    if not v.lazy:
        return None
    name = g.names.fresh(v.hint)
    lines = v.frame.lines
    if v.rank == 0:
        nest = Nest(lines, 0, g.names)
        code = ew_op(g, v, (), nest)
        lines.extend(nest.prelude + [f"{name} = {code}"])
        v.name, v.contig, v.args = name, True, []
        return None
    reds = [want] if want is not None else []
    if v.rank == 2:
        for p in g.parents.get(v.node, ()):
            if p.op in INBLOCK and p is not want and p.args[0] is v.node \
                    and memo_key(p, v.frame) not in v.frame.memo:
                reds.append(p)
    lines.append(f"{name} = np.empty({g.x.shape(v.axes)}, DT)")
    outs = {}
    row_init, inner_upd, row_final = [], [], []
    elem = g.names.fresh("x") if reds else None
    for p in reds:
        out = g.names.fresh(p.op)
        total = p.op.endswith("sum")
        init = "ZERO" if total else "NEG_INF"
        if p.op.startswith("row"):
            axes = (v.axes[0],)
            acc = g.names.fresh("acc")
            lines.append(f"{out} = np.empty({g.x.shape(axes)}, DT)")
            row_init.append(f"{acc} = {init}")
            inner_upd.append(f"{acc} = radd_({acc}, {elem})" if total
                             else f"{acc} = maximum_({acc}, {elem})")
            row_final.append(f"{out}[r] = {acc}")
        else:
            axes = (v.axes[1],)
            fill = "np.zeros" if total else "np.full"
            lines.append(f"{out} = {fill}({g.x.shape(axes)}{'' if total else ', NEG_INF'}, DT)")
            inner_upd.append(f"{out}[c] = {out}[c] + {elem}" if total
                             else f"{out}[c] = maximum_({out}[c], {elem})")
        outs[p] = Block(axes, name=out, frame=v.frame, hint=p.op)

    def body(n: Nest):
        code = ew_op(g, v, n.idx, n)
        idx = ", ".join(n.idx)
        if not reds:
            return [], [f"{name}[{idx}] = {code}"], []
        return row_init, [f"{elem} = {code}", f"{name}[{idx}] = {elem}"] + inner_upd, row_final

    loop_nest(g, lines, v.axes, body)
    v.name, v.contig, v.args = name, True, []
    for p, blk in outs.items():
        if p is not want:
            v.frame.memo[memo_key(p, v.frame)] = blk
    return outs.get(want)


def write(g, v: Block, sink: Sink, frame, axes=None) -> None:
    """Combine ``v`` into ``sink`` element by element (one fused loop nest)."""
    axes = v.axes if axes is None else axes

    def body(n: Nest):
        x = ew(g, v, n.idx, n)
        if sink.direct is not None and not sink.prefix:
            target = sink.direct.in_loop(n.idx, n)
        else:
            target = f"{sink.array}[{', '.join(tuple(map(str, sink.prefix)) + n.idx)}]"
        if target.endswith("[]"):
            target = sink.array
        if sink.mode == "set":
            line = f"{target} = {x}"
        elif sink.mode == "add":
            line = f"{target} += {x}"
        elif sink.mode == "max":
            line = f"{target} = maximum_({target}, {x})"
        elif sink.mode == "scale_add":  # online_softmax: rescale, then add
            alpha = f"{sink.alpha}[{n.idx[0]}]" if n.rank else sink.alpha
            line = f"{target} = {target} * {n.per_row(alpha, 'alpha')} + {x}"
        else:
            raise AssertionError(sink.mode)
        return [], [line], []

    loop_nest(g, frame.lines, axes, body)
