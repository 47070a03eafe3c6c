"""The public API: stable names at the top of the package, and a light import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import blockbuster as bb


def test_stable_names():
    for name in ("workload", "compile", "cost", "fuse", "parse_program", "format_program",
                 "verify", "BlockbusterError", "UsageError", "IRError", "BackendError",
                 "SourceError", "UntrustedRulesError"):
        assert hasattr(bb, name), name
        assert name in bb.__all__
    assert all(issubclass(e, bb.BlockbusterError)
               for e in (bb.UsageError, bb.IRError, bb.BackendError, bb.SourceError,
                         bb.UntrustedRulesError))


def test_import_is_light():
    code = "import blockbuster, sys; print('numpy' in sys.modules, 'lark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", "False"]


def test_cost_is_callable_and_still_the_subpackage():
    # blockbuster.cost is both the API function and the cost subpackage.
    p = bb.workload("attention", N=40, D=8)
    c = bb.cost(p)
    assert c.kernels == len(p.kernels) and c.global_bytes >= c.compulsory_bytes
    from blockbuster.cost import DEFAULT_HARDWARE, Hardware
    assert isinstance(DEFAULT_HARDWARE, Hardware) and bb.cost.Hardware is Hardware
    assert bb.cost(p, DEFAULT_HARDWARE).global_bytes == c.global_bytes
    import blockbuster.cost.model as model     # submodule imports keep working
    assert model.cost(p, DEFAULT_HARDWARE).global_bytes == c.global_bytes


def test_end_to_end_through_the_api():
    p = bb.workload("layernorm_matmul", M=20, K=30, N=10, blocks={"K": 16})
    fused = bb.fuse(p).program
    assert bb.verify(fused) is fused
    assert bb.parse_program(bb.format_program(fused)) == fused
    rng = np.random.default_rng(0)
    arrays = {n: rng.standard_normal(p.shape(n)).astype(np.float32) for n in p.inputs}
    a = bb.compile(p)(**arrays)["Y"]
    b = bb.compile(fused, backend="reference")(**arrays)["Y"]
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_compile_accepts_a_backend_object():
    from blockbuster.backends.registry import get_backend
    p = bb.workload("attention", N=10, D=4)
    run = bb.compile(p, backend=get_backend("reference"))
    x = np.ones((10, 4), np.float32)
    assert run(Q=x, K=x, V=x)["O"].shape == (10, 4)


def test_compile_unknown_backend():
    with pytest.raises(bb.BackendError, match="unknown backend 'nope'"):
        bb.compile(bb.workload("attention", N=10), backend="nope")


def test_fuse_takes_rule_file_paths_and_refuses_what_is_not_a_program(tmp_path):
    """As torch.compile's ``rules`` option: a path (or paths) to rule files."""
    import blockbuster as bb
    path = tmp_path / "mine.bbr"
    path.write_text('include "default.bbr"\n')
    program = bb.workload("attention", N=40, D=8)
    by_path = bb.fuse(program, rules=str(path))
    assert len(by_path.program.kernels) == len(bb.fuse(program).program.kernels) == 1
    assert len(bb.fuse(program, rules=[path]).program.kernels) == 1
    with pytest.raises(bb.UsageError, match="rules: expected a RuleSet"):
        bb.fuse(program, rules=3)
    for call in (bb.fuse, bb.compile):
        with pytest.raises(bb.UsageError, match="expected a block program"):
            call("attention")


