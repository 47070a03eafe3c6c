"""--verify-steps: every step of the three derivations keeps the outputs; a planted
unsound rule is stopped at its own step, by name."""

import subprocess
import sys

import pytest

import blockbuster
from blockbuster.frontend.workloads import workload
from blockbuster.checks.verify_steps import StepChangedOutputs, StepVerifier, small_sizes

DERIVATIONS = [("attention", dict(N=13, S=11, D=6), dict(N=4, S=4, D=4)),
               ("layernorm_matmul", dict(M=9, K=11, N=7), dict(M=4, K=4, N=4)),
               ("rmsnorm_ffn_swiglu", dict(M=7, D=9, H=11), dict(M=4, D=4, H=4))]


@pytest.mark.parametrize("name,sizes,blocks", DERIVATIONS)
def test_every_step_of_the_derivation_keeps_the_outputs(name, sizes, blocks):
    program = workload(name, blocks=blocks, **sizes)
    verifier = StepVerifier(program)
    result = blockbuster.fuse(program, step_check=verifier)
    assert verifier.checked == len(result.trace) > 10
    assert len(result.program.kernels) == 1


def test_an_unsound_step_is_named(tmp_path):
    path = tmp_path / "bad.bbr"
    path.write_text('include "default.bbr"\n'
                    "rule bad_lift: recip(a) => a\n"
                    "phase bad: bad_lift\n"
                    "schedule: fuse, bad\n")
    rules = blockbuster.load_rules(path)
    program = workload("attention", N=9, S=9, D=4, blocks=dict(N=4, S=4, D=4))
    with pytest.raises(StepChangedOutputs, match=r"rule 'bad_lift' \(.*bad.bbr:2:6\), rewriting kernel \w+, changed output O"):
        blockbuster.fuse(program, rules, verify_steps=True, trust_rules=True)


def test_small_sizes_are_small_and_ragged():
    sizes, blocks = small_sizes(workload("attention", N=4096))
    assert sizes["N"] <= 3 * blocks["N"] and sizes["N"] % blocks["N"] != 0


def test_cli_verify_steps_explain_and_dot(tmp_path):
    dot = tmp_path / "attention.dot"
    out = subprocess.run([sys.executable, "-m", "blockbuster", "run", "attention",
                          "--size", "N=100", "--verify-steps", "--explain", "--dot", str(dot),
                          "--backend", "reference"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "== step 1: inline_intermediate" in out.stdout
    assert "online_softmax" in out.stdout and "validation      passed" in out.stdout
    text = dot.read_text()
    assert text.startswith("digraph") and "cluster_p0" in text and "cluster_p1" in text
    assert "label=load" in text and "label=store" in text


def test_cli_refuses_to_overwrite_a_rule_file_with_dot(tmp_path):
    rules = tmp_path / "mine.bbr"
    rules.write_text("rule r: neg(neg(x)) => x\n")
    out = subprocess.run([sys.executable, "-m", "blockbuster", "run", "attention",
                          "--size", "N=10", "--dot", str(rules)], capture_output=True, text=True)
    assert out.returncode == 2 and "refusing to overwrite" in out.stderr
    assert rules.read_text() == "rule r: neg(neg(x)) => x\n"


@pytest.mark.parametrize("name", ["llama_block", "attention", "layernorm_matmul",
                                  "rmsnorm_ffn_swiglu"])
def test_small_sizes_build_every_workload(name):
    """llama_block derives QD, KD, HD, H and G and needs E to split into even heads."""
    full = workload(name)
    sizes, blocks = small_sizes(full)
    small = workload(name, blocks=blocks, **sizes)
    assert {d.name for d in small.dims} == {d.name for d in full.dims}
    assert sum(d.size for d in small.dims) < sum(d.size for d in full.dims)
