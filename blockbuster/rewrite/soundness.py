"""Soundness checking of rules: ``python -m blockbuster rules check``.

A rewrite rule is instantiated on random shapes and values: every pattern variable
becomes a load of a fresh random input whose type is drawn from the block, vector
and scalar types over a few small dimensions (ragged blocks included), and which
depends on the pattern's loop variables unless a guard says otherwise. Both sides
are evaluated by the reference interpreter in float64 and compared. A rule whose
right-hand side is ill-typed where its left-hand side is well-typed is unsound too.

Structural actions are checked by applying every one of their applications to
generated programs (the built-in workloads at small ragged sizes) and comparing the
interpreter's outputs before and after.
"""

from __future__ import annotations

import itertools
import random
from typing import Iterable

import attrs
import numpy as np

from ..backends.reference import run_program
from ..dsl.ast import RuleDef, RuleSet
from ..errors import BlockbusterError, IRError
from ..ir import expr as E
from ..ir.expr import Expr
from ..ir.index import IConst, IVar
from ..ir.program import Kernel, Program, Store
from ..ir.types import ArrayType, BlockType, Dim, GlobalArray
from ..ir.verify import verify
from .actions import ACTION_IMPLS
from .guards import RuleContext, guards_hold
from .matcher import compile_pattern, instantiate

# Block shapes: one block per dimension (a rule is an identity on blocks), with
# distinct extents so that a confused axis shows; the edge set has one-element axes.
# The loop dimensions are point dimensions, so a value can depend on the loop index
# without changing shape.
TILE_DIMS = (Dim("P", 5, 8), Dim("Q", 3, 4), Dim("Z", 4, 4))
EDGE_DIMS = (Dim("P", 1, 8), Dim("Q", 2, 4), Dim("Z", 1, 4))
LOOP_SIZES = (3, 1)          # trip counts tried for pattern loops (1: edge case)
UNIT = Dim("U", 1, 1, point=True)


@attrs.frozen
class Finding:
    rule: str
    location: str
    sound: bool
    trials: int
    detail: str = ""

    def __str__(self) -> str:
        verdict = "ok" if self.sound else "UNSOUND"
        text = f"{self.location}: {self.rule}: {verdict} ({self.trials} trials)"
        return text if self.sound else f"{text}\n    {self.detail}"


def _candidate_types() -> list[BlockType]:
    names = [d.name for d in TILE_DIMS]
    out = [BlockType(())] + [BlockType((n,)) for n in names]
    out += [BlockType(p) for p in itertools.permutations(names, 2)]
    return out


def _pattern_vars(p: Expr) -> tuple[list[str], dict[str, set[str]], list[tuple[str, str]]]:
    """Pattern variables in order; the loop variables in scope at every occurrence of
    each; the binders (loop var, range var) of the pattern."""
    order: list[str] = []
    scopes: dict[str, set[str]] = {}
    binders: list[tuple[str, str]] = []

    def visit(n: Expr, bound: frozenset):
        if n.op == "pvar":
            if n.attr not in scopes:
                order.append(n.attr)
                scopes[n.attr] = set(bound)
            else:
                scopes[n.attr] &= bound
            return
        inner = bound
        if n.op in ("reduce", "map"):
            if (n.attr.var, n.attr.dim) not in binders:
                binders.append((n.attr.var, n.attr.dim))
            inner = bound | {n.attr.var}
        for c in n.args:
            visit(c, inner)

    visit(p, frozenset())
    return order, scopes, binders


def _guard_deps(rule: RuleDef) -> tuple[set, set]:
    """(pattern var, loop var) pairs a guard forces invariant / dependent."""
    invariant, depends = set(), set()
    for g in rule.guards:
        if g.name in ("invariant", "depends"):
            target = invariant if (g.name == "invariant") != g.negated else depends
            target.add(tuple(g.args))
    return invariant, depends


