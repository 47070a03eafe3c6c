"""``reduce``: a sequential loop over block indices with loop-carried accumulators.

A reduction of one trip (a one-block dimension, or a range such as ``K[:1]``) binds
its variable to that block and runs its step once, in line; any other is a Triton
``for`` loop over its range, clamped to the dimension (``range`` bounds may use the
kernel's program-id digits: the causal ``j in T[:t + 1]`` never visits a block above
the diagonal). Accumulators start at the combiner's identity (the registry's
``Combiner.identity``), so an empty range yields it, as the reference's does. Their
initialisation goes before the loop, the step into its body, in this order because
the body is generated first (it gives the accumulators their shapes).

The step of each combiner (``COMBINE``) follows the reference interpreter's fold
(``Evaluator._combine_<name>``): ``sum``/``max`` accumulate passengers;
``online_softmax`` keeps the running row max of its logits (masked padding is
-inf), binds ``runmax`` to it (0 for rows still at -inf) and rescales earlier sums
by ``exp(m_old - m_new)``; ``meanvar`` merges each block's count, shifted mean and
squared deviations with Chan's update, in the frame of each row's first element.
"""

from __future__ import annotations

from blockbuster.errors import BackendError

from ..lowering import MAX_ALONG, row_sum
from .expressions import assign, masked
from .indices import index_value, substitute_var
from .values import Binding, Block, Frame, indent, shape_code


class Accumulators:
    """The loop-carried values of one reduction: their names and initial values."""

    def __init__(self, g):
        self.g = g
        self.init: list[str] = []

    def new(self, like, fill: str):
        """An accumulator (or a map array of them) shaped like ``like``."""
        if isinstance(like, list):
            return [self.new(item, fill) for item in like]
        name = self.g.names.fresh("acc")
        self.init.append(f"{name} = tl.full({shape_code(like.axes)}, {fill}, tl.float32)")
        return Block(name, like.axes)


def update(body: Frame, acc, value, template: str) -> None:
    """``acc = template(acc, value)`` through map arrays."""
    if isinstance(acc, list):
        for a, v in zip(acc, value):
            update(body, a, v, template)
        return
    body.lines.append(f"{acc.code} = {template.format(acc=acc.code, t=value.code)}")


def _rows(alpha: str, value) -> str:
    """``alpha`` broadcast along the first axis of ``value``."""
    if not value.axes:
        raise BackendError("triton: online_softmax cannot rescale a scalar term")
    return alpha if len(value.axes) == 1 else f"{alpha}[:, None]"


def fold_sum(g, bodies, body, accs, single=False):
    terms = [g.value(t, body) for t in bodies]
    if single:
        return terms                 # one trip: the terms themselves, as the reference
    outs = [accs.new(t, "0.0") for t in terms]
    for acc, t in zip(outs, terms):
        update(body, acc, t, "{acc} + {t}")
    return outs


def fold_max(g, bodies, body, accs, single=False):
    terms = [g.value(t, body) for t in bodies]
    if single:
        return terms
    outs = [accs.new(t, "-INF") for t in terms]
    for acc, t in zip(outs, terms):
        update(body, acc, t, "tl.maximum({acc}, {t}, propagate_nan=tl.PropagateNan.ALL)")
    return outs


def fold_online_softmax(g, bodies, body, accs, single=False):
    var = next(iter(body.binds))
    x = g.value(bodies[0], body)
    rows = (x.axes[0],)
    m = accs.new(Block("", rows), "-INF")
    logits = masked(g, body, x, 1, "-INF")
    if logits != x.code:
        logits = assign(g, body, logits, x.axes).code
    row_max = assign(g, body, MAX_ALONG.format(axis=1).format(x=logits), rows)
    m_new = assign(g, body, f"tl.maximum({m.code}, {row_max.code}, "
                            f"propagate_nan=tl.PropagateNan.ALL)", rows)
    # A row whose logits are all -inf so far sees runmax 0: its terms are exp(-inf) = 0.
    seen = assign(g, body, f"tl.where({m_new.code} == -INF, 0.0, {m_new.code})", rows,
                  stem="runmax")
    body.runmax[var] = seen
    terms = [g.value(t, body) for t in bodies[1:]]
    sums = [accs.new(t, "0.0") for t in terms]
    alpha = assign(g, body, f"tl.exp({m.code} - {seen.code})", rows, stem="alpha")

    def rescale(acc, t):
        if isinstance(acc, list):
            for a, v in zip(acc, t):
                rescale(a, v)
            return
        body.lines.append(f"{acc.code} = {acc.code} * {_rows(alpha.code, t)} + {t.code}")

    for acc, t in zip(sums, terms):
        rescale(acc, t)
    body.lines.append(f"{m.code} = {m_new.code}")
    return [m] + sums


