"""Structural actions are checked on random well-formed programs (the property tests'
hypothesis strategy) and on llama_block, not only on the three paper workloads."""

import importlib.util
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from blockbuster.checks.programs import random_program
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.checks.soundness import action_states, check_action, check_programs
from blockbuster.dsl.loader import default_rules, load_rules_text
from blockbuster.ir.verify import verify

_spec = importlib.util.spec_from_file_location(
    "property_programs", Path(__file__).parents[1] / "rewrite" / "test_properties.py")
_properties = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_properties)

RULES = default_rules()
ACTIONS = [r for r in RULES.rules.values() if r.kind == "action"]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_properties.programs(), st.integers(0, 2**16))
def test_every_action_keeps_the_outputs_of_random_programs(program, seed):
    if program is None:
        return
    states = action_states([program], RULES, seed, per_program=4, hardware=DEFAULT_HARDWARE)
    for rule in ACTIONS:
        finding = check_action(rule, states=states, seed=seed)
        assert finding.sound, str(finding)


def test_the_checked_programs_include_llama_block_and_random_ones():
    names = [p.name for p in check_programs(seed=3)]
    assert "llama_block" in names and names.count("random") >= 2
    for p in check_programs(seed=3):
        verify(p)


def test_random_programs_are_well_formed_and_vary():
    import random
    rng = random.Random(1)
    programs = [verify(random_program(rng)) for _ in range(8)]
    assert len({str(p) for p in programs}) > 4


def test_a_broken_action_is_caught_on_llama_block(monkeypatch):
    """drop_dead that also drops a live kernel: caught on a fused llama_block state."""
    from blockbuster.rewrite import actions
    real = actions.ACTION_IMPLS["drop_dead"]

    def drop_too_much(program):
        yield from real(program)
        for k in program.kernels[:-1]:
            if any(s.array in program.outputs for s in k.stores):
                continue
            yield actions.Application(k.name, None, None, {}, lambda k=k: program.evolve(
                kernels=tuple(x for x in program.kernels if x is not k)))
    monkeypatch.setitem(actions.ACTION_IMPLS, "drop_dead", drop_too_much)
    llama = [p for p in check_programs() if p.name == "llama_block"]
    rule = load_rules_text("rule dead: apply drop_dead()\n").rules["dead"]
    finding = check_action(rule, llama)
    assert not finding.sound and "llama_block" in finding.detail


def test_every_action_that_fires_is_tried_several_times_whatever_the_schedule(tmp_path):
    """An action that fires once per derivation (hold_accumulators) is tried on the
    state before it fired, also when a user's rule file adds a phase of its own in
    front (which shifts the evenly spaced sample of states: it was tried 0-1 times)."""
    from blockbuster.checks.soundness import check_soundness
    from blockbuster.dsl.loader import default_rules_path, load_rules
    phases = ", ".join(RULES.schedule)
    mine = tmp_path / "mine.bbr"
    mine.write_text(f'include "{default_rules_path()}"\n'
                    "rule double_neg: neg(neg(a)) => a\n"
                    "phase mine: double_neg\n"
                    f"schedule: mine, {phases}\n")
    findings = {f.rule: f for f in check_soundness(load_rules(mine), trials=4, seed=0,
                                                   hardware=DEFAULT_HARDWARE)}
    for rule in ACTIONS:
        assert findings[rule.name].sound and findings[rule.name].trials >= 4, \
            str(findings[rule.name])
