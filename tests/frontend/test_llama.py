"""The ``llama_block`` workload: Llama decoder layers (RMSNorm, rotary GQA causal
attention, SwiGLU FFN), unfused, against its float64 oracle; the oracle against a
per-head loop; its interface, text form, causal reduction ranges and size checks;
and the two block operators it introduced (``rotate_half``, ``relabel``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import blockbuster
from blockbuster import IRError, UsageError, format_program, parse_program, workload
from blockbuster.backends.reference import run_program
from blockbuster.cost import cost
from blockbuster.cost import kernel_cost
from blockbuster.errors import BackendError
from blockbuster.frontend.workloads import WORKLOADS
from blockbuster.ir.program import Kernel, Store
from blockbuster.oracles import oracle
from blockbuster.validate import compare, random_inputs

WEIGHTS = ("g1", "Wq", "Wk", "Wv", "Wo", "g2", "W1", "W3", "W2")


def rope_tables(tokens: int, head: int, base: float = 10000.0):
    inv = base ** (-np.arange(0, head, 2) / head)
    angles = np.arange(tokens)[:, None] * inv[None, :]
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles), np.sin(angles)


def llama_inputs(program, seed: int = 0) -> dict:
    """Inputs like a trained model's: unit gains, weights scaled by 1/sqrt(fan-in),
    real rotary tables, so attention is neither uniform nor one-hot."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in program.inputs:
        shape = program.shape(name)
        base = name.split("_")[0]
        if base in ("g1", "g2"):
            out[name] = 1.0 + 0.1 * rng.standard_normal(shape)
        elif base.startswith("W"):
            out[name] = rng.standard_normal(shape) / math.sqrt(shape[0])
        elif base == "X":
            out[name] = rng.standard_normal(shape)
    cos, sin = rope_tables(*program.shape("cos"))
    out["cos"], out["sin"] = cos, sin
    return {k: v.astype(np.float32) for k, v in out.items()}


# -- the unfused program computes the oracle ----------------------------------------

CASES = [
    # (sizes, blocks): KVH < NH and = NH, ragged T (50 in blocks of 16), 1 and 2 layers
    ({}, None),
    ({"T": 50}, {"T": 16}),
    ({"T": 50, "KVH": 4}, {"T": 16}),
    ({"T": 50, "KVH": 1, "layers": 2}, {"T": 16}),
    ({"T": 50, "KVH": 2, "layers": 2}, {"T": 16, "E": 16, "F": 16}),
    ({"T": 37, "E": 48, "NH": 3, "KVH": 1, "F": 40}, {"T": 8, "E": 32, "F": 16}),
]


@pytest.mark.parametrize("sizes,blocks", CASES, ids=[str(c[0]) for c in CASES])
@pytest.mark.parametrize("make_inputs", ["model_like", "standard_normal"])
def test_unfused_matches_oracle(sizes, blocks, make_inputs):
    program = workload("llama_block", blocks=blocks, **sizes)
    inputs = (llama_inputs(program, seed=5) if make_inputs == "model_like"
              else random_inputs(program, seed=5))
    outputs = run_program(program, inputs, dtype=np.float32)
    result = compare(outputs, oracle("llama_block", inputs))
    assert result.passed, result
    assert result.max_rel_error < 2e-4


def test_attention_really_matters_in_the_comparison():
    # The check above would be vacuous if the residual stream drowned attention:
    # with model-like inputs, dropping it changes Y by far more than the tolerance.
    program = workload("llama_block", T=50, blocks={"T": 16})
    inputs = llama_inputs(program, seed=5)
    ref = oracle("llama_block", inputs)["Y"]
    no_attn = oracle("llama_block", {**inputs, "Wo": np.zeros_like(inputs["Wo"])})["Y"]
    assert np.max(np.abs(ref - no_attn)) / np.max(np.abs(ref)) > 0.05
    # And the causal mask matters: a future token changes nothing before it.
    later = dict(inputs, X=inputs["X"].copy())
    later["X"][40] += 3.0
    changed = oracle("llama_block", later)["Y"]
    np.testing.assert_array_equal(changed[:40], ref[:40])
    assert np.max(np.abs(changed[40:] - ref[40:])) > 0.1


def test_public_api_runs_it_on_the_reference_backend():
    program = blockbuster.workload("llama_block", T=20, blocks={"T": 8})
    inputs = random_inputs(program, seed=1)
    outputs = blockbuster.compile(program, backend="reference")(**inputs)
    assert compare(outputs, oracle("llama_block", inputs)).passed


# -- interface ------------------------------------------------------------------------

