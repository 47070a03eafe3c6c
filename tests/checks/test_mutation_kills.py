"""Tests that kill one-line mutations of the quality tools (benchmarks/mutation_check.py
lists them): the soundness checker must reject a rule that is only slightly wrong,
not just gross errors; ablation reports bytes per call, weight preparation apart."""

import pytest

from blockbuster.dsl.loader import default_rules, load_rules_text
from blockbuster.frontend.workloads import workload

from blockbuster.checks.ablation import outcome
from blockbuster.checks.soundness import check_rule


@pytest.mark.parametrize("rhs, sound", [
    ("mul(a, 2.0)", True),
    ("mul(a, 2.002)", False),        # off by a relative 1e-3
    ("mul(a, 2.00002)", False),      # off by a relative 1e-5
])
def test_near_miss_rules_are_rejected(rhs, sound):
    rules = load_rules_text(f"rule double: add(a, a) => {rhs}\n", "near.bbr")
    finding = check_rule(rules.rules["double"])
    assert finding.sound == sound, finding


def test_ablation_counts_bytes_per_call_without_weight_preparation():
    # RMSNorm+FFN-SwiGLU folds the gain into W1 and W3 once (two prep kernels).
    from blockbuster.cost import DEFAULT_HARDWARE
    o = outcome(workload("rmsnorm_ffn_swiglu"), default_rules(), DEFAULT_HARDWARE)
    assert (o.kernels, o.prep) == (1, 2)
    assert o.global_bytes == 4456448          # the whole program moves 6569984
