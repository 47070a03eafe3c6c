"""One handler per ATen operator: what each becomes in the block program.

A handler gets the lowering (``low``: its kernel emitter ``low.k`` and dimension
planner ``low.planner``), the FX node and the node's arguments with tensors already
lowered to :class:`~.values.Value` objects. Views return new views (no kernel);
everything else emits the kernels of the unfused program.
"""

from __future__ import annotations

import math

import numpy as np

from ..tensors import values as V
from ..tensors import reshapes as R
from ..tensors.composites import softmax
from ..tensors.values import Value, scalar
from .dims import ImportError_
from . import strided
from . import aten_elementwise  # noqa: F401  (registers the elementwise handlers)
from .aten_indexing import (index_nodes, narrow_cut,   # (and registers the indexing handlers)
                            unaligned_slice)
from .aten_joins import rotate_half_source   # (and registers cat and pad)
from . import aten_conv  # noqa: F401  (registers convolutions)
from .aten_norms import named_axes, reduce_axes   # (and registers layer and RMS norm)
# HANDLERS, Empty and TAKES_EMPTY are read by the lowering through this module.
from .aten_registry import HANDLERS, TAKES_EMPTY, Empty, handles  # noqa: F401


# --- reductions and normalisations ---------------------------------------------------------

def _one_axis(x: Value, dims, what: str) -> int:
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if len(dims) != 1:
        raise ImportError_(f"{what} over {dims or 'all axes'}: only one axis is supported")
    return dims[0] % x.rank


def _negated(low, node, x: Value) -> Value:
    return low.k.elementwise("neg", [x], node.name)


@handles("mean.dim", "mean.default")
def _mean(low, node, x, dims=None, keepdim=False, dtype=None):
    count = math.prod(x.shape[a] for a in named_axes(x, dims))
    return reduce_axes(low, node, "sum", x, dims, keepdim, scale=1.0 / count)


@handles("sum.dim_IntList", "sum.default")
def _sum(low, node, x, dims=None, keepdim=False, dtype=None):
    return reduce_axes(low, node, "sum", x, dims, keepdim)


@handles("var.correction", "std.correction", "var_mean.correction")
def _var(low, node, x, dims=None, correction=None, keepdim=False):
    """``mean((x - mean(x))²)·n/(n - correction)`` over the axes (two passes, as the
    LayerNorm composite; ``std``: its square root; ``var_mean``: (var, mean), as
    batch and group norm's decompositions ask for them)."""
    what = str(node.target).split(".")[1]
    axes = named_axes(x, dims)
    n = math.prod(x.shape[a] for a in axes)
    correction = 1 if correction is None else correction
    if n - correction <= 0:
        raise ImportError_(f"{what} of {n} element(s) with correction {correction}")
    k = low.k
    mean = reduce_axes(low, node, "sum", x, dims, True, scale=1.0 / n)
    square = k.elementwise("square", [k.elementwise("sub", [x, mean], node.name)],
                           node.name)
    var = reduce_axes(low, node, "sum", square, dims, keepdim, scale=1.0 / (n - correction))
    if what == "std":
        return k.elementwise("sqrt", [var], node.name)
    if what == "var_mean":
        for axis in axes if not keepdim else ():     # the kept size-1 axes, last first
            mean = V.drop_axis(mean, axis, low.planner)
        return var, mean
    return var


@handles("linalg_vector_norm.default")
def _vector_norm(low, node, x, ord=2, dim=None, keepdim=False, dtype=None):
    """``x.norm(dim=...)``, ``F.normalize``'s norm: over one axis, for ``ord`` 2
    (``sqrt(sum(x²))``), 1 (``sum(|x|)``) and ``inf`` (``max(|x|)``)."""
    axis = _one_axis(x, dim, "norm")
    k = low.k
    if ord == 2:
        total = k.reduce("sum", k.elementwise("square", [x], node.name), axis, node.name,
                         keepdim)
        return k.elementwise("sqrt", [total], node.name)
    if ord in (1, float("inf")):
        return k.reduce("sum" if ord == 1 else "max", k.elementwise("abs", [x], node.name),
                        axis, node.name, keepdim)
    raise ImportError_(f"norm of order {ord}: only 1, 2 and inf are supported")


@handles("amax.default", "amin.default")
def _amax(low, node, x, dims=(), keepdim=False):
    return _extreme(low, node, "amax" in str(node.target), x, dims, keepdim)


def _extreme(low, node, largest: bool, x: Value, dims, keepdim: bool) -> Value:
    """Largest (smallest: ``-max(-x)``, exact) over the axes; NaN propagates."""
    if largest:
        return reduce_axes(low, node, "max", x, dims, keepdim)
    return _negated(low, node, reduce_axes(low, node, "max", _negated(low, node, x),
                                            dims, keepdim))


