"""Stage 4, lower: ``reduce``, one accumulation scheme per combiner.

**Reductions** keep their combiner's state in accumulators: ``sum``, ``max``,
``online_softmax`` (running max, ``runmax`` bound to it, earlier sums rescaled by
``exp(m_old - m_new)``), ``meanvar`` (Chan's update). Accumulators are allocated
before the loop from the shape of the first block's term; an empty range leaves
each combiner's identity, as in the reference interpreter
(``blockbuster.backends.reference``, the definition of every combiner).
"""

from __future__ import annotations

from blockbuster.errors import BackendError
from blockbuster.ir.combiners import COMBINERS
from blockbuster.ir.expr import Expr
from blockbuster.ir.index import IConst
from blockbuster.ir.placement import binds_loop

from .analyse import substitute_var
from .elementwise import ew, loop_nest, materialize, write
from .maps import emit_maps, map_elements, map_shape, sibling_groups
from .matmul import gemm_calls, gemm_into
from .place import computed_here, memo_key, target_frame
from .schedule import close_loop, open_loop
from .values import Block, Frame, IndexCode, InPlace, MapArray, Multi, Nest, Sink, indent, shape_text


def reduce_range(g, node: Expr, frame: Frame) -> tuple[IndexCode, IndexCode, bool]:
    """``(lo, hi, single)``: clamped bounds of a reduce; single when the range is
    the whole of a one-block dimension (no loop)."""
    a = node.attr
    d = g.dims[a.dim]
    n = d.nblocks

    def bound(ix, default):
        if ix is None:
            return IndexCode(str(default))
        if isinstance(ix, IConst):
            return IndexCode(str(min(max(ix.value, 0), n)))
        return IndexCode("min(max(", g.x.idx_code(ix, frame), f", 0), {n})")

    lo, hi = bound(a.lo, 0), bound(a.hi, n)
    return lo, hi, (str(lo) == "0" and str(hi) == str(n) and n == 1)


def emit_reduce(g, node: Expr, frame: Frame):
    a = node.attr
    online = online_softmax_of(g, node)
    if online is not None:
        found = g.value(online, frame)
        if isinstance(found, Multi):
            frame.lines.append(f"# max({a.var} in {a.dim}): the running max of the online "
                               f"softmax over the same blocks")
            return found.items[0]
    comb = COMBINERS.get(a.combiner)
    if comb is None:
        raise BackendError(f"numba: unknown combiner '{a.combiner}'")
    d = g.dims[a.dim]
    lo_code, hi_code, single = reduce_range(g, node, frame)
    lo, hi = str(lo_code), str(hi_code)
    inner, b = open_loop(g, a.var, d, frame, single, a.lo, a.hi)
    # Accumulators take the sizes of the first block's terms (clamped: an empty
    # range still needs shapes, which the reference takes from a real block).
    first = (IndexCode(str(min(int(lo), d.nblocks - 1))) if lo.isdigit()
             else IndexCode("min(", lo_code, f", {d.nblocks - 1})"))

    def acc_axes(axes):
        return tuple(x.subst(b.name, first) for x in axes)

    what = f"{a.combiner}({a.var} in {a.dim}"
    if a.lo is not None or a.hi is not None:
        what += f"[{'' if a.lo is None else a.lo} : {'' if a.hi is None else a.hi}]"
    what += ")"
    bodies = f"{len(node.args)} bod{'y' if len(node.args) == 1 else 'ies'}"
    frame.lines.append(f"# {what}: {bodies}" + (", one block: no loop" if single else ""))
    combine = COMBINE.get(a.combiner)
    if combine is None:
        raise BackendError(f"numba: no code for combiner '{a.combiner}'")
    outs = combine(g, node, frame, inner, b, single, acc_axes)
    shared = g.shared_maps.pop(node, ())
    if shared:          # sibling maps stored with ':' run in this loop (ir.placement)
        map_elements(g, [m for m, _ in shared], inner, [s for _, s in shared], d, b)
    close_loop(frame, inner, b, lo, hi, f"{a.var} in {a.dim}")
    return outs[0] if len(outs) == 1 else Multi(outs)


