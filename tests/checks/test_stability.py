"""The stability check flags rules whose right side overflows or loses accuracy in
float32 where the left side does not, and only in rule sets not declared unsafe."""

from pathlib import Path

import pytest

from blockbuster.checks.stability import check_rule_stability, check_stability, unsafe_reason
from blockbuster.dsl.loader import load_rules, shipped_rulesets_dir

from check_seeds import SEEDS, resolve

HERE = Path(__file__).parent
UNSTABLE = load_rules(HERE / "unstable.bbr")


@pytest.mark.parametrize("seed", SEEDS)
def test_every_planted_unstable_rule_is_flagged(seed):
    seed = resolve(seed)
    missed = [f.rule for f in check_stability(UNSTABLE, seed=seed) if not f.failed]
    assert not missed, f"seed {seed}: not flagged: {missed}"


def test_a_flag_names_the_rule_and_its_source():
    f = check_rule_stability(UNSTABLE.rules["exp_rowshift"], seed=3)
    assert not f.sound and f.kind == "stability"
    assert f.location.endswith("unstable.bbr:4:6")
    text = str(f)
    assert "UNSTABLE" in text and "rule exp_rowshift:" in text and "\n         ^" in text
    assert "float32" in text and "seed 3" in text


def test_the_paper_set_is_unsafe_by_name_and_its_expansion_is_allowed():
    rules = load_rules(shipped_rulesets_dir() / "paper.bbr")
    finding = check_rule_stability(rules.rules["expand_square_deviation"], allowed=True)
    assert not finding.sound and finding.allowed and not finding.failed
    assert "unstable (allowed: unsafe rule set)" in str(finding)
    assert unsafe_reason(str(shipped_rulesets_dir() / "paper.bbr"))


def test_a_marker_comment_declares_a_file_unsafe(tmp_path):
    marked = tmp_path / "mine.bbr"
    marked.write_text("# my experiments\n# unsafe-ruleset: compared against in a paper\n\n"
                      "rule split: exp(rowshift(s, a)) => rowscale(exp(s), exp(a))\n")
    plain = tmp_path / "plain.bbr"
    plain.write_text("rule split: exp(rowshift(s, a)) => rowscale(exp(s), exp(a))\n"
                     "# unsafe-ruleset: too late, after a rule\n")
    assert unsafe_reason(str(marked)) == "compared against in a paper"
    assert unsafe_reason(str(plain)) == ""
    [allowed] = check_stability(load_rules(marked))
    [flagged] = check_stability(load_rules(plain))
    assert allowed.allowed and not allowed.failed
    assert flagged.failed


def test_a_rule_that_only_cancels_a_common_factor_is_stable():
    rules = load_rules(shipped_rulesets_dir() / "default.bbr")
    assert check_rule_stability(rules.rules["ratio_cancel"]).sound


def test_the_default_set_has_no_unstable_rule():
    rules = load_rules(shipped_rulesets_dir() / "default.bbr")
    flagged = [f.rule for f in check_stability(rules) if f.failed]
    assert not flagged
