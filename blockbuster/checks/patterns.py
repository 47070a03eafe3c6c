"""Rule patterns as the checkers see them: which variables, binders and ranges a
left-hand side has (and whether the checker can instantiate it at all), and a
sampler of well-typed type assignments for its pattern variables.

Types are *sampled* from scalars, vectors and blocks over three tile dimensions by
a randomised search that prunes ill-typed sub-patterns as soon as their variables
are typed, and restarts rather than backtracking through every combination: eight
pattern variables would otherwise make 10^8 combinations.
"""

from __future__ import annotations

import itertools
import random

import attrs

from ..dsl.ast import RuleDef
from ..errors import BlockbusterError, IRError
from ..ir import expr as E
from ..ir.expr import Expr
from ..ir.index import IConst
from ..ir.program import Program
from ..ir.types import SCALAR, ArrayType, BlockType, Dim, GlobalArray
from ..ir.verify import LenientTypeChecker
from ..ir.walk import binder_of, walk_scoped
from ..rewrite.matcher import instantiate

TILES = ("P", "Q", "Z")
CANDIDATE_TYPES = ([SCALAR] + [BlockType((t,)) for t in TILES]
                   + [BlockType(p) for p in itertools.permutations(TILES, 2)])


class MalformedRule(BlockbusterError):
    """A rule the checker cannot instantiate (the loader let it through)."""


# --------------------------------------------------------------------- the pattern

@attrs.frozen
class PatternInfo:
    pvars: tuple                     # pattern variables, in order of first occurrence
    scopes: dict                     # pvar -> frozenset of (loop var, range var) in scope
    binders: tuple                   # distinct (loop var, range var, combiner or "map")
    range_scopes: dict               # range var -> frozenset of enclosing (var, range var)
    constants: frozenset             # pvars a `constant` guard makes literals
    invariant: frozenset             # (pvar, loop var) forced invariant
    depends: frozenset               # (pvar, loop var) forced dependent


def analyse(rule: RuleDef) -> PatternInfo:
    pvars: list = []
    scopes: dict = {}
    binders: list = []
    range_scopes: dict = {}

    # A scope is the set of (loop var, range var) bound around a node.
    def visit(n: Expr, bound: frozenset):
        if n.op == "pvar":
            if n.attr not in scopes:
                pvars.append(n.attr)
                scopes[n.attr] = bound
            else:
                scopes[n.attr] = scopes[n.attr] & bound
        elif n.op == "runmax" and n.attr not in {v for v, _ in bound}:
            raise MalformedRule(f"runmax({n.attr}) is not inside a binder of '{n.attr}'")
        b = binder_of(n)
        if b is not None:
            kind = n.attr.combiner if n.op == "reduce" else "map"
            if (b.var, b.dim, kind) not in binders:
                binders.append((b.var, b.dim, kind))
            range_scopes[b.dim] = range_scopes.get(b.dim, bound) & bound

    def enter(bound: frozenset, b, n: Expr) -> frozenset:   # an inner binder hides an outer one
        return frozenset(x for x in bound if x[0] != b.var) | {(b.var, b.dim)}

    walk_scoped([rule.lhs], frozenset(), visit, enter)
    loop_names = {b[0] for b in binders} | {b[1] for b in binders}
    clash = sorted(loop_names & set(pvars))
    if clash:
        raise MalformedRule(f"'{clash[0]}' is used both as a loop variable or range and "
                            "as a value")
    ranges = {b[1] for b in binders}
    if ranges & {b[0] for b in binders}:
        raise MalformedRule("a name is used both as a loop variable and as a range")
    kinds: dict = {}
    for var, rng, kind in binders:
        if kinds.setdefault(rng, kind == "map") != (kind == "map"):
            raise MalformedRule(f"range '{rng}' is bound both by a map and by a reduction")
    _check_rhs(rule, set(pvars), loop_names)
    constants, invariant, depends = set(), set(), set()
    for g in rule.guards:
        if g.name == "constant" and not g.negated:
            constants.add(g.args[0])
        if g.name in ("invariant", "depends"):
            (invariant if (g.name == "invariant") != g.negated else depends).add(tuple(g.args))
    return PatternInfo(tuple(pvars), scopes, tuple(binders), range_scopes,
                       frozenset(constants), frozenset(invariant), frozenset(depends))


def _check_rhs(rule: RuleDef, pvars: set, loop_names: set) -> None:
    for n in rule.rhs.walk():
        if n.op == "pvar" and n.attr not in pvars:
            raise MalformedRule(f"the right-hand side uses '{n.attr}' as a value, which the "
                                "pattern does not bind as one")
        if n.op == "runmax" and n.attr not in loop_names:
            raise MalformedRule(f"the right-hand side uses runmax({n.attr}) of no binder")
        b = binder_of(n)
        if b is not None and (b.var not in loop_names or b.dim not in loop_names):
            raise MalformedRule(f"the right-hand side binds '{b.var} in {b.dim}', "
                                "which the pattern does not bind as a loop")


