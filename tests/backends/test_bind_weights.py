"""Weight preparation runs once per binding (``CompiledProgram.bind``), not per call;
bound weights are a snapshot (the documented contract)."""

import numpy as np
import pytest

import blockbuster as bb
from blockbuster.backends.base import Backend
from blockbuster.backends.reference import compile_program
from blockbuster.backends.registry import backend_names
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.errors import BackendError


def _fused_ffn():
    program = bb.workload("rmsnorm_ffn_swiglu", M=21, D=50, H=45)
    return bb.fuse(program).program


def _inputs(program, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(program.shape(n)).astype(np.float32) for n in program.inputs}


def _counting_backend(runs):
    def compile_fn(program, **options):
        run = compile_program(program)

        def counted(arrays):
            runs.append(program.name)
            return run(arrays)
        return counted
    return Backend(name="counting", description="reference, counting runs", compile_fn=compile_fn,
                   hardware=DEFAULT_HARDWARE)


def test_preparation_runs_once_per_binding():
    program = _fused_ffn()
    assert any(k.reads() <= set(program.weights) for k in program.kernels)   # has prep
    runs = []
    # tune="off": this exact program (its preparation kernel), not one re-derived
    # at tuned blocks.
    compiled = bb.compile(program, backend=_counting_backend(runs), tune="off")
    x = _inputs(program)
    weights = {n: x[n] for n in program.weights}
    bound = compiled.bind(**weights)
    assert runs == [f"{program.name}_prep"]
    outs = [bound(X=x["X"]) for _ in range(3)]
    assert runs == [f"{program.name}_prep"] + [program.name] * 3
    assert bound.weight_prep_kernels >= 1
    assert bound.kernels_per_call == len(program.kernels) - bound.weight_prep_kernels
    expected = bb.compile(program, tune="off")(**x)["Y"]
    for out in outs:
        np.testing.assert_array_equal(out["Y"], expected)


@pytest.mark.parametrize("backend", backend_names())
def test_bound_weights_are_a_snapshot(backend):
    program = _fused_ffn()
    x = _inputs(program)
    weights = {n: x[n].copy() for n in program.weights}
    bound = bb.compile(program, backend=backend).bind(**weights)
    before = bound(X=x["X"])["Y"]
    weights["W2"] *= 2.0                     # mutating the caller's array ...
    np.testing.assert_array_equal(bound(X=x["X"])["Y"], before)     # ... changes nothing
    rebound = bb.compile(program, backend=backend).bind(**weights)
    np.testing.assert_allclose(rebound(X=x["X"])["Y"], 2.0 * before, rtol=1e-5, atol=1e-5)


def test_bind_errors_are_one_line():
    program = _fused_ffn()
    compiled = bb.compile(program)
    x = _inputs(program)
    with pytest.raises(BackendError, match="missing weight"):
        compiled.bind(W1=x["W1"])
    with pytest.raises(BackendError, match="not: X"):
        compiled.bind(**{n: x[n] for n in program.weights}, X=x["X"])
    bound = compiled.bind(**{n: x[n] for n in program.weights})
    with pytest.raises(BackendError, match="is bound"):
        bound(X=x["X"], W1=x["W1"])
    # an unknown name lists what a bound program takes: not its weights, nor the
    # arrays the preparation made
    with pytest.raises(BackendError) as info:
        bound(X=x["X"], Z=x["X"])
    assert str(info.value).endswith("has no input 'Z' (its inputs once bound: X)")


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_a_weight_of_the_wrong_shape_or_kind_is_refused_when_bound(backend):
    """Checked at bind, as a weight (before: accepted when the program prepares
    nothing, then refused at the first call as an 'input')."""
    from blockbuster.frontend.builder import GraphBuilder
    g = GraphBuilder("e")
    g.dim("M", 100), g.dim("K", 50), g.dim("N", 30)
    program = g.build(g.matmul(g.input("X", "M", "K"), g.weight("W", "K", "N"), name="Y"))
    compiled = bb.compile(bb.fuse(program).program, backend=backend, tune="off")
    with pytest.raises(BackendError, match=r"^weight 'W' has shape \(7, 3\), but program e "
                                           r"declares W\[K, N\] with shape \(50, 30\)$"):
        compiled.bind(W=np.ones((7, 3), np.float32))
    with pytest.raises(BackendError, match="^weight 'W' has dtype <U1"):
        compiled.bind(W=np.full((50, 30), "a"))
    w = np.random.default_rng(0).standard_normal((1, 50, 30))       # an axis of 1 aside
    x = np.random.default_rng(1).standard_normal((100, 50)) * 1e3
    got = compiled.bind(W=w.astype(np.float32))(X=x.astype(np.float32))["Y"]
    want = x @ w[0]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
