import numpy as np
import pytest

import blockbuster as bb

from blockbuster.backends.reference import run_program
from blockbuster.dsl.loader import default_rules, load_rules_text
from blockbuster.frontend.workloads import workload
from blockbuster.ir.parser import parse_program
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.rewrite import engine as _engine
from blockbuster.rewrite.engine import Engine, Limits, RuleError
from blockbuster.validate import random_inputs


def fuse(program, *args, **kwargs):
    """The engine, for the default hardware (the reference backend's)."""
    return _engine.fuse(program, *args, hardware=DEFAULT_HARDWARE, **kwargs)


SMALL = """
program small
dim M = 5 block 2
dim N = 3 block 2
input A[M, N]
input B[M, N]
output C[M, N]
kernel k for i in M, j in N:
  C[i, j] = add(exp(A[i, j]), B[i, j])
"""


def test_a_rule_that_never_ends_stops_at_the_step_limit_with_a_clear_reason():
    rules = load_rules_text("rule grow: exp(a) => exp(neg(neg(a)))\n")
    result = fuse(parse_program(SMALL), rules, Limits(max_steps=25))
    assert result.stop_reason == "step_limit"
    assert len(result.trace) == 25
    assert "may not terminate" in result.message


def test_a_fusion_that_saturates_at_exactly_the_step_limit_is_saturated():
    """The limit stops a fusion that has a next step: at exactly as many steps as the
    derivation takes, it said "step_limit ... may not terminate"."""
    program = workload("attention", N=100)
    steps = len(fuse(program).trace)
    exact = fuse(program, limits=Limits(max_steps=steps))
    assert exact.stop_reason == "saturated" and len(exact.trace) == steps
    short = fuse(program, limits=Limits(max_steps=steps - 1))
    assert short.stop_reason == "step_limit" and len(short.trace) == steps - 1


def test_time_limit():
    rules = load_rules_text("rule comm: add(a, b) => add(b, a)\n")
    result = fuse(parse_program(SMALL), rules, Limits(max_seconds=0.0))
    assert result.stop_reason == "time_limit"


def test_node_limit_on_a_growing_rule():
    rules = load_rules_text("rule grow: exp(a) => exp(neg(neg(a)))\n")
    result = fuse(parse_program(SMALL), rules, Limits(max_nodes=30))
    assert result.stop_reason == "node_limit"


def test_saturates_and_records_every_application():
    rules = load_rules_text("rule dneg: neg(neg(a)) => a\nrule e: exp(a) => neg(neg(exp(a))) if constant(a)\n")
    result = fuse(parse_program(SMALL), rules)
    assert result.stop_reason == "saturated" and result.trace == ()
    text = SMALL.replace("exp(A[i, j])", "neg(neg(neg(neg(A[i, j]))))")
    result = fuse(parse_program(text), rules)
    assert [s.rule for s in result.trace] == ["dneg", "dneg"]
    step = result.trace[0]
    assert step.location.endswith(":1:6") and step.kernel == "k"
    assert "neg(neg(" in str(step.program_before) and step.program_after is result.trace[1].program_before
    assert "C[i, j] = add(A[i, j], B[i, j])" in str(result.program)


def test_guards_prevent_application():
    rules = load_rules_text("rule e: exp(a) => a if constant(a)\n")
    assert fuse(parse_program(SMALL), rules).trace == ()


def test_ill_typed_rule_output_is_reported_with_the_rule_location():
    rules = load_rules_text("rule bad: exp(a) => rowsum(a)\n", "bad.bbr")
    with pytest.raises(RuleError, match=r"bad.bbr:1:6: rule 'bad' produced an ill-formed"):
        fuse(parse_program(SMALL), rules)


@pytest.mark.parametrize("name", ["attention", "layernorm_matmul", "rmsnorm_ffn_swiglu"])
def test_deterministic(name):
    a = fuse(workload(name))
    b = fuse(workload(name))
    assert [(s.rule, s.kernel) for s in a.trace] == [(s.rule, s.kernel) for s in b.trace]
    assert a.program == b.program


def test_index_by_root_operator_changes_nothing_but_speed():
    program = workload("layernorm_matmul")
    rules = default_rules()
    with_index = Engine(rules, hardware=DEFAULT_HARDWARE).run(program)
    without = Engine(rules, hardware=DEFAULT_HARDWARE, use_index=False).run(program)
    assert with_index.program == without.program
    assert [s.rule for s in with_index.trace] == [s.rule for s in without.trace]


def test_deleting_a_rule_stops_the_fusion_it_enabled():
    rules = default_rules()
    assert len(fuse(workload("attention"), rules).program.kernels) == 1
    unfused = fuse(workload("attention"), rules.without("inline_intermediate"))
    assert len(unfused.program.kernels) == 8


def test_derivation_prints_each_step_in_text_form():
    result = fuse(workload("attention", N=100))
    text = result.derivation()
    assert text.startswith("== initial program")
    assert text.count("== step ") == len(result.trace)
    assert "online_softmax" in text and "stop: saturated" in text


