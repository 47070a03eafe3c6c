"""`rules check`: every shipped rule is sound; planted unsound rules are caught."""


import pytest

from blockbuster.dsl.loader import load_rules, load_rules_text, shipped_rulesets_dir
from blockbuster.ir.index import IConst
from blockbuster.rewrite import actions
from blockbuster.rewrite.soundness import check_rule, check_rules

UNSOUND = {
    "wrong_sign": "dot(rowshift(s, a), b) => sub(dot(a, b), outer(s, colsum(b)))",
    "dropped_scale": "dot(rowscale(s, a), b) => dot(a, b)",
    "max_sum_reorder": "max(k in R: sum(j in Q: a)) => sum(j in Q: max(k in R: a))",
    "lift_without_guard": "sum(k in R: rowscale(s, a)) => rowscale(s, sum(k in R: a))",
    "exp_of_sum": "exp(add(a, b)) => add(exp(a), exp(b))",
    "transpose_order": "transpose(dot(a, b)) => dot(transpose(a), transpose(b))",
    "recip_of_sum": "recip(add(a, b)) => add(recip(a), recip(b))",
    "sqrt_of_square": "rsqrt(square(x)) => recip(x)",
    "rows_for_columns": "rowsum(transpose(a)) => rowsum(a)",
    "shift_as_scale": "exp(rowshift(s, a)) => rowscale(s, exp(a))",
    "online_without_rescale": ("sum(k in R: rowsum(exp(x))) => t.1 with t = online_softmax("
                               "k in R: x, rowsum(exp(rowshift(neg(runmax(k)), x)))) if depends(x, k)"),
    "variance_without_centre": ("sum(k in R: rowsum(square(rowshift(neg(m), x)))) => t.2 "
                                "with t = meanvar(k in R: x) if invariant(m, k)"),
}


@pytest.mark.parametrize("name", sorted(UNSOUND))
def test_planted_unsound_rule_is_caught(name):
    rules = load_rules_text(f"rule {name}: {UNSOUND[name]}\n", "planted.bbr")
    finding = check_rule(rules.rules[name])
    assert not finding.sound, finding
    assert finding.location == "planted.bbr:1:6"
    assert finding.detail          # a counterexample or the type error


def test_inline_across_mismatched_indices_is_caught(monkeypatch):
    """A broken inline that reads the producer at a different block index."""
    real = actions.producer_value_at

    def skewed(program, load):
        attr = load.attr
        shifted = attr.__class__(attr.array, (IConst(0),) + attr.index[1:])
        return real(program, load.replace(attr=shifted))

    monkeypatch.setattr(actions, "producer_value_at", skewed)
    rules = load_rules_text("rule inline_all: apply inline(X) if intermediate(X)\n")
    finding = check_rule(rules.rules["inline_all"])
    assert not finding.sound and "changed output" in finding.detail


def test_sound_rule_passes_with_trials():
    rules = load_rules_text("rule comm: mul(a, b) => mul(b, a)\n")
    finding = check_rule(rules.rules["comm"])
    assert finding.sound and finding.trials >= 12


@pytest.mark.parametrize("path", sorted(p.name for p in shipped_rulesets_dir().glob("*.bbr")))
def test_every_shipped_rule_is_sound(path):
    rules = load_rules(shipped_rulesets_dir() / path)
    for finding in check_rules(rules):
        assert finding.sound, str(finding)
        assert finding.trials > 0, str(finding)
