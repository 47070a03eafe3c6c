"""Soundness checking of rules: ``python -m blockbuster rules check``.

A rewrite rule is instantiated many times (``instances.py``: sampled types, random
shapes with 1x1 / thin / ragged / several blocks, empty, short, sub- and dependent
ranges) and both sides are run by the reference interpreter on the same inputs,
drawn from several distributions (values near zero, up to 1e4, mixed signs). The
evaluation uses extended precision (``np.longdouble``) so that exp(±1e4) stays finite
and float rounding cannot hide or fake a difference. Positions must agree in their
non-finite class (nan, +inf, -inf) and finite values within a tolerance scaled by
the values' magnitude. A right-hand side that is ill-formed where the left is
well-formed is unsound too.

Structural actions are checked by applying them (up to a few applications per
state) to built-in workloads at small ragged sizes, ``llama_block`` included, to
random well-formed programs, and to every state along their fusion, comparing the
interpreter's outputs before and after.
"""

from __future__ import annotations

import itertools
import random
from typing import Iterable

import attrs
import numpy as np

from ..backends.reference import run_program
from ..cost.hardware import Hardware
from ..dsl.ast import RuleDef, RuleSet
from ..errors import BlockbusterError, IRError
from ..ir.program import Program
from ..ir.verify import verify
from ..rewrite.actions import ACTION_IMPLS
from .findings import Finding, finding
from .instances import VALUE_KINDS, Deck, InstanceBuilder, MalformedRule, describe_inputs, \
    guarded_finite, random_values
from .patterns import escaping_variables

#: Default number of instances run per rewrite rule (each on one value distribution).
DEFAULT_TRIALS = 30
PRECISION = np.longdouble
#: Finite values agree when |l - r| <= RTOL·max(|l|, |r|) + ATOL·(largest magnitude of
#: the output): extended precision has ~1e-19 rounding, so these leave a wide margin
#: for reassociation while a wrong factor of 1 + 1e-7 is still caught.
RTOL = 1e-9
ATOL = 1e-12
STATES_PER_PROGRAM = 3          # fusion states sampled per program for actions
APPLICATIONS_PER_STATE = 2
ACTION_TRIALS = 24              # applications checked per action (programs interleaved)
NAN_TRIALS = 8                  # instances of a rewrite on inputs with NaNs (nan_hidden)


def mismatch(left, right) -> str:
    """Why two results differ ("" when they agree)."""
    left = np.asarray(left, PRECISION)
    right = np.asarray(right, PRECISION)
    if left.shape != right.shape:
        return f"shapes differ: left {left.shape}, right {right.shape}"
    lc, rc = _classes(left), _classes(right)
    # NaN on the left is an undefined value (inf - inf, 0·inf of an overflow): the
    # right side must be non-finite too, but may say which infinity it is.
    differ = (lc != rc) & ~((lc == 1) & (rc != 0))
    if np.any(differ):
        at = tuple(int(i) for i in np.argwhere(differ)[0])
        return (f"left {_num(left[at], 6)}, right {_num(right[at], 6)} at {at} "
                "(different non-finite class)")
    finite = lc == 0
    if not np.any(finite):
        return ""
    lf, rf = np.where(finite, left, 0), np.where(finite, right, 0)
    scale = np.maximum(np.abs(lf), np.abs(rf))
    tol = RTOL * scale + ATOL * np.max(scale)     # in PRECISION: may exceed float64
    over = np.abs(lf - rf) > tol
    if np.any(over):
        excess = np.where(over, np.abs(lf - rf) / np.maximum(scale, _TINY), 0)
        at = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), excess.shape))
        return (f"left {_num(left[at], 10)}, right {_num(right[at], 10)} at {at} "
                f"(relative difference {_num(excess[at], 3)})")
    return ""


#: The smallest normal magnitude of the check's precision (values far below float64's
#: range, 1e-2907 say, are still compared, and reported, as they are).
_TINY = np.finfo(PRECISION).tiny


def _num(x, digits: int) -> str:
    """``x`` with ``digits`` significant digits, like ``:.{digits}g``, also where it is
    outside float64's range (extended precision keeps exp(-6000) apart from 0)."""
    wide = PRECISION(x)
    narrow = float(wide)
    if wide != 0 and np.isfinite(wide) and (narrow == 0 or not np.isfinite(narrow)):
        return np.format_float_scientific(wide, precision=digits - 1, trim="-")
    return f"{narrow:.{digits}g}"


def _classes(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), 1, np.where(np.isposinf(x), 2, np.where(np.isneginf(x), 3, 0)))


# --------------------------------------------------------------------- rewrite rules