@handles("max.dim", "min.dim")
def _max_dim(low, node, x, dim, keepdim=False):
    """``x.max(dim)``: the values (``amax``/``amin``); the indices are not computed,
    and a graph that reads them is an import error."""
    if any(str(u.target) in _GETITEM and u.args[1] == 1 and u.users for u in node.users):
        raise ImportError_(f"{str(node.target).split('.')[1]} over an axis: its indices "
                           f"(arg{str(node.target).split('.')[1]}) are not supported, "
                           f"only its values")
    return _extreme(low, node, "max" in str(node.target), x, [dim], keepdim), None


_GETITEM = ("<built-in function getitem>", "_operator.getitem")


@handles("argmax.default", "argmin.default")
def _argmax(low, node, x, dim=None, keepdim=False):
    """The position of the largest (smallest) element along an axis, its first one
    if several tie, a NaN's if there is one (as PyTorch): the smallest position
    where the element equals the axis's maximum, as a float (exact below 2^24)."""
    what = str(node.target).split(".")[1]
    if dim is None:
        raise ImportError_(f"{what} of the flattened tensor: give dim")
    axis = dim % x.rank
    n = x.shape[axis]
    k = low.k
    v = x if what == "argmax" else _negated(low, node, x)
    top = reduce_axes(low, node, "max", v, [axis], True)
    hit = k.elementwise("max", [k.elementwise("eq", [v, top], node.name),
                                k.elementwise("ne", [v, v], node.name)], node.name)
    positions = np.arange(n, dtype=np.float64).reshape([n] + [1] * (x.rank - 1 - axis))
    at = low.constant(node, f"positions_{node.name}", positions)
    candidates = k.elementwise("where", [hit, at, scalar(float(n))], node.name)
    return _extreme(low, node, False, candidates, [axis], keepdim)


@handles("any.dim", "any.dims", "any.default", "all.dim", "all.dims", "all.default")
def _any_all(low, node, x, dims=None, keepdim=False):
    """Boolean reductions as 0/1: any = ``max(x != 0)``, all = ``1 - max(x == 0)``."""
    k = low.k
    if "any" in str(node.target):
        return reduce_axes(low, node, "max", k.elementwise("ne", [x, scalar(0.0)],
                                                            node.name), dims, keepdim)
    zero = reduce_axes(low, node, "max", k.elementwise("eq", [x, scalar(0.0)], node.name),
                        dims, keepdim)
    return k.elementwise("sub", [scalar(1.0), zero], node.name)


@handles("cumsum.default")
def _cumsum(low, node, x, dim, dtype=None):
    """Running sums along ``dim``: ``out[t] = Σ_s x[s]·U[s, t]`` with the constant
    upper-triangular 0/1 matrix ``U``. Along one of the last two axes that is a
    matmul (``x @ U``, ``Uᵀ @ x``: a running mean over the positions of ``[B, T, E]``
    features keeps both tiled for a Linear after it; where the rows turn out to be a
    batch, as RoBERTa-style models number the tokens of ``[B, T]`` ids that are not
    padding, the matmul is a broadcast product itself); along a leading axis a
    broadcast product summed over ``s``. Exact on integer counts (below 2^24);
    floats are summed in blocks, not left to right."""
    axis = dim % x.rank
    n = x.shape[axis]
    if n == 1:
        return x
    if x.axes[axis] is None:
        raise ImportError_("cumsum along a broadcast axis")
    last = x.rank - 1
    if axis == last and x.rank >= 2 and x.axes[last - 1] is not None \
            and x.shape[last - 1] > 1:
        upper = low.constant(node, f"cumsum_{node.name}", np.triu(np.ones((n, n))))
        return low.k.matmul(x, upper, node.name)
    if axis == last - 1 and x.shape[last] > 1 and x.axes[last] is not None:
        lower = low.constant(node, f"cumsum_{node.name}", np.tril(np.ones((n, n))))
        return low.k.matmul(lower, x, node.name)
    # out[.., t, ..] = Σ_s x[.., s, 1, ..]·U[s, t]: the axes after it broadcast
    upper = np.triu(np.ones((n, n))).reshape((n, n) + (1,) * (last - axis))
    prod = low.k.elementwise("mul", [V.insert_axis(x, axis + 1),
                                     low.constant(node, f"cumsum_{node.name}", upper)],
                             node.name)
    return low.k.reduce("sum", prod, axis, node.name)


@handles("_softmax.default", "softmax.int")
def _softmax(low, node, x, dim, *rest):
    return softmax(low.k, x, dim % x.rank, node.name)


