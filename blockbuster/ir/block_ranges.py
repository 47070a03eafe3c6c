"""The block-range check of the verifier: every block a load or a position reads
exists, for every value of the enclosing loops (an interval bound first, then the
loops' values tried)."""

from __future__ import annotations

from ..errors import IRError
from .expr import Expr
from .index import IConst, IVar, Idx, evaluate, free_vars as idx_free_vars
from .program import Program
from .typecheck import snippet


def _interval(ix: Idx, ranges: dict) -> tuple[int, int] | None:
    """The least and greatest value of ``ix`` when each variable takes any value of
    its range; None where that is not known (a variable out of scope, a division by
    a range that holds 0)."""
    if isinstance(ix, IVar):
        return ranges.get(ix.name)
    if isinstance(ix, IConst):
        return (ix.value, ix.value)
    a, b = _interval(ix.a, ranges), _interval(ix.b, ranges)
    if a is None or b is None:
        return None
    if ix.op == "+":
        return (a[0] + b[0], a[1] + b[1])
    if ix.op == "-":
        return (a[0] - b[1], a[1] - b[0])
    if ix.op == "//" and b[0] <= 0 <= b[1]:
        return None
    corners = [x * y if ix.op == "*" else x // y for x in a for y in b]
    return (min(corners), max(corners))


#: Assignments of the enclosing loop variables tried, at most, to find a block index
#: out of range that the interval bound could not rule out.
_ENUMERATION_LIMIT = 20_000


def _violation(ix: Idx, binders: tuple, dims, ok, also=()) -> dict | None:
    """An assignment of the enclosing variables (``binders``: ``(var, dim, lo, hi)``
    in binding order, a sub-range's bounds in terms of outer variables) under which
    ``ok(value of ix, assignment)`` fails; None when there is none, or when there are
    too many assignments to try (the interval bound already failed to prove it safe).
    ``also``: variables assigned too though ``ix`` does not use them."""
    needed = set(idx_free_vars(ix)) | set(also)
    for var, _dim, lo, hi in reversed(binders):        # what the bounds depend on
        if var in needed:
            for bound in (lo, hi):
                if bound is not None:
                    needed |= idx_free_vars(bound)
    order = [b for b in binders if b[0] in needed]
    if {b[0] for b in order} != needed:                 # a variable from elsewhere
        return None
    tried = 0

    def go(i: int, env: dict):
        nonlocal tried
        if i == len(order):
            tried += 1
            if tried > _ENUMERATION_LIMIT:
                raise _TooMany
            return None if ok(evaluate(ix, env), env) else dict(env)
        var, dim, lo, hi = order[i]
        first = 0 if lo is None else evaluate(lo, env)
        stop = dims[dim].nblocks if hi is None else evaluate(hi, env)
        for value in range(max(first, 0), min(stop, dims[dim].nblocks)):
            env[var] = value
            found = go(i + 1, env)
            if found is not None:
                return found
        env.pop(var, None)
        return None
    try:
        return go(0, {})
    except (_TooMany, ZeroDivisionError):
        return None


class _TooMany(Exception):
    pass


def check_block_ranges(value: Expr, binders: tuple, program: Program, where: str) -> None:
    """Every block a load or a position reads exists, for every value of the enclosing
    loops (the backends do not check: a block index past the end would read another
    block, or nothing; a sub-range's bounds are clamped to its dimension, so they may
    lie past it). An interval bound proves most indices safe at once; the others are
    tried on the loops' values."""
    dims, arrays = program.dim_map, program.array_map
    seen: set = set()

    def plural(n: int) -> str:
        return f"{n} block{'s' if n != 1 else ''} (0..{n - 1})"

    def at(env: dict) -> str:
        """``, at i=3, k=0`` (the loop indices where it happens), or nothing."""
        where = ", ".join(f"{v}={n}" for v, n in env.items())
        return f", at {where}" if env else ""

    def within(ix: Idx, low: int, high: int, scope: tuple) -> dict | None:
        span = _interval(ix, {v: (0, dims[d].nblocks - 1) if (lo, hi) == (None, None)
                              else _reduce_span(lo, hi, d, scope)
                              for v, d, lo, hi in scope})
        if span is not None and low <= span[0] and span[1] <= high:
            return None
        return _violation(ix, scope, dims, lambda x, _env: low <= x <= high)

    def _reduce_span(lo, hi, d, scope):
        outer = {v: (0, dims[dd].nblocks - 1) for v, dd, _l, _h in scope}
        n = dims[d].nblocks
        a = (0, 0) if lo is None else (_interval(lo, outer) or (0, 0))
        b = (n, n) if hi is None else (_interval(hi, outer) or (n, n))
        return (max(a[0], 0), min(b[1], n) - 1)

    def walk(e: Expr, scope: tuple) -> None:
        key = (e, tuple(b for b in scope if b[0] in e.free_vars))
        if key in seen:
            return
        seen.add(key)
        op = e.op
        checks = []
        if op == "load" and e.attr.array in arrays:
            checks = list(zip(e.attr.index, arrays[e.attr.array].dims))
        elif op == "pos":
            checks = [(e.attr.index, e.attr.dim)]
        for ix, d in checks:
            n = dims[d].nblocks
            env = within(ix, 0, n - 1, scope)
            if env is not None:
                raise IRError(f"{where}: index {ix} reads block {evaluate(ix, env)} of {d}, "
                              f"which has {plural(n)}{at(env)}, in `{snippet(e)}`")
            _check_ragged_pick(ix, d, scope, e)
        if op == "reduce":          # bounds past the dimension are clamped to it
            a = e.attr
            for body in e.args:
                walk(body, scope + ((a.var, a.dim, a.lo, a.hi),))
        elif op == "map":
            walk(e.args[0], scope + ((e.attr.var, e.attr.dim, None, None),))
        else:
            for arg in e.args:
                walk(arg, scope)

    def _check_ragged_pick(ix: Idx, d: str, scope: tuple, e: Expr) -> None:
        """A computed index of a ragged dimension (``3 - m``, ``m // 2``) picks a
        block whose extent must be the one the loop over that dimension is at: the
        last (short) block exactly when the loop is at its last block. (A constant
        index is the type checker's concern; a plain loop variable always agrees.)"""
        dim = dims[d]
        if dim.point or dim.size % dim.block == 0 or isinstance(ix, (IVar, IConst)):
            return
        free = idx_free_vars(ix)
        own = [(v, vd) for v, vd, _lo, _hi in scope if vd == d and v in free]
        if not own:
            # a loop over another dimension with the same ragged tail: a slice of d
            # that ends at d's end (``slice(x, "M", 16, 37)``: M_16 = 21 in blocks of
            # 16 reads block m16 + 1 of M = 37, both last blocks 5 long)
            own = [(v, vd) for v, vd, _lo, _hi in scope if v in free and not dims[vd].point
                   and dims[vd].block == dim.block
                   and dims[vd].size % dims[vd].block == dim.size % dim.block]
        last = dim.nblocks - 1
        if len(own) == 1:
            v, vd = own[0]
            loop_last = dims[vd].nblocks - 1
            env = _violation(ix, scope, dims,
                             lambda x, env: (x == last) == (env[v] == loop_last), also=(v,))
            if env is None:
                return
            got = evaluate(ix, env)
            raise IRError(
                f"{where}: index {ix} of {d} = {dim.size} in blocks of {dim.block} picks "
                f"block {got} ({dim.extent(got)} long) where the loop's block {env[v]} is "
                f"{dims[vd].extent(env[v])} long{at(env)}, in `{snippet(e)}`: a computed "
                f"index of a ragged dimension must keep the last block last (make {d} a "
                f"multiple of its block)")
        raise IRError(
            f"{where}: index {ix} of {d} = {dim.size} in blocks of {dim.block} is computed "
            f"from {'no' if not own else 'several'} loop{'s' if own else ''} over {d}, so "
            f"the extent of the block it picks is not the loop's (the last block is "
            f"{dim.size % dim.block} long), in `{snippet(e)}`: make {d} a multiple of its "
            f"block")

    walk(value, binders)
