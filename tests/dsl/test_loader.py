import pytest

from blockbuster.dsl.loader import default_rules, load_rules, load_rules_text
from blockbuster.errors import SourceError


def test_rules_phases_and_schedule():
    rs = load_rules_text("""
rule a: exp(neg(x)) => recip(exp(x))
rule b: sum(k in R: rowscale(s, y)) => rowscale(s, sum(k in R: y)) if invariant(s, k)
phase one: a
phase two: b, a
schedule: two, one, two
""")
    assert list(rs.rules) == ["a", "b"]
    assert [p.name for p in rs.phases] == ["one", "two"]
    assert rs.schedule == ("two", "one", "two")
    b = rs.rules["b"]
    assert b.lhs.op == "reduce" and b.rhs.op == "rowscale"
    assert str(b.guards[0]) == "invariant(s, k)"
    assert b.loc.line == 3


def test_without_phases_every_rule_runs_in_one_phase_in_file_order():
    rs = load_rules_text("rule z: exp(x) => x\nrule a: neg(x) => x\n")
    assert rs.schedule == ("all",)
    assert rs.phase("all").rules == ("z", "a")


def test_with_clause_is_substituted_and_shared():
    rs = load_rules_text("rule r: exp(x) => mul(t, t) with t = neg(x)\n")
    rhs = rs.rules["r"].rhs
    assert rhs.args[0] is rhs.args[1] and rhs.args[0].op == "neg"


def test_without_removes_rule_from_phases():
    rs = load_rules_text("rule a: exp(x) => x\nrule b: neg(x) => x\nphase p: a, b\n")
    assert rs.without("a").phase("p").rules == ("b",)
    assert "a" not in rs.without("a").rules


def test_include_relative_to_including_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.bbr").write_text("rule base_rule: exp(neg(x)) => recip(exp(x))\n")
    main = tmp_path / "main.bbr"
    main.write_text('include "sub/base.bbr"\nrule mine: neg(neg(x)) => x\nphase p: base_rule, mine\n')
    rs = load_rules(main)
    assert list(rs.rules) == ["base_rule", "mine"]
    assert rs.rules["base_rule"].loc.file.endswith("base.bbr")


def test_include_cycle_loads_each_file_once(tmp_path):
    (tmp_path / "a.bbr").write_text('include "b.bbr"\nrule ra: exp(x) => x\n')
    (tmp_path / "b.bbr").write_text('include "a.bbr"\nrule rb: neg(x) => x\n')
    rs = load_rules(tmp_path / "a.bbr")
    assert sorted(rs.rules) == ["ra", "rb"]


def test_shipped_rule_sets_can_be_included_by_name(tmp_path):
    f = tmp_path / "mine.bbr"
    f.write_text('include "default.bbr"\nrule extra: neg(neg(x)) => x\n'
                 'phase mine: extra\nschedule: fuse, mine\n')
    rs = load_rules(f)
    assert "inline_intermediate" in rs.rules and "extra" in rs.rules
    assert rs.schedule == ("fuse", "mine")


def test_a_rule_in_no_phase_is_an_error_not_silently_ignored(tmp_path):
    # After an include that declares phases, a rule nobody puts in a phase never runs.
    f = tmp_path / "mine.bbr"
    f.write_text('include "default.bbr"\n\nrule extra: neg(neg(x)) => x\n')
    with pytest.raises(SourceError) as info:
        load_rules(f)
    assert info.value.line == 3 and info.value.column == 6
    assert "rule 'extra' is in no phase" in str(info.value)


def test_missing_file_is_a_source_error(tmp_path):
    with pytest.raises(SourceError, match="no such rule file"):
        load_rules(tmp_path / "nope.bbr")


def test_default_rules_load():
    rs = default_rules()
    assert "inline_intermediate" in rs.rules
    assert rs.schedule[0] == "fuse"


def test_deprecated_action_names_still_load_as_the_new_ones():
    with pytest.warns(DeprecationWarning) as record:
        rs = load_rules_text("rule a: apply hoist_accumulators()\n"
                             "rule b: apply outline_weights() if cheaper()\n", "old.bbr")
    assert [str(w.message) for w in record] == [
        "old.bbr:1:15: action 'hoist_accumulators' is deprecated, use 'hold_accumulators'",
        "old.bbr:2:15: action 'outline_weights' is deprecated, use 'prepare_weights'"]
    assert rs.rules["a"].action == "hold_accumulators"
    assert rs.rules["b"].action == "prepare_weights"
    with pytest.warns(DeprecationWarning), \
            pytest.raises(SourceError, match="'prepare_weights' takes 0 arguments"):
        load_rules_text("rule a: apply outline_weights(X)\n")


@pytest.mark.parametrize("path", ["default.bbr", "paper.bbr"])
def test_shipped_rules_name_the_action_they_apply(path):
    """A rule that applies an action says so in its name (``merge_sibling_reductions``
    applies ``merge_reductions``): every word of the action is a word of the rule."""
    from blockbuster.dsl.loader import shipped_rulesets_dir
    from blockbuster.dsl.vocabulary import ACTIONS
    rs = load_rules(shipped_rulesets_dir() / path)
    applied = {r.action for r in rs.rules.values() if r.kind == "action"}
    assert applied == set(ACTIONS)              # the shipped sets use every action
    for rule in rs.rules.values():
        if rule.kind == "action":
            assert set(rule.action.split("_")) <= set(rule.name.split("_")), rule.name