def check_rewrite(rule: RuleDef, trials: int = DEFAULT_TRIALS, seed: int = 0) -> Finding:
    try:
        builder = InstanceBuilder(rule, seed)
    except MalformedRule as err:
        return finding(rule, False, 0, f"cannot be instantiated: {err}")
    if not builder.types:
        return finding(rule, False, 0, "no well-typed instance of the pattern exists "
                                       "(it can never match)")
    escaping = escaping_variables(rule, builder.info)
    if escaping:
        name, var = escaping[0]
        return finding(rule, False, 0, f"the right-hand side uses '{name}' outside the "
                       f"binder of '{var}', but the pattern matches it inside, where it may "
                       f"vary with '{var}': keep it inside, or add the guard "
                       f"invariant({name}, {var})")
    rng = np.random.default_rng(seed)
    values = Deck(VALUE_KINDS, random.Random(seed + 1))
    ran = 0
    for _attempt in range(trials * 4):
        if ran >= trials:
            break
        inst = builder.build()
        if inst is None:
            continue
        ran += 1
        if inst.rhs is None:
            return finding(rule, False, ran, f"ill-typed right-hand side: {inst.rhs_error}\n"
                           f"with {inst.description}\n(seed {seed})")
        kind = values.draw()
        inputs = random_values(inst.lhs, kind, rng)
        try:
            left = run_program(inst.lhs, inputs, dtype=PRECISION)["out"]
        except BlockbusterError:
            continue                   # the left side cannot run here: no evidence
        try:
            right = run_program(inst.rhs, inputs, dtype=PRECISION)["out"]
        except BlockbusterError as err:
            return finding(rule, False, ran, f"the right-hand side cannot run where the "
                           f"left can: {err}\n{_context(inst, kind, inputs, seed)}")
        bad = mismatch(left, right)
        if bad:
            return finding(rule, False, ran, f"counterexample: {bad}\n"
                           f"{_context(inst, kind, inputs, seed)}")
    if ran == 0:
        return finding(rule, False, 0, "no well-typed instance satisfies the guards "
                                       "(it can never match)")
    nan_trials = 0
    finite = guarded_finite(rule)
    for _attempt in range(NAN_TRIALS * 4):
        if nan_trials >= NAN_TRIALS:
            break
        inst = builder.build()
        if inst is None or inst.rhs is None:
            continue
        inputs = random_values(inst.lhs, "with_nan", rng)
        for name in finite & inputs.keys():
            inputs[name] = np.nan_to_num(inputs[name])
        try:
            left = run_program(inst.lhs, inputs, dtype=PRECISION)["out"]
            right = run_program(inst.rhs, inputs, dtype=PRECISION)["out"]
        except BlockbusterError:
            continue
        nan_trials += 1
        bad = nan_hidden(left, right)
        if bad:
            return finding(rule, False, ran + nan_trials,
                           f"counterexample with NaN inputs: {bad}\n"
                           f"{_context(inst, 'with_nan', inputs, seed)}")
    return finding(rule, True, ran + nan_trials)


def nan_hidden(left, right) -> str:
    """Where NaN inputs give the left side NaN and the right side a number, or the two
    sides different numbers ("" when neither): a rule must not turn a NaN into a
    number (``mul(a, 0.0) => zeros``, ``eq(a, a) => ones``). The other way, a NaN
    where the left side has a number, is allowed: fusion may place its NaNs
    differently for non-finite inputs (a factor taken out of a sum over an empty
    range is ``NaN·0``)."""
    left = np.asarray(left, PRECISION)
    right = np.asarray(right, PRECISION)
    if left.shape != right.shape:
        return mismatch(left, right)
    right_number = np.isfinite(right)
    hidden = np.isnan(left) & right_number
    both = np.isfinite(left) & right_number
    lf, rf = np.where(both, left, 0), np.where(both, right, 0)
    scale = np.maximum(np.abs(lf), np.abs(rf))
    differ = np.abs(lf - rf) > RTOL * scale + ATOL * np.max(scale, initial=0)
    where = np.argwhere(hidden | differ)
    if not where.size:
        return ""
    at = tuple(int(i) for i in where[0])
    return f"left {_num(left[at], 10)}, right {_num(right[at], 10)} at {at}"


def _context(inst, kind: str, inputs: dict, seed: int) -> str:
    return (f"with {inst.description}\n{kind} inputs: {describe_inputs(inputs)}\n"
            f"(seed {seed})")


# --------------------------------------------------------------------- actions

def check_programs(seed: int = 0, random_count: int = 4) -> list[Program]:
    """Programs to apply structural actions to: the built-in workloads at small ragged
    sizes (``llama_block`` included) and a few random well-formed programs."""
    from ..frontend.workloads import workload
    from .programs import random_program
    out = [workload("attention", N=5, S=7, D=3, blocks={"N": 2, "S": 3, "D": 2}),
           workload("layernorm_matmul", M=5, K=7, N=3, blocks={"M": 2, "K": 3, "N": 2}),
           workload("rmsnorm_ffn_swiglu", M=3, D=5, H=7, blocks={"M": 2, "D": 2, "H": 3}),
           workload("llama_block", T=3, E=4, F=3, NH=2, KVH=1,
                    blocks={"T": 2, "E": 2, "F": 2})]
    rng = random.Random(seed)
    out += [random_program(rng) for _ in range(random_count)]
    return out


@attrs.frozen
class ActionState:
    """A program state actions are applied to, with its inputs and outputs."""

    origin: str
    program: Program
    inputs: dict
    outputs: dict


