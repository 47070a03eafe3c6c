"""The rule engine: phases to a fixpoint, under limits, with a derivation trace.

A run applies the schedule's phases in order. Within a phase it repeatedly takes
the first applicable rule application — kernels in program order, nodes children
first, rules in phase order — applies it, and records a :class:`Step`, until
nothing applies (``saturated``; ``cycle`` when a phase was ended because its next step
would return to an earlier state of the phase) or a limit stops it (``step_limit``, ``node_limit``,
``depth_limit``, ``time_limit``). A step that would grow the program past the node or
depth limit is not applied: the result always stays within the limits, so a rule
that grows terms forever ends with a stop reason, never a RecursionError downstream.
Several runs (candidate selection) can share one :class:`Budget` so the step and
time limits hold for a whole fusion. The engine knows nothing about workloads: what
fuses is decided entirely by the rule files.
"""

from __future__ import annotations

import numbers
import time
from typing import Callable

import attrs

from ..cost.hardware import Hardware
from ..dsl.ast import RuleDef, RuleSet
from ..errors import BlockbusterError, IRError, UsageError
from ..ir.depth import MAX_DEPTH
from ..ir.expr import Expr
from ..ir.program import Program
from ..ir.verify import verify, verify_rewritten, verify_step
from .actions import ACTION_IMPLS
from .subst import replace_in_kernel, unshadow_program
from .guards import RuleContext, guards_hold
from .matcher import compile_pattern, instantiate


def _positive(kind, zero_ok: bool = False):
    """A limit must be a finite number above zero (NaN would mean "no limit")."""
    def check(instance, attribute, value):
        ok = (not isinstance(value, bool) and isinstance(value, kind)
              and (value >= 0 if zero_ok else value > 0) and value < float("inf"))
        if not ok:      # also false for NaN
            raise UsageError(f"Limits.{attribute.name} must be a "
                             f"{'non-negative' if zero_ok else 'positive'} finite number, "
                             f"got {value!r}")
    return check


@attrs.frozen
class Limits:
    max_steps: int = attrs.field(default=50_000, validator=_positive(numbers.Integral))
    max_nodes: int = attrs.field(default=500_000, validator=_positive(numbers.Integral))
    max_seconds: float = attrs.field(default=120.0, validator=_positive(numbers.Real, True))
    max_depth: int = attrs.field(default=MAX_DEPTH, validator=_positive(numbers.Integral))


class Budget:
    """The step count and deadline left to a whole fusion, shared by its engine runs."""

    def __init__(self, limits: Limits):
        self.steps_left = limits.max_steps
        self.deadline = time.perf_counter() + limits.max_seconds
        self.exhausted: str | None = None     # the stop reason once spent

    def check(self) -> str | None:
        if self.steps_left <= 0:
            self.exhausted = "step_limit"
        elif time.perf_counter() > self.deadline:
            self.exhausted = "time_limit"
        return self.exhausted


STOP_MESSAGES = {
    "saturated": "no rule applies any more",
    "step_limit": "stopped at the step limit (--max-steps, Limits.max_steps): where "
                  "that limit is not set low, the rule set may not terminate on its own",
    "node_limit": "stopped because the next step would grow the program past the node "
                  "limit",
    "depth_limit": "stopped because the next step would nest an expression deeper than "
                   "the depth limit (a rule that grows terms?)",
    "time_limit": "stopped at the time limit",
    "cycle": "a phase was ended where its next step would return the program to an "
             "earlier state: its rules would loop forever (a commutativity rule, or two "
             "rules undoing each other)",
}


@attrs.frozen(eq=False)
class Step:
    index: int
    phase: str
    rule: str
    location: str            # FILE:LINE:COL of the rule
    kernel: str
    before: Expr | None      # the node rewritten (None for whole-program actions)
    after: Expr | None
    program_before: Program
    program_after: Program

    def describe(self) -> str:
        from ..ir.printer import format_expr
        head = f"step {self.index}: {self.rule} ({self.location}) in kernel {self.kernel}"
        if self.before is not None and self.after is not None:
            return f"{head}\n    {_short(format_expr(self.before))}\n => {_short(format_expr(self.after))}"
        if self.before is not None:
            return f"{head}: {_short(format_expr(self.before))}"
        return head


