"""What the Triton generator emits, and hand-written programs for the constructs the
workloads use: causal key ranges (blocks above the diagonal never visited), grouped
heads (``h // g``), multi-output kernels, held rows, against NumPy float64 written
from the math. Nothing in the plugin names a workload."""

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import blockbuster as bb
import blockbuster_triton
from blockbuster.errors import BackendError
from blockbuster.frontend.workloads import WORKLOADS, workload
from blockbuster.ir.parser import parse_program
from blockbuster.oracles import oracle
from blockbuster_triton import GPUS, generate_source
from blockbuster_triton.crosscompile import cross_compile

PLUGIN = Path(blockbuster_triton.__file__).parent

CAUSAL_GQA = """
program causal_gqa
dim H = 4 point
dim G = 2 point
dim T = 21 block 8
dim D = 16 block 16
input Q[H, T, D]
input K[G, T, D]
input V[G, T, D]
output O[H, T, D]
kernel attn for h in H, i in T, d in D:
  let x = keep_ge(pos(T, i), pos(T, j), mul(dot(Q[h, i, 0], transpose(K[h // 2, j, 0])), 0.25))
  let s = online_softmax(j in T[ : i + 1]: x, rowsum(exp(rowshift(neg(runmax(j)), x))), dot(exp(rowshift(neg(runmax(j)), x)), V[h // 2, j, d]))
  O[h, i, d] = rowscale(recip(s.1), s.2)
"""


def f32(a):
    return np.asarray(a, np.float32).astype(np.float64)