def test_inputs_and_outputs_one_layer():
    p = workload("llama_block")
    assert p.inputs == ("X", "g1", "Wq", "Wk", "Wv", "Wo", "g2", "W1", "W3", "W2",
                        "cos", "sin")
    assert p.outputs == ("Y",)
    T, E_, F, NH, KVH = 64, 64, 128, 4, 2
    hd = E_ // NH
    shapes = {"X": (T, E_), "g1": (E_,), "Wq": (E_, E_), "Wk": (E_, KVH * hd),
              "Wv": (E_, KVH * hd), "Wo": (E_, E_), "g2": (E_,), "W1": (E_, F),
              "W3": (E_, F), "W2": (F, E_), "cos": (T, hd), "sin": (T, hd), "Y": (T, E_)}
    assert {n: p.shape(n) for n in shapes} == shapes


def test_inputs_are_suffixed_by_layer():
    p = workload("llama_block", layers=3, T=10)
    assert p.inputs == (("X",) + tuple(f"{w}_{l}" for l in range(3) for w in WEIGHTS)
                        + ("cos", "sin"))
    assert p.outputs == ("Y",)
    # The earlier layers' outputs are intermediates feeding the next layer.
    assert {"Y_0", "Y_1"} <= set(p.intermediates)
    assert p.shape("Wk_2") == (64, 32)


def test_defaults_and_dimensions():
    w = WORKLOADS["llama_block"]
    assert w.dims == {"T": 64, "E": 64, "F": 128}
    assert w.params == {"NH": 4, "KVH": 2, "layers": 1}
    p = workload("llama_block")
    dims = {d.name: (d.size, d.block, d.point) for d in p.dims}
    assert dims == {"T": (64, 16, False), "E": (64, 32, False), "F": (128, 32, False),
                    "QD": (64, 16, False), "KD": (32, 16, False), "HD": (16, 16, False),
                    "H": (4, 1, True), "G": (2, 1, True)}
    assert workload("llama_block", E=128, NH=8, KVH=8, blocks={"E": 64}).dim("KD").size == 128


def test_unfused_shape():
    p = workload("llama_block")
    c = cost(p)
    assert len(p.kernels) == c.kernels == 34
    assert len(workload("llama_block", layers=2).kernels) == 68
    assert len(p.intermediates) == 33
    for array in p.intermediates:
        assert p.producer(array) is not None and p.consumers(array)
    # The per-head T×T intermediates: scores, scaled, masked, shifted, exp, probabilities.
    assert sum(p.array(a).dims == ("H", "T", "T") for a in p.intermediates) == 6
    assert c.global_bytes > c.compulsory_bytes and c.fits


def test_text_round_trip():
    for kwargs in ({}, {"T": 50, "KVH": 4, "blocks": {"T": 16}},
                   {"T": 5, "E": 8, "NH": 2, "KVH": 1, "F": 3, "layers": 2}):
        p = workload("llama_block", **kwargs)
        text = format_program(p)
        assert parse_program(text) == p
        assert format_program(parse_program(text)) == text


def test_tiny_sizes_run():
    p = workload("llama_block", T=1, E=2, NH=1, KVH=1, F=1)
    inputs = random_inputs(p, seed=2)
    assert compare(run_program(p, inputs), oracle("llama_block", inputs)).passed


@pytest.mark.parametrize("kwargs,fragment", [
    ({"NH": 4, "KVH": 3}, "KVH=3 does not divide NH=4"),
    ({"NH": 3, "KVH": 6, "E": 66}, "KVH=6 does not divide NH=3"),
    ({"E": 30, "NH": 4}, "E=30 is not divisible by NH=4"),
    ({"E": 12, "NH": 4, "KVH": 4}, "head size E/NH=3 must be even"),
    ({"layers": 0}, "parameter layers"),
    ({"NH": 2.5}, "parameter NH"),
    ({"N": 3}, "workload llama_block has no dimension 'N'.*parameters: NH, KVH, layers"),
    ({"blocks": {"NH": 2}}, "no dimension 'NH'"),
    ({"blocks": {"QD": 8}}, "no dimension 'QD'"),
])
def test_bad_sizes_are_one_line_usage_errors(kwargs, fragment):
    with pytest.raises(UsageError, match=fragment) as info:
        workload("llama_block", **kwargs)
    assert "\n" not in str(info.value)


# -- causal ranges: blocks above the diagonal are never read by the reductions --------

def _attention_kernels(p):
    return [k for k in p.kernels if any(n.op == "reduce" and n.attr.dim == "T"
                                        for s in k.stores for n in s.value.walk())]


def test_attention_reductions_run_over_the_causal_range():
    p = workload("llama_block", T=50, blocks={"T": 16})
    kernels = _attention_kernels(p)
    assert [k.name.rstrip("0123456789") for k in kernels] == ["rowmax", "rowsum", "attend"]
    for k in kernels:
        (loop_i,) = [v for v, d in k.loops if d == "T"]
        for n in k.stores[0].value.walk():
            if n.op == "reduce" and n.attr.dim == "T":
                assert n.attr.lo is None and str(n.attr.hi) == f"{loop_i} + 1"


