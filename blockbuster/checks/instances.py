"""Random instances of a rewrite rule: both sides as runnable block programs.

A pattern variable becomes a load of a fresh input array (or a literal, under a
``constant`` guard); its type is *sampled* from scalars, vectors and blocks over
three tile dimensions by a randomised search that prunes ill-typed sub-patterns
(never by enumerating every combination). Each trial then draws, from decks that
every seed cycles through completely:

* a shape kind for the tile dimensions: 1x1 blocks, single rows/columns, one full
  block, several even blocks, several blocks with a ragged last one;
* a range kind for every binder's range: empty, 1..7 trips, a constant sub-range, or
  bounds that depend on an enclosing loop variable (``k in R[: i + 1]``), the
  pattern's own enclosing binder included (``h in R[: d + 1]`` inside ``map(d: ...)``);
* a value distribution (the caller's kinds).

The instance's program has one kernel storing the rule side's value for every
block of its output (so ragged blocks are visited), inside an outer point loop
``__i`` that ranges and inputs may depend on.
"""

from __future__ import annotations

import itertools
import random

import attrs
import numpy as np

from ..dsl.ast import RuleDef
from ..errors import BlockbusterError, IRError
from ..ir import expr as E
from ..ir.expr import Expr
from ..ir.index import IConst, IVar
from ..ir.program import Kernel, Program, Store
from ..ir.types import SCALAR, ArrayType, BlockType, Dim, GlobalArray
from ..ir.verify import TypeChecker, verify
from ..rewrite.guards import GUARD_IMPLS, RuleContext
from ..rewrite.matcher import compile_pattern, instantiate

TILES = ("P", "Q", "Z")
CANDIDATE_TYPES = ([SCALAR] + [BlockType((t,)) for t in TILES]
                   + [BlockType(p) for p in itertools.permutations(TILES, 2)])
OUTER = "__i"                    # the kernel's outer loop variable (a point dim "I")
SHAPE_KINDS = ("1x1", "thin", "one_block", "even", "ragged")
RANGE_KINDS = ("empty", 1, 2, 3, 4, 5, 6, 7, "sub", "dependent", "dependent_inner")
#: Guards about values and structure; the others (cost model, arrays) cannot make a
#: rewrite unsound, so the checker takes them as holding.
SEMANTIC_GUARDS = {"invariant", "depends", "scalar", "vector", "block", "constant",
                   "bounds_invariant"}


class MalformedRule(BlockbusterError):
    """A rule the checker cannot instantiate (the loader let it through)."""


class _Lenient(TypeChecker):
    def _check_index(self, e, ix, dim, scope, where):
        return None


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
    runmax_vars: list = []

    def visit(n: Expr, bound: frozenset):
        if n.op == "pvar":
            if n.attr not in scopes:
                pvars.append(n.attr)
                scopes[n.attr] = bound
            else:
                scopes[n.attr] = scopes[n.attr] & bound
            return
        if n.op == "runmax":
            if n.attr not in {v for v, _ in bound}:
                raise MalformedRule(f"runmax({n.attr}) is not inside a binder of '{n.attr}'")
            runmax_vars.append(n.attr)
        inner = bound
        if n.op in ("reduce", "map"):
            var, rng = n.attr.var, n.attr.dim
            kind = n.attr.combiner if n.op == "reduce" else "map"
            if (var, rng, kind) not in binders:
                binders.append((var, rng, kind))
            range_scopes[rng] = range_scopes.get(rng, bound) & bound
            inner = frozenset(b for b in bound if b[0] != var) | {(var, rng)}
        for c in n.args:
            visit(c, inner)

    visit(rule.lhs, frozenset())
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
        if n.op in ("reduce", "map") and (n.attr.var not in loop_names
                                          or n.attr.dim not in loop_names):
            raise MalformedRule(f"the right-hand side binds '{n.attr.var} in {n.attr.dim}', "
                                "which the pattern does not bind as a loop")


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
        self.checker = _Lenient(Program("types", tuple(dims), tuple(arrays), (), (), ()))
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
        return self.checker.type_of(e, {v: ("?", "?") for v in e.free_vars})

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
        if rng.random() < 0.5:
            # Types already in use (and scalars) first, then types over axes already
            # in use: they usually fit together.
            used = set(assign.values()) | {0}
            axes = {a for k in assign.values() for a in CANDIDATE_TYPES[k].axes}
            options.sort(key=lambda k: (k not in used,
                                        not set(CANDIDATE_TYPES[k].axes) <= axes))
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


# --------------------------------------------------------------------- trials

class Deck:
    """Draws every item once, in a random order, before drawing any twice."""

    def __init__(self, items, rng: random.Random):
        self.items, self.rng, self.pile = list(items), rng, []

    def draw(self):
        if not self.pile:
            self.pile = list(self.items)
            self.rng.shuffle(self.pile)
        return self.pile.pop()


