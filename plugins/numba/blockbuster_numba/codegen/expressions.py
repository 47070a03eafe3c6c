"""Stage 4, lower: one expression node, emitted in the frame placement chose.

Leaves and block operators with a loop structure of their own are lowered here;
elementwise operators become lazy blocks (:mod:`.elementwise`), ``reduce`` and
``map`` have modules of their own.

* **Loads are views** of the global arrays starting at 0 (no copy; offsets inside
  a loop would block vectorisation).
* **Block operators** with their own loop structure: ``dot`` calls ``gemm_`` (the
  register-tiled micro-kernel of :mod:`..microkernel`; it packs its operands from
  any strides); row/column sums and maxima are explicit loops.
"""

from __future__ import annotations

from blockbuster.errors import BackendError
from blockbuster.ir.ops import OPS
from blockbuster.ir.expr import Expr
from blockbuster.ir.printer import format_expr

from ..lowering import INBLOCK
from . import elementwise as ew
from .maps import emit_map
from .matmul import gemm_into
from .plan import planned_load
from .reductions import emit_reduce
from .values import Axis, Block, Frame, InPlace, MapArray, Multi, Nest, padded


def emit(g, node: Expr, frame: Frame):
    """The value of ``node``, emitted in ``frame`` (its placement)."""
    op = node.op
    if op == "const":
        return Block((), name=g.m.const(node.attr), frame=frame)
    if op == "load":
        return emit_load(g, node, frame)
    if op == "pos":
        d = g.dims[node.attr.dim]
        axis = Axis(d, g.x.block_index(node.attr.index, d, frame))
        return Block((axis,), node=node, frame=frame, hint="pos")
    if op == "runmax":
        _, b = frame.resolve(node.attr)
        if b.runmax is None:
            raise BackendError(f"numba: runmax({node.attr}) outside its online_softmax")
        return b.runmax
    if op == "proj":
        multi = g.value(node.args[0], frame)
        if not isinstance(multi, Multi):
            raise BackendError("numba: proj of a single-output value")
        return multi.items[node.attr]
    if op == "reduce":
        return emit_reduce(g, node, frame)
    if op == "map":
        return emit_map(g, node, frame)
    if op == "get":
        return emit_get(g, node, frame)
    args = [g.value(a, frame) for a in node.args]
    for a in args:
        if not isinstance(a, Block):
            raise BackendError(f"numba: '{op}' cannot take a map array or a tuple "
                               f"in `{format_expr(node)[:80]}`")
    if op == "dot":
        return emit_dot(g, args, frame, g.in_place.get(node))
    if op in INBLOCK:
        return emit_inblock_reduce(g, node, args[0], frame)
    if op in ("vecsum", "vecmax"):
        return emit_vector_reduce(g, node, args[0], frame)
    return Block(result_axes(op, args), node=node, args=args, frame=frame, hint=op)


def result_axes(op: str, args: list[Block]) -> tuple:
    """The axes of elementwise/broadcast/layout operator ``op`` over ``args``: the
    registry's shape rule (one for the verifier, the cost model and this generator),
    applied to the generator's axes."""
    spec = OPS.get(op)
    if spec is None or spec.result_axes is None:
        raise BackendError(f"numba: no code for operator '{op}'")
    return tuple(spec.result_axes([a.axes for a in args]))


def emit_load(g, node: Expr, frame: Frame) -> Block:
    array = node.attr.array
    dims = g.m.array_dims[array]
    g.loads.append(planned_load(array, node.attr.index, dims, frame, g.kernel_loops))
    blocks = [g.x.block_index(ix, d, frame) for ix, d in zip(node.attr.index, dims)]
    subs, axes = g.x.block_subscripts(blocks, dims)
    # C-contiguous when every subscript after the first non-integer one is ':'.
    first = next((i for i, (s, d) in enumerate(zip(subs, dims)) if not d.point), None)
    contig = first is not None and all(s == ":" for s in subs[first + 1:])
    while subs and subs[-1] == ":" and len(subs) > 1:
        subs.pop()   # X[a:b] is typed C-contiguous by Numba, X[a:b, :] is not
    arg = g.m.arg_names[array]
    if not axes:   # every dimension a point: a scalar element (0-d: ``a[()]``)
        return Block((), name=f"{arg}[{', '.join(subs) or '()'}]", frame=frame)
    direct = g.x.direct(arg, blocks, dims, frame.lines, g.removable)
    name = g.names.fresh(f"{array}_blk")
    frame.lines.append(f"{name} = {arg}[{', '.join(subs)}]")
    g.removable.add(name)      # dropped when every element is read in place
    return Block(axes, name=name, frame=frame, contig=contig, hint=array, source=node,
                 direct=direct)


