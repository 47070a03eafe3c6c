"""The guard predicates of the rule language (vocabulary: ``dsl/vocabulary.py``).

Each guard gets the rule context and the match's bindings; it looks at structure
(free variables), types, or the program (which arrays are intermediates, how they
are read), never at user-written code.
"""

from __future__ import annotations

from typing import Callable

import attrs

from ..cost.hardware import Hardware
from ..dsl.vocabulary import GUARDS
from ..ir.expr import Expr
from ..ir.index import free_vars as index_vars
from ..ir.program import Kernel, Program
from ..ir.types import BlockType
from ..ir.verify import LenientTypeChecker
from ..ir.walk import walk_scoped


@attrs.define
class RuleContext:
    """What a guard may look at. ``hardware`` is the backend's description the
    pricing guards (``cheaper``, ``fits_local``, ...) price with; it is always given:
    None only where no pricing guard can run (the soundness checker's semantic
    guards), and a pricing guard then refuses rather than guess a machine."""

    program: Program
    kernel: Kernel | None = None
    hardware: Hardware | None = attrs.field(kw_only=True)
    candidate: Callable[[], Program] | None = None   # an action's result, built lazily
    run_phase: Callable[[Program, str], Program] | None = None   # lookahead (engine)
    _checker: LenientTypeChecker | None = None

    def type_of(self, e: Expr):
        if self._checker is None:
            self._checker = LenientTypeChecker(self.program)
        try:
            return self._checker.type_out_of_context(e)
        except Exception:
            return None


def _rank(ctx, e, r):
    t = ctx.type_of(e)
    return isinstance(t, BlockType) and len(t.axes) == r


def _loads_of(program: Program, array: str):
    """(kernel, load node, loops (var, dim) enclosing the load) for every load of
    ``array``: the kernel's loops, then its binders, outermost first."""
    found = []
    for k in program.kernels:
        def visit(n: Expr, loops: tuple, k=k):
            if n.op == "load" and n.attr.array == array:
                found.append((k, n, loops))

        walk_scoped((s.value for s in k.stores), tuple(k.loops), visit,
                    lambda loops, binder, n: loops + ((binder.var, binder.dim),))
    return found


def same_index(ctx: RuleContext, array: str) -> bool:
    """No load of ``array`` sits inside a loop (with more than one block) that its
    subscripts do not use: inlining it then recomputes nothing."""
    dims = ctx.program.dim_map
    for _kernel, load, loops in _loads_of(ctx.program, array):
        used = set().union(*(index_vars(ix) for ix in load.attr.index))
        for var, dim in loops:
            if var not in used and dims[dim].nblocks > 1:
                return False
    return True


def _lookahead(ctx: RuleContext, phase: str) -> tuple[Program, Program]:
    """(current program, action result), each after running ``phase`` to a fixpoint."""
    if ctx.candidate is None or ctx.run_phase is None:
        raise ValueError("cheaper_after/fits_after guard an action's result")
    return ctx.run_phase(ctx.program, phase), ctx.run_phase(ctx.candidate(), phase)


def _hardware(ctx: RuleContext) -> Hardware:
    if ctx.hardware is None:
        raise ValueError("a pricing guard needs the backend's hardware description")
    return ctx.hardware


def cheaper_after(ctx: RuleContext, phase: str) -> bool:
    from ..cost.model import cost
    hw = _hardware(ctx)
    now, then = _lookahead(ctx, phase)
    return cost(then, hw).rank < cost(now, hw).rank


def cheaper(ctx: RuleContext) -> bool:
    """The action's result has a lower cost-model objective than the program now."""
    from ..cost.model import cost
    hw = _hardware(ctx)
    if ctx.candidate is None:
        raise ValueError("cheaper() guards an action's result")
    return cost(ctx.candidate(), hw).rank < cost(ctx.program, hw).rank


def fits_after(ctx: RuleContext, phase: str) -> bool:
    from ..cost.model import cost
    return cost(_lookahead(ctx, phase)[1], _hardware(ctx)).fits


def _bounds_invariant(b, rng, var) -> bool:
    _dim, lo, hi = b[rng]
    return all(bound is None or b[var] not in index_vars(bound) for bound in (lo, hi))