@handles("_log_softmax.default", "log_softmax.int")
def _log_softmax(low, node, x, dim, *rest):
    return softmax(low.k, x, dim % x.rank, node.name, log=True)


# --- matrix products -----------------------------------------------------------------------

@handles("mm.default", "bmm.default", "matmul.default")
def _mm(low, node, a, b):
    return low.k.matmul(a, b, node.name)


@handles("linear.default")
def _linear(low, node, x, w, b=None):
    out = low.k.matmul(x, V.permute(w, [1, 0]), node.name)
    return low.k.elementwise("add", [out, b], node.name) if b is not None else out


@handles("addmm.default")
def _addmm(low, node, bias, a, b, beta=1, alpha=1):
    out = low.k.matmul(a, b, node.name)
    if alpha != 1:
        out = low.k.elementwise("mul", [out, scalar(alpha)], node.name)
    if beta != 1:
        bias = low.k.elementwise("mul", [bias, scalar(beta)], node.name)
    return low.k.elementwise("add", [out, bias], node.name)


@handles("scaled_dot_product_attention.default")
def _sdpa(low, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
          scale=None, enable_gqa=False):
    from .attention import attention
    if dropout_p:
        raise ImportError_("attention dropout (use model.eval())")
    return attention(low, node, q, k, v, attn_mask, is_causal, scale)


# --- views --------------------------------------------------------------------------------

@handles("view.default", "_unsafe_view.default", "reshape.default")
def _view(low, node, x, shape):
    shape = [int(s) for s in shape]
    pieces = strided.interleave_pieces(x) if not isinstance(x, Value) else None
    if pieces is not None:                 # stack(..., -1).flatten(-2), absorbed
        return strided.interleave(low, node, pieces)
    lead = _rows_flattened_for_a_linear(node, x, shape)
    if lead is not None:
        shape = list(lead) + [shape[-1]]
    return R.reshape(low.planner, x, shape, node.name)


@handles("as_strided.default")
def _as_strided(low, node, x, size, stride, storage_offset=0):
    """``as_strided`` with a contiguous tensor's own strides for the new size (what
    group norm's decomposition leaves): a reshape. Any other striding reads memory
    in an order the tensor's values do not have: an import error."""
    size = [int(s) for s in size]
    contiguous, step = [], 1
    for s in reversed(size):
        contiguous.append(step)
        step *= max(s, 1)
    contiguous.reverse()
    source = node.args[0].meta.get("val")
    plain = (source is not None and source.is_contiguous() and not storage_offset
             and math.prod(size) == source.numel()
             and all(st == c for s, st, c in zip(size, stride, contiguous) if s != 1))
    if not plain:
        raise ImportError_(f"as_strided to size {size} with strides {list(stride)}: only "
                           f"a contiguous reshape is supported")
    return R.reshape(low.planner, x, size, node.name)


_LINEARS = {"aten.linear.default": 0, "aten.addmm.default": 1, "aten.mm.default": 0}
_VIEWS = ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")


def _rows_flattened_for_a_linear(node, x, shape):
    """``x.view(-1, E)``, a linear layer, and a view back to ``x``'s leading axes
    (GPT-2's Conv1D, ``nn.MultiheadAttention``'s output projection of ``[T, B, H,
    D]``): the leading axes (returned) are kept and the linear layer is applied
    row-wise to them (the same numbers), so that leading axes which cannot merge
    into blocks of rows (a tiled T before a batch iterated one index at a time)
    need not. None when the view is anything else."""
    if len(shape) != 2 or len(node.users) != 1:
        return None
    total = 1
    for s in x.shape:
        total *= s
    rows = shape[0] if shape[0] != -1 else total // max(shape[1], 1)
    lead, n = [], 1
    for s in x.shape:
        if n >= rows:
            break
        lead.append(s)
        n *= s
    if n != rows or len(lead) < 2 or len(lead) >= x.rank:
        # the rows are not whole leading axes of ``x`` (``[T, B·H, D]``, heads still
        # merged with the batch, viewed as ``[T·B, H·D]``): the view back names them
        lead = _view_back_lead(node)
        if lead is None or len(lead) < 2 or math.prod(lead) != rows:
            return None
    if _leading_linear_view_back(node, tuple(lead)):
        return tuple(lead)
    return None


def _view_back_lead(node):
    """The leading sizes of the view after the linear layer that reads ``node``."""
    (user,) = node.users
    backs = [b for b in user.users if str(b.target) in _VIEWS]
    if not backs:
        return None
    out = [int(s) for s in backs[0].args[1]]
    return tuple(out[:-1]) if -1 not in out else None