def action_states(programs: Iterable[Program], fuse_rules: RuleSet | None = None,
                  seed: int = 0, per_program: int = STATES_PER_PROGRAM, *,
                  hardware: Hardware | None) -> list[ActionState]:
    """The programs, a sample of the states along their fusion with ``fuse_rules``
    for ``hardware`` (evenly spaced, the last one included), and neighbours with a
    row held in a map (where accumulators can be hoisted), each with its interpreter
    outputs on random inputs. ``hardware`` may be None only without ``fuse_rules``."""
    from ..rewrite.engine import Engine
    if fuse_rules is not None and hardware is None:
        raise TypeError("action_states: fusing the check programs needs a hardware description")
    per_origin = []
    for n, program in enumerate(programs):
        out = []
        states = [program]
        if fuse_rules is not None:
            steps = Engine(fuse_rules, hardware=hardware).run(program).trace
            trace = [s.program_after for s in steps]
            if trace:
                step = max(1, len(trace) // per_program)
                picked = trace[step - 1::step][:per_program]
                states += picked + ([trace[-1]] if trace[-1] not in picked else [])
            # The state before each action's first application: an action that fires
            # once per derivation (hold_accumulators) is seldom on an evenly spaced
            # sample, and went unchecked when a user's extra rule shifted the trace.
            first_use = {}
            for s in steps:
                first_use.setdefault(s.rule, s.program_before)
            states += [first_use[name] for name, rule in fuse_rules.rules.items()
                       if rule.kind != "rewrite" and name in first_use
                       and first_use[name] not in states]
        states += [app.build() for s in states[1::2]
                   for app in itertools.islice(ACTION_IMPLS["hold"](s), 1)]
        for k, state in enumerate(states):
            inputs = random_values(state, "normal", np.random.default_rng(seed + 1000 * n + k))
            out.append(ActionState(program.name, state, inputs,
                                   run_program(state, inputs, dtype=np.float64)))
        per_origin.append(out)
    # Interleaved, so that a capped check still sees every program.
    return [st for group in itertools.zip_longest(*per_origin) for st in group if st]


def check_action(rule: RuleDef, programs: Iterable[Program] | None = None,
                 fuse_rules: RuleSet | None = None, seed: int = 0,
                 states: list[ActionState] | None = None, *,
                 hardware: Hardware | None = None) -> Finding:
    """Apply the action (up to a few applications per state) and compare outputs.
    ``hardware``: what ``fuse_rules`` fuse the states for (needed with them)."""
    if states is None:
        states = action_states(programs if programs is not None else check_programs(seed),
                               fuse_rules, seed, hardware=hardware)
    tried = 0
    impl = ACTION_IMPLS[rule.action]
    for st in states:
        if tried >= ACTION_TRIALS:
            break
        for app in itertools.islice(impl(st.program), APPLICATIONS_PER_STATE):
            where = f"{st.origin} (kernel {app.kernel})"
            try:
                after_program = verify(app.build(), allow_shadowing=True)  # as the engine does
            except IRError as err:
                return finding(rule, False, tried + 1,
                               f"produced an ill-formed program from {where}: {err}")
            tried += 1
            try:
                after = run_program(after_program, st.inputs, dtype=np.float64)
            except BlockbusterError as err:
                return finding(rule, False, tried, f"changed the outputs of {where}: the result "
                                                   f"cannot run: {err}")
            for name in st.program.outputs:
                bad = mismatch(st.outputs[name], after[name])
                if bad:
                    return finding(rule, False, tried, f"changed output {name} of {where}: "
                                                       f"{bad}\n(seed {seed})")
    return finding(rule, True, tried)


# --------------------------------------------------------------------- entry points

def check_rule(rule: RuleDef, trials: int = DEFAULT_TRIALS, seed: int = 0,
               programs: list[Program] | None = None,
               fuse_rules: RuleSet | None = None,
               states: list[ActionState] | None = None, *,
               hardware: Hardware | None = None) -> Finding:
    """The soundness finding of one rule; never raises for a malformed rule.
    ``hardware``: what an action's check states are fused for with ``fuse_rules``."""
    try:
        if rule.kind == "rewrite":
            return check_rewrite(rule, trials, seed)
        return check_action(rule, programs, fuse_rules, seed, states, hardware=hardware)
    except (BlockbusterError, RecursionError, ValueError, KeyError, TypeError,
            IndexError, AttributeError) as err:
        # A rule the loader accepted but no instance of which can be built or run.
        return finding(rule, False, 0, f"cannot be checked: {type(err).__name__}: {err}")


def check_soundness(rules: RuleSet, trials: int = DEFAULT_TRIALS, seed: int = 0, *,
                    hardware: Hardware) -> list[Finding]:
    """Soundness findings of every rule; actions are tried on states of the check
    programs fused with ``rules`` for ``hardware`` (the backend's description)."""
    states = None
    out = []
    for rule in rules.rules.values():
        if rule.kind == "action" and states is None:
            try:
                states = action_states(check_programs(seed), rules, seed, hardware=hardware)
            except BlockbusterError:    # the rule set cannot fuse them: originals only
                states = action_states(check_programs(seed), None, seed, hardware=hardware)
        out.append(check_rule(rule, trials, seed, None, rules, states))
    return out