_POSITIVE_PRESERVING = {"mul", "div", "recip", "sqrt", "rsqrt", "rowscale", "colscale",
                        "outer"}


def positive(x: Expr) -> bool:
    """``x`` is positive by its form: ``exp(..)``, ``ones(..)``, a positive literal, or
    an operator that keeps positive operands positive applied to such."""
    if x.op in ("exp", "ones"):
        return True
    if x.op == "const":
        return isinstance(x.attr, (int, float)) and x.attr > 0
    return x.op in _POSITIVE_PRESERVING and bool(x.args) and all(positive(a) for a in x.args)


def _weights_only(program: Program, x: Expr) -> bool:
    loads = [n.attr.array for n in x.walk() if n.op == "load"]
    return bool(loads) and set(loads) <= set(program.weights)


def reduces_over(x: Expr, rng: tuple) -> bool:
    """``x`` contains a reduction over exactly the range ``rng`` (dim, lo, hi), not
    nested in another reduction over the same dimension (whose loop then owns it: a
    pivot reduces over the first block of a value that may itself hold full passes)."""
    seen: set = set()
    stack = [x]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "reduce" and n.attr.dim == rng[0]:
            if (n.attr.lo, n.attr.hi) == rng[1:]:
                return True
            continue
        stack.extend(n.args)
    return False


def sums(m: Expr, x: Expr, k: str, rng: tuple) -> bool:
    """``m`` contains a reduction over exactly the range ``rng`` whose bodies hold
    ``x`` with the reduction's own binder in place of ``k``: ``m`` is computed from
    the values ``x`` takes over the range (their mean), not from other data."""
    from .subst import substitute_index
    from ..ir.index import IVar
    for n in m.walk():
        if n.op != "reduce" or n.attr.dim != rng[0] or (n.attr.lo, n.attr.hi) != rng[1:]:
            continue
        inner = substitute_index(x, {k: IVar(n.attr.var)}) if n.attr.var != k else x
        if any(inner in set(body.walk()) for body in n.args):
            return True
    return False


def fits_local(ctx: RuleContext, array: str) -> bool:
    """Inlining ``array`` into its consumers keeps each one within the local tier."""
    from .actions import inline_everywhere
    from ..cost.model import cost
    hw = _hardware(ctx)
    trial = inline_everywhere(ctx.program, array)
    return cost(trial, hw).fits


GUARD_IMPLS: dict[str, Callable] = {
    "invariant": lambda ctx, b, x, k: b[k] not in b[x].free_vars,
    "depends": lambda ctx, b, x, k: b[k] in b[x].free_vars,
    "scalar": lambda ctx, b, x: _rank(ctx, b[x], 0),
    "vector": lambda ctx, b, x: _rank(ctx, b[x], 1),
    "block": lambda ctx, b, x: _rank(ctx, b[x], 2),
    "constant": lambda ctx, b, x: b[x].op == "const",
    "positive": lambda ctx, b, x: positive(b[x]),
    "intermediate": lambda ctx, b, a: ctx.program.is_intermediate(b[a]),
    "same_index": lambda ctx, b, a: same_index(ctx, b[a]),
    "fits_local": lambda ctx, b, a: fits_local(ctx, b[a]),
    "bounds_invariant": lambda ctx, b, r, v: _bounds_invariant(b, r, v),
    "weights_only": lambda ctx, b, x: _weights_only(ctx.program, b[x]),
    "reduces_over": lambda ctx, b, x, r: reduces_over(b[x], b[r]),
    "sums": lambda ctx, b, m, x, k, r: sums(b[m], b[x], b[k], b[r]),
    "whole": lambda ctx, b, r: b[r][1] is None and b[r][2] is None,
    "cheaper_after": lambda ctx, b, p: cheaper_after(ctx, p),
    "cheaper": lambda ctx, b: cheaper(ctx),
    "fits_after": lambda ctx, b, p: fits_after(ctx, p),
}

assert set(GUARD_IMPLS) == set(GUARDS), "every guard in the vocabulary is implemented"


def guards_hold(rule, ctx: RuleContext, bindings: dict) -> bool:
    for g in rule.guards:
        ok = bool(GUARD_IMPLS[g.name](ctx, bindings, *g.args))
        if ok == g.negated:
            return False
    return True
