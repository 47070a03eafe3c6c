"""Rules, not code: removing any rule of the default set changes what the built-in
workloads fuse into (kernels or global bytes). Run with -s to see the table."""

from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.dsl.loader import default_rules
from blockbuster.frontend.workloads import workload
from blockbuster.checks.ablation import ablation_table, format_ablation

PROGRAMS = {
    "attention": workload("attention", N=512),
    "layernorm_matmul": workload("layernorm_matmul", M=256, K=256, N=256),
    "rmsnorm_ffn_swiglu": workload("rmsnorm_ffn_swiglu", M=256, D=256, H=512),
    "paper_figure": workload("paper_figure", M=256, N=256),   # needs merge_siblings
}


def test_every_default_rule_matters_on_some_workload():
    rules = default_rules()
    table = ablation_table(rules, PROGRAMS, DEFAULT_HARDWARE)
    print()
    print(format_ablation(table))
    base = table["(all rules)"]
    assert all(o.kernels == 1 for o in base.values())
    inert = [rule for rule in rules.rules
             if all(table[rule][w] == base[w] for w in PROGRAMS)]
    assert inert == [], f"rules that change nothing on any workload: {inert}"


def test_structural_rules_alone_fuse_attention_but_keep_three_passes_over_keys():
    """Inlining makes one kernel; only the algebra makes it one pass (Flash Attention)."""
    rules = default_rules()
    structural = rules.without(*[r for r in rules.rules if rules.rules[r].kind == "rewrite"])
    full = ablation_table(rules, {"a": PROGRAMS["attention"]},
                          DEFAULT_HARDWARE)["(all rules)"]["a"]
    only = ablation_table(structural, {"a": PROGRAMS["attention"]},
                          DEFAULT_HARDWARE)["(all rules)"]["a"]
    assert only.kernels == full.kernels == 1
    n, d = 512, 64
    key_bytes_per_pass = 4 * (n // 64) * n * d        # K re-read for every query block
    assert only.global_bytes - full.global_bytes >= 2 * key_bytes_per_pass