def fold_meanvar(g, bodies, body, accs, single=False):
    x = g.value(bodies[0], body)
    rows, col = (x.axes[0],), x.axes[1]
    n = accs.new(Block(""), "0.0")
    mean = accs.new(Block("", rows), "0.0")
    s = accs.new(Block("", rows), "0.0")
    q = accs.new(Block("", rows), "0.0")
    shift = accs.new(Block("", rows), "0.0")
    ext = col.extent()
    lines = body.lines
    first = g.names.fresh("first")
    nb = g.names.fresh("nb")
    lines.append(f"{first} = {n.code} == 0.0")
    lines.append(f"{nb} = ({ext}) * 1.0")
    # Means in the frame of each row's first element (O(sigma), not O(mean)).
    col0 = row_sum(f"tl.where((ar_{col.dim.name} == 0)[None, :], {x.code}, 0.0)")
    lines.append(f"{shift.code} = tl.where({first}, {col0}, {shift.code})")
    xs = assign(g, body, f"{x.code} - {shift.code}[:, None]", x.axes)
    mean_b = assign(g, body, f"{row_sum(masked(g, body, xs, 1, '0.0'))} / {nb}", rows)
    dev = assign(g, body, f"{xs.code} - {mean_b.code}[:, None]", x.axes)
    dev2 = Block(f"({dev.code} * {dev.code})", x.axes)
    q_b = assign(g, body, row_sum(masked(g, body, dev2, 1, "0.0")), rows)
    total = g.names.fresh("total")
    delta = g.names.fresh("delta")
    lines.append(f"{total} = {n.code} + {nb}")
    lines.append(f"{delta} = {mean_b.code} - {mean.code}")
    lines.append(f"{q.code} = tl.where({first}, {q_b.code}, {q.code} + {q_b.code} + "
                 f"{delta} * {delta} * ({n.code} * {nb} / {total}))")
    lines.append(f"{mean.code} = tl.where({first}, {mean_b.code}, "
                 f"{mean.code} + {delta} * ({nb} / {total}))")
    lines.append(f"{s.code} = {s.code} + {row_sum(masked(g, body, x, 1, '0.0'))}")
    lines.append(f"{n.code} = {total}")
    terms = [g.value(t, body) for t in bodies[1:]]
    sums = [accs.new(t, "0.0") for t in terms]
    for acc, t in zip(sums, terms):
        update(body, acc, t, "{acc} + {t}")
    return [n, s, q] + sums


COMBINE = {"sum": fold_sum, "max": fold_max, "online_softmax": fold_online_softmax,
           "meanvar": fold_meanvar}


def emit_reduce(g, node, frame: Frame):
    a = node.attr
    fold = COMBINE.get(a.combiner)
    if fold is None:
        raise BackendError(f"triton: no lowering for combiner '{a.combiner}'")
    n = g.m.dims[a.dim].nblocks
    lo = 0 if a.lo is None else index_value(a.lo, frame)
    hi = n if a.hi is None else index_value(a.hi, frame)
    lo = max(lo, 0) if isinstance(lo, int) else f"tl.maximum({lo}, 0)"
    hi = min(hi, n) if isinstance(hi, int) else f"tl.minimum({hi}, {n})"
    single = isinstance(lo, int) and isinstance(hi, int) and hi - lo == 1
    body = Frame(frame)
    accs = Accumulators(g)
    if single:
        # One trip: the bodies for that block, so what does not depend on it is hoisted.
        body.binds[a.var] = Binding(a.var, lo)
        memo: dict = {}
        bodies = [substitute_var(t, a.var, lo, memo) for t in node.args]
    else:
        loop_var = g.names.fresh(a.var + "_")
        body.binds[a.var] = Binding(a.var, loop_var)
        bodies = list(node.args)
    outs = fold(g, bodies, body, accs, single)
    frame.lines.extend(accs.init)
    if single:
        frame.lines.extend(body.lines)
    else:
        frame.lines.append(f"for {loop_var} in range({lo}, {hi}):  # {a.var} in {a.dim}")
        frame.lines.extend(indent(body.lines or ["pass"]))
    return outs[0] if len(outs) == 1 else tuple(outs)
