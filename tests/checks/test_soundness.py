"""`rules check`: every planted unsound rule of the corpus is caught and every sound
one accepted, for several seeds (one of them random); counterexamples say where and
on what; malformed rules never crash the checker; actions are checked too."""

from pathlib import Path

import numpy as np

import pytest

from blockbuster.checks.soundness import check_rule, check_rewrite, mismatch, nan_hidden
from blockbuster.dsl.loader import load_rules, load_rules_text, shipped_rulesets_dir
from blockbuster.ir.index import IConst
from blockbuster.rewrite import action_inline

from check_seeds import SEEDS, resolve

HERE = Path(__file__).parent
UNSOUND = load_rules(HERE / "unsound.bbr")
SOUND = load_rules(HERE / "sound.bbr")
SOUND_SEEDS = [0, 1, "random"]     # the sound corpus runs every trial: fewer seeds


def test_the_corpora_are_large_enough():
    assert len(UNSOUND.rules) >= 40 and len(SOUND.rules) >= 20


@pytest.mark.parametrize("seed", SEEDS)
def test_every_planted_unsound_rule_is_caught(seed):
    seed = resolve(seed)
    missed = [n for n, r in UNSOUND.rules.items() if check_rewrite(r, seed=seed).sound]
    assert not missed, f"seed {seed}: accepted unsound rules {missed}"


@pytest.mark.parametrize("seed", SOUND_SEEDS)
def test_every_sound_rule_is_accepted(seed):
    seed = resolve(seed)
    rejected = [str(f) for f in (check_rewrite(r, seed=seed) for r in SOUND.rules.values())
                if not f.sound]
    assert not rejected, f"seed {seed}:\n" + "\n".join(rejected)


def test_a_counterexample_names_place_shapes_trips_seed_and_values():
    f = check_rewrite(UNSOUND.rules["max_of_invariant"], seed=5)
    text = str(f)
    assert not f.sound and f.location.endswith("unsound.bbr:34:6")
    assert "rule max_of_invariant: max(k in R: a) => a if invariant(a, k)" in text
    assert "\n         ^" in text                  # the caret under the rule's name
    assert "shapes P=" in text and "ranges R = " in text and "(seed 5)" in text
    assert "in_a[:3] = [" in text and "non-finite" in text


def test_non_finite_positions_must_agree():
    import numpy as np
    assert mismatch(np.array([np.inf, 1.0]), np.array([np.inf, 1.0])) == ""
    assert "non-finite" in mismatch(np.array([-np.inf]), np.array([0.0]))
    assert "non-finite" in mismatch(np.array([np.inf]), np.array([np.nan]))
    assert "non-finite" in mismatch(np.array([np.nan]), np.array([1.0]))
    # NaN on the left (inf - inf of an overflow) is undefined: any infinity may answer
    assert mismatch(np.array([np.nan]), np.array([-np.inf])) == ""
    assert "relative difference" in mismatch(np.array([1e-5]), np.array([1.1e-5]))


def test_values_beyond_float64_are_compared_and_reported_as_they_are():
    # The check runs in extended precision: exp(±6000) is neither 0 nor inf there.
    import numpy as np
    big, tiny = np.array([np.longdouble("1e3000")]), np.array([np.longdouble("7e-2908")])
    # A factor of 2 at 1e3000 is a difference (the tolerance once overflowed to inf).
    assert mismatch(big, 2 * big) == "left 1e+3000, right 2e+3000 at (0,) (relative difference 0.5)"
    # A value lost to cancellation is shown, not as "left 0, right 0 (difference 0)".
    assert mismatch(tiny, 0 * tiny) == "left 7e-2908, right 0 at (0,) (relative difference 1)"


OLD_CHAN_VARIANCE = """
rule chan_variance:
  sum(k in R: rowsum(square(rowshift(neg(m), x))))
  => add(t.2, mul(t.0, square(sub(mul(t.1, recip(t.0)), m))))
  with t = meanvar(k in R: x)
  if invariant(m, k)
"""


def test_the_old_chan_variance_is_caught_on_an_empty_range_and_the_shipped_one_passes():
    old = load_rules_text(OLD_CHAN_VARIANCE).rules["chan_variance"]
    f = check_rewrite(old, seed=11)
    assert not f.sound and "nan" in f.detail and "] of " in f.detail
    shipped = load_rules(shipped_rulesets_dir() / "default.bbr").rules["chan_variance"]
    assert check_rewrite(shipped, seed=11).sound


def test_eight_pattern_variables_are_sampled_not_enumerated():
    rules = load_rules_text("rule wide: add(add(add(a, b), add(c, d)), add(add(e, f), "
                            "add(g, h))) => add(add(add(h, g), add(f, e)), add(add(d, c), "
                            "add(b, a)))\n")
    f = check_rewrite(rules.rules["wide"], seed=0)
    assert f.sound and f.trials >= 20