def online_softmax_of(g, node: Expr) -> Expr | None:
    """The ``online_softmax`` over the same range of the same blocks ``x``, in this
    kernel, whose running max is what ``max(v in D: rowmax(x))`` computes (a stored
    softmax's shift beside its online row sum: one pass over ``x`` less), else None.
    Both start at -inf and fold ``maximum_`` over the same blocks: the same value."""
    a = node.attr
    if a.combiner != "max" or len(node.args) != 1 or node.args[0].op != "rowmax":
        return None
    x = node.args[0].args[0]
    # Over a single block, the max's variable is 0 in its body (analyse.single_blocks)
    # while an online softmax keeps its own: compare them that way.
    single = not binds_loop(node, g.dims[a.dim])
    for p in g.uses:
        # (computable wherever the max is: an online softmax that also folds a term of
        # a variable the max does not depend on lives inside that variable's loop)
        if (p.op == "reduce" and p.attr.combiner == "online_softmax"
                and p.free_vars <= node.free_vars
                and (p.attr.var, p.attr.dim, p.attr.lo, p.attr.hi)
                == (a.var, a.dim, a.lo, a.hi)
                and (substitute_var(p.args[0], a.var, 0) if single else p.args[0]) is x):
            return p
    return None


def passengers(g, bodies, inner: Frame, frame: Frame, single: bool, mode: str,
              acc_axes, alpha=None) -> list:
    """Emit the passenger bodies and combine each into a new accumulator; returns
    the accumulators' values (or the terms themselves when the loop has a single
    trip). Sibling ``map`` bodies over one variable are accumulated in one loop."""
    if single:
        return [g.value(body, inner) for body in bodies]
    outs: list = [None] * len(bodies)
    for group in sibling_groups(bodies):
        if bodies[group[0]].op != "map":
            outs[group[0]] = passenger(g, bodies[group[0]], inner, frame, mode, acc_axes, alpha)
            continue
        sinks = []           # accumulate straight into the accumulator arrays
        for i in group:
            name = g.names.fresh("acc")
            fill = "np.full" if mode == "max" else "np.zeros"
            extra = ", NEG_INF" if mode == "max" else ""
            shape = shape_text(map_shape(g, bodies[i], inner))
            frame.lines.append(f"{name} = {fill}({shape}{extra}, DT)")
            sinks.append(Sink(name, (), mode, alpha))
        maps = emit_maps(g, [bodies[i] for i in group], inner, sinks)
        for i, sink, m in zip(group, sinks, maps):
            outs[i] = MapArray(sink.array, m.levels, m.loop_names, acc_axes(m.elem_axes))
    return outs


def passenger(g, body: Expr, inner: Frame, frame: Frame, mode: str, acc_axes, alpha=None):
    """Emit one passenger body (not a ``map``) and combine it into a new accumulator."""
    fused = gemm_passenger(g, body, inner, frame, mode, acc_axes, alpha)
    if fused is not None:
        return fused
    t = g.value(body, inner)
    name = g.names.fresh("acc")
    if isinstance(t, MapArray):
        frame.lines.append(f"{name} = np.zeros({shape_text(t.padded_shape())}, DT)")
        if mode == "add":
            inner.lines.append(f"{name} += {t.name}")
        elif mode == "scale_add":
            lv = len(t.levels)
            inner.lines.append(f"for r in range({alpha}.shape[0]):")
            inner.lines.append(f"    {name}[{':, ' * lv}r] *= {alpha}[r]")
            inner.lines.append(f"{name} += {t.name}")
        else:
            raise BackendError(f"numba: cannot {mode}-accumulate a map array")
        return MapArray(name, t.levels, t.loop_names, acc_axes(t.elem_axes))
    if isinstance(t, Multi):
        raise BackendError("numba: a reduction cannot accumulate a tuple")
    axes = acc_axes(t.axes)
    if t.rank == 0:
        init = "NEG_INF" if mode == "max" else "ZERO"
        frame.lines.append(f"{name} = {init}")
    elif mode == "max":
        frame.lines.append(f"{name} = np.full({g.x.shape(axes)}, NEG_INF, DT)")
    else:
        frame.lines.append(f"{name} = np.zeros({g.x.shape(axes)}, DT)")
    write(g, t, Sink(name, (), mode, alpha), inner)
    return Block(axes, name=name, frame=frame, hint="acc")


def gemm_passenger(g, body: Expr, inner: Frame, frame: Frame, mode: str, acc_axes,
                   alpha=None):
    """A ``dot`` term summed over the loop (``sum``, or an online softmax's rescaled
    sum) is multiplied straight into its accumulator, ``acc += a·b``, with no
    product block in between; None when the term is not such a ``dot`` (or is
    needed elsewhere, or computed outside the loop)."""
    if body.op != "dot" or mode not in ("add", "scale_add") or g.uses[body] > 1:
        return None
    if target_frame(body, inner) is not inner or memo_key(body, inner) in inner.memo:
        return None
    a, b = (g.value(x, inner) for x in body.args)
    if not (isinstance(a, Block) and isinstance(b, Block)):
        return None
    axes = acc_axes((a.axes[0], b.axes[1]))
    name = g.names.fresh("acc")
    frame.lines.append(f"{name} = np.zeros({g.x.shape(axes)}, DT)")
    if mode == "scale_add":       # earlier sums rescaled, row by row
        loop_nest(g, inner.lines, (a.axes[0], b.axes[1]),
                  lambda n: ([], [f"{name}[r, c] *= {n.per_row(f'{alpha}[r]', 'alpha')}"], []))
    gemm_into(g, a, b, name, inner)
    return Block(axes, name=name, frame=frame, hint="acc")