def test_pv_kernel_loads_only_blocks_on_or_below_the_diagonal():
    p = workload("llama_block", T=50, blocks={"T": 16})
    (pv,) = [k for k in p.kernels if k.name.startswith("attend")]
    ext = [16, 16, 16, 2]
    nh, hd = 4, 16
    # Per head and query block i: P[h, i, j] (ext_i × ext_j) and V[j, h // 2]
    # (ext_j × hd) for every key block j <= i.
    causal = nh * sum(ei * ej + ej * hd for i, ei in enumerate(ext) for ej in ext[: i + 1])
    full = nh * sum(ei * ej + ej * hd for ei in ext for ej in ext)
    assert kernel_cost(pv, p).loaded_bytes == 4 * causal

    def whole_range(node):
        if node.op == "reduce":
            return node.replace(args=[whole_range(a) for a in node.args],
                                attr=type(node.attr)(node.attr.combiner, node.attr.var,
                                                     node.attr.dim))
        return node.replace(args=[whole_range(a) for a in node.args]) if node.args else node
    store = pv.stores[0]
    unmasked = Kernel(pv.name, pv.loops, (Store(store.array, store.index,
                                                whole_range(store.value)),))
    assert kernel_cost(unmasked, p).loaded_bytes == 4 * full > 4 * causal


def test_poisoned_upper_blocks_change_nothing():
    # Run the program up to the P·V kernel, poison every probability block above
    # the diagonal with NaN, and run the rest: reading any of them would show.
    p = workload("llama_block", T=50, blocks={"T": 16})
    cut = next(n for n, k in enumerate(p.kernels) if k.name.startswith("attend"))
    before, after = p.kernels[:cut], p.kernels[cut:]
    made_before = {a for k in before for a in k.writes()}
    crossing = tuple(sorted({a for k in after for a in k.reads()} & made_before))
    (probs,) = [a for a in crossing if a.startswith("div")]
    inputs = llama_inputs(p, seed=3)
    mid = run_program(p.evolve(kernels=before, outputs=crossing), inputs)
    P = mid[probs]
    assert P.shape == (4, 50, 50)
    # Above the diagonal the probabilities are exactly 0; each row is a distribution.
    assert not np.any(np.triu(P, k=1))
    np.testing.assert_allclose(P.sum(axis=2), 1.0, rtol=1e-5)
    blocks = np.arange(50) // 16
    above = blocks[None, :] > blocks[:, None]
    poisoned = {**mid, probs: np.where(above, np.float32(np.nan), P)}
    rest = p.evolve(kernels=after, inputs=p.inputs + crossing)
    out = run_program(rest, {**inputs, **poisoned})["Y"]
    np.testing.assert_array_equal(out, run_program(p, inputs)["Y"])


# -- the oracle against a per-head loop ------------------------------------------------

def _layer_by_loops(x, w, cos, sin, nh, nkv):
    tokens, width = x.shape
    head = width // nh
    half = head // 2
    group = nh // nkv

    def rms(a, g):
        return np.array([row / math.sqrt(math.fsum(row * row) / width + 1e-6) * g
                         for row in a])

    def rotate(vec, t):     # the rotation of each (d, d + half) pair, written out
        out = np.empty(head)
        for d in range(half):
            out[d] = vec[d] * cos[t, d] - vec[d + half] * sin[t, d]
            out[d + half] = vec[d + half] * cos[t, d + half] + vec[d] * sin[t, d + half]
        return out

    hn = rms(x, w["g1"])
    Q, K, V = hn @ w["Wq"], hn @ w["Wk"], hn @ w["Wv"]
    attn = np.zeros((tokens, width))
    for h in range(nh):
        kv = h // group
        qs, ks = slice(h * head, (h + 1) * head), slice(kv * head, (kv + 1) * head)
        for t in range(tokens):
            q = rotate(Q[t, qs], t)
            logits = [float(q @ rotate(K[s, ks], s)) / math.sqrt(head) for s in range(t + 1)]
            top = max(logits)
            weights = [math.exp(v - top) for v in logits]
            total = math.fsum(weights)
            attn[t, qs] = sum(wt / total * V[s, ks] for s, wt in enumerate(weights))
    u = x + attn @ w["Wo"]
    z = rms(u, w["g2"])
    a, b = z @ w["W1"], z @ w["W3"]
    return u + (a / (1.0 + np.exp(-a)) * b) @ w["W2"]


