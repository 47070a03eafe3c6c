"""The NumPy reference interpreter: the definitive semantics of block programs.

It runs a verified program block by block, exactly as the IR says: kernels in order;
in each kernel every combination of its loops' block indices; each store's value
evaluated on blocks of their actual extent (the last block of a dimension may be
ragged; a point dimension indexes one element and drops out of the block's shape)
and written into global arrays. No fusion and no cleverness: every other backend,
and every rewrite rule, is checked against this.

Values are NumPy arrays (0-d for scalars), Python lists for ``map`` arrays (one item
per block index) and tuples for multi-output reductions.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..cost.hardware import DEFAULT_HARDWARE
from ..errors import BackendError
from ..ir.combiners import COMBINERS
from ..ir.expr import Expr
from ..ir.index import evaluate
from ..ir.ops import OPS
from ..ir.printer import format_expr
from ..ir.program import Kernel, Program, Store
from ..ir.types import Dim
from .base import Arrays, Backend, Runner, as_dtype

NEG_INF = -math.inf

# Block operators are plain functions of their argument values: their semantics are
# the registry's (``OpSpec.reference``). What the evaluator runs itself (they need
# the environment, not only values):
_STRUCTURAL = frozenset({"load", "const", "pos", "runmax", "proj", "get", "map", "reduce"})

# Fresh identities for runmax bindings: a memo key must change whenever the running
# max a term sees changes, even when the block index does not (nested loops).
_TOKENS = itertools.count(1)


# --- helpers on values (blocks, map arrays, tuples) ----------------------------

def _zip(f, a, b):
    """Apply ``f`` elementwise through map arrays and tuples."""
    if isinstance(a, (list, tuple)):
        return type(a)(_zip(f, x, y) for x, y in zip(a, b))
    return f(a, b)


def _fill(value, fill, dtype):
    """A value of the same structure and shapes, every element ``fill``."""
    if isinstance(value, (list, tuple)):
        return type(value)(_fill(v, fill, dtype) for v in value)
    return np.full(np.shape(value), fill, dtype)


def _rescale_rows(alpha, value):
    """``value`` with row r multiplied by ``alpha[r]`` (through map arrays)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_rescale_rows(alpha, v) for v in value)
    shape = np.shape(value)
    if not shape or shape[0] != alpha.shape[0]:
        raise BackendError(f"online_softmax: an accumulated term of shape {shape} does not "
                           f"have the logits' {alpha.shape[0]} rows as its first axis")
    return alpha.reshape((-1,) + (1,) * (len(shape) - 1)) * value


def _block_slices(dims: list[Dim], blocks) -> tuple:
    """The NumPy subscript of one block: a point dimension is one element (and drops
    out of the shape), a tiled one a slice of the block's actual extent."""
    return tuple(d.start(b) if d.point else slice(d.start(b), d.start(b) + d.extent(b))
                 for d, b in zip(dims, blocks))


def _bind(env: dict, var: str, b: int) -> dict:
    inner = dict(env)
    inner[var] = b
    inner.pop(("runmax", var), None)  # a rebound variable hides an outer running max
    return inner


# --- the interpreter -----------------------------------------------------------