def reduce_sum(g, node, frame, inner, b, single, acc_axes):
    dest = g.in_place.get(node)
    if dest is not None:
        found = sum_in_place(g, node, frame, inner, b, single, acc_axes, dest)
        if found is not None:
            return [found]
    return passengers(g, node.args, inner, frame, single, "add", acc_axes)


def sum_in_place(g, node: Expr, frame: Frame, inner: Frame, b, single: bool, acc_axes,
                 dest: InPlace) -> Block | None:
    """``sum(dot)`` added up in its store's block (:func:`.stores.in_place_target`):
    the first trip stores its product (``gemm_set_``: nothing zeroed first), the
    others add theirs; a range that may be empty zeroes the block first. None when
    the product is not exactly that block, or is needed elsewhere."""
    body = node.args[0]
    if g.uses[body] > 1 or not computed_here(body, inner) or memo_key(body, inner) in inner.memo:
        return None
    x, y = (g.value(v, inner) for v in body.args)
    if not (isinstance(x, Block) and isinstance(y, Block)):
        return None
    axes = acc_axes((x.axes[0], y.axes[1]))
    if not dest.fits(g, axes):
        return None
    store, add = gemm_calls(g, x, y, dest.view, inner)
    lo, hi = (str(v) for v in reduce_range(g, node, frame)[:2])
    if single:
        inner.lines.append(store)
    elif lo.isdigit() and hi.isdigit() and int(lo) < int(hi):
        inner.lines.extend([f"if {b.name} == {lo}:", f"    {store}", "else:", f"    {add}"])
    else:
        frame.lines.append(f"{dest.view}[:, :] = ZERO")
        inner.lines.append(add)
    return Block(axes, name=dest.view, frame=frame, hint="acc")


def reduce_max(g, node, frame, inner, b, single, acc_axes):
    return passengers(g, node.args, inner, frame, single, "max", acc_axes)


def reduce_online_softmax(g, node, frame, inner, b, single, acc_axes):
    # Reference: m_new = max(m, rowmax(x)); seen = m_new with -inf -> 0 (a row of
    # -inf logits sees runmax 0, so its terms are exp(-inf) = 0, not nan); terms
    # use runmax = seen; sums = exp(m - seen) * sums + terms.
    x = g.value(node.args[0], inner)
    b.runmax_of = node.args[0]
    rows = (x.axes[0],)
    m = g.names.fresh("m_run")
    seen = g.names.fresh("m_seen")
    mx = g.names.fresh("mx")
    if single:
        frame.lines.append(f"{m} = np.empty({g.x.shape(rows)}, DT)")
        frame.lines.append(f"{seen} = np.empty({g.x.shape(rows)}, DT)")

        def body(n: Nest):
            v = ew(g, x, n.idx, n)
            return ([f"{mx} = NEG_INF"], [f"{mx} = maximum_({mx}, {v})"],
                    [f"{m}[r] = {mx}", f"{seen}[r] = ZERO if {mx} == NEG_INF else {mx}"])
        loop_nest(g, inner.lines, x.axes, body)
        b.runmax = Block(rows, name=seen, frame=inner, hint="m_seen")
        outs = [Block(rows, name=m, frame=frame, hint="m_run")]
        outs += [g.value(t, inner) for t in node.args[1:]]
        return outs
    acc_rows = acc_axes(rows)
    alpha = g.names.fresh("alpha")
    frame.lines.append(f"{m} = np.full({g.x.shape(acc_rows)}, NEG_INF, DT)  # running max")
    frame.lines.append(f"{seen} = np.empty({g.x.shape(acc_rows)}, DT)  # runmax: the max, -inf as 0")
    frame.lines.append(f"{alpha} = np.empty({g.x.shape(acc_rows)}, DT)  # rescaling of earlier sums")
    sn = g.names.fresh("sn")

    def body(n: Nest):
        v = ew(g, x, n.idx, n)
        return ([f"{mx} = {m}[r]"], [f"{mx} = maximum_({mx}, {v})"],
                [f"{sn} = ZERO if {mx} == NEG_INF else {mx}",
                 f"{alpha}[r] = exp_({m}[r] - {sn})",
                 f"{seen}[r] = {sn}",
                 f"{m}[r] = {mx}"])
    loop_nest(g, inner.lines, x.axes, body)
    b.runmax = Block(rows, name=seen, frame=inner, hint="m_seen")
    outs = [Block(acc_rows, name=m, frame=frame, hint="m_run")]
    outs += passengers(g, node.args[1:], inner, frame, False, "scale_add", acc_axes, alpha)
    return outs