class _Instance:
    """One instantiation: a program for each side over the same random inputs."""

    def __init__(self, rule: RuleDef, types: dict[str, BlockType], loop_size: int,
                 tile_dims=TILE_DIMS):
        self.rule = rule
        order, scopes, binders = _pattern_vars(rule.lhs)
        invariant, depends = _guard_deps(rule)
        self.loop_dims = {}
        for var, rvar in binders:
            if rvar not in self.loop_dims:
                self.loop_dims[rvar] = Dim(f"L{len(self.loop_dims)}", loop_size, 1, point=True)
        loop_of = {var: self.loop_dims[rvar].name for var, rvar in binders}
        self.dims = {d.name: d for d in tile_dims} | {d.name: d for d in self.loop_dims.values()}
        self.arrays: list[GlobalArray] = []
        bindings: dict = {}
        for var, rvar in binders:
            bindings[var] = var
            bindings[rvar] = (self.loop_dims[rvar].name, None, None)
        for name in order:
            deps = [v for v in sorted(scopes[name]) if (name, v) not in invariant]
            t = types[name]
            array = GlobalArray(f"in_{name}", tuple(loop_of[v] for v in deps) + t.axes)
            index = [IVar(v) for v in deps] + [IConst(0) for _ in t.axes]
            self.arrays.append(array)
            bindings[name] = E.load(array.name, *index)
        self.bindings = bindings
        self.lhs = instantiate(rule.lhs, bindings)
        self.rhs = instantiate(rule.rhs, bindings)

    def program(self, value: Expr, out_type) -> Program:
        # A map value is stored with ':' along each of its (point) dimensions.
        held = []
        while isinstance(out_type, ArrayType):
            held.append(out_type.dim)
            out_type = out_type.elem
        axes = out_type.axes or ("U",)
        dims = dict(self.dims)
        if not out_type.axes:
            dims["U"] = UNIT
        loops = tuple((f"o{i}", a) for i, a in enumerate(axes))
        out = GlobalArray("out", tuple(held) + axes)
        arrays = tuple(self.arrays) + (out,)
        index = (None,) * len(held) + tuple(IVar(v) for v, _ in loops)
        kernel = Kernel("k", loops, (Store("out", index, value),))
        program = Program("check", tuple(dims.values()), arrays,
                          tuple(a.name for a in self.arrays), ("out",), (kernel,))
        return program


def _type(program_like, e: Expr):
    from .guards import _LenientChecker
    checker = _LenientChecker(program_like)
    return checker.type_of(e, {v: ("?", "?") for v in e.free_vars})


def _check_rewrite(rule: RuleDef, trials: int, seed: int) -> Finding:
    rng = random.Random(seed)
    order, _, _ = _pattern_vars(rule.lhs)
    cands = _candidate_types()
    combos = list(itertools.product(cands, repeat=len(order)))
    rng.shuffle(combos)
    tried = 0
    well_typed = 0
    matcher = compile_pattern(rule.lhs)
    for combo in combos:
        if well_typed >= trials:
            break
        types = dict(zip(order, combo))
        inst = _Instance(rule, types, LOOP_SIZES[0])
        base = Program("t", tuple(inst.dims.values()), tuple(inst.arrays), (), (), ())
        try:
            lhs_type = _type(base, inst.lhs)
        except IRError:
            continue
        if not isinstance(lhs_type, (BlockType, ArrayType)):
            continue
        bindings: dict = {}
        if not matcher(inst.lhs, bindings):
            continue
        lhs_prog = inst.program(inst.lhs, lhs_type)
        try:
            verify(lhs_prog)
        except IRError:
            continue
        if not guards_hold(rule, RuleContext(lhs_prog), bindings):
            continue
        well_typed += 1
        for loop_size, tile_dims in ((LOOP_SIZES[0], TILE_DIMS), (LOOP_SIZES[1], EDGE_DIMS)):
            inst = _Instance(rule, types, loop_size, tile_dims)
            lhs_prog = inst.program(inst.lhs, lhs_type)
            try:
                rhs_type = _type(base.evolve(dims=tuple(inst.dims.values()),
                                             arrays=tuple(inst.arrays)), inst.rhs)
                if rhs_type != lhs_type:
                    raise IRError(f"the right-hand side has type {rhs_type}, the left {lhs_type}")
                rhs_prog = inst.program(inst.rhs, lhs_type)
                verify(rhs_prog)
            except IRError as err:
                return Finding(rule.name, str(rule.loc), False, tried + 1,
                               f"ill-typed right-hand side for {_describe(types)}: {err}")
            for kind in ("normal", "positive", "large"):
                inputs = _random_inputs(lhs_prog, kind, seed + tried)
                with np.errstate(all="ignore"):
                    left = run_program(lhs_prog, inputs, dtype=np.float64)["out"]
                    right = run_program(rhs_prog, inputs, dtype=np.float64)["out"]
                tried += 1
                bad = _mismatch(left, right)
                if bad:
                    return Finding(rule.name, str(rule.loc), False, tried,
                                   f"counterexample with {_describe(types)}, loop of "
                                   f"{loop_size}, {kind} inputs: {bad}")
    if well_typed == 0:
        return Finding(rule.name, str(rule.loc), False, 0,
                       "no well-typed instance of the pattern exists (it can never match)")
    return Finding(rule.name, str(rule.loc), True, tried)