class Evaluator:
    """Evaluates expressions of one program against its global arrays.

    ``env`` maps loop variables to block indices and ``("runmax", var)`` to
    ``(token, running max)`` inside an online_softmax. Values are memoised on
    ``(node, values of the node's free variables)``: nodes are hash-consed, so a
    shared or loop-invariant sub-expression is computed once.

    In ``abstract`` mode the evaluator only needs shapes (for the identity of an empty
    reduction): every reduction visits one representative block and out-of-range
    loads are clamped.
    """

    def __init__(self, program: Program, arrays: Arrays, dtype, abstract: bool = False):
        self.program = program
        self.dims = program.dim_map
        self.array_dims = {a.name: [self.dims[d] for d in a.dims] for a in program.arrays}
        self.arrays = arrays
        self.dtype = np.dtype(dtype)
        self.abstract = abstract
        self.memo: dict = {}
        self._shape_probe: Evaluator | None = None

    # -- entry points ------------------------------------------------------------
    def value(self, node: Expr, env: dict):
        # free_vars is one cached frozenset per node, so its iteration order is stable.
        key = (node, tuple((env[v], env.get(("runmax", v), (0,))[0]) for v in node.free_vars))
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._eval(node, env)
        return hit

    def run_kernel(self, kernel: Kernel) -> None:
        loop_dims = [self.dims[d] for _, d in kernel.loops]
        for blocks in itertools.product(*(range(d.nblocks) for d in loop_dims)):
            env = dict(zip(kernel.loop_vars, blocks))
            self.memo = {}  # reuse within one iteration only: memory stays bounded
            for store in kernel.stores:
                try:
                    self._store(store, [], self.value(store.value, env), env)
                except ValueError as err:  # NumPy shape mismatch: ragged blocks disagree
                    raise BackendError(f"reference: kernel '{kernel.name}', store to "
                                       f"{store.array} at {env}: {err}") from None

    # -- stores ------------------------------------------------------------------
    def _store(self, store: Store, blocks: list[int], value, env: dict) -> None:
        k = len(blocks)
        if k < len(store.index):
            ix = store.index[k]
            if ix is None:  # ':' walks one level of map array, outermost map first
                for b, item in enumerate(value):
                    self._store(store, blocks + [b], item, env)
            else:
                self._store(store, blocks + [evaluate(ix, env)], value, env)
            return
        dims = self.array_dims[store.array]
        expected = tuple(d.extent(b) for d, b in zip(dims, blocks) if not d.point)
        if np.shape(value) != expected:
            where = ", ".join(map(str, blocks))
            raise ValueError(f"block {store.array}[{where}] has shape {expected}, "
                             f"but the value has shape {np.shape(value)}")
        self.arrays[store.array][_block_slices(dims, blocks)] = value

    # -- expressions ---------------------------------------------------------------
    def _eval(self, node: Expr, env: dict):
        op = node.op
        spec = OPS.get(op)
        if spec is not None and spec.reference is not None:
            return spec.reference(*(self.value(a, env) for a in node.args))
        if op == "load":
            return self._load(node, env)
        if op == "const":
            return np.asarray(node.attr, self.dtype)
        if op == "pos":
            d = self.dims[node.attr.dim]
            b = self._block(node, node.attr.index, d, env)
            return np.arange(d.start(b), d.start(b) + d.extent(b), dtype=self.dtype)
        if op == "runmax":
            return env[("runmax", node.attr)][1]
        if op == "proj":
            return self.value(node.args[0], env)[node.attr]
        if op == "get":
            return self.value(node.args[0], env)[env[node.attr]]
        if op == "map":
            var, d = node.attr.var, self.dims[node.attr.dim]
            return [self.value(node.args[0], _bind(env, var, b)) for b in range(d.nblocks)]
        if op == "reduce":
            return self._reduce(node, env)
        raise BackendError(f"reference: unknown operator '{op}'")

    def _block(self, node: Expr, ix, d: Dim, env: dict) -> int:
        b = evaluate(ix, env)
        if 0 <= b < d.nblocks:
            return b
        if self.abstract:
            return min(max(b, 0), d.nblocks - 1)
        raise BackendError(f"reference: `{format_expr(node)}` reads block {b} of "
                           f"{d.name}, which has {d.nblocks} blocks")

    def _load(self, node: Expr, env: dict):
        dims = self.array_dims[node.attr.array]
        blocks = [self._block(node, ix, d, env) for ix, d in zip(node.attr.index, dims)]
        return self.arrays[node.attr.array][_block_slices(dims, blocks)]

    # -- reductions ----------------------------------------------------------------
    def _reduce(self, node: Expr, env: dict):
        a = node.attr
        n = self.dims[a.dim].nblocks
        lo = 0 if a.lo is None else min(max(evaluate(a.lo, env), 0), n)
        hi = n if a.hi is None else min(max(evaluate(a.hi, env), 0), n)
        if self.abstract:
            blocks = range(0, 1)  # shapes do not depend on which block is reduced
        else:
            blocks = range(lo, hi)
        outs = self._combine(node, env, blocks) if blocks else self._identity(node, env)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _combine(self, node: Expr, env: dict, blocks: range) -> list:
        combine = getattr(self, "_combine_" + node.attr.combiner, None)
        if combine is None:
            raise BackendError(f"reference: unknown combiner '{node.attr.combiner}'")
        return combine(node, env, blocks)

    def _identity(self, node: Expr, env: dict) -> list:
        """The outputs of an empty reduction. Their shapes come from evaluating the
        reduction over one representative block in abstract mode: the types alone do
        not say which block (hence which extent) of a dimension an axis has."""
        if self._shape_probe is None:
            self._shape_probe = Evaluator(self.program, self.arrays, self.dtype, abstract=True)
        probe = self._shape_probe
        probe.memo = {}
        outs = probe._combine(node, env, range(0, 1))
        fill = COMBINERS[node.attr.combiner].identity(len(outs))
        return [_fill(o, f, self.dtype) for o, f in zip(outs, fill)]

    # Each combiner folds bodies block by block. online_softmax and meanvar have a
    # head (the first body, with state of its own); the bodies after it, and all the
    # bodies of sum and max, are passengers accumulated into one output each.

    def _combine_sum(self, node, env, blocks):
        acc = None
        for j in blocks:
            inner = _bind(env, node.attr.var, j)
            terms = [self.value(body, inner) for body in node.args]
            acc = terms if acc is None else [_zip(np.add, s, t) for s, t in zip(acc, terms)]
        return acc

    def _combine_max(self, node, env, blocks):
        acc = None
        for j in blocks:
            inner = _bind(env, node.attr.var, j)
            terms = [self.value(body, inner) for body in node.args]
            acc = terms if acc is None else [np.maximum(s, t) for s, t in zip(acc, terms)]
        return acc

    def _combine_online_softmax(self, node, env, blocks):
        var = node.attr.var
        logits, terms = node.args[0], node.args[1:]
        m = sums = None
        for j in blocks:
            inner = _bind(env, var, j)
            row_max = np.max(self.value(logits, inner), axis=1)
            m_new = row_max if m is None else np.maximum(m, row_max)
            # A row whose logits are all -inf so far sees runmax 0, so its terms are
            # exp(-inf) = 0 rather than exp(-inf + inf) = nan.
            seen = np.where(np.isneginf(m_new), np.zeros_like(m_new), m_new)
            inner[("runmax", var)] = (next(_TOKENS), seen)
            values = [self.value(t, inner) for t in terms]
            if sums is None:
                sums = values
            else:
                # Rescale earlier sums from the old max to the new one. A row whose old
                # max was -inf has summed only zeros; exp(-inf - seen) = 0 keeps them so.
                alpha = np.exp(m - seen)
                sums = [_zip(np.add, _rescale_rows(alpha, s), t) for s, t in zip(sums, values)]
            m = m_new
        return [m] + sums

    def _combine_meanvar(self, node, env, blocks):
        # Chan et al.'s parallel update: merge each block's (count, mean, M2) into the
        # running one, never forming E[x^2] - E[x]^2 (catastrophic for large means).
        # Passengers (bodies after the head x) are plain sums.
        # Means are kept in a frame shifted by each row's first element: a mean of
        # 1e3-sized values rounds at ulp(1e3), and the merge term delta² would carry
        # that error to first order; shifted means are O(σ).
        n = 0
        mean = s = q = sums = shift = None
        for j in blocks:
            inner = _bind(env, node.attr.var, j)
            x = self.value(node.args[0], inner)
            values = [self.value(t, inner) for t in node.args[1:]]
            n_b = x.shape[1]
            if shift is None:
                shift = x[:, :1].copy()
            xs = x - shift
            mean_b = xs.sum(axis=1) / np.asarray(n_b, x.dtype)
            q_b = np.square(xs - mean_b[:, None]).sum(axis=1)
            if mean is None:
                n, mean, s, q, sums = n_b, mean_b, x.sum(axis=1), q_b, values
                continue
            total = n + n_b
            delta = mean_b - mean
            mean = mean + delta * (n_b / total)
            q = q + q_b + np.square(delta) * (n * n_b / total)
            s = s + x.sum(axis=1)
            n = total
            sums = [_zip(np.add, acc, t) for acc, t in zip(sums, values)]
        return [np.asarray(n, self.dtype), s, q] + sums