def escaping_variables(rule: RuleDef, info: PatternInfo) -> list[tuple[str, str]]:
    """``(pvar, loop var)`` pairs where the right-hand side uses ``pvar`` outside a
    binder of ``loop var`` although the pattern matches it inside one, where it may
    vary with that loop variable (no ``invariant(pvar, var)`` guard): such a value
    has no meaning outside its loop, so the rule is wrong whatever it matches."""
    found: list = []

    def visit(n: Expr, bound: frozenset):
        if n.op != "pvar":
            return
        for var, _rng in sorted(info.scopes.get(n.attr, ())):
            pair = (n.attr, var)
            if var not in bound and pair not in info.invariant and pair not in found:
                found.append(pair)

    walk_scoped([rule.rhs], frozenset(), visit,
                lambda bound, b, n: bound | {b.var})
    return found


# --------------------------------------------------------------------- types

RESTART_CHECKS = 600


class TypeSampler:
    """Finds well-typed type assignments for the pattern variables by randomised
    depth-first search, pruning as soon as a sub-pattern whose variables are all
    typed is ill-typed. Each solution is found by a fresh randomised search."""

    def __init__(self, rule: RuleDef, info: PatternInfo, budget: int = 6000):
        self.rule, self.info, self.budget = rule, info, budget
        dims = [Dim(t, 4, 4) for t in TILES]
        self.range_dims = {rng: f"L_{rng}" for _, rng, _ in info.binders}
        dims += [Dim(d, 2, 1, point=True) for d in self.range_dims.values()]
        arrays = [GlobalArray(f"t{k}", t.axes) for k, t in enumerate(CANDIDATE_TYPES)]
        self.checker = LenientTypeChecker(Program("types", tuple(dims), tuple(arrays), (), (), ()))
        self.base = {}
        for var, rng, _ in info.binders:
            self.base[var] = var
            self.base[rng] = (self.range_dims[rng], None, None)
        # Sub-patterns to check once all their variables are typed (with no free
        # runmax: its rows come from an enclosing reduction).
        self.nodes = []
        for n in rule.lhs.walk():
            vs = {m.attr for m in n.walk() if m.op == "pvar"}
            if vs and not _free_runmax(n):
                self.nodes.append((n, vs))
        self.checks = 0
        self.restart_at = budget

    def _value(self, name: str, k: int) -> Expr:
        if name in self.info.constants:
            return E.const(1.0)
        return E.load(f"t{k}", *[IConst(0)] * len(CANDIDATE_TYPES[k].axes))

    def type_of(self, node: Expr, assign: dict):
        b = dict(self.base)
        b.update({v: self._value(v, k) for v, k in assign.items()})
        e = instantiate(node, b)
        self.checks += 1
        return self.checker.type_out_of_context(e)

    def _ok(self, assign: dict, newest: str) -> bool:
        for node, vs in self.nodes:
            if newest in vs and vs <= assign.keys():
                try:
                    t = self.type_of(node, assign)
                except IRError:
                    return False
                if node is self.rule.lhs and not isinstance(t, (BlockType, ArrayType)):
                    return False
        return True

    def sample(self, rng: random.Random, want: int) -> list[dict]:
        pvars = self.info.pvars
        found: list[dict] = []
        seen: set = set()
        for _ in range(want * 8):
            if self.checks > self.budget or len(found) >= want:
                break
            # A search that runs long has made an early choice nothing later fits:
            # restart it rather than backtrack through every combination.
            self.restart_at = self.checks + RESTART_CHECKS
            sol = self._search(rng, pvars, {})
            if sol is None:
                continue
            key = tuple(sorted(sol.items()))
            if key not in seen:
                seen.add(key)
                found.append(sol)
        return found

    def _options(self, rng, name, assign):
        if name in self.info.constants:
            return [0]
        options = list(range(len(CANDIDATE_TYPES)))
        rng.shuffle(options)
        draw = rng.random()
        used = set(assign.values()) | {0}
        axes = {a for k in assign.values() for a in CANDIDATE_TYPES[k].axes}
        # Sometimes types already in use (and scalars) first, or types over axes
        # already in use: they usually fit together. Otherwise any order (diversity).
        if draw < 0.25:
            options.sort(key=lambda k: k not in used)
        elif draw < 0.5:
            options.sort(key=lambda k: not set(CANDIDATE_TYPES[k].axes) <= axes)
        return options

    def _search(self, rng, pvars, assign):
        if len(assign) == len(pvars):
            return dict(assign)
        name = pvars[len(assign)]
        for k in self._options(rng, name, assign):
            if self.checks > min(self.budget, self.restart_at):
                return None
            assign[name] = k
            if self._ok(assign, name):
                sol = self._search(rng, pvars, assign)
                if sol is not None:
                    del assign[name]
                    return sol
            del assign[name]
        return None


def _free_runmax(n: Expr) -> bool:
    bound_inside = {m.attr.var for m in n.walk() if m.op == "reduce"}
    return any(m.op == "runmax" and m.attr not in bound_inside for m in n.walk())