@pytest.mark.parametrize("nh,nkv,layers", [(4, 2, 1), (4, 4, 1), (4, 1, 2), (2, 2, 2)])
def test_oracle_matches_per_head_loops(nh, nkv, layers):
    rng = np.random.default_rng(nh * 10 + nkv + layers)
    tokens, width, ffn = 6, 8, 5
    head = width // nh
    shapes = {"g1": (width,), "Wq": (width, width), "Wk": (width, nkv * head),
              "Wv": (width, nkv * head), "Wo": (width, width), "g2": (width,),
              "W1": (width, ffn), "W3": (width, ffn), "W2": (ffn, width)}
    layer_weights = [{n: rng.standard_normal(s) for n, s in shapes.items()}
                     for _ in range(layers)]
    x = rng.standard_normal((tokens, width))
    cos, sin = rng.standard_normal((tokens, head)), rng.standard_normal((tokens, head))
    args = {"X": x, "cos": cos, "sin": sin}
    for l, w in enumerate(layer_weights):
        args.update({(n if layers == 1 else f"{n}_{l}"): v for n, v in w.items()})
    expected = x
    for w in layer_weights:
        expected = _layer_by_loops(expected, w, cos, sin, nh, nkv)
    got = oracle("llama_block", args)["Y"]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_oracle_needs_weights():
    with pytest.raises(UsageError, match="no weights"):
        oracle("llama_block", {"X": np.zeros((2, 2)), "cos": np.zeros((2, 1)),
                               "sin": np.zeros((2, 1))})


# -- the block operators it introduced -------------------------------------------------

OPS_PROGRAM = """\
program ops
dim T = 5 block 2
dim QD = 8 block 4
dim HD = 4 block 4
input A[T, QD]
input C[T, HD]
output Y[T, HD]
output Z[T, QD]
kernel Y for t in T, d in HD:
  Y[t, d] = mul(rotate_half(relabel(pos(HD, d), A[t, 1])), C[t, d])
kernel Z for t in T, q in QD:
  Z[t, q] = relabel(pos(QD, q), rotate_half(Y[t, 0]))
"""


def test_rotate_half_and_relabel_semantics():
    p = parse_program(OPS_PROGRAM)
    rng = np.random.default_rng(0)
    a, c = rng.standard_normal((5, 8)), rng.standard_normal((5, 4))
    out = run_program(p, {"A": a, "C": c}, dtype=np.float64)
    block = a[:, 4:8]
    rotated = np.concatenate([-block[:, 2:], block[:, :2]], axis=1)
    np.testing.assert_allclose(out["Y"], rotated * c)
    twice = np.concatenate([-out["Y"][:, 2:], out["Y"][:, :2]], axis=1)
    np.testing.assert_allclose(out["Z"], np.concatenate([twice, twice], axis=1))
    assert parse_program(format_program(p)) == p


def test_relabel_and_rotate_half_types_and_errors():
    bad_type = OPS_PROGRAM.replace("mul(rotate_half(relabel(pos(HD, d), A[t, 1])), C[t, d])",
                                   "mul(rotate_half(A[t, 1]), C[t, d])")
    with pytest.raises(IRError, match="operand types differ"):
        parse_program(bad_type)
    with pytest.raises(IRError, match="relabel: positions vector must be a vector"):
        parse_program(OPS_PROGRAM.replace("relabel(pos(HD, d), A[t, 1])",
                                          "relabel(C[t, d], A[t, 1])"))
    ragged = OPS_PROGRAM.replace("dim QD = 8 block 4", "dim QD = 7 block 4")
    p = parse_program(ragged)      # types agree; the extents of block 1 do not
    with pytest.raises(BackendError, match="relabel"):
        run_program(p, {"A": np.zeros((5, 7)), "C": np.zeros((5, 4))})
    narrow = OPS_PROGRAM.replace("dim HD = 4 block 4", "dim HD = 2 block 2")
    with pytest.raises(IRError, match=r"relabel: blocks of QD \(4 columns\) cannot be "
                                      r"taken as HD \(blocks of 2\)"):
        parse_program(narrow)     # the verifier sees the block widths differ
    odd = OPS_PROGRAM.replace("dim HD = 4 block 4", "dim HD = 3 block 3").replace(
        "dim QD = 8 block 4", "dim QD = 6 block 3")
    with pytest.raises(BackendError, match="rotate_half needs an even number"):
        run_program(parse_program(odd), {"A": np.zeros((5, 6)), "C": np.zeros((5, 3))})


def test_relabel_and_rotate_half_costs():
    p = parse_program(OPS_PROGRAM)
    y, z = (kernel_cost(k, p) for k in p.kernels)
    # Y: rotate_half negates half of each 4-wide block (10 of 20 elements), mul 20.
    assert y.flops == 10 + 20
    # Z: rotate_half of Y[t, 0] once per (t, q) instance: 2 × 20 elements, half negated.
    assert z.flops == 20
    assert y.loaded_bytes == 4 * (20 + 20) and z.loaded_bytes == 4 * 40
