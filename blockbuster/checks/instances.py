"""Random instances of a rewrite rule: both sides as runnable block programs.

A pattern variable becomes a load of a fresh input array (or a literal, under a
``constant`` guard) of a type sampled by ``patterns.TypeSampler``. Each trial then
draws, from decks that every seed cycles through completely:

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

import random
import re

import attrs
import numpy as np

from ..dsl.ast import RuleDef
from ..errors import IRError
from ..ir import expr as E
from ..ir.expr import Expr
from ..ir.index import IConst, IVar
from ..ir.program import Kernel, Program, Store
from ..ir.types import ArrayType, Dim, GlobalArray
from ..ir.verify import verify
from ..rewrite.guards import GUARD_IMPLS, RuleContext
from ..rewrite.subst import substitute_index, unshadow
from ..rewrite.matcher import compile_pattern, instantiate
from .patterns import CANDIDATE_TYPES, TILES, MalformedRule, PatternInfo, TypeSampler, analyse

__all__ = ["Deck", "Instance", "InstanceBuilder", "MalformedRule", "VALUE_KINDS",
           "describe_inputs", "guarded_finite", "random_values"]

OUTER = "__i"                    # the kernel's outer loop variable (a point dim "I")
SHAPE_KINDS = ("1x1", "thin", "one_block", "even", "ragged")
RANGE_KINDS = ("empty", 1, 2, 3, 4, 5, 6, 7, "sub", "dependent", "dependent_inner")
#: Guards about values and structure; the others (cost model, arrays) cannot make a
#: rewrite unsound, so the checker takes them as holding.
SEMANTIC_GUARDS = {"invariant", "depends", "scalar", "vector", "block", "constant",
                   "positive", "bounds_invariant", "whole", "reduces_over", "weights_only",
                   "sums"}


def _guarded(rule: RuleDef, name: str) -> list[tuple]:
    """The arguments of every un-negated guard ``name`` of ``rule``."""
    return [g.args for g in rule.guards if g.name == name and not g.negated]


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
        # Inputs follow the kernel's loop over an output axis (an axis stored twice
        # has a single block, read at block 0).
        kernel_var = {a: f"__o{n}" for n, a in enumerate(axes) if axes.count(a) == 1}

        loop_dims, bindings, ranges_text = {}, {}, []
        # Guards the instance is built to satisfy: whole(R) ranges; a value x with
        # reduces_over(x, R) is a sum over R; weights_only(x) reads a weight.
        whole = {args[0] for args in _guarded(self.rule, "whole")}
        reduced = {args[0]: args[1] for args in _guarded(self.rule, "reduces_over")}
        weights_only = {args[0] for args in _guarded(self.rule, "weights_only")}
        # positive(x): an exponential of the drawn values (in the check's extended
        # precision exp(±1e4) is neither 0 nor inf)
        positive = {args[0] for args in _guarded(self.rule, "positive")}
        for var, rname, kind in info.binders:
            bindings[var] = var
            if rname in bindings:
                continue
            draw = self.range_decks[rname].draw()
            size = draw if isinstance(draw, int) else rng.randint(1, 7)
            dim = Dim(self.sampler.range_dims[rname], size, 1, point=True)
            loop_dims[rname] = dim
            lo = hi = None
            if kind != "map" and rname not in whole:
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
            if name in reduced:                 # summed over its own copy of range R
                deps.insert(0, ("__red", loop_dims[reduced[name]].name))
            array = GlobalArray(f"in_{name}", tuple(d for _, d in deps) + typ.axes)
            index = [IVar(v) for v, _ in deps]
            index += [IVar(kernel_var[a]) if a in kernel_var else IConst(picks[a])
                      for a in typ.axes]
            arrays.append(array)
            bindings[name] = E.load(array.name, *index)
            if name in reduced:
                dim_name, lo, hi = bindings[reduced[name]]
                bindings[name] = E.reduce("sum", "__red", dim_name, bindings[name], lo=lo, hi=hi)
            if name in positive:
                bindings[name] = E.call("exp", bindings[name])
            inputs_text.append(f"{name}: {typ}" + (f" (varies with {', '.join(v for v, _ in deps)})"
                                                   if deps else ""))
        # sums(m, x, k, R): m is the sum of x's row sums over its own copy of R (the
        # row mean but for the scale, which the guard does not ask for).
        for m, x, k, r in _guarded(self.rule, "sums"):
            if m in bindings and x in bindings and r in bindings and k in bindings:
                dim_name, lo, hi = bindings[r]
                inner = substitute_index(bindings[x], {bindings[k]: IVar("__sum")})
                bindings[m] = E.reduce("sum", "__sum", dim_name, E.call("rowsum", inner),
                                       lo=lo, hi=hi)
        if len(axes) == 0:
            dims["U"] = Dim("U", 1, 1, point=True)
        loops = [(OUTER, "I")] + [(f"__o{n}", a) for n, a in enumerate(axes)]
        if not axes:
            loops.append(("__u", "U"))
        out = GlobalArray("out", ("I",) + tuple(held) + (tuple(axes) or ("U",)))
        store_index = (IVar(OUTER),) + (None,) * len(held) + tuple(IVar(v) for v, _ in loops[1:])

        def program(value: Expr) -> Program:
            kernel = Kernel("k", tuple(loops), (Store("out", store_index, value),))
            return Program("check", tuple(dims.values()), tuple(arrays) + (out,),
                           tuple(a.name for a in arrays), ("out",), (kernel,),
                           tuple(f"in_{n}" for n in sorted(weights_only)
                                 if any(a.name == f"in_{n}" for a in arrays)))

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
            # A replacement may rebind a matched loop variable inside its own binder
            # (``sum(k in R[: 1]: ...)`` within ``sum(k in R: ...)``): renamed, as the
            # engine does after a step.
            rhs_value = unshadow(instantiate(self.rule.rhs, bindings),
                                 frozenset(v for v, _ in loops))
            rhs = verify(program(rhs_value))     # the store checks its type too
        except IRError as err:
            return Instance(lhs, None, _rhs_problem(str(err)), match, description)
        return Instance(lhs, rhs, "", match, description)

    def _guards(self, program: Program, match: dict) -> bool:
        ctx = RuleContext(program, hardware=None)    # semantic guards only: no pricing
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


_STORE_PREFIX = re.compile(r"^kernel 'k', store to out: ")
_TYPE_CHANGE = re.compile(r"^value has type (.*) but the array's blocks are (.*)$")


def _rhs_problem(message: str) -> str:
    """The verifier's message about an instance's right-hand side, in the rule's terms:
    the kernel and array the checker built around it are not the user's."""
    message = _STORE_PREFIX.sub("", message)
    changed = _TYPE_CHANGE.match(message)
    if changed:
        return (f"it has type {changed.group(1)} where the left-hand side has type "
                f"{changed.group(2)} (a rewrite must keep the type of what it replaces)")
    return message


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