def _describe(types: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in types.items())


def _random_inputs(program: Program, kind: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name in program.inputs:
        shape = program.shape(name)
        if kind == "normal":
            out[name] = rng.standard_normal(shape)
        elif kind == "positive":
            out[name] = rng.uniform(0.5, 2.0, shape)
        else:
            out[name] = rng.standard_normal(shape) * 30.0
    return out


def _mismatch(left: np.ndarray, right: np.ndarray) -> str:
    left, right = np.asarray(left, np.float64), np.asarray(right, np.float64)
    finite = np.isfinite(left)
    if not finite.any():
        return ""                        # the left side is undefined here: no evidence
    scale = max(float(np.max(np.abs(left[finite]))), 1e-300)
    diff = np.abs(np.where(finite, left - right, 0.0))
    if np.any(finite & ~np.isfinite(right)):
        return "the right-hand side is not finite where the left-hand side is"
    err = float(diff.max()) / scale
    if err > 1e-6:
        worst = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.ndim else ()
        return (f"relative error {err:.3g}: left {float(left[worst]):.6g}, "
                f"right {float(right[worst]):.6g} at {tuple(int(i) for i in worst)}")
    return ""


# --- structural actions -------------------------------------------------------------

def check_programs() -> list[Program]:
    """Small ragged instances of the built-in workloads to apply actions to."""
    from ..frontend.workloads import workload
    return [workload("attention", N=5, S=7, D=3, blocks={"N": 2, "S": 3, "D": 2}),
            workload("layernorm_matmul", M=5, K=7, N=3, blocks={"M": 2, "K": 3, "N": 2}),
            workload("rmsnorm_ffn_swiglu", M=3, D=5, H=7, blocks={"M": 2, "D": 2, "H": 3})]


def _check_action(rule: RuleDef, programs: Iterable[Program], fuse_rules: RuleSet | None,
                  seed: int) -> Finding:
    """Apply every application of the action along a fusion run of each program."""
    from .engine import Engine
    tried = 0
    for program in programs:
        states = [program]
        if fuse_rules is not None:      # also check on partially fused programs
            result = Engine(fuse_rules).run(program)
            trace = [s.program_after for s in result.trace]
            states += trace
        # ... and on their neighbours with a row held in a map (where accumulators
        # can be hoisted), whether or not the cost model would choose that.
        states += [app.build() for s in states[::5] for app in ACTION_IMPLS["hold"](s)]
        for state in states:
            inputs = _random_inputs(state, "normal", seed)
            before = run_program(state, inputs, dtype=np.float64)
            for app in itertools.islice(ACTION_IMPLS[rule.action](state), 4):
                try:
                    after_program = verify(app.build(), allow_shadowing=True)  # as the engine does
                except IRError as err:
                    return Finding(rule.name, str(rule.loc), False, tried + 1,
                                   f"produced an ill-formed program from {program.name}: {err}")
                tried += 1
                try:
                    after = run_program(after_program, inputs, dtype=np.float64)
                except BlockbusterError as err:
                    return Finding(rule.name, str(rule.loc), False, tried,
                                   f"changed output of {program.name} (kernel {app.kernel}): "
                                   f"the result cannot run: {err}")
                for name in state.outputs:
                    bad = _mismatch(before[name], after[name])
                    if bad:
                        return Finding(rule.name, str(rule.loc), False, tried,
                                       f"changed output {name} of {program.name} "
                                       f"(kernel {app.kernel}): {bad}")
    return Finding(rule.name, str(rule.loc), True, tried)


def check_rule(rule: RuleDef, trials: int = 4, seed: int = 0,
               programs: list[Program] | None = None, fuse_rules: RuleSet | None = None) -> Finding:
    if rule.kind == "rewrite":
        return _check_rewrite(rule, trials, seed)
    return _check_action(rule, programs if programs is not None else check_programs(),
                         fuse_rules, seed)


def check_rules(rules: RuleSet, trials: int = 4, seed: int = 0) -> list[Finding]:
    programs = check_programs()
    return [check_rule(r, trials, seed, programs, rules) for r in rules.rules.values()]