@pytest.mark.parametrize("name,sizes", [
    ("attention", dict(N=70, S=45, D=24)),
    ("layernorm_matmul", dict(M=37, K=50, N=21)),
    ("rmsnorm_ffn_swiglu", dict(M=19, D=40, H=27)),
])
def test_fusion_preserves_outputs(name, sizes):
    blocks = {d: 16 for d in sizes}
    program = workload(name, blocks=blocks, **sizes)
    fused = fuse(program).program
    inputs = random_inputs(program, seed=3)
    before = run_program(program, inputs, dtype=np.float64)
    after = run_program(fused, inputs, dtype=np.float64)
    for out in program.outputs:
        np.testing.assert_allclose(after[out], before[out], rtol=1e-9, atol=1e-9)


def test_rules_that_undo_each_other_end_their_phase_with_the_reason():
    """Rule choice is deterministic, so a step back to an earlier state of the phase
    would loop forever: the phase ends there (no 50,000 steps), the later phases still
    run, and the stop reason says why."""
    import blockbuster as bb
    from blockbuster.dsl.loader import load_rules_text
    program = bb.workload("layernorm_matmul", M=40, K=24, N=16)
    diff = parse_program("program d\ndim N = 20 block 8\ninput A[N]\ninput B[N]\n"
                         "output Y[N]\nkernel Y for n in N:\n  Y[n] = add(A[n], neg(B[n]))\n")
    for text, subject in (("rule comm: add(a, b) => add(b, a)\n", program),
                          ("rule to_sub: add(a, neg(b)) => sub(a, b)\n"
                           "rule to_add: sub(a, b) => add(a, neg(b))\n", diff)):
        result = bb.fuse(subject, rules=load_rules_text(text))
        assert result.stop_reason == "cycle" and 1 <= len(result.trace) <= 4
        assert "loop forever" in result.message
    mixed = load_rules_text('include "default.bbr"\nrule comm: add(a, b) => add(b, a)\n'
                            'phase tidy: comm\nschedule: tidy, fuse, algebra, safety, merge, '
                            'cancel, hold, interchange, prepare\n')
    result = bb.fuse(program, rules=mixed)
    assert result.stop_reason == "cycle"
    assert len(result.program.kernels) < len(program.kernels)     # fusion went on


@pytest.mark.parametrize("name", ["attention", "layernorm_matmul", "rmsnorm_ffn_swiglu",
                                  "paper_figure", "llama_block"])
def test_a_fused_program_read_back_fuses_again_to_the_same_outputs(name):
    """A user may save a fused program and fuse it again. A read at a computed
    index (GQA's key/value head ``h // 2``) of a value that picks a map element
    with ``get`` cannot be inlined there; that inline crashed the engine
    ("get(.., g) cannot be re-indexed by h // 2") instead of being passed over."""
    program = workload(name)
    once = bb.parse_program(bb.format_program(bb.fuse(program).program))
    twice = bb.fuse(once).program
    inputs = random_inputs(program, seed=5)
    want = run_program(program, inputs, dtype=np.float64)
    got = run_program(twice, inputs, dtype=np.float64)
    for out in program.outputs:
        np.testing.assert_allclose(got[out], want[out], rtol=1e-9, atol=1e-9)


RELU2_MLP = """program relu2_mlp
dim T = 37 block 16
dim E = 53 block 32
dim F = 101 block 32
input X[T, E]
weight W1[E, F]
weight b1[F]
weight W2[F, E]
output Y[T, E]
array H[T, F]
array A[T, F]
kernel H for t in T, f in F:
  H[t, f] = colshift(b1[f], sum(e in E: dot(X[t, e], W1[e, f])))
kernel A for t in T, f in F:
  A[t, f] = square(relu(H[t, f]))
kernel Y for t in T, e in E:
  Y[t, e] = sum(f in F: dot(A[t, f], W2[f, e]))
"""


def _kernel_blocks(text: str) -> dict:
    """Kernel name -> its lines, of a program's or a derivation step's text."""
    blocks, name = {}, None
    for line in text.splitlines():
        if line.startswith("kernel "):
            name = line.split()[1]
            blocks[name] = [line]
        elif name is not None and line.startswith("  "):
            blocks[name].append(line)
        else:
            name = None
    return blocks


def test_every_step_of_a_derivation_reads_back_as_a_program():
    """``--explain`` prints the kernel each step rewrote. Inlining H into Y put H's
    ``sum(e in E: ...)`` inside Y's loop over ``e``: the step printed that binder as
    it was, text the parser rejects ('shadows the enclosing loop variable'). Each
    printed kernel, put into its step's program, now parses to the same program."""
    from blockbuster.ir.printer import format_program
    from blockbuster.ir.verify import verify
    program = parse_program(RELU2_MLP)
    result = fuse(program)
    steps = result.derivation().split("\n== step ")[1:]
    assert len(steps) == len(result.trace) >= 2
    for text, step in zip(steps, result.trace):
        printed = _kernel_blocks(text)
        if not printed:
            continue                              # the step removed its kernel
        lines = format_program(step.program_after).splitlines()
        own = _kernel_blocks("\n".join(lines))
        start = lines.index(own[step.kernel][0])
        lines[start:start + len(own[step.kernel])] = printed[step.kernel]
        again = verify(parse_program("\n".join(lines)))
        inputs = random_inputs(program, seed=1)
        want = run_program(step.program_after, inputs)
        got = run_program(again, inputs)
        np.testing.assert_allclose(got["Y"], want["Y"], rtol=1e-12, atol=0)