def _leading_linear_view_back(node, lead: tuple) -> bool:
    (user,) = node.users
    at = _LINEARS.get(str(user.target))
    if at is None or len(user.args) <= at or user.args[at] is not node or \
            any(a is node for i, a in enumerate(user.args) if i != at):
        return False
    if str(user.target) == "aten.linear.default" and len(user.args) > 1 and \
            getattr(user.args[1], "meta", {}).get("val") is not None and \
            user.args[1].meta["val"].dim() != 2:
        return False
    if not user.users:
        return False
    for back in user.users:
        if str(back.target) not in _VIEWS or back.args[0] is not user:
            return False
        out = [int(s) for s in back.args[1]]
        if -1 in out or tuple(out[:-1]) != lead:
            return False
    return True


@handles("permute.default")
def _permute(low, node, x, perm):
    return V.permute(x, perm)


@handles("transpose.int")
def _transpose(low, node, x, a, b):
    perm = list(range(x.rank))
    a, b = a % x.rank, b % x.rank
    perm[a], perm[b] = perm[b], perm[a]
    return V.permute(x, perm)


@handles("t.default")
def _t(low, node, x):
    return V.permute(x, list(range(x.rank))[::-1])


@handles("unsqueeze.default")
def _unsqueeze(low, node, x, dim):
    return V.insert_axis(x, dim % (x.rank + 1))


@handles("squeeze.dim", "squeeze.dims", "squeeze.default")
def _squeeze(low, node, x, dims=None):
    dims = range(x.rank) if dims is None else ([dims] if isinstance(dims, int) else dims)
    for d in sorted((d % x.rank for d in dims), reverse=True):
        if x.shape[d] == 1:
            x = V.drop_axis(x, d, low.planner)
    return x


@handles("expand.default")
def _expand(low, node, x, shape, implicit=False):
    return V.expand(x, [int(s) for s in shape], low.planner)


@handles("clone.default", "contiguous.default", "alias.default", "detach.default",
         "lift_fresh_copy.default")
def _identity(low, node, x, *rest, **kwargs):
    return x


@handles("_to_copy.default")
def _to_copy(low, node, x, *rest, **kwargs):
    """A cast. Every value is a float already (integers exact below 2^24), so a cast
    to a float type is the value itself (float16 and bfloat16 too: computed in
    float32, without their rounding); to ``bool``, ``x != 0``; floats to integers
    would truncate, which is not supported (an import error, not a silent no-op)."""
    target = kwargs.get("dtype")
    source = getattr(node.args[0], "meta", {}).get("val") if node.args else None
    source = getattr(source, "dtype", None)
    if target is None or source is None or target == source:
        return x
    if str(target) == "torch.bool":
        return low.k.elementwise("ne", [x, scalar(0.0)], node.name)
    if not target.is_floating_point and source.is_floating_point:
        raise ImportError_(f"a cast of {str(source)[6:]} values to {str(target)[6:]} "
                           f"(truncation toward zero) is not supported")
    return x


@handles("split_with_sizes.default", "split.Tensor")
def _split(low, node, x, sizes, dim=0):
    dim %= x.rank
    if isinstance(sizes, int):
        sizes = [sizes] * math.ceil(x.shape[dim] / sizes)
    out, start = [], 0
    for s in sizes:
        stop = min(start + s, x.shape[dim])
        if narrow_cut(low, node, x, dim, start, stop):
            out.append(unaligned_slice(low, node, x, dim, start, stop))   # not whole blocks
        else:
            out.append(V.slice_axis(low.planner, x, dim, start, start + s, 1, node.name))
        start += s
    return tuple(out)


@handles("getitem")
def _getitem(low, node, xs, i):
    return xs[i]


HANDLERS["<built-in function getitem>"] = _getitem
HANDLERS["_operator.getitem"] = _getitem


# --- structural patterns ---------------------------------------------------------------------

def absorbed_nodes(graph, dynamic) -> set:
    """Nodes that only feed a structural pattern (the slices of a rotate-half): the
    pattern's consumer reads them, they are never lowered on their own."""
    out = set()
    for node in graph.nodes:
        if node.name in dynamic and strided.interleave_pieces(node) is not None:
            out.add(node.name)              # read by its view (interleaving)
        src = rotate_half_source(node)
        if src is None or node.name not in dynamic:
            continue
        neg, lo = node.args[0]
        hi = neg.args[0]
        if len(neg.users) == 1 and len(hi.users) == 1 and len(lo.users) == 1:
            out |= {neg.name, hi.name, lo.name}
    return out | index_nodes(graph, dynamic)


@handles("_assert_tensor_metadata.default", "_assert_scalar.default",
         "sym_constrain_range_for_size.default")
def _no_op(low, node, *args, **kwargs):
    """Checks torch.export records; nothing to compute."""
    return None