def _tile_dim(name: str, kind: str, rng: random.Random) -> Dim:
    if kind == "1x1":
        return Dim(name, 1, rng.choice([1, 4]))
    if kind == "thin":                       # some dims one element wide, others not
        return Dim(name, 1, 1) if rng.random() < 0.5 else Dim(name, rng.randint(2, 8), 8)
    if kind == "one_block":
        size = rng.randint(2, 8)
        return Dim(name, size, size)
    block = rng.randint(2, 8)
    nblocks = rng.randint(2, 3)
    rest = block if kind == "even" else rng.randint(1, block - 1)
    return Dim(name, block * (nblocks - 1) + rest, block)


@attrs.frozen
class Instance:
    lhs: Program
    rhs: Program | None              # None: the right side is ill-formed (``rhs_error``)
    rhs_error: str
    bindings: dict                   # the match of the pattern on the left side
    description: str                 # shapes, ranges and types, for reports


class InstanceBuilder:
    """Builds trial instances of one rewrite rule."""

    def __init__(self, rule: RuleDef, seed: int, types_wanted: int = 6):
        self.rule = rule
        self.info = analyse(rule)
        self.rng = random.Random(seed)
        self.sampler = TypeSampler(rule, self.info)
        self.types = self.sampler.sample(self.rng, types_wanted)
        self.matcher = compile_pattern(rule.lhs)
        self.shape_deck = Deck(SHAPE_KINDS, self.rng)
        self.range_decks = {rng: Deck(RANGE_KINDS, self.rng) for _, rng, _ in self.info.binders}
        self.type_deck = Deck(range(len(self.types)), self.rng)

    def build(self) -> Instance | None:
        """One random instance, or None when this draw is ill-formed or fails a guard."""
        if not self.types:
            return None
        info, rng = self.info, self.rng
        assign = self.types[self.type_deck.draw()]
        shape_kind = self.shape_deck.draw()
        tiles = {t: _tile_dim(t, shape_kind, rng) for t in TILES}
        outer = Dim("I", rng.randint(1, 3), 1, point=True)
        lhs_type = self.sampler.type_of(self.rule.lhs, assign)
        held, axes = [], []
        t = lhs_type
        while isinstance(t, ArrayType):
            held.append(t.dim)
            t = t.elem
        axes = list(t.axes)
        # An axis stored twice (block[P, P]) is a single block: one kernel loop each.
        for a in set(axes):
            if axes.count(a) > 1:
                size = min(tiles[a].size, tiles[a].block)
                tiles[a] = Dim(a, size, size)
        # Tile axes the output does not have are read at one block, maybe the ragged one.
        picks = {a: rng.choice([0, tiles[a].nblocks - 1]) for a in TILES}
        kernel_var = {a: f"__o{n}" for n, a in enumerate(axes)}

        loop_dims, bindings, ranges_text = {}, {}, []
        for var, rname, kind in info.binders:
            bindings[var] = var
            if rname in bindings:
                continue
            draw = self.range_decks[rname].draw()
            size = draw if isinstance(draw, int) else rng.randint(1, 7)
            dim = Dim(self.sampler.range_dims[rname], size, 1, point=True)
            loop_dims[rname] = dim
            lo = hi = None
            if kind != "map":
                scope = [OUTER] + sorted(v for v, _ in info.range_scopes.get(rname, ()))
                if draw == "empty":
                    lo = hi = IConst(rng.randint(0, size))
                elif draw == "sub":
                    lo = IConst(rng.randint(0, size - 1))
                    hi = IConst(rng.randint(lo.value + 1, size))
                elif isinstance(draw, str) and draw.startswith("dependent"):
                    # "dependent_inner": on the innermost enclosing binder of the
                    # pattern (where one exists), e.g. `h in R[: d + 1]` in map(d: ...).
                    inner = [v for v, _ in binder_scope_order(info, rname)]
                    v = IVar(inner[-1] if draw == "dependent_inner" and inner
                             else rng.choice(scope))
                    lo, hi = rng.choice([(None, v + IConst(1)), (None, v), (v, None)])
            bindings[rname] = (dim.name, lo, hi)
            ranges_text.append(_range_text(rname, dim, lo, hi))

        dims = dict(tiles)
        dims.update({d.name: d for d in loop_dims.values()})
        dims["I"] = outer
        arrays, inputs_text = [], []
        for name in info.pvars:
            if name in info.constants:
                bindings[name] = E.const(_constant(rng))
                inputs_text.append(f"{name} = {bindings[name].attr:g}")
                continue
            typ = CANDIDATE_TYPES[assign[name]]
            deps = []
            for var, rname in sorted(info.scopes[name]):
                if (name, var) in info.invariant:
                    continue
                if (name, var) in info.depends or rng.random() < 0.6:
                    deps.append((var, loop_dims[rname].name))
            if rng.random() < 0.5:
                deps.append((OUTER, "I"))
            array = GlobalArray(f"in_{name}", tuple(d for _, d in deps) + typ.axes)
            index = [IVar(v) for v, _ in deps]
            index += [IVar(kernel_var[a]) if a in kernel_var else IConst(picks[a])
                      for a in typ.axes]
            arrays.append(array)
            bindings[name] = E.load(array.name, *index)
            inputs_text.append(f"{name}: {typ}" + (f" (varies with {', '.join(v for v, _ in deps)})"
                                                   if deps else ""))
        if len(axes) == 0:
            dims["U"] = Dim("U", 1, 1, point=True)
        loops = [(OUTER, "I")] + [(kernel_var[a], a) for a in axes]
        if not axes:
            loops.append(("__u", "U"))
        out = GlobalArray("out", ("I",) + tuple(held) + (tuple(axes) or ("U",)))
        store_index = (IVar(OUTER),) + (None,) * len(held) + tuple(IVar(v) for v, _ in loops[1:])

        def program(value: Expr) -> Program:
            kernel = Kernel("k", tuple(loops), (Store("out", store_index, value),))
            return Program("check", tuple(dims.values()), tuple(arrays) + (out,),
                           tuple(a.name for a in arrays), ("out",), (kernel,))

        lhs_value = instantiate(self.rule.lhs, bindings)
        try:
            lhs = verify(program(lhs_value))
        except IRError:
            return None
        match: dict = {}
        if not self.matcher(lhs_value, match) or not self._guards(lhs, match):
            return None
        shapes = ", ".join(f"{d.name}={d.size}/{d.block}" for d in tiles.values())
        description = (f"shapes {shapes} ({shape_kind}); outer loop __i in 0..{outer.size - 1}"
                       + ("; ranges " + ", ".join(ranges_text) if ranges_text else "")
                       + "; " + "; ".join(inputs_text))
        try:
            rhs_value = instantiate(self.rule.rhs, bindings)
            rhs = verify(program(rhs_value))     # the store checks its type too
        except IRError as err:
            return Instance(lhs, None, str(err), match, description)
        return Instance(lhs, rhs, "", match, description)

    def _guards(self, program: Program, match: dict) -> bool:
        ctx = RuleContext(program)
        for g in self.rule.guards:
            if g.name not in SEMANTIC_GUARDS:
                continue
            try:
                ok = bool(GUARD_IMPLS[g.name](ctx, match, *g.args))
            except (KeyError, TypeError, ValueError):
                return False
            if ok == g.negated:
                return False
        return True


