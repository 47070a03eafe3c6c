"""Fusion decides for the hardware it is given: the same program fuses into different,
both correct, programs for a small and a large local tier, and the public door's
default is the reference backend's description."""

import numpy as np
import pytest

import blockbuster as bb
from blockbuster.cost import DEFAULT_HARDWARE, Hardware
from blockbuster.errors import UsageError
from blockbuster.ir.prep import split_weight_prep

# Ragged: no size is a multiple of its block.
SIZES = {"M": 100, "K": 90, "N": 200}
BLOCKS = {"M": 32, "K": 32, "N": 32}


def machine(local_bytes: int) -> Hardware:
    return Hardware(f"local-{local_bytes >> 10}KiB", cores=2, local_capacity_bytes=local_bytes,
                    global_bandwidth_bytes_per_s=40e9, local_bandwidth_bytes_per_s=200e9,
                    peak_flops=200e9)


SMALL, LARGE = machine(64 << 10), machine(1 << 20)


def layernorm_matmul_f64(X, gamma, beta, W):
    """Y = LayerNorm(X) W, from the definition, in float64."""
    x = X.astype(np.float64)
    mean = x.sum(axis=1, keepdims=True) / x.shape[1]
    var = ((x - mean) ** 2).sum(axis=1, keepdims=True) / x.shape[1]
    return ((x - mean) / np.sqrt(var + 1e-5) * gamma + beta) @ W.astype(np.float64)


@pytest.fixture(scope="module")
def fused():
    program = bb.workload("layernorm_matmul", blocks=BLOCKS, **SIZES)
    return program, {hw.name: bb.fuse(program, hardware=hw, progress=False).program
                     for hw in (SMALL, LARGE)}


def test_a_small_local_tier_recomputes_per_tile_a_large_one_holds_the_row(fused):
    _, out = fused
    small, large = out[SMALL.name], out[LARGE.name]
    per_call = {hw: split_weight_prep(p).per_call for hw, p in out.items()}
    assert [k.loops for k in per_call[SMALL.name].kernels] == [(("m", "M"), ("n", "N"))]
    # the output row held
    assert [k.loops for k in per_call[LARGE.name].kernels] == [(("m", "M"),)]
    (store,) = per_call[LARGE.name].kernels[0].stores
    assert store.index[1] is None
    # Each fits the machine it was fused for; the held row does not fit the small one.
    assert bb.cost(small, SMALL).fits and bb.cost(large, LARGE).fits
    assert not bb.cost(large, SMALL).fits
    # Where both fit, holding the row moves fewer global bytes.
    assert bb.cost(large, LARGE).global_bytes < bb.cost(small, LARGE).global_bytes


def test_both_fused_programs_compute_layernorm_matmul(fused):
    program, out = fused
    rng = np.random.default_rng(7)
    # Large magnitudes: rows of scale 100 around 50, weights of scale 10.
    X = (rng.standard_normal(program.shape("X")) * 100 + 50).astype(np.float32)
    gamma = (rng.standard_normal(program.shape("gamma")) * 10).astype(np.float32)
    beta = (rng.standard_normal(program.shape("beta")) * 10).astype(np.float32)
    W = (rng.standard_normal(program.shape("W")) * 10).astype(np.float32)
    want = layernorm_matmul_f64(X, gamma, beta, W)
    for name, fused_program in out.items():
        got = bb.compile(fused_program, backend="reference")(X=X, gamma=gamma, beta=beta, W=W)["Y"]
        error = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert error < 1e-5, f"{name}: relative error {error:.3g}"


def test_the_public_door_resolves_the_hardware_once():
    program = bb.workload("layernorm_matmul", blocks=BLOCKS, **SIZES)
    # None: the reference backend's description, which is DEFAULT_HARDWARE.
    assert bb.resolve_hardware("reference") is DEFAULT_HARDWARE
    default = bb.fuse(program, progress=False).program
    assert default == bb.fuse(program, hardware="reference", progress=False).program
    assert bb.cost(default).hardware is DEFAULT_HARDWARE
    assert bb.cost(default, "reference").hardware is DEFAULT_HARDWARE
    with pytest.raises(UsageError, match="Hardware or a backend"):
        bb.fuse(program, hardware=42)


def test_below_the_public_door_the_hardware_is_required():
    from blockbuster.cost import model
    from blockbuster.dsl.loader import default_rules
    from blockbuster.rewrite.engine import Engine
    from blockbuster.select.selection import fuse_program
    program = bb.workload("layernorm_matmul", blocks=BLOCKS, **SIZES)
    with pytest.raises(TypeError, match="hardware"):
        Engine(default_rules())
    with pytest.raises(TypeError, match="hardware"):
        fuse_program(program, default_rules())
    with pytest.raises(TypeError, match="hardware"):
        model.cost(program, None)