#: Value distributions, dealt in turn (small integers twice a round: a rule wrong only
#: at an exact zero or a tie needs that value in the very element it reads).
VALUE_KINDS = ("normal", "positive", "near_zero", "large", "wide", "positive_wide",
               "small_integers", "small_integers")


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
        elif kind == "small_integers":      # exact zeros and ties: div(a, a) at a = 0
            # (0 drawn 3 times in 7: a 1x1 instance meets it in nearly every trial)
            v = rng.choice([-2.0, -1.0, 0.0, 0.0, 0.0, 1.0, 2.0], shape)
        elif kind == "with_nan":            # NaN propagation (see soundness.nan_hidden)
            v = rng.standard_normal(shape)
            v[rng.random(shape) < 0.3] = np.nan
        else:
            v = 10.0 ** rng.uniform(-4, 4, shape)
        out[name] = v
    return out


def guarded_finite(rule: RuleDef) -> set:
    """The input arrays of ``rule``'s instances that a guard keeps finite: NaN is not
    ``positive``, so the NaN check leaves those variables' arrays as drawn."""
    return {f"in_{args[0]}" for args in _guarded(rule, "positive")}


def describe_inputs(inputs: dict, limit: int = 3) -> str:
    parts = []
    for name, v in inputs.items():
        flat = np.asarray(v, np.float64).ravel()[:limit]
        parts.append(f"{name}[:{limit}] = [" + ", ".join(f"{x:.6g}" for x in flat) + "]")
    return "; ".join(parts)