def binder_scope_order(info: PatternInfo, rname: str) -> list:
    """The pattern binders enclosing every binder of ``rname``, outermost first."""
    enclosing = info.range_scopes.get(rname, frozenset())
    return [(v, r) for v, r, _ in info.binders if (v, r) in enclosing]


def _constant(rng: random.Random) -> float:
    return rng.choice([0.0, 1.0, -1.0, 2.0, 0.5, rng.uniform(-10, 10), rng.uniform(-1e4, 1e4)])


def _range_text(rname, dim, lo, hi) -> str:
    if lo is None and hi is None:
        return f"{rname} = {dim.size} trips"
    text = f"{'' if lo is None else lo}:{'' if hi is None else hi}"
    return f"{rname} = [{text}] of {dim.size}"


# --------------------------------------------------------------------- values

VALUE_KINDS = ("normal", "positive", "near_zero", "large", "wide", "positive_wide")


def random_values(program: Program, kind: str, rng: np.random.Generator) -> dict:
    """Inputs of ``program`` drawn from one distribution (float64)."""
    out = {}
    for name in program.inputs:
        shape = program.shape(name)
        if kind == "normal":
            v = rng.standard_normal(shape)
        elif kind == "positive":
            v = rng.uniform(0.5, 2.0, shape)
        elif kind == "near_zero":
            v = rng.standard_normal(shape) * 1e-6
        elif kind == "large":
            v = rng.uniform(-1e4, 1e4, shape)
        elif kind == "wide":
            v = rng.choice([-1.0, 1.0], shape) * 10.0 ** rng.uniform(-6, 4, shape)
        else:
            v = 10.0 ** rng.uniform(-4, 4, shape)
        out[name] = v
    return out


def describe_inputs(inputs: dict, limit: int = 3) -> str:
    parts = []
    for name, v in inputs.items():
        flat = np.asarray(v, np.float64).ravel()[:limit]
        parts.append(f"{name}[:{limit}] = [" + ", ".join(f"{x:.6g}" for x in flat) + "]")
    return "; ".join(parts)