def run_program(program: Program, inputs: Arrays, dtype=np.float32) -> Arrays:
    """Run ``program`` on checked inputs; every global array starts as zeros."""
    arrays = {a.name: np.zeros(program.shape(a.name), dtype) for a in program.arrays}
    for name in program.inputs:
        arrays[name] = np.asarray(inputs[name], dtype=dtype)  # read-only: never written
    evaluator = Evaluator(program, arrays, dtype)
    # IEEE semantics (exp overflow, log(0), 0/0) are part of what a program means;
    # the caller judges the results, NumPy need not warn.
    with np.errstate(all="ignore"):
        for kernel in program.kernels:
            evaluator.run_kernel(kernel)
    return {name: arrays[name] for name in program.outputs}


def compile_program(program: Program, dtype=np.float32) -> Runner:
    dtype = as_dtype(dtype, "reference")
    if dtype.kind != "f":
        raise BackendError(f"reference: dtype must be a floating-point type, got {dtype}")
    return lambda inputs: run_program(program, inputs, dtype)


#: The interpreter is a NumPy program on the CPU; it is priced as the generic 2-core
#: CPU of ``DEFAULT_HARDWARE`` (nominal figures, not this machine): fusing for the
#: reference backend is fusing with the public API's default.
backend = Backend(
    name="reference",
    description="NumPy reference interpreter (block by block, exactly as the IR says)",
    compile_fn=compile_program,
    hardware=DEFAULT_HARDWARE,
    lowered_ops=frozenset(n for n, s in OPS.items() if s.reference) | _STRUCTURAL,
    lowered_combiners=frozenset(n[len("_combine_"):] for n in vars(Evaluator)
                                if n.startswith("_combine_")),
    generates_source=False,
)
