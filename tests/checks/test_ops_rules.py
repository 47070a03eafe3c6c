"""The operators added through the registry are usable in rules: the soundness
checker runs them (reference semantics from the registry) and accepts the sound
identities of ``ops_sound.bbr``, and catches wrong ones."""

from pathlib import Path

import pytest

from blockbuster.checks.soundness import check_rewrite
from blockbuster.dsl.loader import load_rules, load_rules_text

SOUND = load_rules(Path(__file__).parent / "ops_sound.bbr")

UNSOUND = """
rule gelu_is_not_gelu_tanh: gelu(x) => gelu_tanh(x)
rule erf_is_not_tanh: erf(x) => tanh(x)
rule relu_is_not_abs: relu(x) => abs(x)
rule where_arms_swapped: where(c, a, b) => where(c, b, a)
rule max_is_not_min: max(a, b) => min(a, b)
rule lt_is_not_gt: lt(a, b) => gt(a, b)
rule colsum_is_not_colmax: sum(k in R: colsum(a)) => colmax(sum(k in R: a))
rule gelu_drops_the_half: gelu(x) => mul(x, add(1.0, erf(mul(x, 0.7071067811865476))))
"""


@pytest.mark.parametrize("name", sorted(SOUND.rules))
def test_sound_identities_over_the_new_operators_are_accepted(name):
    finding = check_rewrite(SOUND.rules[name], seed=3)
    assert finding.sound, str(finding)


@pytest.mark.parametrize("name", sorted(load_rules_text(UNSOUND).rules))
def test_wrong_identities_over_the_new_operators_are_caught(name):
    assert not check_rewrite(load_rules_text(UNSOUND).rules[name], seed=3).sound