def reduce_meanvar(g, node, frame, inner, b, single, acc_axes):
    # Chan et al.: merge each block's (count, mean, M2) into the running one; the
    # outputs are (n, row sums, row sums of squared deviations). Passengers: sums.
    x = g.value(node.args[0], inner)
    materialize(g, x)        # read twice per row: mean, then squared deviations
    xs = x.name
    rows, cols = (x.axes[0],), x.axes[1]
    nb = g.names.fresh("n_blk")
    nsum, mean, s, q = (g.names.fresh(h) for h in ("mv_n", "mv_mean", "mv_s", "mv_q"))
    sb, mb, qb, dv, delta = (g.names.fresh(h) for h in ("s_b", "mean_b", "q_b", "dev", "delta"))
    lines = inner.lines
    if single:
        frame.lines.append(f"{s} = np.empty({g.x.shape(rows)}, DT)")
        frame.lines.append(f"{q} = np.empty({g.x.shape(rows)}, DT)")
        lines.append(f"{nsum} = DT({g.x.ext(cols)})")
        lines.append(f"for r in range({g.x.loop_len(rows[0])}):")
        lines.extend(indent([
            f"{sb} = ZERO",
            f"for c in range({g.x.loop_len(cols)}):",
            f"    {sb} = radd_({sb}, {xs}[r, c])",
            f"{mb} = {sb} / {nsum}",
            f"{qb} = ZERO",
            f"for c in range({g.x.loop_len(cols)}):",
            f"    {dv} = {xs}[r, c] - {mb}",
            f"    {qb} = radd_({qb}, {dv} * {dv})",
            f"{s}[r] = {sb}",
            f"{q}[r] = {qb}",
        ]))
        outs = [Block((), name=nsum, frame=frame), Block(rows, name=s, frame=frame),
                Block(rows, name=q, frame=frame)]
        return outs + [g.value(t, inner) for t in node.args[1:]]
    # Block means are merged in a frame shifted by the row's first element: a mean
    # of 1e3-sized values rounds at ulp(1e3), and Chan's merge term (delta²) would
    # carry that error to first order; shifted means are O(σ) (as the reference).
    acc_rows = acc_axes(rows)
    shift = g.names.fresh("mv_shift")
    frame.lines.append(f"{nsum} = ZERO  # elements per row so far")
    for v in (mean, s, q, shift):
        frame.lines.append(f"{v} = np.zeros({g.x.shape(acc_rows)}, DT)")
    w1, w2, tot = (g.names.fresh(h) for h in ("w_new", "w_cross", "n_tot"))
    lines.append(f"{nb} = DT({g.x.ext(cols)})")
    lines.append(f"{tot} = {nsum} + {nb}")
    lines.append(f"{w1} = {nb} / {tot}")
    lines.append(f"{w2} = {nsum} * {nb} / {tot}")
    lines.append(f"for r in range({g.x.loop_len(rows[0])}):")
    lines.extend(indent([
        f"if {nsum} == ZERO:",
        f"    {shift}[r] = {xs}[r, 0]",
        f"{sb} = ZERO",
        f"{mb} = ZERO",
        f"for c in range({g.x.loop_len(cols)}):",
        f"    {sb} = radd_({sb}, {xs}[r, c])",
        f"    {mb} = radd_({mb}, {xs}[r, c] - {shift}[r])",
        f"{mb} = {mb} / {nb}",
        f"{qb} = ZERO",
        f"for c in range({g.x.loop_len(cols)}):",
        f"    {dv} = ({xs}[r, c] - {shift}[r]) - {mb}",
        f"    {qb} = radd_({qb}, {dv} * {dv})",
        f"{delta} = {mb} - {mean}[r]",
        f"{mean}[r] += {delta} * {w1}",
        f"{q}[r] += {qb} + {delta} * {delta} * {w2}",
        f"{s}[r] += {sb}",
    ]))
    lines.append(f"{nsum} = {tot}")
    outs = [Block((), name=nsum, frame=frame), Block(acc_rows, name=s, frame=frame),
            Block(acc_rows, name=q, frame=frame)]
    outs += passengers(g, node.args[1:], inner, frame, False, "add", acc_axes)
    return outs


#: Each combiner's fold: the one place this backend lowers a combiner (the backend
#: reports these as its ``lowered_combiners``).
COMBINE = {"sum": reduce_sum, "max": reduce_max, "online_softmax": reduce_online_softmax,
           "meanvar": reduce_meanvar}