def emit_get(g, node: Expr, frame: Frame):
    """Block ``var`` of a map array: a view of the padded array, cut to the
    element's actual extents where they may be smaller (ragged)."""
    arr = g.value(node.args[0], frame)
    if not isinstance(arr, MapArray):
        raise BackendError(f"numba: get needs a map array in `{format_expr(node)[:80]}`")
    _, b = frame.resolve(node.attr)
    loop, rest = arr.loop_names[0], arr.loop_names[1:]
    axes = tuple(a.subst(loop, b.code) for a in arr.elem_axes)
    name = g.names.fresh(arr.name + "_get")
    if rest:   # an array of arrays: one level less
        frame.lines.append(f"{name} = {arr.name}[{b.name}]")
        return MapArray(name, arr.levels[1:], rest, axes)
    cuts = [g.x.ext(a) for a in axes]
    exact = all(cut == str(padded(a.dim)) for cut, a in zip(cuts, axes))
    if exact:
        frame.lines.append(f"{name} = {arr.name}[{b.name}]")
    else:
        subs = [":" if cut == str(padded(a.dim)) else ":" + cut for cut, a in zip(cuts, axes)]
        frame.lines.append(f"{name} = {arr.name}[{b.name}, {', '.join(subs)}]")
    return Block(axes, name=name, frame=frame, contig=exact or len(axes) < 2, hint="get")


def emit_dot(g, args, frame: Frame, dest: InPlace | None = None) -> Block:
    """A product block; stored straight into ``dest`` (its store's block) when it is
    exactly that block."""
    a, b = args
    axes = (a.axes[0], b.axes[1])
    if dest is not None and dest.fits(g, axes):
        gemm_into(g, a, b, dest.view, frame, overwrite=True)
        return Block(axes, name=dest.view, frame=frame, hint="dot")
    name = g.names.fresh("dot")
    frame.lines.append(f"{name} = np.empty({g.x.shape(axes)}, DT)")
    gemm_into(g, a, b, name, frame, overwrite=True)
    return Block(axes, name=name, frame=frame, hint="dot")


def emit_inblock_reduce(g, node: Expr, a: Block, frame: Frame) -> Block:
    op = node.op
    if a.lazy and a.rank == 2 and not (
            a.frame.lines is frame.lines and (ew.cheap(a) or g.uses[a.node] <= 1)):
        # The operand is needed elsewhere too: store it, reducing in the same loop.
        return ew.materialize(g, a, want=node)
    name = g.names.fresh(op)
    axes = (a.axes[0],) if op.startswith("row") else (a.axes[1],)
    if op.endswith("sum") and a.lazy and a.node.op == "ones":
        # A count (the pivot's mean divides by one): the extent summed over, no loop.
        summed = a.axes[1] if op.startswith("row") else a.axes[0]
        frame.lines.append(f"{name} = np.full({g.x.shape(axes)}, DT({g.x.ext(summed)}), DT)")
        return Block(axes, name=name, frame=frame, hint=op)
    # A row's running sum may be reassociated (radd_): the loop vectorises.
    combine = ("maximum_({0}, {1})" if not op.endswith("sum") else
               "radd_({0}, {1})" if op.startswith("row") else "{0} + {1}")
    init = "ZERO" if op.endswith("sum") else "NEG_INF"
    if op.startswith("row"):
        frame.lines.append(f"{name} = np.empty({g.x.shape(axes)}, DT)")
        acc = g.names.fresh("acc")

        def body(n: Nest):
            x = ew.ew(g, a, n.idx, n)
            return ([f"{acc} = {init}"], [f"{acc} = {combine.format(acc, x)}"],
                    [f"{name}[r] = {acc}"])
    else:
        fill = "np.zeros" if op.endswith("sum") else "np.full"
        extra = "" if op.endswith("sum") else ", NEG_INF"
        frame.lines.append(f"{name} = {fill}({g.x.shape(axes)}{extra}, DT)")

        def body(n: Nest):
            x = ew.ew(g, a, n.idx, n)
            return [], [f"{name}[c] = {combine.format(f'{name}[c]', x)}"], []
    ew.loop_nest(g, frame.lines, a.axes, body)
    return Block(axes, name=name, frame=frame, hint=op)


def emit_vector_reduce(g, node: Expr, a: Block, frame: Frame) -> Block:
    """The sum or largest element of a vector block: one number, a loop over it."""
    if a.lazy and g.uses[a.node] > 1 and not ew.cheap(a):
        ew.materialize(g, a)            # needed elsewhere too: computed once
    name = g.names.fresh(node.op)
    total = node.op == "vecsum"
    frame.lines.append(f"{name} = {'ZERO' if total else 'NEG_INF'}")
    # the running sum may be reassociated (radd_), as a row's: the loop vectorises
    combine = "radd_({0}, {1})" if total else "maximum_({0}, {1})"

    def body(n: Nest):
        return [], [f"{name} = {combine.format(name, ew.ew(g, a, n.idx, n))}"], []
    ew.loop_nest(g, frame.lines, a.axes, body)
    return Block((), name=name, frame=frame, hint=node.op)
