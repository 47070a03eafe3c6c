"""Ablation: what each rule of a rule set contributes (kernels and global bytes of
each workload with the rule removed), as ``--without-rule`` would show."""

from __future__ import annotations

import attrs

from ..cost.hardware import Hardware
from ..cost.model import cost
from ..dsl.ast import RuleSet
from ..ir.program import Program
from ..rewrite.engine import fuse


@attrs.frozen
class Outcome:
    """Kernels run on every call and their global bytes (weight preparation, done
    once, is counted apart: ``prep`` kernels)."""

    kernels: int
    global_bytes: int
    prep: int = 0

    def __str__(self) -> str:
        prep = f"+{self.prep}p" if self.prep else ""
        return f"{self.kernels}k{prep} {self.global_bytes / 2**20:.2f}MiB"


def outcome(program: Program, rules: RuleSet, hardware: Hardware) -> Outcome:
    """``program`` fused with ``rules`` for ``hardware``, priced on it."""
    fused = fuse(program, rules, hardware=hardware).program
    c = cost(fused, hardware)
    prep = sum(k.weight_prep for k in c.per_kernel)
    return Outcome(len(fused.kernels) - prep, c.per_call_bytes, prep)


def ablation_table(rules: RuleSet, programs: dict[str, Program],
                   hardware: Hardware) -> dict[str, dict[str, Outcome]]:
    """``{rule or "(all rules)": {workload: Outcome}}``, fused for ``hardware``."""
    table = {"(all rules)": {n: outcome(p, rules, hardware) for n, p in programs.items()}}
    for name in rules.rules:
        table[name] = {n: outcome(p, rules.without(name), hardware)
                       for n, p in programs.items()}
    return table


def format_ablation(table: dict[str, dict[str, Outcome]]) -> str:
    workloads = list(next(iter(table.values())))
    base = table["(all rules)"]
    width = max(len(r) for r in table)
    lines = [f"{'without rule':<{width}}  " + "  ".join(f"{w:<22}" for w in workloads)]
    for rule, row in table.items():
        cells = []
        for w in workloads:
            mark = "" if rule == "(all rules)" or row[w] == base[w] else " *"
            cells.append(f"{str(row[w]) + mark:<22}")
        lines.append(f"{rule:<{width}}  " + "  ".join(cells))
    lines.append("(* = differs from the full rule set)")
    return "\n".join(lines)