def causal_gqa(q, k, v, scale):
    k, v = np.repeat(k, 2, axis=0), np.repeat(v, 2, axis=0)    # head h reads group h // 2
    logits = q @ k.transpose(0, 2, 1) * scale
    t = q.shape[1]
    logits = np.where(np.tril(np.ones((t, t), bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("scale", [1.0, 40.0])
def test_causal_grouped_query_attention(triton_backend, rng, scale):
    program = parse_program(textwrap.dedent(CAUSAL_GQA).strip() + "\n")
    q = f32(rng.normal(size=(4, 21, 16)) * scale)
    k = f32(rng.normal(size=(2, 21, 16)) * scale)
    v = f32(rng.normal(size=(2, 21, 16)))
    compiled = triton_backend.compile(program)
    out = compiled(Q=q, K=k, V=v)["O"]
    want = causal_gqa(q, k, v, 0.25)
    assert np.isfinite(out).all()
    # logits of ~1e4 (scale 40) carry ~1e-3 of float32 rounding before any operator
    atol = 2e-5 if scale == 1.0 else 2e-2
    np.testing.assert_allclose(out, want, rtol=0, atol=atol)
    source = compiled.source
    # the key loop ends at the query block's diagonal: blocks above it are never visited
    loop = re.search(r"for (\w+) in range\(0, tl\.minimum\(\((\w+) \+ 1\), 3\)\)", source)
    assert loop, source
    assert re.search(rf"{loop.group(2)} = .*# i in T", source)
    # grouped heads: the key/value head is the query head // 2
    assert re.search(r"\(\w+ // 2\)\)? \* \d+", source), source


def test_one_kernel_per_program_kernel_and_the_grid(triton_backend):
    unfused = workload("attention", blocks={"N": 16, "S": 16, "D": 16}, N=40, D=20)
    source = generate_source(unfused)
    assert source.count("@triton.jit\ndef kernel_") == len(unfused.kernels)
    # a kernel over (n in N, s in S) of 3 x 3 blocks launches 9 program instances
    assert re.search(r"kernel_\w+\[\(9,\)\]", source)
    assert "tl.dot(" in source and 'input_precision="ieee"' in source
    assert generate_source(unfused) == source          # deterministic


def test_multi_output_kernel_stores_both_outputs(triton_backend, rng):
    # paper_figure: C = A + B and d = rowsum(B) share the loads of B in one kernel
    # (fused for a GPU where that pays: the consumer GPU's description).
    program = workload("paper_figure", blocks={"M": 16, "N": 16}, M=20, N=40)
    fused = bb.fuse(program, hardware=blockbuster_triton.gpu_hardware("rtx4090")).program
    assert len(fused.kernels) == 1 and set(fused.kernels[0].writes()) == {"C", "d"}
    compiled = triton_backend.compile(fused)
    assert compiled.source.count("@triton.jit\ndef kernel_") == 1
    assert "tl.store(p_C" in compiled.source and "tl.store(p_d" in compiled.source
    inputs = {n: rng.normal(size=program.shape(n)).astype(np.float32) for n in program.inputs}
    out, want = compiled(inputs), oracle("paper_figure", inputs)
    for name in ("C", "d"):
        np.testing.assert_allclose(out[name], want[name], rtol=1e-6, atol=1e-6)


def test_held_row_of_accumulators_is_loop_carried(triton_backend, rng):
    # LayerNorm + matmul fused for the default (CPU) description: a row of N
    # accumulators held across the K loop (a map inside the meanvar reduction),
    # unrolled into one tensor per block. (For a GPU, recomputing per (m, n) wins.)
    program = workload("layernorm_matmul", blocks={"M": 16, "K": 16, "N": 16}, M=20, K=40, N=24)
    fused = bb.fuse(program).program
    assert "meanvar" in str(fused) and "map(" in str(fused)
    compiled = triton_backend.compile(fused)
    assert re.search(r"for \w+ in range\(0, 3\):", compiled.source)
    inputs = {n: rng.normal(size=program.shape(n)).astype(np.float32) for n in program.inputs}
    np.testing.assert_allclose(compiled(inputs)["Y"], oracle("layernorm_matmul", inputs)["Y"],
                               rtol=0, atol=2e-5)


def test_float64_programs_run_in_float64(triton_backend, rng):
    program = workload("attention", blocks={"N": 16, "S": 16, "D": 16}, N=20, D=16)
    inputs = {n: rng.normal(size=program.shape(n)) for n in program.inputs}
    out = triton_backend.compile(program, dtype=np.float64)(inputs)["O"]
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, oracle("attention", inputs)["O"], rtol=0, atol=1e-12)


def test_an_unsupported_dtype_is_a_one_line_error(triton_backend):
    program = workload("paper_figure", M=4, N=4)
    with pytest.raises(BackendError, match=r"^triton: dtype must be float32 or float64, got int32$"):
        triton_backend.compile(program, dtype=np.int32)


def test_the_plugin_names_no_workload():
    # code generation comes from the IR alone: no per-workload code paths
    names = set(WORKLOADS) | {"flash", "llama", "swiglu", "rmsnorm", "layernorm", "rope",
                              "gqa", "mlp", "ffn"}
    found = [(p.name, n) for p in PLUGIN.rglob("*.py") for n in names
             if re.search(rf"\b{n}", p.read_text(), re.IGNORECASE)]
    assert found == []
    assert len(list(PLUGIN.rglob("*.py"))) >= 10


def test_kernels_compile_for_hopper_without_a_gpu():
    # What the interpreter cannot check: Triton's compiler (down to a cubin, with the
    # ptxas of its wheel) accepts the kernels for sm_90. A causal grouped-query
    # attention and a held row of accumulators with the mean/variance combiner
    # (loop-carried scalars, vectors and an unrolled row).
    held = bb.fuse(workload("layernorm_matmul", blocks={"M": 16, "K": 16, "N": 16},
                            M=20, K=40, N=24)).program
    assert "meanvar" in str(held) and "map(" in str(held)
    for program in (parse_program(textwrap.dedent(CAUSAL_GQA).strip() + "\n"), held):
        kernels = cross_compile(generate_source(program), arch=90)
        assert len(kernels) == len(program.kernels)
        assert all(k["ok"] for k in kernels), kernels
        assert all(0 <= k["shared"] <= GPUS["h100"].local_capacity_bytes for k in kernels)


ROW_NORMALISED_MATMUL = """
program rownorm_matmul
dim M = 21 block 16
dim K = 19 block 16
dim N = 17 block 16
input X[M, K]
input W[K, N]
output Y[M, N]
kernel Y for m in M, n in N:
  let t = sum(k in K: rowsum(X[m, k]), dot(X[m, k], W[k, n]))
  Y[m, n] = rowscale(recip(t.0), t.1)
"""


def test_padded_lanes_raise_no_numpy_warnings(triton_backend, rng):
    """Ragged blocks: the padded rows' sums are 0 and their reciprocals inf (masked
    off at the store); the interpreter must not warn the user about them."""
    import warnings
    program = parse_program(ROW_NORMALISED_MATMUL)
    x = rng.uniform(0.5, 1.5, (21, 19)).astype(np.float32)
    w = rng.standard_normal((19, 17)).astype(np.float32)
    run = triton_backend.compile(program)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = run(X=x, W=w)["Y"]
    xd = x.astype(np.float64)
    want = (xd / xd.sum(axis=1, keepdims=True)) @ w
    assert np.max(np.abs(y - want)) / np.max(np.abs(want)) < 1e-5


TRANSCENDENTALS = """
program trig
dim M = 21 block 16
dim N = 17 block 16
input X[M, N]
output Y[M, N]
kernel Y for m in M, n in N:
  Y[m, n] = add(mul(sin(X[m, n]), cos(X[m, n])), sub(log1p(abs(X[m, n])), expm1(neg(abs(X[m, n])))))
"""


def test_sin_cos_log1p_expm1_compile_for_hopper_and_run_without_warnings(triton_backend, rng):
    """The new elementwise operators: accepted by Triton's compiler for sm_90, and
    under the interpreter exact to float32 rounding at ragged sizes, with tiny and
    ±1e4 operands and no NumPy warning from the guarded branches."""
    import warnings
    program = parse_program(TRANSCENDENTALS)
    kernels = cross_compile(generate_source(program), arch=90)
    assert kernels and all(k["ok"] for k in kernels), kernels
    x = rng.standard_normal((21, 17)).astype(np.float32)
    x[0, :6] = [1e4, -1e4, 1e-30, -1e-7, 0.0, 0.4999]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = triton_backend.compile(program)(X=x)["Y"]
    xd = x.astype(np.float64)
    want = np.sin(xd) * np.cos(xd) + np.log1p(np.abs(xd)) - np.expm1(-np.abs(xd))
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
