"""Tools that judge rules and rewriting: soundness and numerical stability of rules
(``rules check``), validation of every fusion step, ablations.

``check_rules(ruleset, trials=..., seed=..., hardware=...)`` is the entry point used before a rule
file is trusted: a list of :class:`Finding` (one soundness finding per rule, one
stability finding per rewrite rule); ``finding.failed`` says whether it must stop
the rule set.
"""

from __future__ import annotations

from ..cost.hardware import Hardware
from ..dsl.ast import RuleSet
from .findings import Finding
from .soundness import DEFAULT_TRIALS, check_rule, check_soundness
from .stability import STABILITY_TRIALS, UNSAFE_RULESETS, check_stability

__all__ = ["Finding", "check_rules", "check_rule", "check_soundness", "check_stability",
           "UNSAFE_RULESETS", "DEFAULT_TRIALS"]


def check_rules(rules: RuleSet, trials: int = DEFAULT_TRIALS, seed: int = 0,
                stability: bool = True, *, hardware: Hardware) -> list[Finding]:
    """Soundness findings of every rule, then stability findings of rewrite rules.
    ``trials`` is the number of instances per rewrite rule for soundness; actions are
    checked on states fused for ``hardware`` (the backend's description)."""
    findings = check_soundness(rules, trials, seed, hardware=hardware)
    if stability:      # of the sound rules: an unsound rule's accuracy is moot
        unsound = {f.rule for f in findings if not f.sound}
        findings += [f for f in check_stability(rules, STABILITY_TRIALS, seed)
                     if f.rule not in unsound]
    return findings
