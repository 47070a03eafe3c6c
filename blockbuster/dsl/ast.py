"""What a rule file means once parsed and checked: rules, phases and a schedule.

Patterns and replacements are ordinary expression nodes whose leaves may be
pattern variables (op ``pvar``); a binder in a pattern (``sum(k in R: ...)``) uses
its variable ``k`` and its range ``R`` as pattern variables too.
"""

from __future__ import annotations

import attrs

from ..ir.expr import Expr


@attrs.frozen
class SourceLoc:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@attrs.frozen
class Guard:
    name: str
    args: tuple[str, ...]      # pattern variable, loop variable or array names
    negated: bool = False

    def __str__(self) -> str:
        text = f"{self.name}({', '.join(self.args)})"
        return f"not {text}" if self.negated else text


@attrs.frozen(eq=False)
class RuleDef:
    name: str
    loc: SourceLoc
    kind: str                          # "rewrite" or "action"
    guards: tuple[Guard, ...] = ()
    lhs: Expr | None = None            # rewrite rules
    rhs: Expr | None = None
    action: str | None = None          # action rules
    action_args: tuple[str, ...] = ()
    text: str = ""                     # the rule as written, for reports

    @property
    def root_op(self) -> str | None:
        return self.lhs.op if self.lhs is not None else None


@attrs.frozen
class Phase:
    name: str
    rules: tuple[str, ...]
    loc: SourceLoc


@attrs.frozen(eq=False)
class RuleSet:
    rules: dict                        # name -> RuleDef, in file order
    phases: tuple[Phase, ...]
    schedule: tuple[str, ...]          # phase names, in the order they run
    files: tuple[str, ...] = ()

    def without(self, *names: str) -> "RuleSet":
        """The same rule set with some rules removed (for ablations)."""
        drop = set(names)
        return RuleSet({n: r for n, r in self.rules.items() if n not in drop},
                       tuple(attrs.evolve(p, rules=tuple(r for r in p.rules if r not in drop))
                             for p in self.phases), self.schedule, self.files)

    def phase(self, name: str) -> Phase:
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(name)