def _short(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


@attrs.frozen(eq=False)
class FusionResult:
    program: Program
    trace: tuple[Step, ...] = ()
    stop_reason: str = "saturated"
    seconds: float = 0.0
    original: Program | None = None
    pieces: tuple = ()       # candidate selection: the chosen fused pieces
    fallback: str = ""       # why the whole-program fusion was not kept (never worse)

    @property
    def message(self) -> str:
        return STOP_MESSAGES.get(self.stop_reason, self.stop_reason)

    def rule_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.trace:
            counts[s.rule] = counts.get(s.rule, 0) + 1
        return counts

    def derivation(self, programs: bool = True) -> str:
        """The derivation step by step, in the text form, like the paper's figures."""
        out = []
        if self.original is not None:
            out += ["== initial program", str(self.original)]
        for step in self.trace:
            out.append(f"== {step.describe()}")
            if programs:
                kernel = next((k for k in step.program_after.kernels if k.name == step.kernel),
                              None)
                if kernel is not None:
                    # The engine's intermediate programs may reuse a loop's name in
                    # a binder inside it; printed renamed, a step reads back as text.
                    from ..ir.printer import format_kernel
                    from .subst import unshadow_kernel
                    out.extend(format_kernel(unshadow_kernel(kernel)))
                else:
                    out.append(f"(kernel {step.kernel} removed)")
        out.append(f"== stop: {self.stop_reason} ({self.message}) after {len(self.trace)} steps")
        if self.fallback:
            out.append(f"== {self.fallback}")
        return "\n".join(out)


class RuleError(BlockbusterError):
    """A rule produced an ill-formed program (an unsound or ill-typed rule)."""


class CompiledRules:
    """Rule matchers indexed by root operator, per phase."""

    def __init__(self, rules: RuleSet):
        self.rules = rules
        self.phase_only: dict[str, RuleSet] = {}    # lookahead: one phase alone
        self.matchers: dict[str, Callable] = {}
        for name, rule in rules.rules.items():
            if rule.kind == "rewrite":
                self.matchers[name] = compile_pattern(rule.lhs)
        self.by_phase: dict[str, tuple[dict[str, list[RuleDef]], list[RuleDef]]] = {}
        for phase in rules.phases:
            index: dict[str, list[RuleDef]] = {}
            actions: list[RuleDef] = []
            for rname in phase.rules:
                rule = rules.rules[rname]
                if rule.kind == "rewrite":
                    index.setdefault(rule.root_op, []).append(rule)
                else:
                    actions.append(rule)
            self.by_phase[phase.name] = (index, actions)


# Candidate selection and lookahead start many engines on one rule set: its matchers
# are compiled once (keyed by identity; the rule set is kept alive with them).
_COMPILED: dict[int, tuple[RuleSet, CompiledRules]] = {}


def _compiled(rules: RuleSet) -> CompiledRules:
    hit = _COMPILED.get(id(rules))
    if hit is None or hit[0] is not rules:
        if len(_COMPILED) >= 64:
            _COMPILED.clear()
        hit = _COMPILED[id(rules)] = (rules, CompiledRules(rules))
    return hit[1]


class Engine:
    def __init__(self, rules: RuleSet, limits: Limits | None = None, *, hardware: Hardware,
                 step_check: Callable[[Step], None] | None = None, use_index: bool = True,
                 budget: Budget | None = None, check_each_step: bool = False):
        self.compiled = _compiled(rules)
        # False: steps are not verified one by one; the result is, and a run whose
        # result is ill-formed (or that fails) is run again checking every step, so
        # the error names the rule that broke the program. Same steps, same result:
        # a check never changes what applies. A per-step callback checks each step.
        self.check_each_step = check_each_step or step_check is not None
        self.limits = limits or Limits()
        self.budget = budget            # shared with other runs; None: one per run
        if not isinstance(hardware, Hardware):
            raise TypeError(f"Engine: hardware must be a Hardware description, "
                            f"got {type(hardware).__name__}")
        self.hardware = hardware
        self.step_check = step_check
        self.use_index = use_index
        self._no_match: set = set()     # (rule name, node): matching is context-free
        # (phase index, kernel): kernels known to hold no rewrite of the phase. A
        # step changes one kernel; the others are not scanned again.
        self._kernel_done: set = set()
        self._lookahead: dict = {}

    # -- finding one application -------------------------------------------------
    def _first_rewrite(self, program: Program, index: dict) -> tuple | None:
        all_rules = [r for rules in index.values() for r in rules]
        for kernel in program.kernels:
            done_key = (id(index), kernel)
            if done_key in self._kernel_done:
                continue
            ctx = RuleContext(program, kernel, hardware=self.hardware)
            seen: set = set()
            for store in kernel.stores:
                for node in store.value.walk():
                    if node in seen:
                        continue
                    seen.add(node)
                    candidates = index.get(node.op, ()) if self.use_index else all_rules
                    for rule in candidates:
                        key = (rule.name, node)
                        if key in self._no_match:
                            continue
                        bindings: dict = {}
                        if (self.compiled.matchers[rule.name](node, bindings)
                                and guards_hold(rule, ctx, bindings)):
                            new = instantiate(rule.rhs, bindings)
                            if new is not node:
                                return rule, kernel, node, new
                        self._no_match.add(key)
            self._kernel_done.add(done_key)
        return None

    def _first_action(self, program: Program, actions: list[RuleDef]) -> tuple | None:
        for rule in actions:
            for app in ACTION_IMPLS[rule.action](program):
                bindings = {param: value for param, value in
                            zip(rule.action_args, app.bindings.values())}
                ctx = RuleContext(program, None, hardware=self.hardware, candidate=_once(app.build),
                                  run_phase=self._run_phase)
                if guards_hold(rule, ctx, bindings):
                    return rule, app
        return None

    def _run_phase(self, program: Program, phase: str) -> Program:
        """Lookahead for pricing guards: ``program`` after ``phase`` alone (memoised)."""
        key = (program, phase)
        hit = self._lookahead.get(key)
        if hit is None:
            only = self.compiled.phase_only.get(phase)
            if only is None:
                rules = self.compiled.rules
                only = self.compiled.phase_only[phase] = RuleSet(
                    rules.rules, rules.phases, (phase,), rules.files)
            # Its own step count (lookahead steps are not applied) but the same deadline.
            budget = Budget(self.limits)
            if self.budget is not None:
                budget.deadline = self.budget.deadline
            hit = Engine(only, self.limits, hardware=self.hardware,
                         budget=budget, check_each_step=self.check_each_step
                         ).run(program).program
            self._lookahead[key] = hit
        return hit

    # -- the run -----------------------------------------------------------------
    def run(self, program: Program) -> FusionResult:
        if self.check_each_step:
            return self._run(program, check=True)
        budget = self.budget
        saved = None if budget is None else (budget.steps_left, budget.exhausted)
        try:
            result = self._run(program, check=False)
            verify(result.program)
            return result
        except Exception:       # noqa: BLE001 -- rerun checked: the error names the rule
            if budget is not None:
                budget.steps_left, budget.exhausted = saved
            return Engine(self.compiled.rules, self.limits, hardware=self.hardware,
                          use_index=self.use_index, budget=budget,
                          check_each_step=True).run(program)

    def _run(self, program: Program, check: bool) -> FusionResult:
        start = time.perf_counter()
        original = program
        trace: list[Step] = []
        limits = self.limits
        budget = self.budget if self.budget is not None else Budget(limits)
        verified = False            # ``program`` has passed a full ``verify``
        stop = "saturated"
        cycled = False
        for phase in self.compiled.rules.schedule:
            index, actions = self.compiled.by_phase[phase]
            # Rule choice is deterministic: a state seen before in this phase would
            # repeat the steps since then forever.
            seen = {program}
            while True:
                if budget.steps_left > 0 and budget.check():     # the time limit
                    stop = budget.exhausted
                    break
                rewrite = self._first_rewrite(program, index)
                action = None if rewrite is not None else self._first_action(program, actions)
                if rewrite is None and action is None:
                    break
                # a step limit stops a fusion that has a next step, not one that has
                # just saturated at exactly that many steps
                if budget.check():
                    stop = budget.exhausted
                    break
                changed = None          # (old kernel, new kernel) of a rewrite step
                if rewrite is not None:
                    rule, kernel, before, after = rewrite
                    new_program = replace_in_kernel(program, kernel, {before: after})
                    kernel_name = kernel.name
                    changed = (kernel, new_program.kernels[program.kernels.index(kernel)])
                else:
                    rule, app = action
                    new_program = app.build()
                    kernel_name, before, after = app.kernel, app.before, app.after
                grown = _over_limits(new_program, limits)
                if grown:
                    stop = grown
                    break
                if new_program in seen:
                    cycled = True       # this phase ends; the next ones still run
                    break
                seen.add(new_program)
                if check:
                    # After one full check, a rewrite step checks only the kernel it
                    # changed.
                    self._check(rule, new_program, program if verified else None, changed)
                    verified = True
                step = Step(len(trace) + 1, phase, rule.name, str(rule.loc), kernel_name,
                            before, after, program, new_program)
                trace.append(step)
                budget.steps_left -= 1
                if self.step_check is not None:
                    self.step_check(step)
                program = new_program
            if stop != "saturated":
                break
        if cycled and stop == "saturated":
            stop = "cycle"
        # Steps may shadow a binder (see ``verify``); the result has one name per scope.
        program = unshadow_program(program)
        return FusionResult(program, tuple(trace), stop, time.perf_counter() - start, original)

    @staticmethod
    def _check(rule: RuleDef, program: Program, verified: Program | None = None,
               changed: tuple | None = None) -> None:
        try:
            if verified is not None and changed is not None:
                verify_rewritten(verified, changed[0], program, changed[1],
                                 allow_shadowing=True)
            elif verified is not None:
                verify_step(verified, program, allow_shadowing=True)
            else:
                verify(program, allow_shadowing=True)
        except IRError as err:
            raise RuleError(f"{rule.loc}: rule '{rule.name}' produced an ill-formed "
                            f"program: {err}") from None


def _once(build: Callable[[], Program]) -> Callable[[], Program]:
    cache: list[Program] = []

    def get() -> Program:
        if not cache:
            cache.append(build())
        return cache[0]
    return get


# Node depths and each kernel's (node count, depth): pure functions of hash-consed
# nodes and immutable kernels, shared by every run (a step changes one kernel, and
# candidates and lookahead runs meet the same kernels again).
_DEPTHS: dict = {}
_SIZES: dict = {}


def _over_limits(program: Program, limits: Limits) -> str | None:
    """``node_limit``/``depth_limit`` if ``program`` exceeds one, else None. The node
    count is summed over kernels (a node shared by two kernels counts twice)."""
    nodes = 0
    for kernel in program.kernels:
        sized = _SIZES.get(kernel)
        if sized is None:
            if len(_SIZES) >= 20_000:
                _SIZES.clear()
            if len(_DEPTHS) >= 200_000:
                _DEPTHS.clear()
            roots = [store.value for store in kernel.stores]
            # Distinct nodes: the memoised walks (a step's new kernel is walked by the
            # matcher anyway); the deepest node is a root's.
            count = (len(roots[0].postorder()) if len(roots) == 1 else
                     len(set().union(*(root.postorder() for root in roots))))
            sized = _SIZES[kernel] = (count, max(_depth(root) for root in roots))
        if sized[1] > limits.max_depth:
            return "depth_limit"
        nodes += sized[0]
    return "node_limit" if nodes > limits.max_nodes else None


def _depth(root: Expr) -> int:
    """Nodes on the longest path from ``root`` to a leaf, memoised; only
    nodes not known yet are visited (an explicit stack: expressions can be deep)."""
    depths = _DEPTHS
    stack = [root]
    while stack:
        node = stack[-1]
        if node in depths:
            stack.pop()
            continue
        missing = [a for a in node.args if a not in depths]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        depths[node] = 1 + max((depths[a] for a in node.args), default=0)
    return depths[root]


def fuse(program: Program, rules: RuleSet | None = None, limits: Limits | None = None, *,
         hardware: Hardware, step_check=None, budget: Budget | None = None) -> FusionResult:
    """Fuse ``program`` with a rule set (default: the shipped default rules) for
    ``hardware`` (the backend's description: the pricing guards decide with it)."""
    if rules is None:
        from ..dsl.loader import default_rules
        rules = default_rules()
    return Engine(rules, limits, hardware=hardware, step_check=step_check,
                  budget=budget).run(program)