def test_fuse_refuses_an_unsound_rule_of_your_own_unless_trusted(tmp_path, monkeypatch):
    """Rules from your own files are checked before fuse uses them, as `run --rules`
    does: exp(a + b) is not exp(a) + exp(b)."""
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "mine.bbr"
    path.write_text("rule split_exp: exp(add(a, b)) => add(exp(a), exp(b))\n")
    program = bb.parse_program("program e\ndim N = 20 block 8\ninput A[N]\ninput B[N]\n"
                               "output C[N]\nkernel C for n in N:\n"
                               "  C[n] = exp(add(A[n], B[n]))\n")
    with pytest.raises(bb.UntrustedRulesError) as err:
        bb.fuse(program, rules=str(path))
    message = str(err.value)
    assert "\n" not in message and f"{path}:1:6: split_exp: UNSOUND" in message
    assert "counterexample" in message and "trust_rules=True" in message
    assert err.value.exit_code == 1
    trusted = bb.fuse(program, rules=str(path), trust_rules=True)
    assert trusted.rule_counts() == {"split_exp": 1}


@pytest.mark.parametrize("call,fragment", [
    (lambda p: bb.fuse(p, limits=5), "limits: expected a blockbuster.Limits"),
    (lambda p: bb.compile(p, backend=3), "compile: backend must be a backend's name"),
    (lambda p: bb.cost(None), "cost: expected a block program"),
    (lambda p: bb.parse_program(3), "parse_program: expected the program's text"),
    (lambda p: bb.workload("attention", blocks=[("N", 32)]), "blocks: expected a dict"),
])
def test_wrong_argument_types_are_usage_errors(call, fragment):
    # Before: AttributeError / a message about a dimension named "('N', 32)".
    program = bb.workload("attention", N=40, S=40, D=8)
    with pytest.raises(bb.UsageError, match=fragment.replace("(", r"\(")):
        call(program)


def test_numpy_integer_sizes_are_sizes():
    # Sizes computed with NumPy (np.int64) were refused as "not positive integers".
    program = bb.workload("attention", N=np.int64(40), S=np.int32(30), D=8,
                          blocks={"N": np.int64(16)})
    assert (program.dim("N").size, program.dim("N").block, program.dim("S").size) == (40, 16, 30)
    assert type(program.dim("N").size) is int
    with pytest.raises(bb.UsageError, match="got np.True_|got True"):
        bb.workload("attention", N=np.True_)


@pytest.mark.parametrize("args,fragment", [
    ((), "no rule files given"), ((3,), "got 3"), ((None,), "got None"),
    ((["a.bbr"],), "several files are separate arguments"), (("",), "got ''"),
    (("rule r: mul(a, 1.0) => a",), "this looks like rule text"),
])
def test_load_rules_refuses_what_is_not_a_rule_file_path(args, fragment):
    # Before: TypeError from pathlib, an empty RuleSet for no arguments, and
    # ".: a directory, not a rule file" for "".
    with pytest.raises(bb.UsageError, match=fragment.replace("(", r"\(")):
        bb.load_rules(*args)


SCALE = """\
program scale
dim M = 10 block 4
input X[M, M]
weight w[M]
output Y[M, M]
kernel Y for m in M, n in M:
  Y[m, n] = colscale(w[n], X[m, n])
"""


def test_arrays_passed_by_position_are_refused_in_one_line():
    """`run(x)` has no name to go by: a one-line error saying how to pass arrays, not
    NumPy's 'truth value of an array is ambiguous'."""
    compiled = bb.compile(bb.parse_program(SCALE), backend="reference")
    x, w = np.arange(100.0).reshape(10, 10), np.linspace(1, 2, 10)
    for call in (lambda: compiled(x), lambda: compiled.bind(w),
                 lambda: compiled.bind(w=w)(x)):
        with pytest.raises(bb.BackendError, match="takes its arrays by name .* got a "
                                                  "ndarray by position"):
            call()
    want = x * w
    assert np.allclose(compiled({"X": x}, w=w)["Y"], want)
    assert np.allclose(compiled.bind({"w": w})({"X": x})["Y"], want)


def test_an_option_the_backend_does_not_take_is_a_usage_error():
    with pytest.raises(bb.UsageError, match="^compile: backend 'reference' takes no option "
                                            "'threds'$"):
        bb.compile(bb.parse_program(SCALE), backend="reference", threds=2)