@pytest.mark.parametrize("text", ["sum(k in R: R) => R", "exp(runmax(k)) => runmax(k)",
                                  "sum(k in R: x) => sum(k in R: R)"])
def test_malformed_rules_are_load_errors_with_a_location(text):
    from blockbuster.errors import SourceError
    with pytest.raises(SourceError) as info:
        load_rules_text(f"rule bad: {text}\n", "bad.bbr")
    assert info.value.render().startswith("bad.bbr:1:")


def test_inline_across_mismatched_indices_is_caught(monkeypatch):
    """A broken inline that reads the producer at a different block index."""
    real = action_inline.producer_value_at     # patched where inline calls it

    def skewed(program, load):
        attr = load.attr
        shifted = attr.__class__(attr.array, (IConst(0),) + attr.index[1:])
        return real(program, load.replace(attr=shifted))

    monkeypatch.setattr(action_inline, "producer_value_at", skewed)
    rules = load_rules_text("rule inline_all: apply inline(X) if intermediate(X)\n")
    finding = check_rule(rules.rules["inline_all"])
    # Found either by its changed values or, where the shifted block is a ragged
    # dimension's, by the verifier (a constant block meeting looped ones).
    assert not finding.sound and "attention" in finding.detail
    assert "changed" in finding.detail or "cannot meet blocks" in finding.detail


def _shipped_rewrite_rules():
    """Every rewrite rule of the shipped sets, once (paper.bbr includes default.bbr)."""
    seen = {}
    for path in sorted(shipped_rulesets_dir().glob("*.bbr")):
        for rule in load_rules(path).rules.values():
            if rule.kind == "rewrite":
                seen.setdefault((rule.loc.file, rule.name), rule)
    return list(seen.values())


@pytest.mark.parametrize("rule", _shipped_rewrite_rules(), ids=lambda r: r.name)
def test_every_shipped_rewrite_rule_is_sound(rule):
    finding = check_rewrite(rule, seed=0)
    assert finding.sound and finding.trials >= 10, str(finding)


def test_a_value_taken_out_of_its_loop_is_named_with_the_guard_that_would_allow_it():
    """`b` matched inside `sum(k ...)` may vary with k: using it outside the loop is
    wrong whatever the rule matches, and the finding says which variable and loop
    (not an ill-formed instance program's loads); with the guard it is sound."""
    text = "rule lift: sum(k in R: mul(a, b)) => mul(sum(k in R: a), b)\n"
    f = check_rewrite(load_rules_text(text, "lift.bbr").rules["lift"])
    assert not f.sound
    assert "uses 'b' outside the binder of 'k'" in f.detail
    assert "invariant(b, k)" in f.detail and "kernel 'k'" not in f.detail
    guarded = load_rules_text(text.replace("\n", " if invariant(b, k)\n"), "lift.bbr")
    assert check_rewrite(guarded.rules["lift"]).sound
    inner = "rule keep: sum(k in R: mul(a, b)) => sum(k in R: mul(b, a))\n"
    assert check_rewrite(load_rules_text(inner, "keep.bbr").rules["keep"]).sound


def test_a_right_hand_side_of_another_type_is_named_in_the_rules_terms():
    """Not the checker's own scaffolding (its kernel 'k' storing to 'out')."""
    rule = load_rules_text("rule zero: sub(a, a) => 0.0\n", "zero.bbr").rules["zero"]
    f = check_rewrite(rule)
    assert not f.sound
    assert "ill-typed right-hand side: it has type scalar where the left-hand side has type " \
           "block[" in f.detail
    assert "kernel 'k'" not in f.detail and "store to out" not in f.detail


def test_a_rule_that_turns_a_nan_into_a_number_is_named_with_its_nan_inputs():
    rules = load_rules_text("rule mul_zero: mul(a, 0.0) => sub(ones(a), ones(a))\n")
    finding = check_rewrite(rules.rules["mul_zero"], seed=0)
    assert not finding.sound
    assert "counterexample with NaN inputs: left nan, right 0" in finding.detail
    assert "with_nan inputs" in finding.detail


def test_a_nan_placed_differently_is_allowed_but_not_hidden():
    """The policy of nan_hidden: the left side's NaN must stay a NaN, the other way
    round (fusion's NaN·0 over an empty range) is allowed."""
    nan = np.nan
    assert nan_hidden(np.array([nan, 1.0]), np.array([nan, 1.0])) == ""
    assert nan_hidden(np.array([0.0, 1.0]), np.array([nan, 1.0])) == ""
    assert "left nan, right 2" in nan_hidden(np.array([nan]), np.array([2.0]))
    assert "left 1, right 0" in nan_hidden(np.array([1.0]), np.array([0.0]))
